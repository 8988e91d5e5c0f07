"""`step`'s engine on the native hot path (`StepHotPath`, `--engine native`): the backend of
step_python.py, with the per-instruction work in C (emutrace/native/step.c).

C's code hook counts every instruction, resolves the pending transfer and looks each
address up in its flow table; Python is entered only
* to decode an address seen for the first time (`_py_flow`: the reference's `flow_of`, packed
  into one word, plus whether a return's value is an integer register);
* to resolve a transfer C leaves to it (`_py_resolve`: the reference's `resolve` on the
  live CPU): the first call of a target, a `maybe_return` jump, a return into a function's
  entry, values read from memory or float registers;
* to drain the buffer of records C wrote for the transfers it finished (`_drain`: the same
  `resolve` rules, in order, over a register snapshot read by an `ArgReader`).

For `emutrace record` and `emutrace run` the tracer attaches the record writer (`attach_writer`,
backends/native_writer.py, as int3_native's): a call or return C finished then normally never
reaches Python — C keeps the shadow stack's common case and writes the uftrace record itself.

A jump to an address that is no function entry records nothing and never leaves C.  The
buffer is drained before Python emits anything or looks at the tail-call state, and at the
end, so the event stream is the reference's, byte for byte (tests/test_native_engine.py).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import cast

from emutrace import native
from emutrace.backends.args import ArgReader
from emutrace.backends.native_args import (
    SNAPSHOT,
    VOID_PLAN,
    ArgPlan,
    Snapshot,
    arg_plan,
    args_fast,
    ret_plan,
    return_fast,
)
from emutrace.backends.native_writer import NativeWriter, packed_sink_of
from emutrace.backends.step_python import Pending, StepBackend
from emutrace.discover.callabi import CallTypes
from emutrace.discover.memo import kept
from emutrace.discover.prototypes import CType
from emutrace.elf import Image
from emutrace.errors import Unsupported
from emutrace.isa.base import Flow, FlowKind
from emutrace.native import steplib
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Call, Event, Return, TailCall
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import RecordSink
from emutrace.trace.values import Value

# FlowKind <-> the kind bits of C's flow word (step.c K_*)
_KIND_CODE = {FlowKind.NONE: 0, FlowKind.CALL: 1, FlowKind.RETURN: 2, FlowKind.JUMP: 3,
              FlowKind.STOP: 4, FlowKind.BRANCH: 5, FlowKind.EXECUTE: 6}
_KIND_OF = {code: kind for kind, code in _KIND_CODE.items()}
_CONDITIONAL, _MAYBE_RETURN = steplib.CONDITIONAL, steplib.MAYBE_RETURN
_ALT_LINK, _RET_FAST = steplib.ALT_LINK, steplib.RET_FAST
_EVENT = struct.Struct(native.EVENT_FORMAT)
_SE_CALL, _SE_RETURN = 1, 2


class StepHotPath:
    """step's engine (step_python.StepEngine) on the Unicorn hot path: step.c's code hook
    classifies and resolves what it can, the backend's reference code the rest."""

    cpu: UnicornCpu  # the C hook runs inside this Unicorn instance
    b: StepBackend  # the backend it runs (`attach`)
    _shadow_now: Callable[[], ShadowStack]  # the running thread's (attach_writer)

    def __init__(self, image: Image, cpu: UnicornCpu, hooks: HookSet,
                 emit: Callable[[Event], None]) -> None:
        lib = steplib.load()
        self.cpu = cpu
        self.native_stats: dict[str, int] = {}
        isa = image.isa
        regs = isa.registers
        self._lib, self._hooks, self._emit_now = lib, hooks, emit
        self._callbacks = (steplib.PY_FLOW(self._py_flow),
                           steplib.PY_RESOLVE(self._py_resolve),
                           native.PY_DRAIN(self._py_drain))
        self._arg_names, self._ret_names = native.call_registers(isa)
        self._all_args_saved = len(regs.args) <= native.MAX_REGS
        cfg = steplib.StepConfig()
        cfg.abi = native.call_abi(isa, cpu.reg_id, cpu.word, cpu.byteorder == "big", 4096)
        self._n_stack, self._stack_offset = cfg.abi.n_stack, cfg.abi.stack_offset
        port = self._port = cpu.c_port
        cfg.reg_read = port.function("reg_read")
        cfg.mem_read = port.function("mem_read")
        cfg.py_flow, cfg.py_resolve, cfg.py_drain = self._callbacks
        self._cfg = cfg
        self._st: int | None = None  # C's state, made once the decoder knows the delay slot
        self._final_time = 0
        self._symbols_generation = -1
        self._fast_checked: set[int] = set()

    def attach(self, backend: StepBackend) -> None:
        """The backend is set up (its decoder knows the delay slot): C's state and hook."""
        self.b = b = backend
        lib, cpu, port, cfg = self._lib, self.cpu, self._port, self._cfg
        cfg.delay = b.delay
        self._st = lib.st_new(port.handle, ctypes.byref(cfg))
        if not self._st:
            raise MemoryError("native hot path: out of memory")
        # flow words of this file's instructions as earlier runs in this process decoded
        # them (memo.py; keyed by address << 1 | alternate mode, without the run's
        # _RET_FAST)
        self._flow_words: dict[int, int] = kept("step_flows", b.decoder.file_key, dict)
        self._preload()
        try:
            self._c_hook = port.add_hook(
                "code", ctypes.cast(lib.st_on_insn, ctypes.c_void_p).value or 0, self._st)
        except Exception as e:  # noqa: BLE001 - the engine's refusal, said in one line
            raise Unsupported(f"--engine native: the step hook was refused ({e})") from None
        self._snapshot = Snapshot(cpu)
        self._snap_args = ArgReader(cast(UnicornCpu, self._snapshot), b.args.types,
                                    at_entry=True)
        self._value = self._snap_args.value
        self._arg_plans: dict[int, object] = {}
        self._ret_plans: dict[int, object] = {}
        self._writer: NativeWriter | None = None  # `record`, `run`: C writes the records
        # the transfer C waited to resolve when each thread stopped (its six words)
        self._c_pending: dict[int, ctypes.Array[ctypes.c_uint64] | None] = {}

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        """The tracer's shadow stack (the running thread's) and sink, before the run: when
        the records go to a uftrace directory or `run`'s spill file, C keeps the shadow
        stack's common case and writes them itself (backends/native_writer.py); otherwise
        every record is drained to Python."""
        self._shadow_now = shadow_now
        sink = sink_now()
        packed = packed_sink_of(sink)
        if packed is None or not self._st \
                or self._writer is not None:
            return
        self._drain()
        lib, st = self._lib, self._st
        self._writer = NativeWriter(lib, None, shadow_now(), self.b.tails, sink_now, packed,
                                    attach=lambda u: lib.st_set_writer(st, u))

    # ------------------------------------------------------------ shared state
    @property
    def time(self) -> int:
        if not self._st:
            return self._final_time
        return int(self._lib.st_get_time(self._st))

    @time.setter
    def time(self, value: int) -> None:
        if self._st:
            self._lib.st_set_time(self._st, value)
        else:
            self._final_time = value

    def thread_leaving(self, tid: int) -> None:
        """Another guest thread gets the CPU (C is idle between two runs of the CPU): what
        C did is the stopping thread's (drained first); the transfer C waits to resolve is
        kept with that thread (the CPU may stop right after a call ran, before its target's
        first instruction: the run's instruction count stops ahead of this hook); the
        reference swaps the rest."""
        self._drain()
        pending = (ctypes.c_uint64 * 6)()
        self._c_pending[tid] = pending if self._lib.st_take_pending(self._st, pending) \
            else None

    def thread_entered(self, tid: int) -> None:
        """C gets the incoming thread's transfer and stacks."""
        incoming = self._c_pending.pop(tid, None)
        if incoming is not None:
            self._lib.st_put_pending(self._st, incoming)
        if self._writer is not None:
            self._writer.switch_thread(self._shadow_now())

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        def emit_drained(event: Event) -> None:
            self._drain()
            self._emit_now(event)

        return emit_drained

    def flow_decoded(self, addr: int, flow: Flow, length: int) -> None:
        pass

    def resolved(self) -> None:
        pass

    # ------------------------------------------------------------ callbacks from C
    def _py_flow(self, addr: int, size: int) -> int:
        """The flow word of the instruction at addr (step.c F_*): the reference's `flow_of`
        (Decoder.flow_at in the instruction set the CPU runs), packed."""
        try:
            self._sync_entries()
            key = addr << 1 | self.cpu.in_alt_mode()
            word = self._flow_words.get(key)
            if word is None:
                got = self.b.decoder.flow_at(addr, bool(key & 1))
                if got is None:  # nothing decodes here (not the file's code): not kept
                    word = size
                else:
                    word = self._flow_words[key] = self._pack(got[0], got[1].size)
            return self._run_flags(addr, word)
        except BaseException as e:  # noqa: BLE001 - re-raised by run(), as a hook's
            if self._hooks.pending is None:
                self._hooks.pending = e
            self._port.stop()
            return 0

    @staticmethod
    def _pack(flow: Flow, length: int) -> int:
        """The reference's classification as C's flow word, what the file alone decides."""
        word = length | _KIND_CODE[flow.kind] << 16
        if flow.conditional:
            word |= _CONDITIONAL
        if flow.maybe_return:
            word |= _MAYBE_RETURN
        if flow.alt_link:
            word |= _ALT_LINK
        return word

    def _run_flags(self, addr: int, word: int) -> int:
        """word with what this run's call types add: a return whose value C may read."""
        if word >> 16 & 7 == _KIND_CODE[FlowKind.RETURN] and self._return_fast(addr):
            word |= _RET_FAST
        return word

    def _preload(self) -> None:
        """C's flow table filled before the run with the words an earlier run of the same
        file decoded: then C asks Python only for instructions no run has reached yet.  Not
        where an instruction set is chosen at run time (ARM/Thumb: C's table is keyed by
        address alone, the first mode seen wins, as the reference's `flows`), nor for a
        dynamic program (no memo: its modules are not one file)."""
        if self.b.cls.alt_mode or not self._flow_words:
            return
        self._sync_entries()  # (as _py_flow does before any new code runs)
        known = [(key >> 1, self._run_flags(key >> 1, word))
                 for key, word in self._flow_words.items() if not key & 1]
        addrs = (ctypes.c_uint64 * len(known))(*(a for a, _w in known))
        words = (ctypes.c_uint32 * len(known))(*(w for _a, w in known))
        if self._lib.st_flows_load(self._st, addrs, words, len(known)) != 0:
            raise MemoryError("native hot path: out of memory")

    def _guarded(self, body: Callable[[], None]) -> None:
        """A Python section C called: what Python changed of the stacks goes back to C's
        writer at its end."""
        try:
            self._hooks.guard(body)
        finally:
            if self._writer is not None:
                self._writer.push()

    def _py_resolve(self, flow: int, site: int, fallthrough: int, time: int, sp: int,
                    pc: int) -> None:
        def body() -> None:
            self._drain()
            kind = _KIND_OF[flow >> 16 & 7]
            self.b.resolve(Pending(kind, site, fallthrough, time, sp, (), 0,
                                  bool(flow & _CONDITIONAL), bool(flow & _MAYBE_RETURN),
                                  bool(flow & _ALT_LINK)), pc)
            if kind is not FlowKind.RETURN and pc not in self._fast_checked:
                self._fast_checked.add(pc)  # C may finish transfers to pc from now on
                if self._args_fast(pc):
                    self._lib.st_fast_add(self._st, pc)

        self._guarded(body)

    def _py_drain(self) -> None:
        self._guarded(self._drain)

    def _sync_entries(self) -> None:
        """C's superset of the tail rule's entries: every symbol entry (again when the
        table grew: a library mapped, before any of its code runs and is decoded)."""
        tails = self.b.tails
        symbols = tails.symbols
        if symbols.generation == self._symbols_generation:
            return
        self._symbols_generation = symbols.generation
        for code in tails.entries:
            self._lib.st_entry_add(self._st, code)
        for f in symbols.funcs:
            if f.part_of is None:
                self._lib.st_entry_add(self._st, f.start)
                self._lib.st_entry_add(self._st, f.start + f.local_offset)

    # ------------------------------------------------------------ which values C covers
    def _return_fast(self, site: int) -> bool:
        return return_fast(self.b.args.types, site)

    def _args_fast(self, target: int) -> bool:
        return self._all_args_saved and args_fast(self.b.args.types, target,
                                                  len(self._arg_names) + self._n_stack)

    # ------------------------------------------------------------ events
    def _drain(self) -> None:
        lib, st, writer = self._lib, self._st, self._writer
        if writer is not None:  # C's records and stacks first: they come before these
            writer.pull()
        n = lib.st_events_count(st)
        if not n:
            return
        data = ctypes.string_at(lib.st_events(st), n * _EVENT.size)
        lib.st_events_clear(st)
        emit, tails = self._emit_now, self.b.tails
        called, returned, is_tail = tails.called, tails.returned, tails.is_tail
        args, ret_plans, value = self._args, self._ret_plans, self._value
        calls = returns = tail_calls = 0
        try:
            for kind, flags, time, site, target, sp, after, entry_sp, *regs in \
                    _EVENT.iter_unpack(data):
                if kind == _SE_CALL:
                    calls += 1
                    called(target, after)
                    call = Call(time, site, target, sp, after, args(target, entry_sp, regs),
                                bool(flags & _ALT_LINK))
                    if writer is None:
                        emit(call)
                    else:  # written by the reference, then its layout taught to C
                        writer.teach_call(call, None if flags & _ALT_LINK
                                          else self._words(target), writer.emit(call))
                elif kind == _SE_RETURN:
                    returns += 1
                    returned()
                    plan = ret_plans.get(site)
                    if plan is None:
                        plan = ret_plans[site] = ret_plan(self.b.args.types, site,
                                                          self.cpu.word)
                    if plan is SNAPSHOT:
                        self._snapshot.regs = dict(zip(self._ret_names, regs, strict=False))
                        result = self._snap_args.read_return(site)
                    else:
                        result = None if plan is VOID_PLAN else value(regs[0], cast(CType, plan))
                    ret = Return(time, site, sp, result, target)
                    if writer is None:
                        emit(ret)
                    else:
                        writer.teach_return(ret, plan is not SNAPSHOT, writer.emit(ret))
                elif is_tail(target):
                    tail_calls += 1
                    tail = TailCall(time, site, target, sp, args(target, entry_sp, regs))
                    if writer is None:
                        emit(tail)
                    else:
                        writer.teach_call(tail, self._words(target), writer.emit(tail))
        finally:  # (counted as the reference counts: where the event is made)
            stats = self.b.stats
            stats["calls"] += calls
            stats["returns"] += returns
            stats["tail_calls"] += tail_calls

    def _words(self, target: int) -> list[tuple[int, object]] | None:
        """A call's values as C's writer can copy them (per value its snapshot word and
        type), or None (values read otherwise: the call stays Python's)."""
        plan = self._arg_plans.get(target)
        if plan is SNAPSHOT or plan is None \
                or not all(isinstance(t, CType) for _i, t in cast(ArgPlan, plan)):
            return None
        return cast(list[tuple[int, object]], plan)

    # The common cases without the snapshot: what ArgReader.read / read_return compute from
    # the same words (one word per value: `ArgReader.value`; `Unknown`: a constant)
    def _args(self, target: int, entry_sp: int, regs: list[int]) -> tuple[Value, ...]:
        plan = self._arg_plans.get(target)
        if plan is None:
            plan = self._arg_plans[target] = arg_plan(self.b.args.types, target)
        if plan is not SNAPSHOT:
            value = self._value
            return tuple(value(regs[i], t) if isinstance(t, CType) else cast(Value, t)
                         for i, t in cast(ArgPlan, plan))
        snap, word, n_args = self._snapshot, self.cpu.word, len(self._arg_names)
        snap.regs = dict(zip(self._arg_names, regs, strict=False))
        snap.regs[self.b.sp_reg] = entry_sp
        snap.words = {entry_sp + self._stack_offset + k * word: regs[n_args + k]
                      for k in range(self._n_stack)}
        return self._snap_args.read(target)

    # ------------------------------------------------------------ traps and end
    def trap_entering(self) -> None:
        """The reference's trap frame comes next, over the transfer C was waiting to
        resolve (a signal handler entered between blocks resolves it at the interrupted
        code)."""
        self._drain()
        out = (ctypes.c_uint64 * 6)()
        if self._lib.st_take_pending(self._st, out):
            flow = out[0]
            self.b.pending = Pending(_KIND_OF[flow >> 16 & 7], out[1], out[2], out[3],
                                     out[4], (), out[5], bool(flow & _CONDITIONAL),
                                     bool(flow & _MAYBE_RETURN), bool(flow & _ALT_LINK))

    def leave(self) -> None:
        """(After a trap frame's event: C's stacks learn the signal frame.)"""
        if self._writer is not None:
            self._writer.push()

    def flush_events(self) -> None:
        """Hand the buffered events to the shadow stack (the tracer asks at the end of the
        run, before it reads the open frames)."""
        if self._st:
            self._drain()

    def detach(self) -> None:
        """(StepEngine.detach.)  C's instruction hook goes; its tables live on to `finish`."""
        if self._c_hook:
            self._port.del_hook(self._c_hook)
            self._c_hook = 0

    def finish(self) -> None:
        if not self._st:  # finished already
            return
        self._drain()
        lib, st, stats = self._lib, self._st, self.b.stats
        self._final_time = self.time
        # the calls and returns the writer took: made (written) in C, never seen by Python
        written = [int(lib.st_counter(st, which)) for which in (2, 3, 4)]
        stats["calls"] += written[0]
        stats["returns"] += written[1]
        stats["tail_calls"] += written[2]
        # how much went through Python (bench's profile; not a mechanism counter)
        self.native_stats = {"c_transfers": int(lib.st_counter(st, 0)),
                             "python_transfers": int(lib.st_counter(st, 1)),
                             "c_records": sum(written), "c_tail_calls": written[2],
                             "python_decodes": int(lib.st_counter(st, 5))}
        if self._writer is not None:
            self._writer.close()
        if self._c_hook:
            self._port.del_hook(self._c_hook)
        lib.st_free(st)
        self._st = None


def create(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
           types: CallTypes | None = None) -> StepBackend:
    """step on the Unicorn hot path: the backend over a `StepHotPath` engine."""
    return StepBackend(image, cpu, emit, types, engine=StepHotPath(image, cpu, hooks, emit))
