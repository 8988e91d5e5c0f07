"""What the pulled run loops share (target/ptrace_run.py, target/gdb_run.py): the hooks a
target keeps for its loop to call at a stop, called before the instruction it stands at."""

from __future__ import annotations

from typing import Any, Protocol

from emutrace.target.protocol import BlockHook, CodeHook


class PulledHooks(Protocol):
    """A target whose run loop calls its hooks (PtraceTarget, GdbRemoteTarget)."""

    blocks_wanted: bool
    block_hooks: dict[int, BlockHook]
    range_hooks: dict[int, tuple[CodeHook, int, int, Any]]
    point_hooks: dict[int, dict[int, tuple[CodeHook, Any]]]


def hooks_before(target: PulledHooks, pc: int, blocks: bool, again: bool) -> None:
    """The hooks of the instruction at pc, before it runs: the block hooks when a block
    entry is due (blocks; again: a trap handler wants the next entry too, as Unicorn
    delivers both after an interrupt), then the code hooks over ranges holding pc, then
    those on pc."""
    if blocks:
        target.blocks_wanted = False
        for block_hook in list(target.block_hooks.values()):
            block_hook(None, pc, 0, None)
        target.blocks_wanted = target.blocks_wanted or again
    for fn, begin, end, data in list(target.range_hooks.values()):
        if begin > end or begin <= pc <= end:
            fn(None, pc, 0, data)
    for fn, data in list(target.point_hooks.get(pc, {}).values()):
        fn(None, pc, 0, data)
