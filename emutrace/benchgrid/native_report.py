"""Writing `emutrace bench --target native`'s results: native-cost.csv and native-cost.json
(one record per mechanism cell, `emutrace.cost.check.Check.record`), native-cost.md (the
predicted-against-measured table, the two error factors, errors) and the terminal table.

Numbers are made in `emutrace.cost.check`; text only here.  A ratio outside ±30 % is marked
"**off**" in markdown and red on the terminal.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from emutrace.benchgrid.results import geomean
from emutrace.cost.check import TOLERANCE

COLUMNS = ("isa", "program", "backend", "rounds", "untraced_s", "traced_s",
           "measured_slowdown", "predicted_slowdown", "ratio", "within_30pct",
           "predicted_measured_base", "ratio_measured_base", "within_30pct_measured_base",
           "native_stops", "us_per_stop", "emulated_stops", "model_us_per_stop",
           "emulated_insns", "native_insns", "model_base_s", "model_tracing_s")


@dataclass(frozen=True)
class NativeMeta:
    machine: str
    revision: str
    command: str
    started: str
    rounds: int
    ns_per_insn: float
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    probe: tuple[str, ...]  # `emutrace info --native`'s lines


def write_csv(path: Path, recs: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for r in recs:
            out.writerow(["" if r[c] is None else r[c] for c in COLUMNS])


def write_json(path: Path, meta: NativeMeta, recs: Sequence[dict[str, Any]],
               errors: Sequence[str]) -> None:
    doc = {"meta": meta.__dict__, "cells": list(recs), "errors": list(errors)}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def ratio_text(v: float) -> str:
    return f"{v:.3g}x" if v < 100 else f"{v:,.0f}x"


def flag(r: dict[str, Any], key: str = "ratio") -> str:
    text = f"{r[key]:.3g}"
    return text if abs(r[key] - 1) <= TOLERANCE else f"**{text} off**"


def us(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f}"


def factors(recs: Sequence[dict[str, Any]]) -> list[str]:
    """Per mechanism, geometric means over its cells of the two factors whose product is
    the ratio: the untraced base (model / measured) and the tracing time (model /
    measured), so that a reader sees which half of the model is off."""
    lines = ["| mechanism | cells | predicted / measured | base: model / measured untraced | "
             "tracing: model / measured | µs per stop, measured | µs per stop, model |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for backend in dict.fromkeys(r["backend"] for r in recs):
        mine = [r for r in recs if r["backend"] == backend]
        base = geomean(r["model_base_s"] / r["untraced_s"] for r in mine)
        tracing = geomean(r["model_tracing_s"] / (r["traced_s"] - r["untraced_s"])
                          for r in mine if r["traced_s"] > r["untraced_s"])
        lines.append(
            f"| {backend} | {len(mine)} | {geomean(r['ratio'] for r in mine):.3g} | "
            f"{'n/a' if base is None else f'{base:.3g}'} | "
            f"{'n/a' if tracing is None else f'{tracing:.3g}'} | "
            f"{us(geomean(r['us_per_stop'] for r in mine))} | "
            f"{us(geomean(r['model_us_per_stop'] for r in mine))} |")
    return [*lines, ""]


def short_program(template: str) -> str:
    """`.cache/busybox/{isa}/busybox sort FILE` → `busybox sort`: the table's column."""
    words = template.split()
    name = words[0].rsplit("/", 1)[-1]
    return " ".join([name, *(w for w in words[1:2] if "/" not in w)])


def compact(recs: Sequence[dict[str, Any]]) -> list[str]:
    """One row per mechanism, one column per (program, ISA): measured / predicted."""
    columns = list(dict.fromkeys((r["program"], r["isa"]) for r in recs))
    at = {(r["backend"], r["program"], r["isa"]): r for r in recs}
    lines = ["| mechanism | " + " | ".join(f"{short_program(p)} {isa}" for p, isa in columns)
             + " |", "|---|" + "---:|" * len(columns)]
    for backend in dict.fromkeys(r["backend"] for r in recs):
        cells = []
        for program, isa in columns:
            r = at.get((backend, program, isa))
            cells.append("–" if r is None else f"{ratio_text(r['measured_slowdown'])} / "
                         f"{ratio_text(r['predicted_slowdown'])}")
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def write_markdown(path: Path, meta: NativeMeta, recs: Sequence[dict[str, Any]],
                   errors: Sequence[str]) -> None:
    load = ", ".join(f"{x:.1f}" for x in meta.load_start)
    load_end = ", ".join(f"{x:.1f}" for x in meta.load_end)
    out = ["# emutrace bench --target native: the cost model against native runs", "",
           f"- machine: {meta.machine}",
           f"- emutrace revision: {meta.revision}",
           f"- started: {meta.started}; load average at start {load}, at end {load_end}",
           f"- command: `{meta.command}`",
           f"- rounds: {meta.rounds} (the cells of a row in turn each round; medians)",
           f"- model: setting `vm`, untraced speed {meta.ns_per_insn} ns/instruction, counts "
           "from the same program under emulation",
           *(f"- {line.strip()}" for line in meta.probe), "",
           "measured slowdown = traced / untraced native time (`run()` to the reaped end, "
           "plus the arming before the first instruction); predicted = the model from the "
           f"emulated counts; ratio = predicted / measured, **off** outside ±"
           f"{TOLERANCE:.0%}; *with measured base* = the model's tracing time over the "
           "measured untraced time (the prices alone).", "",
           "## Predicted against measured", "",
           "| ISA | program | mechanism | untraced s | measured | predicted | ratio | "
           "predicted, measured base | ratio | stops native / emulated |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in recs:
        out.append(
            f"| {r['isa']} | `{r['program']}` | {r['backend']} | {r['untraced_s']:.4f} | "
            f"{ratio_text(r['measured_slowdown'])} | {ratio_text(r['predicted_slowdown'])} | "
            f"{flag(r)} | {ratio_text(r['predicted_measured_base'])} | "
            f"{flag(r, 'ratio_measured_base')} | "
            f"{r['native_stops']:,} / {r['emulated_stops']:,} |")
    off = sum(1 for r in recs if not r["within_30pct"])
    off_base = sum(1 for r in recs if not r["within_30pct_measured_base"])
    counted = [r for r in recs if r["native_stops"]]
    counts_ok = sum(1 for r in counted
                    if abs(r["emulated_stops"] / r["native_stops"] - 1) <= TOLERANCE)
    out += ["", f"{off} of {len(recs)} cells outside ±{TOLERANCE:.0%} as the model stands; "
            f"{off_base} with the measured untraced time as the base.  The events the model "
            f"counts under emulation are within ±{TOLERANCE:.0%} of the stops the native run "
            f"took in {counts_ok} of {len(counted)} cells.", "",
            "## Where the error is (geometric means per mechanism)", "",
            "ratio = (base factor and tracing factor combined); base: the model's "
            "instructions × ns/insn over the measured untraced time; tracing: the model's "
            "Σ events × price over the measured traced − untraced time.", ""]
    out += factors(recs)
    out += ["## Per mechanism and program: measured / predicted native slowdown", ""]
    out += compact(recs)
    if errors:
        out += ["## Cells without a result", ""] + [f"- {e}" for e in errors] + [""]
    path.write_text("\n".join(out) + "\n")


def print_table(console: Console, recs: Sequence[dict[str, Any]]) -> None:
    table = Table(title="native slowdown: measured vs predicted (cost model, vm prices)")
    for name in ("ISA", "program", "mechanism", "measured", "predicted", "ratio",
                 "µs/stop", "model µs/stop"):
        table.add_column(name, justify="left" if name in ("ISA", "program", "mechanism")
                         else "right", no_wrap=True)
    for r in recs:
        ratio = f"{r['ratio']:.3g}"
        table.add_row(r["isa"], escape(r["program"]), r["backend"],
                      ratio_text(r["measured_slowdown"]), ratio_text(r["predicted_slowdown"]),
                      ratio if r["within_30pct"] else f"[bold red]{ratio}[/bold red]",
                      us(r["us_per_stop"]), us(r["model_us_per_stop"]))
    console.print(table)
