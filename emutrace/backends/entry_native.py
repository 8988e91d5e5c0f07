"""`entry` on the Unicorn hot path (`--engine native`): the probes of backends/entry.py with
their common traps finished in C (native/entryprobe.c, through hotpath.c).

* An entry probe (patch delivery, the function's first instruction an ordinary one, its
  arguments integer words C saves): C applies the frame rule of `EagerProbes.entered`
  (a new frame: a call record; the frame's own entry again: nothing) and steps over the
  displaced instruction as int3.py's fall-back does (the program's bytes back, the block
  run from the probe, the breakpoint written back at the next block, which is restarted),
  counted as a trap and a step-over with one instruction taken off the time.  Python's:
  the process entry, a signal handler's entry, a jump to another function in the same
  frame (the tail rule's), a probe whose instruction the reference simulates (a jump or a
  call), ELFv2's local entry, and every probe while a mapped module waits to be probed.
* A return probe: int3's lazy return site (hotpath.c `fast_trap`), and the open frames it
  leaves popped in C (`EagerProbes.resolving`).
* Hook delivery (mips, mipsel, riscv64: no breakpoint is written): an entry probe is a row
  of entryprobe.c's table that hotpath.c's block hook (`hs_on_block`) looks at when a block
  starts there — the probed instruction not run yet, as the reference's code hook sees it —
  and applies the same frame rule (`ep_enter`; nothing to step over); a return probe is a
  row of C's hooked-site table (backends/hooked_sites.py), finished as int3's.  Python's: a
  probe C hands back (as under patch delivery), a return at a function's entry (its hook
  is an entry probe too), a jump that may return, and a probe that lies inside a block (a
  function entered by falling into it): that one becomes the reference's Python code hook
  when the block holding it is first seen (`_py_probe`), the block translated again.
* ARM (two instruction sets): the probes stay the reference's Python traps; C counts the
  blocks.

The open frames live in C while C runs: the part Python changed is handed to C (`refresh`,
`WatchedList.low` up), the part C changed read back (`drain`, `ep_low` up) — never the
whole list (a 10,000-deep recursion would make that quadratic).
`record` and `run`: C's record writer takes the calls C's probes record (`entry_call`) and
the returns C finishes, as int3's.

All of it is `EntryProbesInC`, an addon of the hot path engine (int3_native.py): the tracer
is int3_python's with `EagerProbes`, the engine `HotPathEngine`; nothing is subclassed."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import replace

from emutrace import native
from emutrace.backends import hooked_sites
from emutrace.backends.entry_python import EagerProbes, probes_of
from emutrace.backends.int3_native import HotPathEngine
from emutrace.backends.int3_python import Int3Backend
from emutrace.discover import Function, Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import FlowKind
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event

_vp, _u32, _u64, _i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
SIGNATURES = {
    "ep_new": ([_vp, _vp, _vp, _vp, _vp, _vp, _i32, _i32, _i32, _u32, _u32, _u64, _u64, _i32,
                _u64], _vp),
    "ep_free": ([_vp], None),
    "ep_probe_add": ([_vp, _u64, _u64, ctypes.c_char_p, ctypes.c_char_p, _u32, _u32],
                     ctypes.c_int),
    "ep_probe_add_hooked": ([_vp, _u64, _u64], ctypes.c_int),
    "ep_probe_active": ([_vp, _u64, _u32], None),
    "ep_set": ([_vp, _u32, _u64, _u64], None),
    "ep_frames_splice": ([_vp, _u64, _u64, ctypes.c_char_p], ctypes.c_int),
    "ep_dirty": ([_vp], _u32),
    "ep_low": ([_vp], _u64),
    "ep_depth": ([_vp], _u64),
    "ep_frames": ([_vp], _vp),
    "ep_clean": ([_vp], None),
    "ep_counter": ([_vp, _u32], _u64),
    "ep_handover": ([_vp], _u64),
    "nt_set_entry": ([_vp, _vp], None),
}
FRAME = struct.Struct("=3Q")  # ep_frame: return address, call sp, function


class EntryProbesInC:
    """The hot path engine's addon (int3_native.EngineAddon) for `entry`: the eager
    placement's probes and open frames kept in C (entryprobe.c) beside the engine's tables."""

    def __init__(self, tracer: Int3Backend, engine: HotPathEngine, hooks: HookSet) -> None:
        self.t, self.engine = tracer, engine
        self.probes = probes = probes_of(tracer)
        self._c_probes: set[int] = set()
        self._patches_seen = 0  # C's breakpoint writes counted in stats["patches"]
        self._sent = 0  # how many open frames C had when Python last took or gave them
        self._copied = 0  # open frames copied between Python and C (both ways)
        self._inside = 0  # hooked probes found inside a block: Python's code hooks since
        lib = self._lib = engine.lib
        native.declare(lib, SIGNATURES, "entry probes (ep_*)")
        cpu, isa = engine.cpu, tracer.image.isa
        self._probes_in_c = tracer.delivery == "patch"
        mode = isa.alt_mode_flag  # (ARM: CPSR.T, which C reads to restart a Thumb block)
        self._ep: int | None = lib.ep_new(
            engine.port.handle, *(ctypes.c_void_p(engine.port.function(f))
                                  for f in ("reg_read", "reg_write", "mem_read", "mem_write",
                                            "ctl")),
            cpu.reg_id(isa.registers.pc), cpu.reg_id(isa.registers.sp),
            cpu.reg_id(probes.link) if probes.link else -1, cpu.word,
            int(cpu.byteorder == "big"), probes.push, probes.code_mask,
            cpu.reg_id(mode[0]) if mode is not None else -1, mode[1] if mode else 0)
        if not self._ep:
            raise MemoryError("native hot path: out of memory")
        lib.nt_set_entry(engine.nt, self._ep)
        self._hooked = engine.hooked_table
        if self._hooked is not None:  # hook delivery: the block hook sees the probes
            self._hooked.probes_to(self._py_probe)
            tracer.hook_site = self._hook_site
        probes.before_probing = self._count_patches
        probes.after_probing = self._hooked_entries_to_python
        # a module mapped by a system call C's INTR hook did not see: probed at the next block
        hooks.after_insn_syscall = engine.refresh_c

    # ------------------------------------------------------------ probes told to C
    def _probe_in_c(self, site: Site, owner: Function | None) -> bool:
        """May C record this entry probe's calls?  Its function's arguments are integer
        words C saves (strings copied by C at the trap: `tell_string_args`); ELFv2's local
        entry: C's record reads the arguments as typed at the entry it is taken at, the
        reference as at the function's start — the same plan."""
        types = self.t.args.types
        return (owner is not None and self.engine.fast.args_fast(owner.start)
                and (owner.start == site.addr
                     or types.at(site.addr) == types.at(owner.start)))

    def _hook_site(self, site: Site) -> int:
        """Hook delivery (the tracer's `hook_site`): an entry probe in entryprobe.c's
        table, a return in C's hooked-site table, where C can take them; else the
        reference's Python hook."""
        hooked = self._hooked
        assert hooked is not None and self._ep is not None
        if site.kind is SiteKind.ENTRY:
            owner = self.probes.entries.get(site.addr)
            if self._probe_in_c(site, owner):
                assert owner is not None
                self.engine.fast.tell_string_args(site.addr, owner.start)
                if self._lib.ep_probe_add_hooked(self._ep, site.addr, owner.start) == 0:
                    self._c_probes.add(site.addr)
                    hooked.probes_changed()
                    return hooked.new_handle()
        elif (site.kind is SiteKind.RETURN and not site.maybe_return
              and site.addr not in self.probes.entries):
            return hooked.hook(site)
        return self.t.python_site_hook(site)

    def _to_python_hook(self, addr: int) -> None:
        """The site at addr is delivered by the reference's Python code hook from now on
        (the translation holding it dropped: hotpath.c enters the block again)."""
        t = self.t
        armed = t.armed[addr]
        t.armed[addr] = replace(armed, hook=t.python_site_hook(armed.site))
        t.drop_cache(addr, armed.site.size)

    def _py_probe(self, addr: int, inside: int) -> None:
        """hotpath.c hands a hooked probe to Python: the reference's code hook runs now (the
        block starts at it), or (inside: it lies inside a block) it becomes one."""
        def body() -> None:
            self.engine.drain_c()
            if inside:
                self._inside += 1
                self._lib.ep_probe_active(self._ep, addr, 0)
                self._c_probes.discard(addr)
                self._to_python_hook(addr)
            else:
                self.t.on_site(self.engine.port.engine, addr, 0, None)

        self.engine.guarded(body)

    def site_armed(self, site: Site, func: int) -> None:
        t = self.t
        armed = t.armed.get(site.addr)
        if armed is not None and armed.hook < 0 and site.addr in self._c_probes \
                and self._ep is not None:  # (a hooked probe armed again from idle)
            self._lib.ep_probe_active(self._ep, site.addr, 1)
        if armed is None or armed.hook or self._ep is None:
            return
        if site.addr in self._c_probes:
            self._lib.ep_probe_active(self._ep, site.addr, 1)
        elif site.kind is SiteKind.ENTRY:
            owner = self.probes.entries.get(site.addr)
            _insn, flow = t.site_insn(site)
            # (a probe on a jump is simulated by the reference, not stepped over)
            if (self._probes_in_c and flow.kind is FlowKind.NONE
                    and self._probe_in_c(site, owner)):
                assert owner is not None
                bp = t.breakpoint_bytes(site)
                self.engine.fast.tell_string_args(site.addr, owner.start)
                pc_bits = t.image.isa.mode_address(site.addr, site.alt_mode) - site.addr
                if self._lib.ep_probe_add(self._ep, site.addr, owner.start, armed.original,
                                          bp, len(bp), pc_bits) == 0:
                    self._c_probes.add(site.addr)
        elif site.addr in self.probes.entries:
            self.engine.fast.disarmed(site.addr)  # a return at an entry: `pending_at`'s

    def site_disarmed(self, addr: int) -> None:
        if addr in self._c_probes:
            self._lib.ep_probe_active(self._ep, addr, 0)

    def _count_patches(self) -> None:
        """(Before probing: the `patches` snapshot counts the breakpoint writes of C's
        step-overs, as the reference's fall-backs count theirs.)"""
        if self._ep is not None:
            written = int(self._lib.ep_counter(self._ep, 2))
            self.t.stats["patches"] += written - self._patches_seen
            self._patches_seen = written

    def _hooked_entries_to_python(self) -> None:
        """(After probing, under hook delivery: a return probe C watches that turned out to
        be a function's entry as well — another function starting at it, probed later — is
        Python's: the reference's hook there runs the entry's frame rule first.)"""
        hooked = self._hooked
        if hooked is None:
            return
        entries = self.probes.entries
        for addr in [a for a in hooked.sites if a in entries and a not in hooked.dropped]:
            hooked.drop(addr)
            self._to_python_hook(addr)

    # ------------------------------------------------------------ state across C
    def needs_blocks(self) -> bool:
        """(A module mapped: its functions are probed at the next block, `block`.)"""
        return self.t.discovery.symbols.generation != self.probes.generation

    def refresh(self) -> None:
        if self._ep is None:
            return
        lib, ep, probes = self._lib, self._ep, self.probes
        lib.ep_set(ep, int(self.t.discovery.symbols.generation != probes.generation),
                   probes.process_entry or 0, probes.handler_entry or 0)
        frames = probes.open  # C gets the part Python changed: from frames.low up
        if frames.low < self._sent or len(frames) != self._sent:
            keep = min(frames.low, len(frames))
            data = b"".join(FRAME.pack(*f) for f in frames[keep:])
            if lib.ep_frames_splice(ep, keep, len(frames) - keep, data) != 0:
                raise MemoryError("native hot path: out of memory")
            frames.clean()
            self._sent = len(frames)
            self._copied += len(frames) - keep

    def drain(self) -> None:
        ep = self._ep
        if ep is not None and self._lib.ep_dirty(ep):  # the part C changed: from low up
            lib = self._lib
            low, n = int(lib.ep_low(ep)), int(lib.ep_depth(ep))
            data = (ctypes.string_at(lib.ep_frames(ep) + low * FRAME.size,
                                     (n - low) * FRAME.size) if n > low else b"")
            self.probes.open.replace_from(low, FRAME.iter_unpack(data))  # type: ignore[arg-type]
            self._sent = n
            self._copied += n - low
            lib.ep_clean(ep)

    def block_entered(self) -> None:
        """(A step-over C began and Python's block ends: the probe is re-armed here, as the
        reference's fall-back re-arms it: `rearm`, then the block restarted.)"""
        at = self._lib.ep_handover(self._ep) if self._ep is not None else 0
        if at:
            t = self.t
            armed = t.armed.pop(at)
            if t.guard is not None:
                t.guard.restored(at)
            t.rearm[at] = (armed.site, armed.func)
            self._lib.ep_probe_active(self._ep, at, 0)

    # ------------------------------------------------------------ end
    def finish(self, stats: dict[str, int]) -> None:
        ep = self._ep
        if ep is None:
            return
        self._c_traps = int(self._lib.ep_counter(ep, 0))
        stats["traps"] += self._c_traps
        stats["fallbacks"] += int(self._lib.ep_counter(ep, 1))

    def native_stats(self) -> dict[str, int]:
        return {"c_entries": getattr(self, "_c_traps", 0), "frames_copied": self._copied,
                "probes_inside_blocks": self._inside}

    def free(self) -> None:
        if self._ep is not None:
            self._lib.ep_free(self._ep)
            self._ep = None


def create(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
           types: CallTypes | None = None) -> Int3Backend:
    """entry on the Unicorn hot path: the site tracer with eager placement over a
    `HotPathEngine` (C's hooked-site table only where every site is hooked: there it sees
    the entry probes too; elsewhere an entry probe is a breakpoint C steps over), with
    `EntryProbesInC` composed in."""
    engine = HotPathEngine(image, cpu, hooks, emit, "lazy",
                           site_table_in_c=hooked_sites.every_site_hooked(image.isa))
    tracer = Int3Backend(image, cpu, hooks, emit, "lazy", types, name="entry",
                         placement=EagerProbes, engine=engine)
    engine.addons.append(EntryProbesInC(tracer, engine, hooks))
    return tracer
