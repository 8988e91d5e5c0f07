"""Writing the grid's results: results.csv and results.json (one record per cell),
results.md (tables, machine, revision, command line, cost-model assumptions and prices), and
the terminal table.

Cells hold numbers; text is made only here: slowdowns as "12.3x", missing values as "n/a",
a disagreeing cell as "FAIL".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from emutrace.benchgrid.results import Meta
from emutrace.cost import DEFAULT_NS_PER_INSN
from emutrace.cost.markdown import cost_table_markdown

FIXED_COLUMNS = ("isa", "program", "backend", "median_s", "slowdown", "guest_insns", "calls",
                 "main_event", "main_events", "exit_code", "agreement",
                 "predicted_vm", "predicted_bare_metal", "error", "problems",
                 "records_per_s", "bytes_per_record")


def stat_keys(recs: Sequence[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for r in recs:
        keys.update(dict.fromkeys(r["stats"]))
    return list(keys)


def write_csv(path: Path, recs: Sequence[dict[str, Any]]) -> None:
    stats = stat_keys(recs)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow([*FIXED_COLUMNS, *(f"stat_{k}" for k in stats)])
        for r in recs:
            fixed = [("; ".join(r[c]) if c == "problems" else r[c]) for c in FIXED_COLUMNS]
            out.writerow(["" if v is None else v for v in fixed]
                         + [r["stats"].get(k, 0) if r["main_event"] else "" for k in stats])


def write_json(path: Path, meta: Meta, recs: Sequence[dict[str, Any]],
               assumptions: Sequence[str]) -> None:
    doc = {"meta": {**meta.__dict__, "assumptions": list(assumptions)},
           "cells": list(recs)}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def fmt_ratio(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3g}x" if v < 100 else f"{v:,.0f}x"


def fmt_count(v: int | None) -> str:
    return "n/a" if v is None else f"{v:,}"


def cell_text(r: dict[str, Any], key: str) -> str:
    if r["error"]:
        return r["agreement"] if r["agreement"] in ("n/a", "unsupported") else "error"
    text = fmt_count(r[key]) if key == "main_events" else fmt_ratio(r[key])
    return f"FAIL {text}" if r["agreement"] == "FAIL" else text


def grid(recs: Sequence[dict[str, Any]]) -> tuple[list[str], list[tuple[str, str]],
                                                   dict[tuple[str, str, str], dict[str, Any]]]:
    backends = list(dict.fromkeys(r["backend"] for r in recs))
    rows = list(dict.fromkeys((r["isa"], r["program"]) for r in recs))
    at = {(r["isa"], r["program"], r["backend"]): r for r in recs}
    return backends, rows, at


def markdown_table(recs: Sequence[dict[str, Any]], key: str, with_none: bool) -> list[str]:
    backends, rows, at = grid(recs)
    shown = [b for b in backends if with_none or b != "none"]
    lines = ["| ISA | program | " + " | ".join(shown) + " |",
             "|---|---|" + "---:|" * len(shown)]
    for isa, program in rows:
        cells = []
        for b in shown:
            r = at.get((isa, program, b))
            if r is None:
                cells.append("")
            elif b == "none" and key == "slowdown":
                cells.append("n/a" if r["median_s"] is None else f"{r['median_s']:.3f} s")
            else:
                cells.append(cell_text(r, key))
        lines.append(f"| {isa} | `{program}` | " + " | ".join(cells) + " |")
    return lines + [""]


def agreement_sentence(recs: Sequence[dict[str, Any]]) -> str:
    """What the comparison saw, never more: agreement is claimed only for cells that were
    compared ("ok"); cells that errored, were unsupported or missing are counted apart."""
    tracing = [r for r in recs if r["backend"] != "none"]
    compared = sum(1 for r in tracing if r["agreement"] == "ok")
    if not tracing:
        return "No tracing cells ran: nothing was compared."
    if compared == len(tracing):
        return (f"All {compared} tracing cells gave the same canonical trace as the reference "
                "(step when run) and the same exit code as `none`.")
    return (f"Only {compared} of {len(tracing)} tracing cells were compared, and those agreed; "
            f"the other {len(tracing) - compared} could not be compared (listed below).")


def write_markdown(path: Path, meta: Meta, recs: Sequence[dict[str, Any]],
                   assumptions: Sequence[str], isas: Sequence[str],
                   problems: Sequence[str]) -> None:
    out = ["# emutrace bench", "",
           f"- machine: {meta.machine}",
           f"- emutrace revision: {meta.revision}",
           f"- started: {meta.started}",
           f"- command: `{meta.command}`",
           f"- rounds: {meta.rounds} (cells of a row run in turn each round; medians)",
           f"- untraced native speed assumed: {meta.ns_per_insn} ns/instruction"
           + (" (default)" if meta.ns_per_insn == DEFAULT_NS_PER_INSN else ""), ""]
    out += ["## Agreement", ""]
    out += [f"- **FAIL** {p}" for p in problems] or [agreement_sentence(recs)]
    out += [f"- {r['agreement']}: {r['isa']} `{r['program']}` {r['backend']}: {r['error']}"
            for r in recs if r["agreement"] in ("unsupported", "error", "n/a")]
    out += ["", "## Emulated slowdown (median time / median time of `none`; `none`: seconds)",
            ""]
    out += markdown_table(recs, "slowdown", with_none=True)
    out += ["## Mechanism events (each backend's main counter: int3/btf/entry traps, hwbp "
            "hits, bts records, step steps)", ""]
    out += markdown_table(recs, "main_events", with_none=False)
    out += ["## Predicted native slowdown, setting `vm` (this project's KVM guest, x86_64 "
            "measurements)", ""]
    out += markdown_table(recs, "predicted_vm", with_none=False)
    out += ["## Predicted native slowdown, setting `bare-metal` (published figures)", ""]
    out += markdown_table(recs, "predicted_bare_metal", with_none=False)
    recorded = [r for r in recs if r["records_per_s"] is not None]
    if recorded:
        out += ["## Recording (`BACKEND:record` cells: the trace streamed into a uftrace data "
                "directory)", "",
                "| ISA | program | backend | records | records/s | bytes/record |",
                "|---|---|---|---:|---:|---:|"]
        out += [f"| {r['isa']} | `{r['program']}` | {r['backend']} | "
                f"{2 * (r['calls'] or 0):,} | {r['records_per_s']:,.0f} | "
                f"{r['bytes_per_record']:.1f} |" for r in recorded] + [""]
    out += ["## Cost-model assumptions", "",
            "predicted = (insns × ns/insn + Σ events × price) / (insns × ns/insn); insns = "
            "guest instructions the tracing backend counted.", ""]
    out += [f"- {a}" for a in assumptions] + [""]
    out += ["### Prices (emutrace.cost)", "", cost_table_markdown(isas)]
    path.write_text("\n".join(out))


def print_table(console: Console, recs: Sequence[dict[str, Any]]) -> None:
    """Two tables: emulated slowdown (and `none`'s seconds), then the predicted native
    slowdown, `vm` / `bare-metal`."""
    backends, rows, at = grid(recs)
    tracing = [b for b in backends if b != "none"]
    measured = Table(title="emulated slowdown vs none (median time ratio)")
    predicted = Table(title="predicted native slowdown: vm / bare-metal (emutrace.cost)")
    for table in (measured, predicted):
        table.add_column("ISA", no_wrap=True)
        table.add_column("program", no_wrap=True)
    measured.add_column("none (s)", justify="right")
    for b in tracing:
        measured.add_column(b, justify="right")
        predicted.add_column(b, justify="right")
    for isa, program in rows:
        base = at.get((isa, program, "none"))
        base_text = "" if base is None else (
            "n/a" if base["agreement"] == "n/a" else "error" if base["error"]
            else f"{base['median_s']:.3f}")
        slow, pred = [], []
        for b in tracing:
            r = at.get((isa, program, b))
            if r is None:
                slow.append("")
                pred.append("")
                continue
            bad = r["agreement"] in ("FAIL", "error")
            slow.append(f"[bold red]{cell_text(r, 'slowdown')}[/bold red]" if bad
                        else cell_text(r, "slowdown"))
            pred.append("n/a" if r["predicted_vm"] is None else
                        f"{fmt_ratio(r['predicted_vm'])} / "
                        f"{fmt_ratio(r['predicted_bare_metal'])}")
        measured.add_row(isa, escape(program), base_text, *slow)
        predicted.add_row(isa, escape(program), *pred)
    console.print(measured)
    console.print(predicted)
