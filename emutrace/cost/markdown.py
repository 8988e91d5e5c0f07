"""The price list as markdown: one table per setting, rows = (backend, event), columns =
ISAs, each cell the price with a numbered source; an asterisk marks an assumption, and the
assumptions follow, each once with the ISAs it applies to."""

from __future__ import annotations

from collections.abc import Sequence

from emutrace.cost.prices import COUNTED, ISAS, SETTINGS, Price, price


def format_ns(ns: float) -> str:
    if ns == 0:
        return "0"
    if ns >= 1000:
        return f"{ns / 1000:g} µs"
    return f"{ns:g} ns"


def cost_table_markdown(isas: Sequence[str] = ISAS,
                        backends: Sequence[str] = tuple(COUNTED)) -> str:
    sources: dict[str, int] = {}
    assumptions: dict[str, list[str]] = {}
    out: list[str] = []
    for setting in SETTINGS:
        out += [f"#### Native prices, setting `{setting}`", "",
                "| backend | event | " + " | ".join(isas) + " |",
                "|---|---|" + "---|" * len(isas)]
        for backend in backends:
            for event in COUNTED.get(backend, ()):
                cells = []
                for isa in isas:
                    p = price(isa, backend, setting, event)
                    cells.append("–" if p is None else _cell(p, sources, assumptions))
                out.append(f"| {backend} | {event} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["Sources:", ""]
    out += [f"{n}. {text}" for text, n in sources.items()]
    out += ["", "Assumptions (`*`):", ""]
    for text, where in assumptions.items():
        names = sorted(set(where), key=where.index)
        out.append(f"- {text} — {', '.join(names)}")
    return "\n".join(out) + "\n"


def _cell(p: Price, sources: dict[str, int], assumptions: dict[str, list[str]]) -> str:
    n = sources.setdefault(p.source, len(sources) + 1)
    per = "/insn" if p.basis == "guest_insn" else ""
    mark = ""
    if p.assumption:
        mark = "*"
        assumptions.setdefault(f"{p.backend} {p.event} ({p.setting}): {p.assumption}",
                               []).append(p.isa)
    label = "" if p.label == p.setting else f" ({p.label})"
    return f"{format_ns(p.ns)}{per}{label} [{n}]{mark}"
