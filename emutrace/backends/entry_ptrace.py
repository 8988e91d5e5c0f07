"""`entry` on the native target with the C loop (`--target native`, engine native): the
probes of entry_python.py's `EagerProbes`, with their common traps finished in C
(native/ploop.c pl_entry_*), composed into the ptrace engine (int3_ptrace.py) as
`EntryProbesInLoop`.

* An entry probe: C applies the frame rule of `EagerProbes.entered` (a new frame: a call
  record; the frame's own entry again: nothing) and steps over the displaced instruction
  as the Python backend's fall-back does (the program's byte back, one PTRACE_SINGLESTEP,
  the INT3 again), counted as a trap and a step-over with one taken off the time.
  Python's: the process entry, a signal handler's entry, a jump to another function in
  the same frame (the tail rule's), a probe whose instruction Python simulates (a jump),
  and every probe while a mapped module waits to be probed (`probe_known`).
* A return probe: the lazy return site of `FastSites` (simulated: the word popped), and
  the open frames it leaves popped (`EagerProbes.resolving`).

The open frames live in C while C runs: handed to C before it resumes when Python
changed them, read back when C did; the time likewise."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.entry_python import EagerProbes, probes_of
from emutrace.backends.int3_ptrace import PtraceLoopEngine
from emutrace.backends.int3_python import Int3Backend
from emutrace.backends.watched import WatchedList
from emutrace.discover import Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import FlowKind
from emutrace.native.ploop import PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.target.ptrace_run import NativeTrapHooks
from emutrace.trace.events import Event


class EntryProbesInLoop:
    """The ptrace engine's `LoopSites` for `entry`: the probes C may step over itself, and
    the open frames handed to C and back around each resume."""

    def __init__(self, tracer: Int3Backend, engine: PtraceLoopEngine) -> None:
        self.t, self.engine, self.loop = tracer, engine, engine.loop
        self.probes = probes_of(tracer)
        self._c_probes: set[int] = set()
        self._told_entry: int | None = None
        self._sent: list[tuple[int, int, int]] = []  # the open frames as C has them
        loop = self.loop
        loop.entry_enable(0, self.probes.push, self.probes.code_mask)
        loop.before_resume = self._before_resume
        loop.after_resume = self._after_resume
        engine.on_leave = self._told_process_entry
        engine.counters.append(self._count)

    def _told_process_entry(self) -> None:
        """(After start-up: C learns where the process began, which is no call.)"""
        entry = self.probes.process_entry
        if entry is not None and entry != self._told_entry:
            self._told_entry = entry
            self.loop.entry_enable(entry, self.probes.push, self.probes.code_mask)

    # ------------------------------------------------------------ probes told to C
    def site_armed(self, site: Site, func: int) -> None:
        t = self.t
        armed = t.armed.get(site.addr)
        if armed is None or armed.hook:
            return
        if site.addr in self._c_probes:
            self.loop.entry_probe_active(site.addr, True)
        elif site.kind is SiteKind.ENTRY:
            owner = self.probes.entries.get(site.addr)
            _insn, flow = t.site_insn(site)
            # (a probe on a jump is simulated by Python, not stepped over; C copies the
            # strings of `char *` arguments at the trap)
            if (owner is not None and flow.kind is FlowKind.NONE and len(armed.original) == 1
                    and site.addr not in self.engine.target.points
                    and self.engine.fast.args_fast(owner.start)):
                self._c_probes.add(site.addr)
                self.engine.fast.tell_string_args(site.addr, owner.start)
                self.loop.entry_probe(site.addr, owner.start, armed.original[0])
        elif site.addr not in self.probes.entries:
            self.engine.fast.armed(site)

    def site_disarmed(self, addr: int) -> None:
        if addr in self._c_probes:
            self.loop.entry_probe_active(addr, False)
        else:
            self.engine.fast.disarmed(addr)

    # ------------------------------------------------------------ state across C
    def _before_resume(self) -> None:
        probes = self.probes
        hold = self.t.discovery.symbols.generation != probes.generation
        self.loop.entry_hold(hold, probes.handler_entry or 0)
        if probes.open != self._sent:
            self.loop.entry_frames_set(probes.open)
            self._sent = list(probes.open)

    def _after_resume(self) -> None:
        frames = self.loop.entry_frames_get()
        if frames is not None:
            self.probes.open = WatchedList(frames)
            self._sent = list(frames)
        self.t.time = self.loop.c_time()

    def _count(self, stats: dict[str, int]) -> None:
        stats["fallbacks"] += self.loop.entry_stepovers()


def create(image: Image, target: PtraceTarget, hooks: NativeTrapHooks,
           emit: Callable[[Event], None], loop: PtraceLoop,
           types: CallTypes | None = None) -> Int3Backend:
    """entry on the native target's C loop: the site tracer with eager placement over a
    `PtraceLoopEngine`, with `EntryProbesInLoop` as its loop sites."""
    engine = PtraceLoopEngine(target, loop, emit, learn_on_resolve=False)
    tracer = Int3Backend(image, target, hooks, emit, "lazy", types, name="entry",
                         placement=EagerProbes, engine=engine)
    engine.sites = EntryProbesInLoop(tracer, engine)
    return tracer
