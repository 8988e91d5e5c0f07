"""What the int3 backends with a C fast path share (the Unicorn hot path,
backends/int3_native.py, and the native ptrace loop, backends/int3_ptrace.py): which armed
sites C may finish, told to C's tables as they are armed and resolved (`FastSites`), and
the records C wrote turned into `trace.events` with the code the Python path uses
(`RecordDrain`: an `ArgReader` over the registers C saved).

Both are composed into a backend; the C side is whatever object offers `SiteTable`'s
methods (a ctypes wrapper of hotpath.c or ploop.c)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from emutrace import native
from emutrace.backends.args import ArgReader
from emutrace.backends.native_args import SNAPSHOT as _SNAPSHOT  # (shared with step, btf)
from emutrace.backends.native_args import VOID_PLAN as _VOID
from emutrace.backends.native_args import ArgPlan as _ArgPlan
from emutrace.backends.native_args import Snapshot as _Snapshot
from emutrace.backends.native_args import arg_plan, args_fast, ret_plan, return_fast
from emutrace.discover import Function, Site, SiteKind
from emutrace.discover.callabi import Slots
from emutrace.discover.prototypes import CType
from emutrace.isa.base import CONDITION_TESTS, FlowKind, Isa
from emutrace.native import EVENT, SiteOp
from emutrace.target.protocol import Target
from emutrace.trace.events import Call, Event, Return, TailCall
from emutrace.trace.values import Value

if TYPE_CHECKING:
    from emutrace.backends.int3_python import Int3Backend, Pending
    from emutrace.backends.native_writer import NativeWriter

# what hotpath.c's nt_site_extra adds where a code address's bit 0 selects the instruction
# set (ARM): the next instruction's mode bits, the target test and its bits a, b, the guard's
# mask ("mask_zero"), the registers popped below a return's target (ids)
SiteExtra = tuple[int, int, int, int, int, tuple[int, ...]]
_PLAIN = (0, 0, 0, 0, 0, ())  # no extra: every ISA without a thumb bit
_SITE_KIND = {FlowKind.CALL: SiteKind.CALL, FlowKind.RETURN: SiteKind.RETURN,
              FlowKind.JUMP: SiteKind.TAIL}
_COPY = struct.Struct("=BH")  # a string copy's word index and length (hotpath.c string_put)


def _copies(strings: bytes, at: int, count: int) -> tuple[dict[int, str | None], int]:
    """count string copies from strings[at:]: word index -> text (None: NULL or unreadable,
    as ArgReader.string says), and where the next event's begin."""
    texts: dict[int, str | None] = {}
    for _ in range(count):
        index, length = _COPY.unpack_from(strings, at)
        at += _COPY.size
        if length == native.STRING_NONE:
            texts[index] = None
        else:
            texts[index] = strings[at:at + length].decode("latin-1")
            at += length
    return texts, at


class SiteTable(Protocol):
    """C's tables (hotpath.c nt_*, ploop.c pl_*)."""

    def site_set(self, addr: int, op: SiteOp) -> None: ...

    def site_active(self, addr: int, on: bool) -> None: ...

    def callee_add(self, target: int) -> None: ...

    def inside_add(self, site: int, target: int) -> None: ...

    def inside_drop(self, target: int) -> None: ...


class TailSiteTable(SiteTable, Protocol):
    """A C table that also records jumps to another armed function's entry (hotpath.c
    nt_tail_add; ploop.c leaves them to Python)."""

    def tail_add(self, site: int, target: int) -> None: ...


class SwitchJumpTable(SiteTable, Protocol):
    """A C table whose strict cleanup switches the armed function at a jump into another
    function that records nothing (hotpath.c nt_switch_jump_add, strict.c ns_jump)."""

    def switch_jump_add(self, site: int, target: int) -> None: ...


class StringTable(SiteTable, Protocol):
    """A C table that copies `char *` values at the event (core.c core_string_args,
    core_string_return through either port: the strings come with the events, hotpath.c
    `nt_strings`, ploop.c `pl_strings`)."""

    strings: bool

    def string_args(self, target: int, mask: int) -> None: ...

    def string_return(self, site: int) -> None: ...


class ExtraSiteTable(SiteTable, Protocol):
    """A C table that also takes `SiteExtra` (hotpath.c; ploop.c does not: the native
    target's ISAs need none)."""

    def site_extra(self, addr: int, extra: SiteExtra) -> None: ...


class FastSites:
    """Tells C which armed sites it may finish: a lowered call, return or jump (the ISA's
    `lower`), a call only to a target whose function is armed and whose arguments are
    integer words C saves, a jump only where Python found it records nothing."""

    def __init__(self, backend: Int3Backend, table: SiteTable, reg_id: Callable[[str], int],
                 n_saved: int, strict_in_c: bool = False, strict_jumps: bool = False,
                 on_callee: Callable[[int, Function], None] | None = None) -> None:
        """strict_in_c: lower a strict backend's sites too, C switching what is armed at
        each transfer itself (natively: int3's ploop.c pl_strict_*, hwbp's debug-register
        slots pl_hw_*, backends/hwbp_ptrace.py).  strict_jumps: C finishes a strict
        backend's jumps inside a function too (int3 strict natively).  on_callee: under
        emulation C switches strict cleanup itself (hotpath.c with strict.c): told each
        call target C may finish and the function it enters (implies strict_in_c and
        strict_jumps)."""
        self.b, self.table, self.reg_id = backend, table, reg_id
        self.strict_in_c = strict_in_c or on_callee is not None
        self.strict_jumps = strict_jumps or on_callee is not None
        self.on_callee = on_callee
        regs = backend.image.isa.registers
        self._n_saved = n_saved  # argument registers + stack words C saves at a call
        self._all_args_saved = len(regs.args) <= native.MAX_REGS
        self._ops: dict[int, tuple[SiteOp, SiteExtra] | None] = {}
        self._callees: set[int] = set()
        self._pair_targets: set[int] = set()  # targets of jump pairs that are no entry yet
        self._args_fast_cache: dict[int, bool] = {}
        self._strings = bool(getattr(table, "strings", False))  # (StringTable)
        self._string_args_told: set[int] = set()  # call targets / entry probes told to C
        self._string_returns_told: set[int] = set()  # return sites told to C
        # site hooks C watches (backends/hooked_sites.py): their jumps are learnt as well
        self.hooked: set[int] = set()

    def armed(self, site: Site) -> None:
        """After the backend armed site (a site hook stays Python's)."""
        armed = self.b.armed.get(site.addr)
        if armed is None or armed.hook:
            return
        got = self._op(site)
        if got is not None:
            op, extra = got
            self.table.site_set(site.addr, op)
            if extra != _PLAIN:
                cast(ExtraSiteTable, self.table).site_extra(site.addr, extra)

    def disarmed(self, addr: int) -> None:
        self.table.site_active(addr, False)

    def _op(self, site: Site) -> tuple[SiteOp, SiteExtra] | None:
        if site.addr in self._ops:
            return self._ops[site.addr]
        got = self._ops[site.addr] = self._lowered(site)
        return got

    def _lowered(self, site: Site) -> tuple[SiteOp, SiteExtra] | None:
        b = self.b
        isa = b.image.isa
        lower = isa.lower
        if (lower is None or (b.strict and not self.strict_in_c) or site.executes is not None
                or site.delay_slot or site.maybe_return or site.alt_link
                or (site.conditional and site.kind is SiteKind.CALL)):
            return None
        insn, flow = b.site_insn(site)
        op = lower(insn, flow) if flow.kind is not FlowKind.NONE else None
        after = site.addr + site.size
        if (op is None or _SITE_KIND[op.kind] is not site.kind or insn.addr + insn.size != after
                or op.load is not None or op.effective is not None):
            return None  # (a target read from memory or added up: C's trap path does
            # neither, Python's)
        cond = op.cond
        try:
            src = self.reg_id(op.reg) if op.reg is not None else -1
            link = self.reg_id(op.link) if op.link is not None else -1
            cond_reg = self.reg_id(cond.reg) if cond.reg is not None else -1
            guard_reg = self.reg_id(op.guard.reg) if op.guard.reg is not None else -1
            pops = tuple(self.reg_id(name) for name in op.pops)
        except KeyError:
            return None
        if -1 in (src if op.reg else 0, link if op.link else 0,
                  cond_reg if cond.reg else 0, guard_reg if op.guard.reg else 0, *pops):
            return None  # a register this target cannot name for C
        extra = (isa.mode_address(after, site.alt_mode) - after,
                 CONDITION_TESTS.index(op.target_test.test), op.target_test.a,
                 op.target_test.b, op.guard.mask, pops)
        if extra != _PLAIN and not hasattr(self.table, "site_extra"):
            return None  # (a C table without them: Python's)
        fast = 1
        if op.kind is FlowKind.RETURN:
            fast = int(self._return_fast(site))
            if fast:
                self.tell_string_return(site)
        code = {FlowKind.CALL: native.OP_CALL, FlowKind.RETURN: native.OP_RETURN,
                FlowKind.JUMP: native.OP_JUMP}[op.kind]
        return (code, op.target or 0, after, src, link, op.release, fast,
                int(site.conditional), CONDITION_TESTS.index(cond.test), cond_reg, cond.a,
                cond.b, cond.c, op.clear_low, CONDITION_TESTS.index(op.guard.test), guard_reg,
                op.guard.a, op.guard.b), extra

    def _return_fast(self, site: Site) -> bool:
        """Is the value of the function returning at site in the snapshotted registers (a
        `char *` too where C copies its string: `tell_string_return`)?"""
        return return_fast(self.b.args.types, site.addr, self._strings, self.b.cpu.word)

    def tell_string_return(self, site: Site) -> None:
        """(A return site C finishes.)  If its value is a `char *`, C copies the string."""
        if not self._strings:
            return
        _func, values = self.b.args.types.function_of(site.addr)
        t = values.ret
        if (t is not None and t.kind in ("str", "buf")
                and site.addr not in self._string_returns_told):
            self._string_returns_told.add(site.addr)
            cast(StringTable, self.table).string_return(site.addr)

    def tell_string_args(self, key: int, target: int) -> None:
        """(A call to target, or an entry probe at key, C records.)  The snapshot words of
        its `char *` arguments, whose strings C copies at the event."""
        if not self._strings or key in self._string_args_told:
            return
        mask = 0
        for loc in self.b.args.types.at(target).args:
            if isinstance(loc, Slots) and loc.ctype.kind in ("str", "buf"):
                mask |= 1 << loc.ids[0]
        self._string_args_told.add(key)
        if mask:
            cast(StringTable, self.table).string_args(key, mask)

    def call_fast(self, target: int) -> bool:
        """May C record a call to target (its arguments are words C saves)?"""
        return self.args_fast(target)

    def args_fast(self, target: int) -> bool:
        """Are the arguments of the function at target all integer words in the argument
        registers or the stack words C saves (no string or struct to read at the event)?"""
        got = self._args_fast_cache.get(target)
        if got is None and not self._all_args_saved:
            got = False
        if got is None:
            got = args_fast(self.b.args.types, target, self._n_saved, self._strings,
                            self.b.cpu.word)
            self._args_fast_cache[target] = got
        return got

    def resolve(self, p: Pending, target: int, resolve: Callable[[Pending, int], None]) -> None:
        """The backend's own `resolve` (`resolve`), then what C may finish from now on."""
        b, site = self.b, p.site
        code = target & b.tails.mask
        new_entry = site.kind is SiteKind.CALL and code not in b.tails.entries
        # (a jump not taken, or one the tail rule takes for a return, asks discovery
        # nothing in the reference: learning from it would make its target a function
        # entry the reference never knows — C tests "not taken" itself)
        jumped = site.kind is SiteKind.TAIL and b.tails.taken(
            FlowKind.JUMP, site.conditional, site.maybe_return, target,
            p.fallthrough) is FlowKind.JUMP
        here = b.armed.get(site.addr)  # (the function the jump leaves: strict disarms it)
        owner = here.func if here is not None else None
        resolve(p, target)
        if new_entry and code in self._pair_targets:
            # a jump there may be a tail call from now on (TailRule.is_tail)
            self._pair_targets.discard(code)
            self.table.inside_drop(target)
        if b.strict:
            # a jump that stays inside its function or leaves the image is the only kind
            # strict cleanup does nothing for (_learn_jump's first case)
            if self.on_callee is not None and site.kind is SiteKind.CALL:
                self._strict_callee(target)
            elif (self.strict_jumps and jumped
                    and (self._ops.get(site.addr) is not None or site.addr in self.hooked)):
                self._learn_jump(site, target, code, owner)
            return
        if site.kind is SiteKind.CALL and target not in self._callees:
            # a call C may finish from now on: its function is armed (arming again is a
            # no-op in lazy mode) and its arguments are integer registers
            func: Function | None = b.function_entered(target)
            if func is not None and func.start in b.armed_funcs and self.args_fast(target):
                self._callees.add(target)
                self.tell_string_args(target, target)
                self.table.callee_add(target)
        elif jumped and (self._ops.get(site.addr) is not None or site.addr in self.hooked):
            self._learn_jump(site, target, code, owner)

    def _strict_callee(self, target: int) -> None:
        """Under strict cleanup with C switching (emulation's strict.c): a call C may
        finish from now on (its function armed now, its arguments integer words), told
        with that function."""
        assert self.on_callee is not None
        b = self.b
        func: Function | None = b.function_entered(target)
        if (func is not None and func.start in b.armed_funcs and b.traceable(func)
                and self.args_fast(target)):
            self.on_callee(target, func)
            if target not in self._callees:
                self._callees.add(target)
                self.tell_string_args(target, target)
                self.table.callee_add(target)

    def _learn_jump(self, site: Site, target: int, code: int, owner: int | None) -> None:
        """A jump that recorded nothing and left nothing to arm does the same next time
        (int3.resolve): one that stays inside its function or leaves the image, always;
        one to code that is no function entry, until a call makes it one.  Under lazy
        cleanup, a jump to the entry of another armed function whose arguments C saves is
        one C records next time (where its table can: `TailSiteTable`), for TailRule.is_tail
        to decide in order whether it is a tail call (entries are never forgotten; arming
        the function again is a no-op).  Under strict cleanup with C switching, a jump into
        another armed function is C's too: it switches the armed function there (strict.c
        ns_jump) after recording the jump as lazy does when the target is an entry.  owner:
        the function whose site it is (was, when strict cleanup has just disarmed it)."""
        b = self.b
        if owner is None:
            return
        switched = b.image.isa.thumb_bit and b.cpu.in_alt_mode() != site.alt_mode
        func = b.function_entered(target)
        if switched and (func is None or func.start == owner):
            return  # (a switch of instruction set inside or out of every function: Python's)
        if func is None or func.start == owner:
            self.table.inside_add(site.addr, target)
            return
        if func.start not in b.armed_funcs:
            return
        strict_in_c = self.on_callee is not None and hasattr(self.table, "switch_jump_add")
        if b.strict and not strict_in_c:
            return  # (strict: a jump to other code switches the armed function: Python's)
        if code not in b.tails.entries:
            # nothing recorded there until the target becomes an entry (the pair is
            # dropped then); under strict, C switches the armed function (strict.c ns_jump)
            self._pair_targets.add(code)
            if b.strict:
                assert self.on_callee is not None
                self.on_callee(target, func)
                cast(SwitchJumpTable, self.table).switch_jump_add(site.addr, target)
            else:
                self.table.inside_add(site.addr, target)
        elif hasattr(self.table, "tail_add") and self.args_fast(target):
            if b.strict:  # (recorded, then switched as above)
                assert self.on_callee is not None
                self.on_callee(target, func)
            self.tell_string_args(target, target)
            cast(TailSiteTable, self.table).tail_add(site.addr, target)


class RecordDrain:
    """C's event records (hotpath.c nt_event, the same layout in ploop.c) → Call and Return
    events, emitted in order with the tail rule kept as the Python path keeps it."""

    def __init__(self, backend: Int3Backend, target: Target, emit: Callable[[Event], None],
                 arg_names: list[str], ret_names: list[str], n_stack: int) -> None:
        self.b, self.emit = backend, emit
        isa: Isa = backend.image.isa
        self._arg_names, self._ret_names, self._n_stack = arg_names, ret_names, n_stack
        self._stack_offset = isa.registers.stack_args_offset
        self._word = target.word
        self._snapshot = _Snapshot(target)
        self._snap_args = ArgReader(cast(Target, self._snapshot), backend.args.types,
                                    at_entry=True)
        self._value = self._snap_args.value
        self._arg_plans: dict[int, object] = {}
        self._ret_plans: dict[int, object] = {}
        # `record` on the Unicorn hot path: C writes the records (backends/native_writer.py);
        # each event drained is written by the reference, then its layout taught to C
        self.writer: NativeWriter | None = None
        # called after each record is emitted with (kind, site, target): the strict replay
        # of backends/strict_ptrace.py
        self.after_event: Callable[[int, int, int], None] | None = None

    def drain(self, data: bytes, strings: bytes = b"") -> None:
        """The events in data (EVENT records); strings: the `char *` values C copied for
        them (hotpath.c nt_strings), in the same order."""
        emit, tails, writer, replay = self.emit, self.b.tails, self.writer, self.after_event
        arg_plans, ret_plans = self._arg_plans, self._ret_plans
        at = 0  # the next event's first copy in strings
        texts: dict[int, str | None] | None = None
        for kind, n, time, site, target, sp, after, entry_sp, *regs in EVENT.iter_unpack(data):
            if n >> native.STRINGS_SHIFT:
                texts, at = _copies(strings, at, n >> native.STRINGS_SHIFT)
            else:
                texts = None
            if kind == native.EV_CALL:
                tails.called(target, after)
                plan = arg_plans.get(target)
                if plan is None:
                    plan = arg_plans[target] = self._arg_plan(target)
                if plan is _SNAPSHOT:
                    args = self._args_from_snapshot(target, entry_sp, regs)
                elif texts is not None:
                    args = self._args_with_strings(cast(_ArgPlan, plan), regs, texts)
                else:
                    args = tuple(self._value(regs[i], t) if isinstance(t, CType) else
                                 cast(Value, t) for i, t in cast(_ArgPlan, plan))
                call = Call(time, site, target, sp, after, args)
                if writer is None:
                    emit(call)
                else:
                    words = None if plan is _SNAPSHOT or not all(
                        isinstance(t, CType) for _i, t in cast(_ArgPlan, plan)) \
                        else cast(list[tuple[int, object]], plan)
                    writer.teach_call(call, words, writer.emit(call))
                if replay is not None:
                    replay(kind, site, target)
            elif kind == native.EV_TAIL:  # (int3.py _transfer's jump, lazy cleanup)
                if tails.is_tail(target):
                    self._tail_call(time, site, target, sp, entry_sp, regs, texts)
            else:
                tails.returned()
                rplan = ret_plans.get(site)
                if rplan is None:
                    rplan = ret_plans[site] = self._ret_plan(site)
                if rplan is _SNAPSHOT:
                    self._snapshot.regs = dict(zip(self._ret_names, regs, strict=False))
                    value = self._snap_args.read_return(site)
                elif rplan is _VOID:
                    value = None
                elif texts is not None and cast(CType, rplan).kind in ("str", "buf"):
                    value = self._snap_args.string_value(regs[0], cast(CType, rplan), texts[0])
                else:
                    value = self._value(regs[0], cast(CType, rplan))
                ret = Return(time, site, sp, value, target)
                if writer is None:
                    emit(ret)
                else:
                    writer.teach_return(ret, rplan is not _SNAPSHOT, writer.emit(ret))
                if replay is not None:
                    replay(kind, site, target)

    def _tail_call(self, time: int, site: int, target: int, sp: int, entry_sp: int,
                   regs: list[int], texts: dict[int, str | None] | None = None) -> None:
        """A TailCall, its arguments read as a call's; written by the reference, its layout
        then taught to C's writer."""
        plan = self._arg_plans.get(target)
        if plan is None:
            plan = self._arg_plans[target] = self._arg_plan(target)
        if plan is _SNAPSHOT:
            args = self._args_from_snapshot(target, entry_sp, regs)
        elif texts is not None:
            args = self._args_with_strings(cast(_ArgPlan, plan), regs, texts)
        else:
            args = tuple(self._value(regs[i], t) if isinstance(t, CType) else cast(Value, t)
                         for i, t in cast(_ArgPlan, plan))
        tail = TailCall(time, site, target, sp, args)
        if self.writer is None:
            self.emit(tail)
        else:
            words = None if plan is _SNAPSHOT or not all(
                isinstance(t, CType) for _i, t in cast(_ArgPlan, plan)) \
                else cast(list[tuple[int, object]], plan)
            self.writer.teach_call(tail, words, self.writer.emit(tail))

    def _args_with_strings(self, plan: _ArgPlan, regs: list[int],
                           texts: dict[int, str | None]) -> tuple[Value, ...]:
        """A call's values when C copied its strings: a `char *` takes its copy (word i's)."""
        out = []
        for i, t in plan:
            if not isinstance(t, CType):
                out.append(t)
            elif t.kind in ("str", "buf"):
                out.append(self._snap_args.string_value(regs[i], t, texts[i]))
            else:
                out.append(self._value(regs[i], t))
        return tuple(out)

    # The common cases without the snapshot (native_args: one word per value)
    def _arg_plan(self, target: int) -> _ArgPlan | object:
        return arg_plan(self.b.args.types, target)

    def _ret_plan(self, site: int) -> object:
        return ret_plan(self.b.args.types, site, self._word)

    def _args_from_snapshot(self, target: int, entry_sp: int,
                            regs: list[int]) -> tuple[Value, ...]:
        snap, word, n_args = self._snapshot, self._word, len(self._arg_names)
        snap.regs = dict(zip(self._arg_names, regs, strict=False))
        snap.regs[self.b.sp_reg] = entry_sp
        snap.words = {entry_sp + self._stack_offset + k * word: regs[n_args + k]
                      for k in range(self._n_stack)}
        return self._snap_args.read(target)
