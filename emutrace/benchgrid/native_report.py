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
           "measured_slowdown", "calibrated_slowdown", "calibrated_ratio",
           "within_30pct_calibrated", "predicted_untraced_s", "predicted_extra_s",
           "mechanism_share", "predicted_slowdown", "ratio", "within_30pct",
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
    calibration: tuple[dict[str, Any], ...] | list[dict[str, Any]] = ()  # per ISA and spec
    statistic: str = "median"  # of the rounds (native_runner.STATISTICS)


def write_csv(path: Path, recs: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for r in recs:
            out.writerow(["" if r[c] is None else r[c] for c in COLUMNS])


def write_json(path: Path, meta: NativeMeta, recs: Sequence[dict[str, Any]],
               errors: Sequence[str], rounds: Sequence[dict[str, Any]] = ()) -> None:
    """`rounds`: every run's own times (calibration rows included), for a reader who wants
    another statistic than the median."""
    doc = {"meta": meta.__dict__, "cells": list(recs), "errors": list(errors),
           "rounds": list(rounds)}
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
                         f"{calibrated(r)}")
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def calibrated(r: dict[str, Any]) -> str:
    return "n/a" if r["calibrated_slowdown"] is None else ratio_text(r["calibrated_slowdown"])


def share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def calibration_table(meta: NativeMeta) -> list[str]:
    lines = ["| ISA | mechanism | untraced base s | tracer per run s | per stop µs | "
             "stops priced | held at |", "|---|---|---:|---:|---:|---|---|"]
    for c in meta.calibration:
        held = ", ".join(f"{k} {n:,}" for k, n in c["held"].items()) or "–"
        lines.append(f"| {c['isa']} | {c['spec']} | {c['base_s']:.4f} | {c['per_run_s']:.3f} | "
                     f"{c['per_stop_us']:,.1f} | {', '.join(c['varying'])} | {held} |")
    return [*lines, ""]


def why_off(r: dict[str, Any]) -> str:
    """The measured quantities that differ from the calibration's, for a cell off ±30 %."""
    parts = []
    if r["predicted_untraced_s"]:
        parts.append("untraced measured / predicted "
                     f"{r['untraced_s'] / r['predicted_untraced_s']:.2f}")
    if r["predicted_extra_s"]:
        extra = r["traced_s"] - r["untraced_s"]
        parts.append(f"tracing time measured / predicted {extra / r['predicted_extra_s']:.2f}")
    for k, (mine, theirs) in r["held"].items():
        if mine or theirs:
            parts.append(f"{k} {mine:,} here, {theirs:,} in the calibration (not priced)")
    cal = r["calibration"]
    for k in ("functions", "patches", "slot_writes"):
        if cal and k in cal.get("others", {}) and k in r["native_stats"]:
            parts.append(f"{k} {r['native_stats'][k]:,} here, {cal['others'][k]:,} in the "
                         "calibration")
    if cal and r["us_per_stop"] is not None:
        parts.append(f"µs per stop here {r['us_per_stop']:,.1f}, calibration "
                     f"{cal['per_stop_us']:,.1f} + per run {cal['per_run_s']:.3f} s")
    return "; ".join(parts)


def write_markdown(path: Path, meta: NativeMeta, recs: Sequence[dict[str, Any]],
                   errors: Sequence[str]) -> None:
    load = ", ".join(f"{x:.1f}" for x in meta.load_start)
    load_end = ", ".join(f"{x:.1f}" for x in meta.load_end)
    programs = sorted({p for c in meta.calibration for p in c["programs"]})
    out = ["# emutrace bench --target native: the cost model against native runs", "",
           f"- machine: {meta.machine}",
           f"- emutrace revision: {meta.revision}",
           f"- started: {meta.started}; load average at start {load}, at end {load_end}",
           f"- command: `{meta.command}`",
           f"- rounds: {meta.rounds} (the cells of a row in turn each round); a cell's time "
           + ("the median of its rounds" if meta.statistic == "median" else
              "its least disturbed round (the minimum)"),
           f"- calibration: {', '.join(f'`{p}`' for p in programs) or 'none'}, in the same "
           "run, every mechanism (emutrace/cost/calibrate.py)",
           f"- model: untraced = the calibration's untraced run + instructions × "
           f"{meta.ns_per_insn} ns; traced = untraced + the calibration's per-run and "
           "per-stop tracer costs × the stops counted under emulation; the kernel-price model "
           "(setting `vm`, bench/results/ptrace-prices.md) is the mechanism's share",
           *(f"- {line.strip()}" for line in meta.probe), "",
           "measured slowdown = traced / untraced native time (`run()` to the reaped end, "
           "plus the arming before the first instruction); predicted = the calibrated model "
           f"from the emulated counts; ratio = predicted / measured, **off** outside ±"
           f"{TOLERANCE:.0%}; kernel prices = the old model (instructions × ns/insn as the "
           "base, Σ events × kernel price); mechanism = the kernel prices' time over the "
           "measured tracing time (the rest is emutrace's own work).", "",
           "## Predicted against measured", "",
           "| ISA | program | mechanism | untraced s | measured | predicted | ratio | "
           "kernel prices | ratio | mechanism | stops native / emulated |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in recs:
        ratio = "n/a" if r["calibrated_ratio"] is None else flag(r, "calibrated_ratio")
        out.append(
            f"| {r['isa']} | `{r['program']}` | {r['backend']} | {r['untraced_s']:.4f} | "
            f"{ratio_text(r['measured_slowdown'])} | {calibrated(r)} | {ratio} | "
            f"{ratio_text(r['predicted_slowdown'])} | {flag(r)} | "
            f"{share(r['mechanism_share'])} | {r['native_stops']:,} / {r['emulated_stops']:,} |")
    judged = [r for r in recs if r["calibrated_ratio"] is not None]
    off_cal = [r for r in judged if not r["within_30pct_calibrated"]]
    off = sum(1 for r in recs if not r["within_30pct"])
    counted = [r for r in recs if r["native_stops"]]
    counts_ok = sum(1 for r in counted
                    if abs(r["emulated_stops"] / r["native_stops"] - 1) <= TOLERANCE)
    out += ["", f"{len(off_cal)} of {len(judged)} cells outside ±{TOLERANCE:.0%} with the "
            f"calibrated model; {off} of {len(recs)} with the kernel prices alone.  The events "
            f"the model counts under emulation are within ±{TOLERANCE:.0%} of the stops the "
            f"native run took in {counts_ok} of {len(counted)} cells.", ""]
    if off_cal:
        out += ["### Cells off, and what differs from the calibration", ""]
        out += [f"- {r['isa']} `{r['program']}` {r['backend']} ({r['calibrated_ratio']:.3g}): "
                f"{why_off(r)}" for r in off_cal]
        out.append("")
    out += ["## The calibration (tracer costs measured in this run)", ""]
    out += calibration_table(meta)
    out += ["## Where the kernel-price model's error is (geometric means per mechanism)", "",
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
    table = Table(title="native slowdown: measured vs predicted (calibrated cost model)")
    for name in ("ISA", "program", "mechanism", "measured", "predicted", "ratio",
                 "µs/stop", "kernel µs/stop"):
        table.add_column(name, justify="left" if name in ("ISA", "program", "mechanism")
                         else "right", no_wrap=True)
    for r in recs:
        ratio = "n/a" if r["calibrated_ratio"] is None else f"{r['calibrated_ratio']:.3g}"
        table.add_row(r["isa"], escape(r["program"]), r["backend"],
                      ratio_text(r["measured_slowdown"]), calibrated(r),
                      ratio if r["within_30pct_calibrated"] else f"[bold red]{ratio}[/bold red]",
                      us(r["us_per_stop"]), us(r["model_us_per_stop"]))
    console.print(table)
