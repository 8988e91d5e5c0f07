"""A function without a symbol: recursive descent over its basic blocks from the entry.

Blocks end at returns, unconditional jumps and undecodable or trapping instructions.  A
direct unconditional jump is a tail call (not followed) when its target lies before the
entry or is a known function entry; otherwise it is followed as part of the function.  An
indirect jump ends the block and becomes a TAIL site with its operand: whether it leaves the
function (tail call) or stays (jump table) is decided when it runs; code reached only through
a jump table is therefore missing from the extent.  The extent is the covered range.

Which entries are known grows as the run goes on, so a function descended before a target
it followed became a known entry is *stale*: `Discovery.stale` names it, and it is
descended again on request (then the jump is a TAIL site, as `backends.tails` rules).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import replace

from emutrace.discover.decode import UNSEEN, Decoder
from emutrace.discover.model import Function, Site, SiteKind
from emutrace.discover.sites import code_addr, fall_through, resolve, site_for
from emutrace.isa.base import FlowKind

MAX_INSNS = 200_000
NONE = FlowKind.NONE


def descend(decoder: Decoder, entry: int, alt: bool,
            is_function_entry: Callable[[int], bool]) -> Function:
    seen: dict[int, int] = {}  # addr → size of every covered instruction
    sites: dict[int, Site] = {}
    data: list[tuple[int, int]] = []  # PC-relative literals loaded by covered code
    literal = decoder.cls.literal
    predicates = decoder.cls.predicates
    classify = decoder.cls.classify
    known = decoder.instructions  # insn_at's cache, read here first
    todo = [entry]
    followed: set[int] = set()

    def leaves(target: int) -> bool:
        return target < entry or (target != entry and is_function_entry(target))

    def inside(target: int) -> bool:
        return not leaves(target)

    def branch(addr: int, target: int) -> None:
        """A conditional direct branch to target at addr: followed when the target is inside
        the function, else a site (what the loop below does for it)."""
        target = code_addr(decoder, target)
        if not inside(target):
            insn = decoder.insn_at(addr, alt)
            site = None if insn is None else site_for(decoder, insn, inside, classify(insn))
            if site is not None:
                sites[addr] = site
        elif decoder.in_code(target):
            todo.append(target)
            if target != entry:
                followed.add(target)

    # straight-line code walked in C up to the next instruction the ISA's SweepFilter keeps
    # (decode.Decoder.walker: the others fall through or stop, and need only their sizes;
    # conditional direct branches and jumps into the function are followed there, by
    # `branch`'s rule, the other branches come back with their targets, direct calls walked
    # past come back for their sites); not where the ISA reads literals or IT blocks from
    # every instruction (ARM)
    walk = decoder.walker(alt) if literal is None and predicates is None else None
    while todo and len(seen) < MAX_INSNS:
        addr = todo.pop()
        predicated = 0  # instructions still under an IT block
        while addr not in seen:
            walked = walk(addr, seen, entry, is_function_entry, todo, followed) \
                if walk is not None else None
            if walked is not None:
                insn, addr, branches, calls = walked
                assert not ((branches or calls) and decoder.cls.delay_slot)  # (test_sweep_filter)
                for at, goes_to in branches:
                    branch(at, goes_to)
                for call in calls:  # (a direct call's site: what the loop below makes)
                    site = site_for(decoder, call, inside, classify(call))
                    if site is not None:
                        sites[call.addr] = site
                if addr in seen:  # (into code seen already)
                    break
            else:
                insn = known.get((addr, alt), UNSEEN)
                if insn is UNSEEN:
                    insn = decoder.insn_at(addr, alt)
            if insn is None:
                break
            seen[addr] = insn.size
            if literal is not None:
                pool = literal(insn)
                if pool is not None:
                    data.append(pool)
            classified = classify(insn)
            if classified.kind is NONE:  # most instructions: what the general path does
                if predicated:           # for them, without its calls (cold discovery)
                    predicated -= 1
                elif predicates is not None:
                    predicated = predicates(insn)
                addr += insn.size
                continue
            flow = resolve(decoder, insn, classified)[0] \
                if classified.kind is FlowKind.EXECUTE else classified
            # a direct jump into the function is followed and makes no site (site_for's rule,
            # asked once here)
            target = None if flow.kind not in (FlowKind.JUMP, FlowKind.BRANCH) \
                or flow.target is None else code_addr(decoder, flow.target)
            local = target is not None and inside(target)
            site = None if local else site_for(decoder, insn, inside, classified)
            if predicated:
                predicated -= 1
                flow = replace(flow, conditional=True)
                if site is not None:
                    site = replace(site, conditional=True)
            elif predicates is not None:
                predicated = predicates(insn)
            if site is not None:
                sites[addr] = site
            kind, nxt = flow.kind, addr + insn.size
            if decoder.cls.delay_slot and kind not in (FlowKind.NONE, FlowKind.STOP,
                                                        FlowKind.EXECUTE):
                slot = decoder.insn_at(nxt, alt)
                if slot is not None:
                    seen[nxt] = slot.size
                nxt = fall_through(decoder, insn)
            if local and target is not None and decoder.in_code(target):
                todo.append(target)
                if target != entry:
                    followed.add(target)
            if kind is FlowKind.STOP:
                break
            if kind in (FlowKind.RETURN, FlowKind.JUMP) and not flow.conditional:
                break
            addr = nxt
    # code "after" a call that never returns (abort, __stack_chk_fail) may be a literal
    # pool: a site that overlaps loaded data is no site (patching it would corrupt the data)
    for lo, size in data:
        for addr in [a for a, s in sites.items() if a < lo + size and lo < a + s.size]:
            del sites[addr]
    start = min(seen) if seen else entry
    end = max(map(operator.add, seen, seen.values())) if seen else entry
    ordered = tuple(sorted(sites.values(), key=lambda s: s.addr))
    # a site's conditional TAIL to a target that was followed as part of the function
    ordered = tuple(s for s in ordered if not (s.kind is SiteKind.TAIL and s.target is not None
                                               and code_addr(decoder, s.target) in seen))
    return Function(None, start, end, ordered, alt, followed=frozenset(followed))
