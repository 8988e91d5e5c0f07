"""The verdicts as Markdown: per backend an ISA × program table (an ISA's heading names its
cells' target when it is not emulation: `m68k (gdb)`), then each failure's first divergence
and each error."""

from __future__ import annotations

from collections.abc import Sequence

from emutrace.matrix.spec import EMULATION
from emutrace.matrix.verdict import ERROR, FAIL, PASS, Verdict


def _mark(v: Verdict) -> str:
    if v.status == PASS:
        return "ok"
    if v.status == ERROR:
        return "**error**"
    what = [w for w, bad in (("baseline", v.baseline in ("differs", "missing", "unreadable")),
                             ("ISAs", v.isas == "differs")) if bad]
    return f"**FAIL** ({', '.join(what)})"


def _target_note(v: Verdict, column: set[str]) -> str:
    return f" ({v.cell.target})" if len(column) > 1 and v.cell.target != EMULATION else ""


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def headline(verdicts: Sequence[Verdict]) -> str:
    count = {s: sum(v.status == s for v in verdicts) for s in (PASS, FAIL, ERROR)}
    return (f"{len(verdicts)} cells: {count[PASS]} passed, {count[FAIL]} failed, "
            f"{count[ERROR]} could not run")


def summary_markdown(title: str, verdicts: Sequence[Verdict], how: str) -> str:
    lines = [f"# emutrace ci: {title}", "", f"{headline(verdicts)} ({how}).", ""]
    backends = list(dict.fromkeys(v.cell.backend for v in verdicts))
    for backend in backends:
        mine = [v for v in verdicts if v.cell.backend == backend]
        isas = list(dict.fromkeys(v.cell.isa for v in mine))
        programs = list(dict.fromkeys(v.cell.program for v in mine))
        at = {(v.cell.program, v.cell.isa): v for v in mine}
        # an ISA whose cells all run on one target other than emulation says so in its
        # heading; in a column of mixed targets, each such cell does
        targets = {isa: {v.cell.target for v in mine if v.cell.isa == isa} for isa in isas}
        heads = [f"{isa} ({next(iter(t))})" if len(t) == 1 and EMULATION not in t else isa
                 for isa, t in targets.items()]
        lines += [f"## backend `{backend}`", "",
                  "| program | " + " | ".join(heads) + " |",
                  "|---|" + "---|" * len(isas)]
        for program in programs:
            marks = [_mark(at[program, isa]) + _target_note(at[program, isa], targets[isa])
                     if (program, isa) in at else "—" for isa in isas]
            lines.append(f"| {_cell_text(program)} | " + " | ".join(marks) + " |")
        lines.append("")
    bad = [v for v in verdicts if v.status != PASS]
    if bad:
        lines += ["## Failures and errors", ""]
        for v in bad:
            lines.append(f"* `{v.cell.key}` (`{' '.join(v.cell.argv)}`): "
                         f"{'could not run: ' if v.status == ERROR else ''}"
                         f"{_cell_text(v.message)}")
        lines.append("")
    return "\n".join(lines)
