"""Site hooks on the native hot path: every site under hook delivery (MIPS, RISC-V, whose
breakpoint traps Unicorn does not deliver usably; isa/mips.py, isa/riscv64.py), and the
sites of code found by descent on the other ISAs (int3.py `by_hook`: a wrong guess about
what is code must never write a breakpoint into data), beside the patched sites.

The reference (`Int3Backend.arm_site`) gives each armed site a bounded Python code hook;
Unicorn scans bounded code hooks linearly on every hit (../shared/DESIGN.md §5).  Here the
sites go into one C table read by one C block hook (hotpath.c `hs_on_block`), which replaces
hotpath.c's block hook: a block holding an armed site leaves its transfer pending, and the
next block resolves it — in C for the cases `fast_trap` finishes, else by handing the
reference the `Pending` its site hook would have made, then the block (`on_block`).

A site is in C's table when the ISA says what it and its delay slot do to sp
(`Classifiers.sp_effect`): C reads sp after both ran.  Other sites keep their Python hook.
The reference's bookkeeping (`armed`, `idle_hooks`, the patches/hooks_added/cache_removals
counters, the restart of a block that was translated before its site was armed) is
unchanged: a C site's handle is a negative number instead of a Unicorn hook handle.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from emutrace import native
from emutrace.backends.int3_python import Pending
from emutrace.discover import Site, SiteKind
from emutrace.isa.base import VIRTUAL_LOOKBEHIND, FlowKind, Insn, Isa

if TYPE_CHECKING:
    from emutrace.backends.fastpath import FastSites
    from emutrace.backends.int3_native import HotPathEngine
    from emutrace.backends.int3_python import Int3Backend

PY_SITE = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)
PY_VISIT = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
PY_PROBE = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32)


class NsConfig(ctypes.Structure):
    """hs_config in hotpath.c (py_probe: entry's, set by `probes_to`; else NULL)."""

    _fields_ = [("py_site", PY_SITE), ("py_visit", PY_VISIT), ("align", ctypes.c_uint32),
                ("py_probe", PY_PROBE)]


_vp, _u32, _u64, _i64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64
SIGNATURES = {
    "hs_new": ([_vp, ctypes.POINTER(NsConfig)], _vp),
    "hs_free": ([_vp], None),
    "hs_site_set": ([_vp, _u64, _u32, _u32, _u64, _i64, _u32, _u32, _u32, _u32, _u32, _u32],
                    ctypes.c_int),
    "hs_site_set_rows": ([_vp, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    "hs_site_active": ([_vp, _u64, _u32], None),
    "hs_site_drop": ([_vp, _u64], None),
    "hs_site_shared": ([_vp, _u64], None),
    "hs_cancel": ([_vp], None),
    "hs_touch": ([_vp], None),
    "hs_set_probe": ([_vp, _vp], None),
    "hs_returns_set": ([_vp, ctypes.c_char_p, _u64, _u64], None),  # (host-order u64s)
    "hs_counter": ([_vp, _u32], _u64),
    "hs_counts_preload": ([_vp, ctypes.c_char_p, ctypes.c_size_t], None),
    "hs_on_block": ([_vp, _u64, _u32, _vp], None),
    "hs_span_new": ([_vp, _u64], _vp),
    "hs_on_span": ([_vp, _u64, _u32, _vp], None),
}
# how many of the innermost return addresses C is told at each Python section: returns
# below them (deeper unwinding in C alone) are handed to Python
RETURNS_SENT = 64
_NO_RETURN = (1 << 64) - 1  # a frame without a return address (TailRule: None)
# hotpath.c hs_site.finish: Python resolves the transfer; C may; C may unless the target is
# the running call's return address (FINISH_UNLESS_RETURN)
_NOT_C, _C, _C_UNLESS_RETURN = 0, 1, 2
_ROW_WORDS = 11  # hotpath.c HS_ROW_WORDS: one site of hs_site_set_rows
_WORD = (1 << 64) - 1
_OP = {SiteKind.CALL: native.OP_CALL, SiteKind.RETURN: native.OP_RETURN,
       SiteKind.TAIL: native.OP_JUMP}


def wanted(isa: Isa) -> bool:
    """C watches the site hooks — of every site where the ISA has no working breakpoint
    (`every_site_hooked`) or the backend delivers by hooks only (hwbp), elsewhere of the
    code found by descent (int3.py `by_hook`), beside the patched sites C's INTR hook
    finishes — on an ISA that describes sp effects, under either cleanup (strict.c switches
    them under strict)."""
    cls = isa.classifiers
    return cls is not None and cls.sp_effect is not None


def virtual_breakpoints(isa: Isa) -> bool:
    """Patch sites in C's table instead of breakpoint bytes (`HookedSites.virtual`, under
    lazy cleanup: strict.c switches written bytes), where the ISA has working breakpoints
    (else every site is hooked anyway) and says so (`Classifiers.virtual_breakpoints`): a
    Unicorn trap exit costs ~2,350 instructions, the table's block-hook test a few dozen."""
    cls = isa.classifiers
    return (not every_site_hooked(isa) and cls is not None
            and cls.virtual_breakpoints)


def every_site_hooked(isa: Isa) -> bool:
    """Hook delivery for every site: Unicorn delivers no usable breakpoint trap here."""
    return not any(b.works for b in isa.breakpoints)


class HookedSites:
    """The C site table of one native int3 backend, and the callbacks C hands Python.
    Made before the backend (its block hook is installed with the backend's hooks), then
    `bind`-ed to it."""

    b: Int3Backend
    engine: HotPathEngine
    fast: FastSites

    def __init__(self, isa: Isa, lib: ctypes.CDLL, nt: int) -> None:
        native.declare(lib, SIGNATURES, "hooked sites (hs_*)")
        self.lib = lib
        cls = isa.classifiers
        assert cls is not None and cls.sp_effect is not None
        self._sp_effect: Callable[[Insn], int | None] = cls.sp_effect
        self._when_taken = cls.hooked_when_taken
        self._callbacks = (PY_SITE(self._py_site), PY_VISIT(self._py_visit))
        cfg = NsConfig()
        cfg.py_site, cfg.py_visit = self._callbacks
        self._probe_callback: object = None
        # (where a site may start in a block: ARM's Thumb code is 2-aligned)
        cfg.align = min(cls.insn_align, cls.alt_insn_align) if cls.alt_mode else cls.insn_align
        self.ns = lib.hs_new(nt, ctypes.byref(cfg))
        if not self.ns:
            raise MemoryError("native hot path: out of memory")
        self.sites: dict[int, Site] = {}  # in C's table, by address
        self._virtual: set[int] = set()  # those standing for breakpoints (`virtual`)
        self.dropped: set[int] = set()  # in it, but no longer watched (`drop`)
        self._next_handle = -1
        self.sets = 0  # sites `_watch` put in the table (set active there)
        # the rows of sites set since C last read the table, sent in one call (`flush`)
        # where nothing but the block hook reads them in between (not under strict
        # cleanup, whose C flips their `active` bits itself)
        self._rows: list[int] = []
        self._batched = False
        self.block_hook = lib.hs_on_block

    def bind(self, backend: Int3Backend, engine: HotPathEngine, fast: FastSites) -> None:
        self.b, self.engine, self.fast = backend, engine, fast
        self._batched = not backend.strict
        backend.hook_site = self.hook
        if virtual_breakpoints(backend.image.isa) and not backend.strict:
            backend.virtual_patch = self.virtual

    # ------------------------------------------------------------ arming
    def hook(self, site: Site) -> int:
        """The backend's `hook_site`: C's table when C can watch the site, else the
        reference's Python hook."""
        self._virtual.discard(site.addr)
        if not self._watch(site):
            return self.b.python_site_hook(site)
        return self.new_handle()

    def new_handle(self) -> int:
        """A handle for a site C watches (negative: no Unicorn hook's)."""
        handle, self._next_handle = self._next_handle, self._next_handle - 1
        return handle

    def probes_to(self, on_probe: Callable[[int, int], None]) -> None:
        """entry under hook delivery: its hooked probes (entryprobe.c) are seen by the block
        hook too, and the ones C hands back go to on_probe(addr, inside) (hotpath.c
        py_probe_fn)."""
        self._probe_callback = callback = PY_PROBE(on_probe)
        self.flush()
        self.lib.hs_set_probe(self.ns, ctypes.cast(callback, ctypes.c_void_p))

    def probes_changed(self) -> None:
        """Probes were added or handed to Python: blocks look for them again."""
        self.flush()
        self.lib.hs_touch(self.ns)

    def watch(self, site: Site) -> bool:
        """Put site in C's table (again, after `drop`); False where C cannot watch it."""
        self.dropped.discard(site.addr)
        return self._watch(site)

    def drop(self, addr: int) -> None:
        """C no longer watches the site at addr (hwbp: a Python hook delivers it now)."""
        if addr in self.sites:
            self.flush()
            self.lib.hs_site_drop(self.ns, addr)
            self.dropped.add(addr)

    def shared(self, addr: int) -> None:
        """hwbp: the site at addr is two functions' (each one's code hook counts its hits)."""
        self.flush()
        self.lib.hs_site_shared(self.ns, addr)

    def virtual(self, site: Site) -> int:
        """The backend's `virtual_patch`: a patch site whose breakpoint the reference's
        trap would simulate (its lowering, `Isa.lower`, is that simulation as data), put in
        C's table instead of written; 0 where the breakpoint must be written."""
        b = self.b
        lower = b.image.isa.lower
        if lower is None or site.executes is not None:
            return 0
        insn, flow = b.site_insn(site)
        if flow.kind is FlowKind.NONE or lower(insn, flow) is None:
            return 0  # (the reference may fall back to running it in place: a real trap)
        check = b.decoder.cls.virtual_site
        if check is not None and not check(insn, b.decoder.bytes_before(site.addr,
                                                                         VIRTUAL_LOOKBEHIND)):
            return 0  # (whether it falls back depends on state the site cannot show)
        if not self._watch(site, virtual=True, insn=insn):
            self._virtual.discard(site.addr)
            return 0
        self._virtual.add(site.addr)
        return self.new_handle()

    def can_watch(self, site: Site) -> bool:
        """Would `watch` take site (nothing changed)?"""
        insn = self.b.decoder.insn_at(site.addr, site.alt_mode)
        return self._sp_delta(site, insn) is not None and site.executes is None

    def _watch(self, site: Site, virtual: bool = False, insn: Insn | None = None) -> bool:
        """Put site in C's table (again: a site re-armed from idle may come with another
        `Site` at that address), active; False where C cannot watch it.  `virtual`: a
        breakpoint's site (it traps whether its transfer is taken or not); insn: the site's
        instruction, where the caller has it."""
        b = self.b
        if insn is None:
            insn = b.decoder.insn_at(site.addr, site.alt_mode)
        sp_delta = self._sp_delta(site, insn)
        if sp_delta is None or site.executes is not None:
            return False
        # (C compares the next block's address, Thumb or not: no mode bit to simulate); a
        # jump that may be a return, C's where it knows the return address is elsewhere
        finish = _NOT_C if (site.alt_link or (site.conditional and site.kind is SiteKind.CALL)
                            or (site.maybe_return and site.kind is not SiteKind.TAIL)) \
            else _C_UNLESS_RETURN if site.maybe_return else _C

        fast = site.kind is SiteKind.RETURN and self.fast._return_fast(site)
        if fast:
            self.fast.tell_string_return(site)
        after = site.addr + site.size + (b.delay if site.delay_slot else 0)
        taken_only = (not virtual and site.conditional and self._when_taken is not None
                      and insn is not None and self._when_taken(insn))
        row = (site.addr, site.size, _OP[site.kind], after, sp_delta & _WORD,
               int(site.conditional), finish, int(fast), int(site.delay_slot),
               int(taken_only), int(virtual))
        if self._batched:
            self._rows.extend(row)
        else:
            self.lib.hs_site_set(self.ns, *row[:4], sp_delta, *row[5:])
        self.sites[site.addr] = site
        self.fast.hooked.add(site.addr)
        self.sets += 1
        return True

    def flush(self) -> None:
        """The sites set since C last read the table, to C (before anything else C reads of
        it: the end of a Python section, `HotPathEngine._refresh`, and this table's other
        calls)."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        # (out of memory a site is not set, as with hs_site_set: it is then not watched)
        self.lib.hs_site_set_rows(self.ns, struct.pack(f"={len(rows)}Q", *rows),
                                  len(rows) // _ROW_WORDS)

    def _sp_delta(self, site: Site, insn: Insn | None) -> int | None:
        b = self.b
        delta = self._sp_effect(insn) if insn is not None else None
        if delta and site.conditional:
            return None  # (ARM `popeq`: whether it released anything is not known)
        if delta is not None and site.delay_slot:
            slot = b.decoder.insn_at(site.addr + site.size, site.alt_mode)
            more = self._sp_effect(slot) if slot is not None else None
            delta = None if more is None else delta + more
        return delta

    def armed(self, site: Site, fresh: bool = False) -> None:
        """After the reference armed site: one of C's, armed again from idle, is watched
        again, as the Site it is armed with now.  fresh: the arming put it in the table
        (active already)."""
        if fresh:
            return
        if (site.addr in self.sites and self.sites[site.addr] is not site
                and site.addr not in self.dropped):
            self._watch(site, virtual=site.addr in self._virtual)
        self.active(site.addr, True)

    def rearmed_by_c(self, site: Site) -> None:
        """strict.c armed site again (it set it active itself): only another Site at that
        address must be watched as this one."""
        if (site.addr in self.sites and self.sites[site.addr] is not site
                and site.addr not in self.dropped):
            self._watch(site, virtual=site.addr in self._virtual)

    def active(self, addr: int, on: bool) -> None:
        """After the reference disarmed a site (or armed it again)."""
        if addr in self.sites:
            self.flush()
            self.lib.hs_site_active(self.ns, addr, int(on))

    def returns(self, return_addrs: list[int | None]) -> None:
        """The end of a Python section: the top of the tail rule's return addresses, which a
        return C finishes must go back to (as `TailRule.returns_to`: int3.py `_transfer`
        arms the code a return reaches elsewhere, and `taken` makes a return into an
        entry a jump — both Python's)."""
        top = return_addrs[-RETURNS_SENT:]
        if None in top:
            top = [_NO_RETURN if r is None else r for r in top]
        self.lib.hs_returns_set(self.ns, struct.pack(f"={len(top)}Q", *top),
                                len(return_addrs), len(top))

    def cancel(self) -> None:
        """A signal is delivered: a block left before its site ran leaves nothing pending."""
        self.flush()
        self.lib.hs_cancel(self.ns)

    # ------------------------------------------------------------ C → Python
    def _py_site(self, addr: int, time: int, sp: int) -> None:
        """The transfer of the site at addr is Python's: the Pending its hook would have made.
        (No Python section of its own: Python's block hook runs next, `_py_visit`, which
        drains C's records first and hands Python's state back to C at its end.)"""
        b = self.b

        def body() -> None:
            site = self.sites[addr]
            b.pending = Pending(site, time, sp,
                                site.addr + site.size + (b.delay if site.delay_slot else 0))

        self.engine.under_guard(body)

    def _py_visit(self, addr: int, size: int) -> int:
        """The reference's block hook; 1 when it restarted the block (not counted)."""
        b = self.b
        self.engine.py_block(addr, size)
        return int(b.restarted == addr)

    # ------------------------------------------------------------ end
    def counters(self) -> tuple[int, int, int]:
        """(site hits, hits handed to Python, hits of virtual breakpoints among them)."""
        self.flush()
        return (int(self.lib.hs_counter(self.ns, 0)), int(self.lib.hs_counter(self.ns, 1)),
                int(self.lib.hs_counter(self.ns, 2)))

    # ------------------------------------------------------------ hwbp's spans
    def span(self, owner: int) -> int:
        """The user data of a code hook of hwbp's over a stepped span or range slot of the
        function at owner (`span_hook`), freed with the table; 0 where C cannot (no
        strict.c: it says which functions are armed)."""
        self.flush()
        return int(self.lib.hs_span_new(self.ns, owner) or 0)

    @property
    def span_hook(self) -> int:
        """hotpath.c `hs_on_span`: a span's code hook."""
        return int(ctypes.cast(self.lib.hs_on_span, ctypes.c_void_p).value or 0)

    def stepped(self) -> int:
        """Instructions run in armed spans that were no site of the table."""
        return int(self.lib.hs_counter(self.ns, 3))

    def free(self) -> None:
        self._rows = []
        self.lib.hs_free(self.ns)
        self.ns = None
