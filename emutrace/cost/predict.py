"""Predicted native slowdown of a traced run, from the events the emulated backend counted.

    slowdown = (insns × ns_per_insn + Σ_kind count(kind) × price(kind)) / (insns × ns_per_insn)

`insns` is the number of instructions the program executed (``RunResult.guest_insns``): the
untraced native run is assumed to take ``ns_per_insn`` per instruction (default 0.3 ns, one
instruction per cycle at ~3.3 GHz — an assumption printed with every result).  A price with
basis ``guest_insn`` (BTF in the VM) is multiplied by `insns` instead of by its counter.

A statistic the price list does not know (a backend added a key) is priced 0 and named in the
assumptions; a counted key missing from the statistics counts 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from emutrace.cost.prices import COUNTED, HARDWARE_NOTES, SETTINGS, Price, price

DEFAULT_NS_PER_INSN = 0.3


@dataclass(frozen=True)
class EventCost:
    event: str
    count: int  # events priced (guest instructions for a per-instruction price)
    ns_each: float
    price: Price | None  # None: a statistic the price list does not know

    @property
    def total_ns(self) -> float:
        return self.count * self.ns_each


@dataclass(frozen=True)
class Prediction:
    isa: str
    backend: str
    setting: str
    guest_insns: int
    ns_per_insn: float
    breakdown: dict[str, EventCost]
    assumptions: list[str] = field(default_factory=list)

    @property
    def native_ns(self) -> float:
        return self.guest_insns * self.ns_per_insn

    @property
    def tracing_ns(self) -> float:
        return sum(c.total_ns for c in self.breakdown.values())

    @property
    def slowdown(self) -> float:
        return (self.native_ns + self.tracing_ns) / self.native_ns


def backend_of(spec: str) -> str:
    """`int3:strict`, `hwbp:2` → the backend the prices are listed under."""
    return spec.split(":", 1)[0]


def predict(isa: str, backend: str, stats: Mapping[str, int], guest_insns: int,
            setting: str = "vm", ns_per_insn: float = DEFAULT_NS_PER_INSN) -> Prediction:
    backend = backend_of(backend)
    if setting not in SETTINGS:
        raise ValueError(f"setting {setting!r}: one of {', '.join(SETTINGS)}")
    if backend not in COUNTED:
        raise KeyError(f"no prices for backend {backend!r}")
    if guest_insns <= 0 or ns_per_insn <= 0:
        raise ValueError("guest_insns and ns_per_insn must be positive")
    assumptions = [f"untraced native speed {ns_per_insn} ns per instruction (assumption: "
                   f"{1 / ns_per_insn:.1f} instructions per ns)"]
    breakdown: dict[str, EventCost] = {}
    for event in COUNTED[backend]:
        p = price(isa, backend, setting, event)
        if p is None:
            raise KeyError(f"no price for {isa} {backend} {setting} {event}")
        count = guest_insns if p.basis == "guest_insn" else int(stats.get(event, 0))
        breakdown[event] = EventCost(event, count, p.ns, p)
        if p.assumption and count:
            assumptions.append(f"{event}: {p.assumption}")
        if p.basis == "guest_insn":
            assumptions.append(f"{event}: priced per guest instruction "
                               f"({guest_insns}), not per counted event "
                               f"({int(stats.get(event, 0))})")
    for event in sorted(set(stats) - set(breakdown)):
        breakdown[event] = EventCost(event, int(stats[event]), 0.0, None)
        assumptions.append(f"{event}: not in the price list, priced 0")
    note = HARDWARE_NOTES.get((backend, isa))
    if note:
        assumptions.append(note)
    return Prediction(isa, backend, setting, guest_insns, ns_per_insn, breakdown, assumptions)
