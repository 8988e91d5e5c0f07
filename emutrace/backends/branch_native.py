"""The engines of `bts` and `btf` on the native hot path (`--engine native`: `BtsHotPath`,
`BtfHotPath`, each a branch_python.BranchEngine under the one `BranchBackend`): the taken
branches of backends/branch.py found by one C block hook (emutrace/native/branch.c) instead
of Python's.

`NativeBranches` is the C hook with its tables; it stands in for `BranchObserver` (same
`time`, same `interrupted`) and asks the reference observer's `block()` for the facts of
each block the first time it runs (instruction count, the transfer ending it), so which
branches are taken is the reference's decision by construction.

* bts: C counts every taken branch and the BTS interrupt (`--bts-buffer` records since the
  last decode) and buffers the records (from, to, time, sp at the target) the decoder may
  make an event of — not a jump to no function entry (step.c's rule, `entries`); they are
  held by the tracer's `RecordBuffer` and decoded by the reference `BranchDecoder`, in
  order, at the same moments as the reference (interrupt, signal, end).  Counters are
  C's (records, interrupts, drained) and the decoder's.
* btf: every taken branch is one trap (C counts them).  A jump to no function entry is
  nothing and never leaves C; a call, return or jump to an entry whose values a register
  snapshot covers (integer arguments of a target seen before, an integer return value) is
  one record, decoded later by the reference `BranchDecoder` reading the snapshot
  (`native_args.Snapshot`) instead of the CPU; anything else (a first call of a target, a
  `maybe_return` jump, a return into an entry, values in memory or float registers) is
  decoded at once by the reference decoder on the live CPU, after the buffer.  The buffer
  is drained before Python emits anything else (a signal frame) and at the end.
"""

from __future__ import annotations

import copy
import ctypes
import struct
from collections.abc import Callable
from typing import cast

from emutrace import native
from emutrace.backends.args import ArgReader
from emutrace.backends.branch import BranchObserver, BranchRecord
from emutrace.backends.branch_python import BranchBackend, BranchTraps, RecordBuffer
from emutrace.backends.native_args import Snapshot, args_fast, return_fast
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.errors import Unsupported
from emutrace.isa.base import FlowKind
from emutrace.native import branchlib
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event

# FlowKind -> the kind bits of a block's flags (branch.c K_*, step.c's codes)
_KIND_CODE = {FlowKind.NONE: 0, FlowKind.CALL: 1, FlowKind.RETURN: 2, FlowKind.JUMP: 3,
              FlowKind.STOP: 4, FlowKind.BRANCH: 5, FlowKind.EXECUTE: 6}
_RECORD = struct.Struct(native.EVENT_FORMAT)


class NativeBranches:
    """The C block hook that finds taken branches, and its record buffer."""

    def __init__(self, cpu: UnicornCpu, hooks: HookSet, observer: BranchObserver,
                 on_flush: Callable[[bool], None],
                 on_live: Callable[[BranchRecord], None] | None = None,
                 capacity: int = 0) -> None:
        self.lib = lib = branchlib.load()
        self.cpu, self.hooks, self.observer = cpu, hooks, observer
        self.decoder = observer.decoder
        self._on_flush, self._on_live = on_flush, on_live
        isa, regs = cpu.isa, cpu.isa.registers
        self._callbacks = (branchlib.PY_BLOCK_INFO(self._py_block),
                           branchlib.PY_FLUSH(self._py_flush),
                           branchlib.PY_LIVE(self._py_live))
        self.arg_names, self.ret_names = native.call_registers(isa)
        cfg = branchlib.BranchConfig()
        # bts: the buffer is the BTS buffer (up to 64 Ki records; a larger one is handed to
        # Python in parts, kept undecoded until the interrupt)
        cfg.abi = native.call_abi(isa, cpu.reg_id, cpu.word, cpu.byteorder == "big",
                                  min(capacity, 1 << 16) if capacity else 4096)
        cfg.abi.code_mask = (1 << 64) - 2 if isa.thumb_bit else (1 << 64) - 1
        self.n_stack, self.stack_offset = cfg.abi.n_stack, cfg.abi.stack_offset
        port = self._port = cpu.c_port
        cfg.reg_read = port.function("reg_read")
        cfg.mem_read = port.function("mem_read")
        cfg.py_block, cfg.py_flush, cfg.py_live = self._callbacks
        flag = isa.alt_mode_flag  # the Thumb bit, read as UnicornCpu.in_alt_mode does
        cfg.alt_reg, cfg.alt_mask = (cpu.reg_id(flag[0]), flag[1]) if flag else (-1, 0)
        cfg.live, cfg.capacity = int(on_live is not None), capacity
        self.all_args_saved = len(regs.args) <= native.MAX_REGS
        self._symbols_generation = -1
        self._bb = lib.bb_new(port.handle, ctypes.byref(cfg))
        if not self._bb:
            raise MemoryError("native hot path: out of memory")
        cpu.hook_del(observer.hook)  # the reference's Python hook: C's instead
        try:
            self._c_hook = port.add_hook(
                "block", ctypes.cast(lib.bb_on_block, ctypes.c_void_p).value or 0, self._bb)
        except Exception as e:  # noqa: BLE001 - the engine's refusal, said in one line
            raise Unsupported(f"--engine native: the branch hook was refused ({e})") from None
        self._final_time = 0

    # ------------------------------------------------------------ BranchObserver's face
    @property
    def time(self) -> int:
        return int(self.lib.bb_get_time(self._bb)) if self._bb else self._final_time

    def interrupted(self) -> None:
        self.lib.bb_interrupted(self._bb)

    # ------------------------------------------------------------ callbacks from C
    def _py_block(self, addr: int, size: int, thumb: int, out: ctypes.Array) -> None:
        """The block's facts (BranchObserver.block) into out[5]."""
        try:
            self._sync_entries()
            block = self.observer.block(addr, size, bool(thumb))
            out[0] = block.count
            if block.site is None:
                return
            flow, _size = self.decoder.flow(block.site, bool(thumb))
            flags = (branchlib.B_SITE | _KIND_CODE[flow.kind] << branchlib.B_KIND_SHIFT
                     | (branchlib.B_CONDITIONAL if block.conditional else 0)
                     | (branchlib.B_SPLIT if block.split else 0)
                     | (branchlib.B_MAYBE_RETURN if flow.maybe_return else 0))
            if flow.kind is FlowKind.RETURN and self.decoder.args is not None \
                    and return_fast(self.decoder.args.types, block.site):
                flags |= branchlib.B_RET_FAST
            out[1], out[2], out[3], out[4] = block.site, block.index, block.fallthrough, flags
        except BaseException as e:  # noqa: BLE001 - re-raised by run(), as a hook's
            if self.hooks.pending is None:
                self.hooks.pending = e
            self._port.stop()

    def _py_flush(self, interrupt: int) -> None:
        self.hooks.guard(lambda: self._on_flush(bool(interrupt)))

    def _py_live(self, site: int, target: int, time: int, thumb: int) -> None:
        assert self._on_live is not None
        on_live = self._on_live
        self.hooks.guard(lambda: on_live(BranchRecord(site, target, time, 0, bool(thumb))))

    def _sync_entries(self) -> None:
        """C's superset of the tail rule's entries (btf; step_native's rule): every symbol
        entry, again when the table grew (a library mapped: before any of its code runs)."""
        tails = self.decoder.tails
        symbols = tails.symbols
        if symbols.generation == self._symbols_generation:
            return
        self._symbols_generation = symbols.generation
        for code in tails.entries:
            self.lib.bb_entry_add(self._bb, code)
        for f in symbols.funcs:
            if f.part_of is None:
                self.lib.bb_entry_add(self._bb, f.start)
                self.lib.bb_entry_add(self._bb, f.start + f.local_offset)

    # ------------------------------------------------------------ records
    def take(self) -> list[tuple]:
        """The buffered records (native.EVENT_FORMAT tuples), and the buffer emptied."""
        lib, bb = self.lib, self._bb
        if not bb:
            return []
        n = lib.bb_records_count(bb)
        if not n:
            return []
        data = ctypes.string_at(lib.bb_records(bb), n * _RECORD.size)
        lib.bb_records_clear(bb)
        return list(_RECORD.iter_unpack(data))

    def counter(self, which: int) -> int:
        return int(self.lib.bb_counter(self._bb, which))

    def fill_reset(self) -> None:
        self.lib.bb_fill_reset(self._bb)

    def fast_add(self, target: int) -> None:
        self.lib.bb_fast_add(self._bb, target)

    def detach(self) -> None:
        """C's block hook goes; its tables live on to `close`."""
        if self._c_hook:
            self._port.del_hook(self._c_hook)
            self._c_hook = 0

    def close(self) -> None:
        """The run is over: C's hook goes, then its tables."""
        if not self._bb:
            return
        self._final_time = self.time
        if self._c_hook:
            self._port.del_hook(self._c_hook)
        self.lib.bb_free(self._bb)
        self._bb = None


class BtsHotPath:
    """bts's engine (branch_python.BranchEngine) on the Unicorn hot path: C counts the
    taken branches and the BTS interrupts and buffers the records the decoder may make an
    event of; the tracer's `RecordBuffer` holds them until they are decoded (stats as the
    reference's: C's counters)."""

    degraded_at: int | None = None

    def __init__(self, cpu: UnicornCpu, hooks: HookSet, capacity: int) -> None:
        self.cpu, self.hooks, self.capacity = cpu, hooks, capacity
        self.native_stats: dict[str, int] = {}
        self.b: BranchBackend
        self.buffer: RecordBuffer
        self.branches: NativeBranches

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend
        self.buffer = cast(RecordBuffer, backend.delivery)
        reference = BranchObserver(self.cpu, backend.decoder, lambda rec: None)
        self.branches = NativeBranches(self.cpu, self.hooks, reference, self._on_flush,
                                       capacity=self.capacity)

    @property
    def time(self) -> int:
        return self.branches.time

    def _on_flush(self, interrupt: bool) -> None:
        self._take()
        if interrupt:
            self.buffer.drain()

    def _take(self) -> None:
        """C's records, handed over (not decoded yet)."""
        self.buffer.hold([BranchRecord(site, target, time, sp, bool(flags & 1))
                          for _k, flags, time, site, target, sp, *_rest
                          in self.branches.take()])

    def drain(self) -> None:
        """A signal: its frame goes after the branches recorded so far."""
        self._take()
        self.buffer.drain()
        self.branches.fill_reset()

    def interrupted(self) -> None:
        self.branches.interrupted()

    def resumed(self) -> None:
        pass

    def flush_events(self) -> None:
        """(bts decodes what is left at `finish`, after the open frames are read.)"""

    def detach(self) -> None:
        self.branches.detach()

    def finish(self) -> None:
        if self.branches._bb is None:  # finished already
            return
        self._take()
        self.buffer.drain()
        # (records since the last interrupt or signal: the reference's list at the end)
        stats, counter = self.b.stats, self.branches.counter
        stats["drained"] = counter(branchlib.FILL)
        stats["records"] = counter(branchlib.TAKEN)
        stats["interrupts"] = counter(branchlib.INTERRUPTS)
        self.native_stats = {"buffered": counter(branchlib.BUFFERED)}
        self.branches.close()


class BtfHotPath:
    """btf's engine (branch_python.BranchEngine) on the Unicorn hot path: C finds the
    taken branches and snapshots the registers an event reads at the target; the tracer's
    decoder reads the snapshot, or the live CPU for a branch C leaves to it (stats as the
    reference's: traps are C's count)."""

    degraded_at: int | None = None

    def __init__(self, cpu: UnicornCpu, hooks: HookSet) -> None:
        self.cpu, self.hooks = cpu, hooks
        self.native_stats: dict[str, int] = {}
        self.b: BranchBackend
        self.branches: NativeBranches

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend
        cpu, decoder = self.cpu, backend.decoder
        assert decoder.args is not None
        self.types = decoder.args.types
        reference = BranchObserver(cpu, decoder, lambda rec: None, sideband_sp=False)
        self.branches = NativeBranches(cpu, self.hooks, reference, self._on_flush,
                                       self._on_live)
        # the same decoder reading a register snapshot instead of the CPU (shared tail rule,
        # flow cache and counters: a shallow copy)
        self._snapshot = Snapshot(cpu)
        self._snap_decoder = copy.copy(decoder)
        self._snap_decoder.cpu = cast(UnicornCpu, self._snapshot)
        self._snap_decoder.args = ArgReader(cast(UnicornCpu, self._snapshot), self.types,
                                            at_entry=True)
        self._saved_words = len(self.branches.arg_names) + self.branches.n_stack
        self._fast_checked: set[int] = set()

    @property
    def time(self) -> int:
        return self.branches.time

    def _on_flush(self, _interrupt: bool) -> None:
        """Decode the buffered records in order, each over its snapshot."""
        snap, dec, emit = self._snapshot, self._snap_decoder, self.b.emit
        sp_name, word = dec.sp_reg, self.cpu.word
        arg_names, ret_names = self.branches.arg_names, self.branches.ret_names
        n_args, n_stack, offset = len(arg_names), self.branches.n_stack, \
            self.branches.stack_offset
        for kind, flags, time, site, target, sp, _after, _entry_sp, *regs in \
                self.branches.take():
            if kind == branchlib.BR_RETURN:
                snap.regs = dict(zip(ret_names, regs, strict=False))
                snap.words = {}
            else:
                snap.regs = dict(zip(arg_names, regs, strict=False))
                snap.words = {sp + offset + k * word: regs[n_args + k] for k in range(n_stack)}
            snap.regs[sp_name] = sp
            ev = dec.event(BranchRecord(site, target, time, 0, bool(flags & 1)))
            if ev is not None:
                emit(ev)

    def _on_live(self, rec: BranchRecord) -> None:
        """A branch C leaves to the reference: decoded now, on the CPU at its target."""
        decoder = self.b.decoder
        self.b.decode(rec)
        target = rec.target
        if decoder.flow(rec.source, rec.thumb)[0].kind is FlowKind.RETURN:
            return
        if target not in self._fast_checked:  # C may snapshot branches to it from now on
            self._fast_checked.add(target)
            if self.branches.all_args_saved and args_fast(self.types, target,
                                                          self._saved_words):
                self.branches.fast_add(target)

    def drain(self) -> None:
        """A signal: its frame goes after the branches decoded so far."""
        self._on_flush(False)

    def interrupted(self) -> None:
        self.branches.interrupted()

    def resumed(self) -> None:
        pass

    def flush_events(self) -> None:
        """Hand the buffered events to the shadow stack (the tracer asks at the end of the
        run, before it reads the open frames)."""
        self._on_flush(False)

    def detach(self) -> None:
        self.branches.detach()

    def finish(self) -> None:
        if self.branches._bb is None:  # finished already
            return
        self._on_flush(False)
        counter = self.branches.counter
        self.b.stats["traps"] = counter(branchlib.TAKEN)
        self.native_stats = {"buffered": counter(branchlib.BUFFERED),
                             "live": counter(branchlib.LIVE)}
        self.branches.close()


def create_bts(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
               buffer: int = 4096) -> BranchBackend:
    """bts on the Unicorn hot path: the tracer over a `BtsHotPath` engine."""
    return BranchBackend("bts", image, cpu, emit, RecordBuffer(buffer),
                         BtsHotPath(cpu, hooks, buffer))


def create_btf(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
               types: CallTypes | None = None) -> BranchBackend:
    """btf on the Unicorn hot path: the tracer over a `BtfHotPath` engine."""
    return BranchBackend("btf", image, cpu, emit, BranchTraps(), BtfHotPath(cpu, hooks), types)
