"""Taken branches, as branch-tracing hardware sees them: what `bts` and `btf` share.

`BranchObserver` is a translation-block hook (UC_HOOK_BLOCK).  A block ends at a control
transfer, so at each block entry it knows the block that just ran and where it went.  Per
block — cached by (address, size, instruction set): a block's Thumb state is read at its
own entry, since a `bx` switches it for the next block — it keeps the instruction count and,
when the block ends in a control-transfer instruction, that instruction (on MIPS the one
before the last, the last being its delay slot; or the last, when a page boundary falls
between a branch and its delay slot: QEMU then runs the delay slot as a block of its own and
the branch goes somewhere after that block).  A `BranchRecord` (from, to) is produced when
that branch was taken: the next block is not its fallthrough, or it is an unconditional
transfer (call, jump, return), which is taken whatever its target.  Blocks that end for
another reason (a system call, the block size limit, a page boundary) produce none; the
first block has no predecessor.  Whether a transfer is conditional comes from the ISA
classifier (the hardware knows which of its branches it takes).

`BranchDecoder` turns a record into a raw event by disassembling the `from` instruction
(a hardware record cannot tell a call from a jump), with exactly the decisions of `step`:
a call to the next instruction only reads the PC and a return to the fallthrough is not
taken (no event); a jump or conditional branch is a tail call when `TailRule` says so;
s390x EXRL counts as a call when the instruction it executes is one.

Sideband.  `time` is the number of instructions executed before the branch instruction
(the block's start time plus the branch's index in it), as in `step`.  The stack pointer is
read once, at the target (the next block's entry), and the event's sp — by convention the
one *before* the event's instruction (trace.events) — is derived from it:

* call: sp(target) + `call_push_size` (a call pushes one word on x86, nothing elsewhere).
  Assumption: nothing but the call moves sp between the call and its target.  A MIPS delay
  slot that does breaks it: the fs_rt programs' `_start` has `jal fs_entry` with
  `addiu sp, sp, -16` in its slot, so that frame gets the callee's entry sp, 16 bytes
  deeper (harmless there: the frame never returns and every later call is deeper still).
* return: sp(target) - push (- the immediate of x86 `ret imm16`).  On x86 this is exactly
  the sp before `ret`.  Where a return also pops registers (ARM `pop {r4, pc}`) or frees
  the frame in its delay slot (MIPS `jr ra; addiu sp, sp, N`) it is shallower than that:
  it is the sp the returning frame had at its call, which is all the shadow stack compares
  it with (frames strictly deeper are finished; the returning frame is not).
* jump: sp(target); the same holds for a tail jump that frees its frame in its slot.

Time is counted per block when it starts, as in `int3`: a block cut short by a fault is
counted whole, and Thumb IT-block instructions whose condition fails are counted (they are
architecturally executed; Unicorn's code hook, hence `step`, skips them).  Limit: after a
fault outside the NULL page the run loop replays the faulting instruction in a second
emu_start; that block entry is taken for the destination of the faulting block's branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import unicorn

from emutrace.backends.args import ArgReader, call_push_size
from emutrace.backends.tails import TailRule
from emutrace.discover.callabi import CallTypes
from emutrace.discover.decode import Decoder
from emutrace.discover.symbols import read_symbols
from emutrace.elf import Image
from emutrace.isa.base import NO_FLOW, Flow, FlowKind
from emutrace.target.protocol import Target
from emutrace.trace.events import Call, Event, Return, TailCall


class BranchRecord(NamedTuple):
    source: int  # address of the branch instruction ("from")
    target: int  # address of the next instruction executed ("to")
    time: int  # sideband: guest instructions executed before the branch
    sp: int  # sideband: stack pointer at the target (0 when not kept)
    thumb: bool  # the source's instruction set (ARM Thumb)


@dataclass(frozen=True, slots=True)
class Block:
    count: int  # instructions
    site: int | None  # the control transfer ending the block; None: it ends otherwise
    index: int = 0  # the site's position in the block (its time offset)
    fallthrough: int = 0  # where the site goes when not taken (after its delay slot)
    conditional: bool = False
    split: bool = False  # the site's delay slot is the next block (a page boundary)


class BranchDecoder:
    """Branch records → raw events.  With `live` the decoder is live: it runs while the
    CPU stands at the record's target with all its registers (btf), so calls get their
    arguments (read as at a callee's entry), returns their return value, and sp is read
    there rather than taken from the record.  Without (bts), records carry no register
    values but the sideband sp."""

    def __init__(self, image: Image, cpu: Target, types: CallTypes | None = None,
                 live: bool = False) -> None:
        self.image, self.cpu = image, cpu
        self.decoder = Decoder(image)
        self.cls = self.decoder.cls
        self.delay = self.cls.delay_bytes
        self.tails = TailRule(read_symbols(image), image.isa.code_mask)
        self.push = call_push_size(cpu)
        self.args = ArgReader(cpu, types or CallTypes.for_image(image), at_entry=True) \
            if live else None
        regs = image.isa.registers
        self.ret_reg, self.sp_reg = regs.retval, regs.sp
        self._flows: dict[tuple[int, bool], tuple[Flow, int]] = {}
        self.stats = {"calls": 0, "returns": 0, "tail_calls": 0}

    def flow(self, addr: int, thumb: bool) -> tuple[Flow, int]:
        """(flow, size) of the instruction at addr, decoded once (as `step` decides)."""
        key = (addr, thumb)
        got = self._flows.get(key)
        if got is None:
            got = self._flows[key] = self._decode(addr, thumb)
        return got

    def _decode(self, addr: int, thumb: bool) -> tuple[Flow, int]:
        got = self.decoder.flow_at(addr, thumb)
        if got is None:
            return NO_FLOW, self.decoder.align(thumb)
        return got[0], got[1].size

    def _popped(self, addr: int, thumb: bool) -> int:
        """Bytes a return pops besides the return address: x86 `ret imm16`."""
        insn = self.decoder.insn_at(addr, thumb)
        if not self.push or insn is None or not insn.op_str:
            return 0
        try:
            return int(insn.op_str, 0)
        except ValueError:
            return 0

    def event(self, rec: BranchRecord) -> Event | None:
        """The event a taken branch is, or None (a jump inside a function, a call that only
        reads the PC).  Records must come in the order they were taken (TailRule)."""
        flow, size = self.flow(rec.source, rec.thumb)
        to = rec.target
        fallthrough = rec.source + size + self.delay
        kind = self.tails.taken(flow.kind, flow.conditional, flow.maybe_return, to,
                                fallthrough)
        if kind is FlowKind.CALL:
            self.stats["calls"] += 1
            self.tails.called(to, fallthrough)
            args = self.args.read(to) if self.args is not None else ()
            return Call(rec.time, rec.source, to, self._sp(rec) + self.push, fallthrough, args,
                        flow.alt_link)
        if kind is FlowKind.RETURN:
            self.stats["returns"] += 1
            self.tails.returned()
            retval = self.args.read_return(rec.source) if self.args is not None else None
            sp = self._sp(rec) - self.push - self._popped(rec.source, rec.thumb)
            return Return(rec.time, rec.source, sp, retval, to)
        if kind in (FlowKind.JUMP, FlowKind.BRANCH) and self.tails.is_tail(to):
            self.stats["tail_calls"] += 1
            args = self.args.read(to) if self.args is not None else ()
            return TailCall(rec.time, rec.source, to, self._sp(rec), args)
        return None

    def _sp(self, rec: BranchRecord) -> int:
        """sp at the target: live from the CPU, or the record's sideband."""
        return self.cpu.reg_read(self.sp_reg) if self.args is not None else rec.sp


class BranchObserver:
    """Counts instructions per block and reports each taken branch to `on_branch`, at the
    entry of the block it went to."""

    def __init__(self, cpu: Target, decoder: BranchDecoder,
                 on_branch: Callable[[BranchRecord], None], sideband_sp: bool = True) -> None:
        self.cpu, self.decoder, self.on_branch = cpu, decoder, on_branch
        isa = cpu.isa
        # sideband_sp=False: the consumer reads sp itself at the target (btf); records
        # then carry sp=0
        self.sp = cpu.reg_id(isa.registers.sp) if sideband_sp else None
        self.blocks: dict[tuple[int, int, bool], Block] = {}
        # the branch that ended the last block, its time and instruction set; `waiting`:
        # its delay slot is the block running now, it goes somewhere at the next one
        self.branch: Block | None = None
        self.branch_time = 0
        self.branch_thumb = False
        self.waiting = False
        self.time = 0
        self.hook = cpu.hook_block(self._on_block)  # (the native engine replaces it)

    def _on_block(self, uc: unicorn.Uc, addr: int, size: int, _d: object) -> None:
        thumb = self.cpu.in_alt_mode()
        if self.waiting:
            self.waiting = False
        else:
            b = self.branch
            if b is not None and (addr != b.fallthrough or not b.conditional):
                assert b.site is not None
                sp = uc.reg_read(self.sp) if self.sp is not None else 0
                self.on_branch(BranchRecord(b.site, addr, self.branch_time, sp,
                                            self.branch_thumb))
            self.branch = None
        block = self.block(addr, size, thumb)
        if block.site is not None:
            self.branch, self.waiting = block, block.split
            self.branch_time, self.branch_thumb = self.time + block.index, thumb
        self.time += block.count

    def interrupted(self) -> None:
        """A signal handler is entered before the branch that ends the block running now
        (a system call's return or a fault inside it), or at the start of a block (a
        SIGALRM between blocks: the kernel's block hook is added during the run, so it
        runs after this one, which has taken the block already): that branch never runs."""
        self.branch, self.waiting = None, False

    def block(self, addr: int, size: int, thumb: bool) -> Block:
        """The block's facts, decoded once per (address, size, instruction set)."""
        key = (addr, size, thumb)
        block = self.blocks.get(key)
        if block is None:
            block = self.blocks[key] = self._block(addr, size, thumb)
        return block

    def _block(self, addr: int, size: int, thumb: bool) -> Block:
        """The block's instruction count and the control transfer that ends it."""
        dec = self.decoder
        starts = dec.decoder.insn_starts(addr, size, thumb)
        last = len(starts) - 1
        for index in ([last - 1, last] if dec.delay else [last]):
            if index < 0:
                continue
            site = starts[index]
            flow, length = dec.flow(site, thumb)
            if flow.kind not in (FlowKind.NONE, FlowKind.STOP):
                return Block(len(starts), site, index, site + length + dec.delay,
                             flow.conditional, split=dec.delay > 0 and index == last)
        return Block(len(starts), None)

