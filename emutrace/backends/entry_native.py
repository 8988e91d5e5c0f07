"""`entry` on the Unicorn hot path (`--engine native`): the probes of backends/entry.py with
their common traps finished in C (native/entryprobe.c, through hotpath.c).

* An entry probe (patch delivery, the function's first instruction an ordinary one, its
  arguments integer words C saves): C applies the frame rule of `EntryBackend._entered`
  (a new frame: a call record; the frame's own entry again: nothing) and steps over the
  displaced instruction as int3.py's fall-back does (the program's bytes back, the block
  run from the probe, the breakpoint written back at the next block, which is restarted),
  counted as a trap and a step-over with one instruction taken off the time.  Python's:
  the process entry, a signal handler's entry, a jump to another function in the same
  frame (the tail rule's), a probe whose instruction the reference simulates (a jump or a
  call), ELFv2's local entry, and every probe while a mapped module waits to be probed.
* A return probe: int3's lazy return site (hotpath.c `fast_trap`), and the open frames it
  leaves popped in C (`EntryBackend._resolve`).
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

The open frames live in C while C runs: the part Python changed is handed to C (`_refresh`,
`WatchedList.low` up), the part C changed read back (`_drain`, `ep_low` up) — never the
whole list, which a 10,000-deep recursion made quadratic (25 s on mips, now 1 s).
`record` and `run`: C's record writer takes the calls C's probes record (`entry_call`) and
the returns C finishes, as int3's (session 13)."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import replace

from unicorn.unicorn_py3.unicorn import uclib

from emutrace import native
from emutrace.backends import hooked_sites
from emutrace.backends.entry_python import EntryBackend
from emutrace.backends.int3_native import NativeInt3Backend
from emutrace.discover import Function, Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import FlowKind
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event, SignalDelivery

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


class NativeEntryBackend(EntryBackend, NativeInt3Backend):
    """EntryBackend's algorithm over NativeInt3Backend's C hooks (method order: entry's
    rules first, then the native engine's bookkeeping, then int3's)."""

    name = "entry"
    # C's hooked-site table (its block hook) only where every site is hooked: there it sees
    # the entry probes too; elsewhere an entry probe is a breakpoint C steps over
    site_table_in_c = False

    def __init__(self, image: Image, cpu: UnicornCpu, hooks: HookSet,
                 emit: Callable[[Event], None], types: CallTypes | None = None) -> None:
        self._ep = None  # (before super(): nothing is probed before start)
        self._c_probes: set[int] = set()
        self._patches_seen = 0  # C's breakpoint writes counted in stats["patches"]
        self._sent = 0  # how many open frames C had when Python last took or gave them
        self._copied = 0  # open frames copied between Python and C (both ways)
        self._inside = 0  # hooked probes found inside a block: Python's code hooks since
        self.site_table_in_c = hooked_sites.every_site_hooked(image.isa)
        super().__init__(image, cpu, hooks, emit, types)
        lib = self._lib
        native.declare(lib, SIGNATURES, "entry probes (ep_*)")
        isa = image.isa
        self._probes_in_c = self.delivery == "patch"
        mode = isa.alt_mode_flag  # (ARM: CPSR.T, which C reads to restart a Thumb block)
        self._ep = lib.ep_new(
            cpu.uc._uch, *(ctypes.cast(getattr(uclib, f"uc_{f}"), ctypes.c_void_p)
                           for f in ("reg_read", "reg_write", "mem_read", "mem_write", "ctl")),
            cpu.reg_id(isa.registers.pc), cpu.reg_id(isa.registers.sp),
            cpu.reg_id(self.link) if self.link else -1, cpu.word,
            int(cpu.byteorder == "big"), self.push, self.code_mask,
            cpu.reg_id(mode[0]) if mode is not None else -1, mode[1] if mode else 0)
        if not self._ep:
            raise MemoryError("native hot path: out of memory")
        lib.nt_set_entry(self._nt, self._ep)
        if self._hooked is not None:  # hook delivery: the block hook sees the probes
            self._hooked.probes_to(self._py_probe)
            self.hook_site = self._hook_site
        # a module mapped by a system call C's INTR hook did not see: probed at the next block
        hooks.after_insn_syscall = self._refresh

    # ------------------------------------------------------------ probes told to C
    def _probe_in_c(self, site: Site, owner: Function | None) -> bool:
        """May C record this entry probe's calls?  Its function's arguments are integer
        words C saves (strings copied by C at the trap: `tell_string_args`); ELFv2's local
        entry: C's record reads the arguments as typed at the entry it is taken at, the
        reference as at the function's start — the same plan."""
        types = self.args.types
        return (owner is not None and self._fast._args_fast(owner.start)
                and (owner.start == site.addr
                     or types.at(site.addr) == types.at(owner.start)))

    def _hook_site(self, site: Site) -> int:
        """Hook delivery (`hook_site`): an entry probe in entryprobe.c's table, a return in
        C's hooked-site table, where C can take them; else the reference's Python hook."""
        hooked = self._hooked
        assert hooked is not None and self._ep is not None
        if site.kind is SiteKind.ENTRY:
            owner = self.entries.get(site.addr)
            if self._probe_in_c(site, owner):
                assert owner is not None
                self._fast.tell_string_args(site.addr, owner.start)
                if self._lib.ep_probe_add_hooked(self._ep, site.addr, owner.start) == 0:
                    self._c_probes.add(site.addr)
                    hooked.probes_changed()
                    return hooked.new_handle()
        elif (site.kind is SiteKind.RETURN and not site.maybe_return
              and site.addr not in self.entries):
            return hooked.hook(site)
        return self._python_site_hook(site)

    def _to_python_hook(self, addr: int) -> None:
        """The site at addr is delivered by the reference's Python code hook from now on
        (the translation holding it dropped: hotpath.c enters the block again)."""
        armed = self.armed[addr]
        self.armed[addr] = replace(armed, hook=self._python_site_hook(armed.site))
        self._drop_cache(addr, armed.site.size)

    def _py_probe(self, addr: int, inside: int) -> None:
        """hotpath.c hands a hooked probe to Python: the reference's code hook runs now (the
        block starts at it), or (inside: it lies inside a block) it becomes one."""
        def body() -> None:
            self._drain()
            if inside:
                self._inside += 1
                self._lib.ep_probe_active(self._ep, addr, 0)
                self._c_probes.discard(addr)
                self._to_python_hook(addr)
            else:
                self._on_site(self.cpu.uc, addr, 0, None)

        self._guarded(body)

    def _arm_site(self, site: Site, func: int) -> None:
        super()._arm_site(site, func)
        armed = self.armed.get(site.addr)
        if armed is not None and armed.hook < 0 and site.addr in self._c_probes \
                and self._ep is not None:  # (a hooked probe armed again from idle)
            self._lib.ep_probe_active(self._ep, site.addr, 1)
        if armed is None or armed.hook or self._ep is None:
            return
        if site.addr in self._c_probes:
            self._lib.ep_probe_active(self._ep, site.addr, 1)
        elif site.kind is SiteKind.ENTRY:
            owner = self.entries.get(site.addr)
            _insn, flow = self._insn(site)
            # (a probe on a jump is simulated by the reference, not stepped over)
            if (self._probes_in_c and flow.kind is FlowKind.NONE
                    and self._probe_in_c(site, owner)):
                assert owner is not None
                bp = self.breakpoint_bytes(site)
                self._fast.tell_string_args(site.addr, owner.start)
                pc_bits = self.image.isa.mode_address(site.addr, site.alt_mode) - site.addr
                if self._lib.ep_probe_add(self._ep, site.addr, owner.start, armed.original,
                                          bp, len(bp), pc_bits) == 0:
                    self._c_probes.add(site.addr)
        elif site.addr in self.entries:
            self._fast.disarmed(site.addr)  # a return at an entry: `_pending` is Python's

    def _disarm_site(self, addr: int) -> None:
        super()._disarm_site(addr)
        if addr in self._c_probes:
            self._lib.ep_probe_active(self._ep, addr, 0)

    def _probe_known(self) -> None:
        """(Its `patches` snapshot counts the breakpoint writes of C's step-overs, as the
        reference's fall-backs count theirs.  Under hook delivery: a return probe C watches
        that turned out to be a function's entry as well — another function starting at
        it, probed later — is Python's: the reference's hook there runs the entry's frame
        rule first.)"""
        if self._ep is not None:
            written = int(self._lib.ep_counter(self._ep, 2))
            self.stats["patches"] += written - self._patches_seen
            self._patches_seen = written
        super()._probe_known()
        hooked = self._hooked
        if hooked is None:
            return
        for addr in [a for a in hooked.sites if a in self.entries and a not in hooked.dropped]:
            hooked.drop(addr)
            self._to_python_hook(addr)

    # ------------------------------------------------------------ state across C
    def _needs_blocks(self) -> bool:
        """(A module mapped: its functions are probed at the next block, `_on_block`.)"""
        return (super()._needs_blocks()
                or self.discovery.symbols.generation != self.generation)

    def _refresh(self) -> None:
        super()._refresh()
        if self._ep is None:
            return
        lib, ep = self._lib, self._ep
        lib.ep_set(ep, int(self.discovery.symbols.generation != self.generation),
                   self.process_entry or 0, self.handler_entry or 0)
        frames = self.open  # C gets the part Python changed: from frames.low up
        if frames.low < self._sent or len(frames) != self._sent:
            keep = min(frames.low, len(frames))
            data = b"".join(FRAME.pack(*f) for f in frames[keep:])
            if lib.ep_frames_splice(ep, keep, len(frames) - keep, data) != 0:
                raise MemoryError("native hot path: out of memory")
            frames.clean()
            self._sent = len(frames)
            self._copied += len(frames) - keep

    def _drain(self) -> None:
        super()._drain()
        ep = self._ep
        if ep is not None and self._lib.ep_dirty(ep):  # the part C changed: from low up
            lib = self._lib
            low, n = int(lib.ep_low(ep)), int(lib.ep_depth(ep))
            data = (ctypes.string_at(lib.ep_frames(ep) + low * FRAME.size,
                                     (n - low) * FRAME.size) if n > low else b"")
            self.open.replace_from(low, FRAME.iter_unpack(data))  # type: ignore[arg-type]
            self._sent = n
            self._copied += n - low
            lib.ep_clean(ep)

    def _on_block(self, uc: object, addr: int, size: int, _d: object) -> None:
        """(A step-over C began and Python's block ends: the probe is re-armed here, as the
        reference's fall-back re-arms it: `rearm`, then the block restarted.)"""
        at = self._lib.ep_handover(self._ep) if self._ep is not None else 0
        if at:
            armed = self.armed.pop(at)
            if self.guard is not None:
                self.guard.restored(at)
            self.rearm[at] = (armed.site, armed.func)
            self._lib.ep_probe_active(self._ep, at, 0)
        super()._on_block(uc, addr, size, _d)

    def start(self, entry: int) -> None:
        super().start(entry)  # (EntryBackend's: the lazy algorithm's start never runs)
        self._refresh()

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        self._drain()
        super().trap_entered(vector, signal)  # (EntryBackend's: everything is probed)
        self._refresh()

    # ------------------------------------------------------------ end
    def finish(self) -> int:
        ep = self._ep
        if ep is None:
            return super().finish()
        self._drain()
        c_traps = int(self._lib.ep_counter(ep, 0))
        self.stats["traps"] += c_traps
        self.stats["fallbacks"] += int(self._lib.ep_counter(ep, 1))
        time = super().finish()
        self.native_stats["c_entries"] = c_traps
        self.native_stats["frames_copied"] = self._copied
        self.native_stats["probes_inside_blocks"] = self._inside
        self._lib.ep_free(ep)
        self._ep = None
        return time
