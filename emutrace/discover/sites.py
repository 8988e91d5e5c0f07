"""One instruction → at most one site, from the ISA's classifier (no ISA names here)."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.discover.decode import Decoder
from emutrace.discover.model import Site, SiteKind
from emutrace.isa.base import Flow, FlowKind, Insn


def code_addr(decoder: Decoder, addr: int) -> int:
    """A target address without the instruction-set bit (ARM Thumb)."""
    return decoder.isa.code_address(addr)


def resolve(decoder: Decoder, insn: Insn, flow: Flow | None = None) -> tuple[Flow, int | None]:
    """The insn's flow (flow: the classifier's answer, when the caller has it already);
    EX/EXRL are replaced by the flow of the instruction they execute (returned as the
    second value)."""
    if flow is None:
        flow = decoder.cls.classify(insn)
    if flow.kind is FlowKind.EXECUTE and flow.target is not None:
        executed = decoder.insn_at(flow.target, insn.thumb)
        if executed is None:
            return Flow(FlowKind.NONE), flow.target
        inner = decoder.cls.classify(executed)
        if inner.kind in (FlowKind.EXECUTE, FlowKind.STOP, FlowKind.BRANCH, FlowKind.JUMP):
            inner = Flow(FlowKind.NONE) if inner.kind is not FlowKind.JUMP else inner
        return inner, flow.target
    return flow, None


def fall_through(decoder: Decoder, insn: Insn) -> int:
    """Where execution continues after insn and, on delay-slot ISAs, its delay slot."""
    return insn.addr + insn.size * (2 if decoder.cls.delay_slot else 1)


def site_for(decoder: Decoder, insn: Insn, inside: Callable[[int], bool],
             classified: Flow | None = None) -> Site | None:
    """The site insn makes in a function whose code range is tested by `inside`
    (classified: the classifier's answer for insn, when the caller has it already)."""
    flow, executes = resolve(decoder, insn, classified)
    kind = flow.kind
    delay = decoder.cls.delay_slot and executes is None and kind is not FlowKind.NONE
    if kind is FlowKind.CALL:
        if flow.target is not None and executes is None \
                and code_addr(decoder, flow.target) == fall_through(decoder, insn):
            return None  # `call next` / `bcl 20,31,$+4` / `bal 1f`: reads the PC
        site_kind = SiteKind.CALL
    elif kind is FlowKind.RETURN:
        site_kind = SiteKind.RETURN
    elif kind in (FlowKind.JUMP, FlowKind.BRANCH):
        if flow.target is not None and inside(code_addr(decoder, flow.target)):
            return None
        site_kind = SiteKind.TAIL
    else:
        return None
    return Site(insn.addr, insn.size, site_kind, flow.target, flow.indirect, delay,
                flow.conditional, insn.thumb, executes, flow.maybe_return,
                flow.alt_link)
