"""`entry` on the native target with the C loop (`--target native`, engine native): the
probes of backends/entry.py, with their common traps finished in C (native/ploop.c
pl_entry_*).

* An entry probe: C applies the frame rule of `EntryBackend._entered` (a new frame: a call
  record; the frame's own entry again: nothing) and steps over the displaced instruction
  as the Python backend's fall-back does (the program's byte back, one PTRACE_SINGLESTEP,
  the INT3 again), counted as a trap and a step-over with one taken off the time.
  Python's: the process entry, a signal handler's entry, a jump to another function in
  the same frame (the tail rule's), a probe whose instruction Python simulates (a jump),
  and every probe while a mapped module waits to be probed (`_probe_known`).
* A return probe: the lazy return site of `FastSites` (simulated: the word popped), and
  the open frames it leaves popped (`EntryBackend._resolve`).

The open frames live in C while C runs: handed to C before it resumes when Python
changed them, read back when C did; the time likewise."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.entry_python import EntryBackend
from emutrace.backends.fastpath import FastSites, RecordDrain
from emutrace.backends.watched import WatchedList
from emutrace.discover import Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import FlowKind
from emutrace.native.ploop import C_RESUMES, C_RETURNED, C_SIMULATED, C_TRAPS, PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.target.ptrace_run import NativeTrapHooks
from emutrace.trace.events import Event


class PtraceEntryBackend(EntryBackend):
    name = "entry"

    def __init__(self, image: Image, target: PtraceTarget, hooks: NativeTrapHooks,
                 emit: Callable[[Event], None], loop: PtraceLoop,
                 types: CallTypes | None = None) -> None:
        self._loop = loop  # (before super(): nothing is probed before start)
        self._c_probes: set[int] = set()
        super().__init__(image, target, hooks, emit, types)
        self._target = target
        self._fast = FastSites(self, loop, target.reg_id, len(loop.arg_names) + loop.n_stack)
        records = RecordDrain(self, target, emit, loop.arg_names, loop.ret_names, loop.n_stack)
        loop.on_records = records.drain
        loop.time = lambda: self.time
        loop.entry_enable(0, self.push, self.code_mask)
        loop.before_resume = self._before_resume
        loop.after_resume = self._after_resume
        self._sent: list[tuple[int, int, int]] = []  # the open frames as C has them
        self.native_stats: dict[str, int] = {}

    def start(self, entry: int) -> None:
        super().start(entry)
        self._loop.entry_enable(self.process_entry or 0, self.push, self.code_mask)

    # ------------------------------------------------------------ probes told to C
    def _arm_site(self, site: Site, func: int) -> None:
        super()._arm_site(site, func)
        armed = self.armed.get(site.addr)
        if armed is None or armed.hook:
            return
        if site.addr in self._c_probes:
            self._loop.entry_probe_active(site.addr, True)
        elif site.kind is SiteKind.ENTRY:
            owner = self.entries.get(site.addr)
            _insn, flow = self._insn(site)
            # (a probe on a jump is simulated by Python, not stepped over; arguments that
            # are strings or buffers are read from memory at the trap: Python's)
            if (owner is not None and flow.kind is FlowKind.NONE and len(armed.original) == 1
                    and site.addr not in self._target.points
                    and self._fast._args_fast(owner.start)):
                self._c_probes.add(site.addr)
                self._loop.entry_probe(site.addr, owner.start, armed.original[0])
        elif site.addr not in self.entries:
            self._fast.armed(site)

    def _disarm_site(self, addr: int) -> None:
        super()._disarm_site(addr)
        if addr in self._c_probes:
            self._loop.entry_probe_active(addr, False)
        else:
            self._fast.disarmed(addr)

    # ------------------------------------------------------------ state across C
    def _before_resume(self) -> None:
        hold = self.discovery.symbols.generation != self.generation
        self._loop.entry_hold(hold, self.handler_entry or 0)
        if self.open != self._sent:
            self._loop.entry_frames_set(self.open)
            self._sent = list(self.open)

    def _after_resume(self) -> None:
        frames = self._loop.entry_frames_get()
        if frames is not None:
            self.open = WatchedList(frames)
            self._sent = list(frames)
        self.time = self._loop.c_time()

    def finish(self) -> int:
        loop = self._loop
        if not self.native_stats:  # (once: the counters join the Python path's)
            self.stats["traps"] += loop.counter(C_TRAPS)
            self.stats["simulated"] += loop.counter(C_SIMULATED)
            self.stats["fallbacks"] += loop.entry_stepovers()
            self.native_stats = {"c_traps": loop.counter(C_TRAPS),
                                 "python_stops": loop.counter(C_RETURNED),
                                 "c_resumes": loop.counter(C_RESUMES)}
        return super().finish()
