"""A verdict per cell: its trace against its baseline, and against the other ISAs' traces of
the same program and backend, with `emutrace diff`'s rules (`trace/diff.py`).

* Baseline: the stored trace at `BASELINES/<program>/<backend>/<isa>.trace`; equal when the
  tokens are (a file edited by hand may differ in spacing only).  Missing: the cell fails
  (write it with `--update-baselines`, which writes every traced cell's).
* Across ISAs: the cells' traces grouped by equality; the largest group (on a tie, the one
  met first in the ISA order) is the reference, and every cell outside it fails with the
  first divergence from the reference group's first ISA.

The traces are read back from `TraceStore` when compared, two at a time, so the verdicts
need memory for the matrix's size and two traces, not for all of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import Cell
from emutrace.matrix.tracefile import parse_trace
from emutrace.trace.diff import Trace, describe, first_divergence

PASS, FAIL, ERROR = "pass", "fail", "error"


def file_name(cell: Cell) -> Path:
    """`<program>/<backend>/<isa>.trace`, the backend's ':' spelled '-'."""
    backend = re.sub(r"[^A-Za-z0-9._+-]", "-", cell.backend)
    return Path(cell.program, backend, f"{cell.isa}.trace")


class TraceStore:
    """The run's traces as files under a directory, as cells finish."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, cell: Cell) -> Path:
        return self.root / file_name(cell)

    def save(self, cell: Cell, text: str) -> None:
        path = self.path(cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def load(self, cell: Cell) -> Trace:
        return parse_trace(self.path(cell).read_text())


@dataclass(frozen=True)
class Verdict:
    cell: Cell
    outcome: Outcome  # without its trace (TraceStore holds it)
    status: str  # PASS, FAIL, ERROR
    baseline: str  # "equal", "differs", "missing", "unreadable", "written", "not kept"
    isas: str  # "equal", "differs", "alone" (no other ISA traced), "not compared"
    message: str = ""  # one line: the first divergence, or the error
    detail: tuple[str, ...] = ()  # more lines: both sides of each divergence


def _divergence(what: str, ours: Trace, theirs: Trace, name: str,
                their_name: str) -> tuple[str, tuple[str, ...]] | None:
    at = first_divergence(theirs, ours)
    if at is None:
        return None
    line = (f"{what} at event {at + 1}: {their_name}: {describe(theirs, at)} | "
            f"{name}: {describe(ours, at)}")
    return line, (f"{what} at event {at + 1}:", f"  {their_name}: {describe(theirs, at)}",
                  f"  {name}: {describe(ours, at)}")


def _against_baseline(cell: Cell, store: TraceStore, baselines: Path | None,
                      update: bool) -> tuple[str, tuple[str, tuple[str, ...]] | None]:
    if baselines is None:
        return "not kept", None
    path = baselines / file_name(cell)
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(store.path(cell).read_text())
        return "written", None
    try:
        text = path.read_text()
    except FileNotFoundError:
        return "missing", (f"no baseline {path} (write it with --update-baselines)", ())
    except (OSError, UnicodeDecodeError) as e:
        return "unreadable", (f"baseline {path}: {e}", ())
    try:
        theirs = parse_trace(text)
    except ValueError as e:
        return "unreadable", (f"baseline {path}: {e}", ())
    found = _divergence("differs from its baseline", store.load(cell), theirs, "this run",
                        "baseline")
    return ("equal", None) if found is None else ("differs", found)


def _across_isas(cells: Sequence[Cell], outcomes: dict[str, Outcome], store: TraceStore
                 ) -> dict[str, tuple[str, tuple[str, tuple[str, ...]] | None]]:
    """Per cell key of one group (program, backend): its cross-ISA verdict."""
    traced = [c for c in cells if outcomes[c.key].ok]
    if not traced:
        return {}
    if not traced[0].options.compare_isas:
        return {c.key: ("not compared", None) for c in traced}
    if len(traced) == 1:
        return {traced[0].key: ("alone", None)}
    groups: dict[str, list[Cell]] = {}
    for cell in traced:
        groups.setdefault(outcomes[cell.key].digest, []).append(cell)
    reference = max(groups.values(), key=len)  # max keeps the first of equal lengths
    if len(groups) == 1:
        return {c.key: ("equal", None) for c in traced}
    ref = reference[0]
    ref_trace = store.load(ref)
    names = ", ".join(c.isa for c in reference)
    out: dict[str, tuple[str, tuple[str, tuple[str, ...]] | None]] = {
        c.key: ("equal", None) for c in reference}
    for members in groups.values():
        if members is reference:
            continue
        ours = store.load(members[0])
        for cell in members:
            found = _divergence(f"differs from {names}", ours, ref_trace, cell.isa, ref.isa)
            out[cell.key] = ("differs", found)
    return out


def verdicts(cells: Sequence[Cell], outcomes: dict[str, Outcome], store: TraceStore,
             baselines: Path | None, update: bool = False) -> list[Verdict]:
    """The verdict of every cell, in the cells' order."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    isa_verdicts = {}
    for members in groups.values():
        isa_verdicts.update(_across_isas(members, outcomes, store))
    out = []
    for cell in cells:
        outcome = outcomes[cell.key].slim()
        if not outcome.ok:
            out.append(Verdict(cell, outcome, ERROR, "not run", "not compared",
                               outcome.error))
            continue
        base, base_found = _against_baseline(cell, store, baselines, update)
        isas, isa_found = isa_verdicts[cell.key]
        found = [f for f in (base_found, isa_found) if f is not None]
        out.append(Verdict(cell, outcome, FAIL if found else PASS, base, isas,
                           "; ".join(m for m, _ in found),
                           tuple(line for _, lines in found for line in lines)))
    return out
