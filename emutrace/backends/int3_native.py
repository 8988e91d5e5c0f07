"""`int3` on the native hot path (`--engine native`): the algorithm of backends/int3.py, with
the per-event work in C (emutrace/native/hotpath.c).

What C does without entering Python:
* the block hook adds each block's instruction count (the count is computed once per block,
  by `Int3Backend._count`, through a callback, and kept in a C table);
* a trap at an armed patch site whose displaced instruction the ISA lowers to a
  `NativeOp` (isa/base.py; today x86_64 and aarch64): a call to a target whose function is
  already armed and whose arguments are integer registers, or a return whose value is in
  the return registers.  C simulates it, snapshots the registers, and appends one fixed
  record to a buffer.

Everything else is the Python reference code, reached through ctypes callbacks: the first
call of a target (discovery and arming), sites the ISA does not lower, strict cleanup, site
hooks (hook delivery, code found by descent), fallbacks, syscalls and faults, and every block
while the Python state needs one (a restart, a pending transfer, a re-arm).

Order: the buffer is drained — records turned into `trace.events` with the same code the
Python path uses (an `ArgReader` over the snapshot) — before Python emits anything or looks
at the tail-call state, and at the end; so the event stream is the Python path's, byte for
byte (tests/test_native_engine.py).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import cast

import unicorn
from unicorn import unicorn_const as ucc
from unicorn.unicorn_py3.unicorn import uclib

from emutrace import native
from emutrace.backends.args import ArgReader
from emutrace.backends.int3 import Int3Backend, Pending
from emutrace.discover import Function, Site, SiteKind
from emutrace.discover.callabi import SRET, VOID, CallTypes, Slots, Unknown
from emutrace.discover.prototypes import CType
from emutrace.elf import Image
from emutrace.errors import Unsupported
from emutrace.isa.base import CONDITION_TESTS, FlowKind
from emutrace.target.protocol import TrapHooks
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Call, Event, Return
from emutrace.trace.values import Value

# nt_site_set's arguments after the address: op, target, after, src_reg, link_reg, release,
# fast, conditional, condition test, condition register, its bits a, b, c, clear_low, guard
# test, guard register, its bits a, b
SiteOp = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int,
               int, int]
_SITE_KIND = {FlowKind.CALL: SiteKind.CALL, FlowKind.RETURN: SiteKind.RETURN,
              FlowKind.JUMP: SiteKind.TAIL}
_NO_INTNO = 0xFFFFFFFF
_ArgPlan = list[tuple[int, "CType | Value"]]  # per argument: its word's index, type or value
_SNAPSHOT = object()  # a value plan: read through ArgReader over the snapshot
_VOID = object()  # a return plan: no value  # no breakpoint interrupt (hook delivery)
_EVENT = struct.Struct(native.EVENT_FORMAT)


class _Snapshot:
    """The registers and stack words the native hook saved at one event, read like a CPU by
    `ArgReader` (a word it did not save reads as unmapped, as ArgReader expects)."""

    def __init__(self, cpu: UnicornCpu) -> None:
        self.isa, self.word, self.byteorder = cpu.isa, cpu.word, cpu.byteorder
        self.regs: dict[str, int] = {}
        self.words: dict[int, int] = {}

    def reg_read(self, name: str) -> int:
        return self.regs[name]

    def read_word(self, addr: int) -> int:
        try:
            return self.words[addr]
        except KeyError:
            raise unicorn.UcError(ucc.UC_ERR_READ_UNMAPPED) from None


class NativeInt3Backend(Int3Backend):
    name = "int3"
    cpu: UnicornCpu  # the C hooks run inside this Unicorn instance

    def switch_thread(self, tid: int) -> None:
        """The C side keeps one thread's transfer state: threads are traced by the
        Python engine only (an error, exit 69, rather than a trace that mixes threads)."""
        raise Unsupported("--engine native: tracing a program with threads is not "
                          "supported yet; use --engine python (the default, auto, does for "
                          "programs that can create threads)")

    def __init__(self, image: Image, cpu: UnicornCpu, hooks: HookSet,
                 emit: Callable[[Event], None], cleanup: str = "lazy",
                 types: CallTypes | None = None) -> None:
        lib = native.load()
        isa = image.isa
        regs = isa.registers
        bp = isa.breakpoint_for(alt_mode=False)
        self._lib, self._hooks, self._emit_now = lib, hooks, emit
        # ctypes trampolines: kept referenced as long as C may call them
        self._callbacks = (native.PY_INTR(self._py_intr), native.PY_BLOCK(self._py_block),
                           native.PY_COUNT(self._py_count), native.PY_DRAIN(self._py_drain))
        # (an ISA with more argument registers than C saves gets no fast calls: _args_fast)
        self._arg_names = regs.args[:native.MAX_REGS]
        self._all_args_saved = len(regs.args) <= native.MAX_REGS
        self._ret_names = [regs.retval] + ([isa.c_values.retval_hi]
                                           if isa.c_values.retval_hi else [])
        cfg = native.Config()
        for field in ("reg_read", "reg_write", "mem_read", "mem_write", "emu_stop"):
            setattr(cfg, field, ctypes.cast(getattr(uclib, f"uc_{field}"), ctypes.c_void_p))
        cfg.py_intr, cfg.py_block, cfg.py_count, cfg.py_drain = self._callbacks
        cfg.pc_reg, cfg.sp_reg = cpu.reg_id(regs.pc), cpu.reg_id(regs.sp)
        cfg.bp_intno = bp.intno if bp is not None else _NO_INTNO
        cfg.pc_after = bp.pc_after if bp is not None else 0
        cfg.word, cfg.big_endian = cpu.word, int(cpu.byteorder == "big")
        cfg.n_args = len(self._arg_names)
        # stack words after the argument registers (i386: all of them; x86_64: args 7 and 8)
        self._n_stack = cfg.n_stack = native.MAX_REGS - cfg.n_args
        self._stack_offset = cfg.stack_offset = regs.stack_args_offset
        for i, name in enumerate(self._arg_names):
            cfg.arg_regs[i] = cpu.reg_id(name)
        cfg.ret_reg = cpu.reg_id(self._ret_names[0])
        cfg.ret_hi_reg = cpu.reg_id(self._ret_names[1]) if len(self._ret_names) > 1 else -1
        cfg.buffer_events = 4096
        self._cfg = cfg
        self._nt = lib.nt_new(cpu.uc._uch, ctypes.byref(cfg))
        if not self._nt:
            raise MemoryError("native hot path: out of memory")
        self._c_hooks: list[int] = []
        self._final_time = 0
        self._ops: dict[int, SiteOp | None] = {}
        self._callees: set[int] = set()
        self._pair_targets: set[int] = set()  # targets of jump pairs that are no entry yet
        self._args_fast_cache: dict[int, bool] = {}
        super().__init__(image, cpu, hooks, self._emit_drained, cleanup, types)
        if self.guard is not None:  # a load that hid breakpoints: settle at the next block
            self.guard.on_hide = lambda: self._lib.nt_set_attention(self._nt, 1)
        self._snapshot = _Snapshot(cpu)
        self._snap_args = ArgReader(cast(UnicornCpu, self._snapshot), self.args.types,
                                    at_entry=True)
        self._value = self._snap_args.value
        self._arg_plans: dict[int, object] = {}
        self._ret_plans: dict[int, object] = {}

    # ------------------------------------------------------------ shared state
    @property  # type: ignore[override]
    def time(self) -> int:
        if not self._nt:
            return self._final_time
        return int(self._lib.nt_get_time(self._nt))

    @time.setter
    def time(self, value: int) -> None:
        self._lib.nt_set_time(self._nt, value)

    def _refresh(self) -> None:
        """Tell C whether the next block needs Python's block hook."""
        busy = (self.pending is not None or bool(self.rearm)
                or self._armed_now or self._restarted is not None
                or self._resume_at is not None or self._after_trap
                or (self.guard is not None and bool(self.guard.hidden)))
        self._lib.nt_set_attention(self._nt, int(busy))

    # ------------------------------------------------------------ hooks
    def _install(self, hooks: TrapHooks) -> None:
        assert isinstance(hooks, HookSet)
        if self.delivery == "patch":
            hooks.on_trap = self._on_trap
        uc = self.cpu.uc
        uc.hook_del(hooks.intr_hook)  # C's INTR hook passes on what it does not finish
        for kind, fn in ((ucc.UC_HOOK_INTR, self._lib.nt_on_intr),
                         (ucc.UC_HOOK_BLOCK, self._lib.nt_on_block)):
            handle = ctypes.c_size_t()
            err = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), kind,
                                    ctypes.cast(fn, ctypes.c_void_p),
                                    ctypes.c_void_p(self._nt), 1, 0)
            if err != ucc.UC_ERR_OK:
                raise unicorn.UcError(err)
            self._c_hooks.append(handle.value)

    def _guarded(self, body: Callable[[], None]) -> None:
        try:
            self._hooks.guard(body)
        finally:
            self._refresh()

    def _py_intr(self, intno: int) -> None:
        self._guarded(self._drain)
        self._hooks.on_intr(self.cpu.uc, intno, None)  # guarded itself
        self._refresh()

    def _py_block(self, addr: int, size: int) -> None:
        def body() -> None:
            self._drain()
            self._on_block(self.cpu.uc, addr, size, None)

        self._guarded(body)

    def _py_count(self, addr: int, size: int) -> int:
        try:
            key = (addr, size)
            count = self.block_sizes.get(key)
            if count is None:
                count = self.block_sizes[key] = self._count(addr, size)
            return count
        except BaseException as e:  # noqa: BLE001 - re-raised by run(), as a hook's
            if self._hooks.pending is None:
                self._hooks.pending = e
            self.cpu.uc.emu_stop()
            return 0

    def _py_drain(self) -> None:
        self._guarded(self._drain)

    def _on_site(self, uc: object, addr: int, size: int, _d: object) -> None:
        self._drain()
        super()._on_site(uc, addr, size, _d)
        self._refresh()

    def start(self, entry: int) -> None:
        super().start(entry)
        self._refresh()

    def trap_returned(self, site: int) -> None:
        """(A signal handler's rt_sigreturn: the next block, the interrupted code, is
        Python's, which re-arms it under strict cleanup.)"""
        super().trap_returned(site)
        self._refresh()

    # ------------------------------------------------------------ events
    def _emit_drained(self, event: Event) -> None:
        self._drain()
        self._emit_now(event)

    def _drain(self) -> None:
        lib, nt = self._lib, self._nt
        n = lib.nt_events_count(nt)
        if not n:
            return
        data = ctypes.string_at(lib.nt_events(nt), n * _EVENT.size)
        lib.nt_events_clear(nt)
        emit, tails = self._emit_now, self.tails
        arg_plans, ret_plans = self._arg_plans, self._ret_plans
        for kind, _n, time, site, target, sp, after, entry_sp, *regs in _EVENT.iter_unpack(data):
            if kind == native.EV_CALL:
                tails.called(target, after)
                plan = arg_plans.get(target)
                if plan is None:
                    plan = arg_plans[target] = self._arg_plan(target)
                if plan is _SNAPSHOT:
                    args = self._args_from_snapshot(target, entry_sp, regs)
                else:
                    args = tuple(self._value(regs[i], t) if isinstance(t, CType) else
                                 cast(Value, t) for i, t in cast(_ArgPlan, plan))
                emit(Call(time, site, target, sp, after, args))
            else:
                tails.returned()
                rplan = ret_plans.get(site)
                if rplan is None:
                    rplan = ret_plans[site] = self._ret_plan(site)
                if rplan is _SNAPSHOT:
                    self._snapshot.regs = dict(zip(self._ret_names, regs, strict=False))
                    value = self._snap_args.read_return(site)
                else:
                    value = None if rplan is _VOID else self._value(regs[0], cast(CType, rplan))
                emit(Return(time, site, sp, value, target))

    # The common cases without the snapshot: what ArgReader.read / read_return would compute
    # from the same words (one word per value: `ArgReader.value`; `Unknown`: a constant)
    def _arg_plan(self, target: int) -> _ArgPlan | object:
        out: _ArgPlan = []
        for loc in self.args.types.at(target).args:
            if isinstance(loc, Unknown):
                out.append((0, Value("struct", 8 * loc.ctype.size, 0, "{?}")))
            elif (isinstance(loc, Slots) and len(loc.ids) == 1 and loc.ctype.kind != "struct"
                  and loc.ctype is not SRET):
                out.append((loc.ids[0], loc.ctype))
            else:
                return _SNAPSHOT
        return out

    def _ret_plan(self, site: int) -> object:
        _func, values = self.args.types.function_of(site)
        t = values.ret
        if t is VOID or t.kind == "void":
            return _VOID
        if t.kind in ("float", "struct") or t.size > self.cpu.word:
            return _SNAPSHOT
        return t

    def _args_from_snapshot(self, target: int, entry_sp: int,
                            regs: list[int]) -> tuple[Value, ...]:
        snap, word, n_args = self._snapshot, self.cpu.word, len(self._arg_names)
        snap.regs = dict(zip(self._arg_names, regs, strict=False))
        snap.regs[self.sp_reg] = entry_sp
        snap.words = {entry_sp + self._stack_offset + k * word: regs[n_args + k]
                      for k in range(self._n_stack)}
        return self._snap_args.read(target)

    # ------------------------------------------------------------ arming
    def _arm_site(self, site: Site, func: int) -> None:
        super()._arm_site(site, func)
        armed = self.armed.get(site.addr)
        if armed is None or armed.hook:
            return  # a site hook: Python's
        op = self._op(site)
        if op is not None:
            self._lib.nt_site_set(self._nt, site.addr, *op)

    def _disarm_site(self, addr: int) -> None:
        super()._disarm_site(addr)
        self._lib.nt_site_active(self._nt, addr, 0)

    def _op(self, site: Site) -> SiteOp | None:
        """The site as nt_site_set's arguments after the address, or None where C leaves it
        to Python."""
        if site.addr in self._ops:
            return self._ops[site.addr]
        got = self._ops[site.addr] = self._lowered(site)
        return got

    def _lowered(self, site: Site) -> SiteOp | None:
        lower = self.image.isa.lower
        if (lower is None or self.strict or site.executes is not None or site.delay_slot
                or site.alt_mode or site.maybe_return or site.alt_link
                or (site.conditional and site.kind is SiteKind.CALL)):
            return None
        insn, flow = self._insn(site)
        op = lower(insn, flow) if flow.kind is not FlowKind.NONE else None
        after = site.addr + site.size
        if op is None or _SITE_KIND[op.kind] is not site.kind or insn.addr + insn.size != after:
            return None
        cond = op.cond
        try:
            src = self.cpu.reg_id(op.reg) if op.reg is not None else -1
            link = self.cpu.reg_id(op.link) if op.link is not None else -1
            cond_reg = self.cpu.reg_id(cond.reg) if cond.reg is not None else -1
            guard_reg = self.cpu.reg_id(op.guard.reg) if op.guard.reg is not None else -1
        except KeyError:
            return None
        fast = 1
        if op.kind is FlowKind.RETURN:
            fast = int(self._return_fast(site))
        code = {FlowKind.CALL: native.OP_CALL, FlowKind.RETURN: native.OP_RETURN,
                FlowKind.JUMP: native.OP_JUMP}[op.kind]
        return (code, op.target or 0, after, src, link, op.release, fast,
                int(site.conditional), CONDITION_TESTS.index(cond.test), cond_reg, cond.a,
                cond.b, cond.c, op.clear_low, CONDITION_TESTS.index(op.guard.test), guard_reg,
                op.guard.a, op.guard.b)

    def _return_fast(self, site: Site) -> bool:
        """Is the value of the function returning at site in the snapshotted registers?"""
        _func, values = self.args.types.function_of(site.addr)
        t = values.ret
        return t is not None and (t.kind == "void" or t.kind not in ("float", "struct", "str",
                                                                        "buf"))

    def _args_fast(self, target: int) -> bool:
        """Are the arguments of the function at target all integer words in the argument
        registers or the stack words C saves (no string or struct to read at the event)?"""
        got = self._args_fast_cache.get(target)
        if got is None and not self._all_args_saved:
            got = False
        if got is None:
            n = len(self._arg_names) + self._n_stack
            got = all(isinstance(loc, Unknown) or (
                isinstance(loc, Slots) and loc.ctype is not SRET and max(loc.ids) < n
                and loc.ctype.kind not in ("str", "buf"))
                for loc in self.args.types.at(target).args)
            self._args_fast_cache[target] = got
        return got

    def _resolve(self, p: Pending, target: int) -> None:
        site = p.site
        code = target & self.tails.mask
        new_entry = site.kind is SiteKind.CALL and code not in self.tails.entries
        super()._resolve(p, target)
        if self.strict:
            return
        if new_entry and code in self._pair_targets:
            # a jump there may be a tail call from now on (TailRule.is_tail)
            self._pair_targets.discard(code)
            self._lib.nt_inside_drop(self._nt, target)
        if site.kind is SiteKind.CALL and target not in self._callees:
            # a call C may finish from now on: its function is armed (arming again is a
            # no-op in lazy mode) and its arguments are integer registers
            func: Function | None = self._function(target)
            if func is not None and func.start in self.armed_funcs and self._args_fast(target):
                self._callees.add(target)
                self._lib.nt_callee_add(self._nt, target)
        elif site.kind is SiteKind.TAIL and self._ops.get(site.addr) is not None:
            self._learn_jump(site, target, code)

    def _learn_jump(self, site: Site, target: int, code: int) -> None:
        """A jump that recorded nothing and left nothing to arm does the same next time
        (int3._resolve): one that stays inside its function or leaves the image, always;
        one to code that is no function entry, until a call makes it one."""
        here = self.armed.get(site.addr)
        if here is None or self.image.isa.thumb_bit:
            return
        func = self._function(target)
        if func is None or func.start == here.func:
            self._lib.nt_inside_add(self._nt, site.addr, target)
        elif func.start in self.armed_funcs and code not in self.tails.entries:
            self._pair_targets.add(code)
            self._lib.nt_inside_add(self._nt, site.addr, target)

    # ------------------------------------------------------------ end
    def flush_events(self) -> None:
        """Hand the buffered events to the shadow stack (the session asks at the end of the
        run, before it reads the open frames)."""
        if self._nt:
            self._drain()

    def finish(self) -> int:
        if not self._nt:  # finished already
            return self._final_time
        self._drain()
        lib, nt = self._lib, self._nt
        self.stats["traps"] += int(lib.nt_counter(nt, 0))
        self.stats["simulated"] += int(lib.nt_counter(nt, 1))
        # how much still went through Python (bench's profile; not a mechanism counter)
        self.native_stats = {"python_traps": int(lib.nt_counter(nt, 2)),
                             "python_blocks": int(lib.nt_counter(nt, 3))}
        self._final_time = self.time
        # the run is over: C's hooks go, then its tables (a bench or a test builds hundreds
        # of processes)
        for handle in self._c_hooks:
            uclib.uc_hook_del(self.cpu.uc._uch, ctypes.c_size_t(handle))
        self._c_hooks.clear()
        lib.nt_free(nt)
        self._nt = None
        return self._final_time
