"""ctypes bindings of the native target's ptrace loop in C (``ploop.c``, built into the same
library as ``hotpath.c``) and `PtraceLoop`, the object the run loop (target/ptrace_run.py)
resumes the tracee through when the C engine is chosen.

`PtraceLoop.resume` replaces the Python loop's PTRACE_CONT + wait4 pair: it returns the wait
status of the first stop C did not finish, after handing the records C wrote at the stops
it finished to `on_records` (the int3 backend's drain)."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Protocol

from emutrace import native
from emutrace.errors import Unsupported
from emutrace.isa.base import Isa
from emutrace.native import EVENT, SiteOp, steplib


class WriterExchange(Protocol):
    """C's record writer as the loop sees it (backends/native_writer.py `NativeWriter`):
    its records and stacks to Python before a drain, Python's changes back after one."""

    def pull(self) -> None: ...

    def push(self) -> None: ...

PL_STOP, PL_FULL, PL_EINTR = 0, 1, 2  # pl_resume's results (negative: -errno)
BUFFER_EVENTS = 4096
MAX_STOPS = 4096  # stops C finishes before Python runs (its signal handlers: Ctrl-C)
HW_SLOTS, HW_CHAIN = 4, 1024  # abi.h PL_HW_SLOTS (DR0-DR3), PL_HW_CHAIN
# pl_counter: traps C finished, of them simulated, stops handed to Python, resumes, strings
# C copied, events the record writer took
C_TRAPS, C_SIMULATED, C_RETURNED, C_RESUMES, C_STRINGS, C_WRITTEN = range(6)


class LoopConfig(ctypes.Structure):
    """abi.h pl_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("abi", native.CallAbi), ("max_stops", ctypes.c_uint32), ("mem_fd", ctypes.c_int32),
    ]


_vp, _u32, _u64, _i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
SIGNATURES: native.Signatures = {
    "pl_new": ([ctypes.POINTER(LoopConfig)], _vp),
    "pl_free": ([_vp], None),
    "pl_site_set": ([_vp, _u64, _u32, _u64, _u64, _i32, _i32, _u32, _u32, _u32, _u32, _i32,
                     _u32, _u32, _u32, _u32, _u32, _i32, _u32, _u32], ctypes.c_int),
    "pl_site_active": ([_vp, _u64, _u32], None),
    "pl_callee_add": ([_vp, _u64], ctypes.c_int),
    "pl_inside_add": ([_vp, _u64, _u64], ctypes.c_int),
    "pl_inside_drop": ([_vp, _u64], None),
    "pl_set_time": ([_vp, ctypes.c_int64], None),
    "pl_last_pc": ([_vp], _u64),
    "pl_counter": ([_vp, _u32], _u64),
    "pl_events": ([_vp], _vp),
    "pl_events_count": ([_vp], _u32),
    "pl_events_clear": ([_vp], None),
    "pl_set_writer": ([_vp, _vp, native.PY_DRAIN], None),
    "pl_string_args": ([_vp, _u64, _u32], ctypes.c_int),
    "pl_string_return": ([_vp, _u64], ctypes.c_int),
    "pl_strings": ([_vp], _vp),
    "pl_strings_len": ([_vp], _u64),
    "pl_resume": ([_vp, _i32, _i32, _i32, ctypes.POINTER(_i32)], ctypes.c_int),
    "pl_quiet_add": ([_vp, _u64], ctypes.c_int),
    "pl_entry_add": ([_vp, _u64], ctypes.c_int),
    "pl_jump_add": ([_vp, _u64, _u64, _u32], ctypes.c_int),
    "pl_step": ([_vp, _i32, _i32, ctypes.POINTER(_i32), ctypes.POINTER(_u64)], ctypes.c_int),
    "pl_step_pending_put": ([_vp, _u64, _u32, ctypes.POINTER(_u64)], ctypes.c_int),
    "pl_step_pending_take": ([_vp, ctypes.POINTER(_u64)], ctypes.c_int),
    "pl_time": ([_vp], ctypes.c_int64),
    # int3 --cleanup strict (pl_strict_*)
    "pl_strict_enable": ([_vp], ctypes.c_int),
    "pl_strict_func": ([_vp, _u64, _u64, _u32, _u32, ctypes.POINTER(_u64), ctypes.c_char_p],
                       ctypes.c_int),
    "pl_strict_func_armed": ([_vp, _u64, _u32], None),
    "pl_strict_owner": ([_vp, _u64, _u64], ctypes.c_int),
    "pl_strict_callee": ([_vp, _u64, _u64], ctypes.c_int),
    "pl_strict_chain_set": ([_vp, _u32, ctypes.POINTER(_u64), ctypes.POINTER(_u64)],
                            ctypes.c_int),
    # the entry backend's probes (pl_entry_*)
    "pl_entry_enable": ([_vp, _u64, _u64, _u64], ctypes.c_int),
    "pl_entry_probe": ([_vp, _u64, _u64, _u32], ctypes.c_int),
    "pl_entry_probe_active": ([_vp, _u64, _u32], None),
    "pl_entry_hold": ([_vp, _u32, _u64], None),
    "pl_entry_frames_set": ([_vp, _u32, ctypes.POINTER(_u64), ctypes.POINTER(_u64),
                             ctypes.POINTER(_u64)], ctypes.c_int),
    "pl_entry_frames_get": ([_vp, ctypes.POINTER(_u64), ctypes.POINTER(_u64),
                             ctypes.POINTER(_u64), _u32], ctypes.c_int64),
    "pl_entry_stepovers": ([_vp], _u64),
    "pl_quiet_block_add": ([_vp, _u64, _u64, _u32], ctypes.c_int),
    "pl_block": ([_vp, _i32, _i32, _u64, _u32, ctypes.POINTER(_i32), ctypes.POINTER(_u64),
                  ctypes.POINTER(_u64)], ctypes.c_int),
    "pl_hw_func_set": ([_vp, _u64, _u64, _u32, _u64, _u64, _u64, _u64, _u32], ctypes.c_int),
    "pl_hw_func_drop": ([_vp, _u64], None),
    "pl_hw_begin": ([_vp, _u32, _u64, ctypes.POINTER(_u64), ctypes.POINTER(_u64), _u32], None),
    "pl_hw_cur": ([_vp], _u64),
    "pl_hw_depth": ([_vp], _u32),
    "pl_hw_chain": ([_vp, ctypes.POINTER(_u64), _u32], None),
    "pl_hw_count": ([_vp, _u32], _u64),
}


def load() -> ctypes.CDLL:
    """The library with the loop's signatures set; Unsupported (exit 69) when it is not built
    or predates ploop.c."""
    return native.load("ploop.c (the ptrace loop)", SIGNATURES)


def available() -> bool:
    try:
        load()
    except Unsupported:
        return False
    return True


class PtraceLoop:
    """The C loop over one tracee, with its site tables (backends/fastpath.py's SiteTable)
    and event buffer.  `reg_id` names registers as indices of `user_regs_struct`."""

    def __init__(self, isa: Isa, reg_id: Callable[[str], int], mem_fd: int) -> None:
        lib = self._lib = self.lib = load()
        self.arg_names, self.ret_names = native.call_registers(isa)
        cfg = LoopConfig()
        cfg.abi = native.call_abi(isa, reg_id, isa.identity.word_size, False, BUFFER_EVENTS)
        self.n_stack = cfg.abi.n_stack
        cfg.max_stops, cfg.mem_fd = MAX_STOPS, mem_fd
        self._pl = lib.pl_new(ctypes.byref(cfg))
        if not self._pl:
            raise MemoryError("native ptrace loop: out of memory")
        self._status = ctypes.c_int32()
        # the records C wrote and the strings it copied for them, handed over at every
        # return from C (the int3 backend's drain)
        self.on_records: Callable[[bytes, bytes], None] | None = None
        self.time: Callable[[], int] = lambda: 0  # the backend's clock, stamped on records
        self.counters = [0] * 6
        # CPU seconds of this thread inside pl_resume/pl_step (C and the kernel's ptrace and
        # wait4 work) and in the drain (Python): bench's profile of where an event's time
        # goes (bench/bench_native_target.py)
        self.c_seconds = self.drain_seconds = 0.0
        # `step` (backends/step_ptrace.py): the backend's clock and waiting transfer told to
        # C (`pending_in`: the time, and step.c's pending words or None), the hooks C took
        # (`took(n)`), and C's waiting transfer handed back when C took any
        # (`pending_out(words or None)`); pending_in None: every step is Python's
        self.pending_in: Callable[[], tuple[int, list[int] | None]] | None = None
        self.took: Callable[[int], None] = lambda n: None
        self.pending_out: Callable[[list[int] | None], None] = lambda words: None
        self._skipped = ctypes.c_uint64()
        # called before each pl_resume and after each drain (strict: the call chain handed
        # to C; entry: its open frames both ways, the time back)
        self.before_resume: Callable[[], None] | None = None
        self._stepovers, self._entry_on = 0, False
        self.after_resume: Callable[[], None] | None = None
        # `hwbp` (backends/hwbp_ptrace.py): told before C resumes which function is armed
        # and its chain (`hw_in`, through `hw_begin`), and given C's changes after
        # (`hw_out(stopped)`, reading `hw_state`; stopped: the tracee is still there);
        # None: every debug-register stop is Python's
        self.hw_in: Callable[[], None] | None = None
        self.hw_out: Callable[[bool], None] = lambda stopped: None
        # `btf` (backends/btf_native.py): whether the degradation has been seen
        # (`blocks_in`), and the stops and instructions C took (`blocks_took`)
        self.blocks_in: Callable[[], bool] | None = None
        self.blocks_took: Callable[[int, int], None] = lambda stops, walked: None
        self._stops, self._walked = ctypes.c_uint64(), ctypes.c_uint64()
        # `record`/`run` (backends/int3_ptrace.py): C's record writer (native_writer.py),
        # pushed before each resume and pulled before the records are drained
        self.writer: WriterExchange | None = None
        self._py_drain = native.PY_DRAIN(self._drain_in_c)
        self._drain_error: BaseException | None = None

    # ------------------------------------------------------------ SiteTable
    strings = True  # C copies `char *` values at the event (fastpath.StringTable)

    _strings_told = False  # (no string told: no copies to fetch at a drain)

    def string_args(self, target: int, mask: int) -> None:
        self._strings_told = True
        self._check(self._lib.pl_string_args(self._pl, target, mask))

    def string_return(self, site: int) -> None:
        self._strings_told = True
        self._check(self._lib.pl_string_return(self._pl, site))

    def site_set(self, addr: int, op: SiteOp) -> None:
        if self._lib.pl_site_set(self._pl, addr, *op) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def site_active(self, addr: int, on: bool) -> None:
        self._lib.pl_site_active(self._pl, addr, int(on))

    def callee_add(self, target: int) -> None:
        if self._lib.pl_callee_add(self._pl, target) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def inside_add(self, site: int, target: int) -> None:
        if self._lib.pl_inside_add(self._pl, site, target) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def inside_drop(self, target: int) -> None:
        self._lib.pl_inside_drop(self._pl, target)

    # ------------------------------------------------------------ the loop
    def resume(self, pid: int, sig: int, request: int) -> tuple[int, int]:
        """Resume the stopped tracee with `request` (PTRACE_CONT; PTRACE_SYSCALL while system
        calls are watched; PTRACE_SINGLEBLOCK for btf) and signal sig, and wait for a stop C
        does not finish (a system-call stop, a block step's trap: every stop but an int3 at
        an armed site is handed back): (its wait status, the PC after the last trap C
        finished or 0)."""
        if self.hw_in is None:
            return self._resume(pid, sig, request)
        self.hw_in()
        stopped = False  # (an exit, a death, a failed request: no registers to program)
        try:
            status, last_pc = self._resume(pid, sig, request)
            stopped = os.WIFSTOPPED(status)
            return status, last_pc
        finally:
            self.hw_out(stopped)  # (before Python handles the stop)

    def _resume(self, pid: int, sig: int, request: int) -> tuple[int, int]:
        lib, pl = self._lib, self._pl
        last_pc = 0
        while True:
            if self.before_resume is not None:
                self.before_resume()
            if self.writer is not None:
                self.writer.push()
            lib.pl_set_time(pl, self.time())
            start = time.thread_time()
            rc = lib.pl_resume(pl, pid, request, sig, ctypes.byref(self._status))
            drained = time.thread_time()
            last_pc = int(lib.pl_last_pc(pl)) or last_pc
            self._drain()
            if self._drain_error is not None:  # (raised in C's drain callback)
                error, self._drain_error = self._drain_error, None
                raise error
            if self.after_resume is not None:
                self.after_resume()
            self.c_seconds += drained - start
            self.drain_seconds += time.thread_time() - drained
            if rc == PL_STOP:
                return int(self._status.value), last_pc
            if rc == PL_EINTR:  # emutrace got a signal: its handler runs in this wait
                _, status = os.waitpid(pid, 0)
                return status, last_pc
            if rc != PL_FULL:
                raise OSError(-rc, os.strerror(-rc))
            sig = 0  # the buffer was full or C ran long: Python's turn, then on

    # ------------------------------------------------------------ debug registers
    def hw_func_set(self, start: int, end: int, slots: list[int], calls: bool) -> None:
        """A function whose slots C may program: its sites in register order; calls: a
        call to its start may be finished in C (its arguments are words C saves)."""
        addrs = [*slots, 0, 0, 0, 0][:HW_SLOTS]
        if self._lib.pl_hw_func_set(self._pl, start, end, len(slots), *addrs, int(calls)):
            raise MemoryError("native ptrace loop: out of memory")

    def hw_func_drop(self, start: int) -> None:
        self._lib.pl_hw_func_drop(self._pl, start)

    def hw_begin(self, on: bool, cur: int, chain: list[tuple[int, int]]) -> None:
        """Before C resumes: cur is the one armed function, chain the top of the chain
        (each function's extent, innermost last)."""
        n = len(chain)
        starts = (ctypes.c_uint64 * max(n, 1))(*(a for a, _b in chain))
        ends = (ctypes.c_uint64 * max(n, 1))(*(b for _a, b in chain))
        self._lib.pl_hw_begin(self._pl, int(on), cur, starts, ends, n)

    def hw_state(self) -> tuple[int, list[int], int, int]:
        """After C: (the armed function, the chain's top, hits C finished, slot writes)."""
        lib, pl = self._lib, self._pl
        depth = int(lib.pl_hw_depth(pl))
        starts = (ctypes.c_uint64 * max(depth, 1))()
        lib.pl_hw_chain(pl, starts, depth)
        chain = list(starts[:depth])
        return (int(lib.pl_hw_cur(pl)), chain, int(lib.pl_hw_count(pl, 0)),
                int(lib.pl_hw_count(pl, 1)))

    # ------------------------------------------------------------ branch steps
    @property
    def blocks_quietly(self) -> bool:
        return self.blocks_in is not None

    def quiet_block_add(self, start: int, stop: int, count: int) -> None:
        """A stop at `stop` after a resume at `start` whose walk crossed no taken branch
        over `count` instructions (branch.c's block facts)."""
        self._check(self._lib.pl_quiet_block_add(self._pl, start, stop, count))

    def block(self, pid: int, sig: int, start: int) -> tuple[int, int]:
        """PTRACE_SINGLEBLOCK from start, and on while each stop's walk crosses no taken
        branch (pl_block): (the wait status of the first stop C does not take, the PC of
        the last one it took or 0)."""
        assert self.blocks_in is not None
        lib, pl = self._lib, self._pl
        last_pc = 0
        degraded_known = self.blocks_in()
        while True:
            begin = time.thread_time()
            rc = lib.pl_block(pl, pid, sig, last_pc or start, int(degraded_known),
                              ctypes.byref(self._status), ctypes.byref(self._stops),
                              ctypes.byref(self._walked))
            self.c_seconds += time.thread_time() - begin
            last_pc = int(lib.pl_last_pc(pl)) or last_pc
            self.blocks_took(int(self._stops.value), int(self._walked.value))
            ended = self._ended(rc, pid, last_pc)
            if ended is not None:
                return ended
            sig = 0

    def _ended(self, rc: int, pid: int, last_pc: int) -> tuple[int, int] | None:
        """What a pulled C loop's return means: its stop (the wait status, PL_STOP; or one
        waited for here, PL_EINTR) with the last PC it took, None to go on (PL_FULL: its
        buffer was drained), an OSError for -errno."""
        if rc == PL_STOP:
            return int(self._status.value), last_pc
        if rc == PL_EINTR:
            _, status = os.waitpid(pid, 0)
            return status, last_pc
        if rc != PL_FULL:
            raise OSError(-rc, os.strerror(-rc))
        return None

    # ------------------------------------------------------------ single-stepping
    @property
    def steps_quietly(self) -> bool:
        return self.pending_in is not None

    def quiet_add(self, addr: int) -> None:
        """An instruction whose `step` hook only counts it (no call, return or jump)."""
        if self._lib.pl_quiet_add(self._pl, addr) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def step(self, pid: int, sig: int) -> tuple[int, int]:
        """PTRACE_SINGLESTEP, and on while C can take the step backend's hook at the next
        instruction (pl_step): (the wait status of the first stop it does not take, the
        PC of the last one it took or 0)."""
        assert self.pending_in is not None
        lib, pl = self._lib, self._pl
        now, words = self.pending_in()
        put = (ctypes.c_uint64 * steplib.PENDING_WORDS)(*(words or ()))
        self._check(lib.pl_step_pending_put(pl, now, int(words is not None), put))
        last_pc = taken = 0
        try:
            while True:
                start = time.thread_time()
                rc = lib.pl_step(pl, pid, sig, ctypes.byref(self._status),
                                 ctypes.byref(self._skipped))
                self.c_seconds += time.thread_time() - start
                last_pc = int(lib.pl_last_pc(pl)) or last_pc
                taken += int(self._skipped.value)
                self.took(int(self._skipped.value))
                ended = self._ended(rc, pid, last_pc)
                if ended is not None:
                    return ended
                sig = 0
        finally:
            if taken:  # (none taken: the backend's transfer is as it was)
                out = (ctypes.c_uint64 * steplib.PENDING_WORDS)()
                self.pending_out(list(out) if lib.pl_step_pending_take(pl, out) else None)

    def jump_add(self, addr: int, fallthrough: int, conditional: bool) -> None:
        """A jump whose hook only remembers it as waiting (backends/step_ptrace.py)."""
        if self._lib.pl_jump_add(self._pl, addr, fallthrough, int(conditional)) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def entry_add(self, addr: int) -> None:
        """A function entry of the tail rule (a jump there may be a tail call)."""
        if self._lib.pl_entry_add(self._pl, addr) != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def c_time(self) -> int:
        """The backend's clock as C left it (an entry step-over takes one off)."""
        return int(self._lib.pl_time(self._pl))

    # ------------------------------------------------------------ int3 strict (pl_strict_*)
    def strict_enable(self) -> None:
        self._check(self._lib.pl_strict_enable(self._pl))

    def strict_func(self, start: int, end: int, ok: bool, sites: list[tuple[int, int]]) -> None:
        """A function the backend armed: its extent, whether C may arm and disarm it, and
        its sites with the program's byte under each."""
        addrs = (ctypes.c_uint64 * max(1, len(sites)))(*(a for a, _b in sites))
        origs = bytes(b for _a, b in sites)
        self._check(self._lib.pl_strict_func(self._pl, start, end, int(ok), len(sites),
                                             addrs, origs))

    def strict_func_armed(self, start: int, on: bool) -> None:
        self._lib.pl_strict_func_armed(self._pl, start, int(on))

    def strict_owner(self, addr: int, owner: int) -> None:
        """The site at addr is armed for the function at owner (0: disarmed)."""
        self._check(self._lib.pl_strict_owner(self._pl, addr, owner))

    def strict_callee(self, target: int, start: int) -> None:
        self._check(self._lib.pl_strict_callee(self._pl, target, start))

    def strict_chain(self, extents: list[tuple[int, int]]) -> None:
        n = len(extents)
        starts = (ctypes.c_uint64 * max(1, n))(*(a for a, _b in extents))
        ends = (ctypes.c_uint64 * max(1, n))(*(b for _a, b in extents))
        self._check(self._lib.pl_strict_chain_set(self._pl, n, starts, ends))

    # ------------------------------------------------------------ entry probes (pl_entry_*)
    def entry_enable(self, process_entry: int, push: int, code_mask: int) -> None:
        self._entry_on = True
        self._check(self._lib.pl_entry_enable(self._pl, process_entry, push, code_mask))

    def entry_probe(self, addr: int, func: int, orig: int) -> None:
        self._check(self._lib.pl_entry_probe(self._pl, addr, func, orig))

    def entry_probe_active(self, addr: int, on: bool) -> None:
        self._lib.pl_entry_probe_active(self._pl, addr, int(on))

    def entry_hold(self, hold: bool, handler_entry: int) -> None:
        self._lib.pl_entry_hold(self._pl, int(hold), handler_entry)

    def entry_frames_set(self, frames: list[tuple[int, int, int]]) -> None:
        n = len(frames)
        cols = [(ctypes.c_uint64 * max(1, n))(*(f[i] for f in frames)) for i in range(3)]
        self._check(self._lib.pl_entry_frames_set(self._pl, n, *cols))

    def entry_frames_get(self) -> list[tuple[int, int, int]] | None:
        """The open frames if C changed them since they were last read or set, else None."""
        room = 256
        while True:
            cols = [(ctypes.c_uint64 * room)() for _ in range(3)]
            n = int(self._lib.pl_entry_frames_get(self._pl, *cols, room))
            if n < 0:
                return None
            if n <= room:
                return list(zip(cols[0][:n], cols[1][:n], cols[2][:n], strict=True))
            room = n

    def entry_stepovers(self) -> int:
        if self._pl:
            self._stepovers = int(self._lib.pl_entry_stepovers(self._pl))
        return self._stepovers

    @staticmethod
    def _check(rc: int) -> None:
        if rc != 0:
            raise MemoryError("native ptrace loop: out of memory")

    def set_writer(self, u: int | None) -> None:
        """C's record writer state (NativeWriter's `attach`), or None at its end."""
        if self._pl:  # (a loop closed first has no writer left to unbind)
            self._lib.pl_set_writer(self._pl, u, self._py_drain if u else native.PY_DRAIN())

    def _drain_in_c(self) -> None:
        """C's drain callback (the writer's bytes full, a record for Python while the
        writer is on), the Unicorn port's py_drain: C's records to Python, then Python's
        changes to C's stacks; an exception is kept for `_resume` to raise, never lost in
        C."""
        try:
            self._drain()
            if self.writer is not None:  # what the drain changed, to C's stacks
                self.writer.push()
        except BaseException as e:  # noqa: BLE001 - re-raised by _resume
            if self._drain_error is None:
                self._drain_error = e
            self._lib.pl_set_writer(self._pl, None, native.PY_DRAIN())  # (Python's now)

    def _drain(self) -> None:
        lib, pl = self._lib, self._pl
        if self.writer is not None:  # its records and stacks come before these
            self.writer.pull()
        n = lib.pl_events_count(pl)
        if not n:
            return
        data = ctypes.string_at(lib.pl_events(pl), n * EVENT.size)
        n_strings = int(lib.pl_strings_len(pl)) if self._strings_told else 0
        strings = ctypes.string_at(lib.pl_strings(pl), n_strings) if n_strings else b""
        lib.pl_events_clear(pl)
        if self.on_records is not None:
            self.on_records(data, strings)

    def close(self) -> None:
        if self._pl and self._entry_on:
            self.entry_stepovers()  # (kept for the backend's finish)
        if self._pl:
            self.counters = [int(self._lib.pl_counter(self._pl, i)) for i in range(6)]
            self._lib.pl_free(self._pl)
            self._pl = None

    def counter(self, index: int) -> int:
        if self._pl:
            return int(self._lib.pl_counter(self._pl, index))
        return self.counters[index]
