"""`btf`'s engine on the native target (`BlockSteps`): the tracee runs by
PTRACE_SINGLEBLOCK (x86 DEBUGCTL.BTF with EFLAGS.TF: a debug trap after each taken branch,
Intel SDM vol. 3 §18.4.3), and each stop becomes the `BranchRecord` that
`branch.BranchDecoder` turns into an event, as under emulation.

ptrace gives the trap's target (RIP) but not its source (the last-branch record is not
exposed).  The source is found by walking the instructions from the previous stop: each
non-transfer instruction falls through, a conditional branch whose direct target is not the
new RIP was not taken, and the first other transfer is the branch that trapped.  The walk
also counts the instructions run between two stops (the native instruction clock of this
backend).

Degradation.  A hypervisor may drop DEBUGCTL.BTF (KVM does on this machine): the trap flag
then traps after *every* instruction, silently.  That shows as a single-step trap
(si_code TRAP_TRACE) with no transfer between the two stops; the first one is kept
(`degraded_at`) and the run reports it, with `stops` (traps the mechanism really took)
against `traps` (taken branches).  The trace is the same either way.

With the C loop (engine native, `loop`), the stops whose walk crosses no taken branch —
with BTF degraded, every instruction that is no branch — are taken in C (native/ploop.c
`pl_block`): each such walk (resumed at, stopped at, instructions) is told to C once as one
of branch.c's block facts (`quiet_block_add`), and C hands back the count of stops and
instructions it took.  C takes a one-instruction stop only once the degradation has been
seen here, so its detection stays this class's.

Signal handlers (target/ptrace_signals.py): the tracer (branch_python.BranchBackend) emits
the handler's frame as under emulation; a handler is entered, and left by sigreturn,
without a branch, so the stop after the sigreturn is no branch's either (`resumed`: no
walk, the interrupted code resumes).

stats: traps (taken branches), calls, returns, tail_calls, stops, degraded (0 or 1).
"""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.branch import BranchRecord
from emutrace.backends.branch_python import BranchBackend, BranchTraps
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import Flow, FlowKind
from emutrace.native.ploop import PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.trace.events import Event

TRAP_TRACE = 2  # <asm-generic/siginfo.h>: the trap flag's (or BTF's) debug trap
WALK_LIMIT = 1 << 16  # instructions between two stops before the walk gives up


class BlockSteps:
    """btf's engine (branch_python.BranchEngine) on the native target: each stop of
    PTRACE_SINGLEBLOCK walked back to the branch that trapped, handed to the tracer's
    `BranchTraps` (module docstring)."""

    def __init__(self, cpu: PtraceTarget, loop: PtraceLoop | None = None) -> None:
        self.cpu = cpu
        self.time = 0
        self.degraded_at: int | None = None
        self._steps: dict[int, tuple[Flow, int, bool]] = {}  # pc → (flow, size, decoded)
        self._resumed = False  # a sigreturn ran: the next stop is the interrupted code's
        self._loop = loop
        self._quiet_told: set[tuple[int, int]] = set()  # (resumed at, stopped at) told to C
        self.native_stats: dict[str, int] = {}
        self.b: BranchBackend

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend
        self.decoder = backend.decoder
        self.stats = backend.stats
        self.stats.update(stops=0, degraded=0, lost=0)
        self.cpu.hook_branch(self._on_stop)
        loop = self._loop
        if loop is not None:
            loop.blocks_in = lambda: self.degraded_at is not None
            loop.blocks_took = self._took
            self.native_stats["c_stops"] = 0

    def _took(self, stops: int, walked: int) -> None:
        """C took `stops` stops that crossed `walked` instructions and no taken branch."""
        self.stats["stops"] += stops
        self.time += walked
        self.native_stats["c_stops"] += stops

    def _on_stop(self, before: int, at: int, code: int) -> None:
        """The tracee stopped at `at`; it was resumed at `before`."""
        self.stats["stops"] += 1
        if self._resumed:  # the sigreturn's own step: no branch was taken
            self._resumed = False
            self.time += 1
            return
        source, walked = self._walk(before, at)
        if source is None:
            if walked == 1 and code == TRAP_TRACE and self.degraded_at is None:
                self.degraded_at = before  # a trap after a non-branch instruction
                self.stats["degraded"] = 1
            if walked and self._loop is not None and (before, at) not in self._quiet_told:
                self._quiet_told.add((before, at))  # (C takes it from now on)
                self._loop.quiet_block_add(before, at, walked)
            self.time += walked
            return
        rec = BranchRecord(source, at, self.time + walked - 1, 0, False)
        self.time += walked
        self.b.delivery.taken(rec)  # (a trap: counted, decoded here)

    def _walk(self, pc: int, at: int) -> tuple[int | None, int]:
        """(the taken branch between pc and at, instructions run up to and including it);
        (None, n) when execution fell through to `at` (a system call's stop, or a trap
        after an instruction that is no branch); (None, 0) when the walk cannot follow
        (code outside the image: a signal handler's entry, the vDSO), counted as lost."""
        n = 0
        if pc == at:  # stopped where it was resumed: a branch to itself, or a trap in the
            # middle of a repeated string instruction (REP MOVS traps per iteration)
            flow, _size = self.decoder.flow(pc, False)
            taken = flow.kind not in (FlowKind.NONE, FlowKind.STOP) and (
                not flow.conditional or flow.target == at)
            return (pc, 1) if taken else (None, 0)
        while n < WALK_LIMIT:
            if pc == at and n:
                return None, n
            got = self._steps.get(pc)
            if got is None:
                known = self.decoder.decoder.insn_at(pc, False) is not None
                flow, size = self.decoder.flow(pc, False)
                got = self._steps[pc] = (flow, size, known)
            flow, size, known = got
            if not known:
                break
            n += 1
            if flow.kind in (FlowKind.NONE, FlowKind.STOP) or (
                    flow.conditional and at != flow.target):
                pc += size  # runs on (a conditional branch not taken: BTF does not trap)
                continue
            return pc, n
        self.stats["lost"] += 1
        return None, 0

    def drain(self) -> None:
        """(Every stop is decoded when it comes: nothing is held.)"""

    def interrupted(self) -> None:
        """(A handler's first instruction is a stop of its own: no branch is pending.)"""

    def resumed(self) -> None:
        """The handler's sigreturn runs next: its stop is no branch's (no walk)."""
        self._resumed = True

    def flush_events(self) -> None:
        pass

    def detach(self) -> None:
        """(A native target's forked children run untraced: no detach is asked.)"""

    def finish(self) -> None:
        pass


def create(image: Image, cpu: PtraceTarget, emit: Callable[[Event], None],
           types: CallTypes | None = None, loop: PtraceLoop | None = None) -> BranchBackend:
    """btf on the native target: the tracer over a `BlockSteps` engine."""
    return BranchBackend("btf", image, cpu, emit, BranchTraps(), BlockSteps(cpu, loop), types)
