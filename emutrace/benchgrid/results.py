"""The grid's results as flat records (one per cell), with the cost model's predicted native
slowdowns attached: what results.csv, results.json, results.md and the plots are made of.

A prediction needs the instructions the program executed; only tracing backends count them,
so a cell without a count (the baseline, an error) has no prediction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from emutrace.benchgrid.runner import Cell, Row
from emutrace.cost import COUNTED, MAIN_EVENT, SETTINGS, Prediction, backend_of, predict


@dataclass(frozen=True)
class Meta:
    machine: str
    revision: str
    command: str
    started: str
    rounds: int
    ns_per_insn: float


def prediction(cell: Cell, setting: str, ns_per_insn: float) -> Prediction | None:
    """The cost model's prediction for the cell, or None where it has none (an error, a
    backend or ISA the price list does not cover: tests/test_cost.py checks that every
    registered backend's events are priced)."""
    backend = backend_of(cell.spec.label)
    if cell.error or not cell.guest_insns or backend not in COUNTED:
        return None
    try:
        return predict(cell.isa, backend, cell.stats, cell.guest_insns, setting, ns_per_insn)
    except KeyError:  # (predict's "no price for ISA BACKEND SETTING EVENT")
        return None


def main_events(cell: Cell) -> int | None:
    key = MAIN_EVENT.get(cell.spec.backend)
    return None if key is None or cell.error else int(cell.stats.get(key, 0))


def record(row: Row, cell: Cell, ns_per_insn: float) -> dict[str, Any]:
    predicted = {s: prediction(cell, s, ns_per_insn) for s in SETTINGS}
    return {
        "isa": cell.isa,
        "program": cell.program.template,
        "backend": cell.spec.label,
        "median_s": cell.median,
        "rounds_s": list(cell.seconds),
        "slowdown": row.slowdown(cell),
        "guest_insns": cell.guest_insns,
        "calls": cell.calls,
        "main_event": MAIN_EVENT.get(cell.spec.backend),
        "main_events": main_events(cell),
        "exit_code": cell.exit_code,
        "agreement": cell.agreement,
        "problems": list(cell.problems),
        "error": cell.error,
        "predicted_vm": None if predicted["vm"] is None else predicted["vm"].slowdown,
        "predicted_bare_metal": (None if predicted["bare-metal"] is None
                                 else predicted["bare-metal"].slowdown),
        "stats": dict(cell.stats),
        # `:record` cells: record throughput (records written / median seconds, the whole
        # traced run) and the data directory's bytes per record (values included)
        "records_per_s": (None if not cell.recorded_records or not cell.median
                          else cell.recorded_records / cell.median),
        "bytes_per_record": (None if not cell.recorded_records
                             else (cell.recorded_bytes or 0) / cell.recorded_records),
    }


def records(rows: Iterable[Row], ns_per_insn: float) -> list[dict[str, Any]]:
    return [record(row, cell, ns_per_insn) for row in rows for cell in row.cells]


def assumptions(rows: Iterable[Row], ns_per_insn: float) -> list[str]:
    """Every assumption the predictions made, once, with the settings, backends and ISAs it
    was made for."""
    where: dict[str, tuple[set[str], set[str], set[str]]] = {}
    for row in rows:
        for cell in row.cells:
            for setting in SETTINGS:
                p = prediction(cell, setting, ns_per_insn)
                for text in p.assumptions if p is not None else ():
                    settings, specs, isas = where.setdefault(text, (set(), set(), set()))
                    settings.add(setting)
                    specs.add(cell.spec.label)
                    isas.add(cell.isa)
    out = []
    for text, (settings, specs, isas) in where.items():
        if text.startswith("untraced"):
            out.append(text)
            continue
        out.append(f"{text} — {'/'.join(sorted(settings))}; {', '.join(sorted(specs))}; "
                   f"{', '.join(sorted(isas))}")
    return out


def geomean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None and v > 0]
    if not got:
        return None
    return math.exp(sum(math.log(v) for v in got) / len(got))


def per_isa(recs: list[dict[str, Any]], key: str) -> dict[str, dict[str, float | None]]:
    """backend → isa → geometric mean of `key` over the programs (one program: its value)."""
    out: dict[str, dict[str, list[float | None]]] = {}
    for r in recs:
        out.setdefault(r["backend"], {}).setdefault(r["isa"], []).append(r[key])
    return {b: {isa: geomean(v) for isa, v in by_isa.items()} for b, by_isa in out.items()}
