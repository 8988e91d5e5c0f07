"""`emutrace bench`: the files it writes and their consistency, the agreement check failing
on a backend that really disagrees, bad input, and the whole backend set on every ISA."""

from __future__ import annotations

import csv
import importlib.machinery
import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from emutrace.benchgrid.runner import Cell, Row, check
from emutrace.benchgrid.spec import ALL_SPECS, NONE_SPEC, expand, parse_spec
from emutrace.cli.main import main
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.mechanisms import BACKENDS
from emutrace.trace.events import Call

from .conftest import BUSYBOX, ISAS, TESTBINS

FILES = ("results.csv", "results.json", "results.md", "slowdown.png", "slowdown.svg",
         "events.png", "events.svg", "predicted.png", "predicted.svg")


def bench(out: Path, *args: str) -> int:
    return main(["bench", "--out", str(out), *args])


def without_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`emutrace bench` writes its results without drawing the six charts (matplotlib: about a
    third of a small grid's CPU).  For the tests that read only the csv, json and markdown;
    test_small_grid_writes_consistent_results and the x86_64 cell of the every-backend grid
    still draw them."""
    from emutrace.benchgrid import plots

    monkeypatch.setattr(plots, "plot_all", lambda recs, out, revision: [])


def read_csv(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_small_grid_writes_consistent_results(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    rc = bench(out, "--arch", "x86_64,aarch64", "--backend", "int3,step", "--repeat", "2",
               f"{TESTBINS}/{{isa}}/fib 5")
    assert rc == 0
    for name in FILES:
        assert (out / name).stat().st_size > 0, name
    rows = read_csv(out)
    assert [(r["isa"], r["backend"]) for r in rows] == [
        (isa, b) for isa in ("x86_64", "aarch64") for b in ("none", "int3", "step")]
    doc = json.loads((out / "results.json").read_text())
    cells = doc["cells"]
    assert len(cells) == len(rows) == 6
    assert doc["meta"]["rounds"] == 2 and "bench" in doc["meta"]["command"]
    for isa in ("x86_64", "aarch64"):
        mine = {c["backend"]: c for c in cells if c["isa"] == isa}
        base = mine["none"]
        assert base["agreement"] == "baseline" and len(base["rounds_s"]) == 2
        for spec in ("int3", "step"):
            c = mine[spec]
            assert c["agreement"] == "ok" and c["error"] is None
            assert len(c["rounds_s"]) == 2
            assert c["slowdown"] == pytest.approx(c["median_s"] / base["median_s"])
            assert c["calls"] > 0 and c["guest_insns"] > 1000
            assert c["predicted_vm"] > c["predicted_bare_metal"] > 1
            assert c["exit_code"] == base["exit_code"] == 0
        # both backends traced the same calls of the same run
        assert mine["int3"]["calls"] == mine["step"]["calls"]
        assert mine["step"]["main_events"] == mine["step"]["stats"]["steps"]
        csv_row = next(r for r in rows if r["isa"] == isa and r["backend"] == "int3")
        assert float(csv_row["slowdown"]) == pytest.approx(mine["int3"]["slowdown"])
        assert int(csv_row["stat_traps"]) == mine["int3"]["stats"]["traps"]
    md = (out / "results.md").read_text()
    assert "git" not in md or "revision" in md
    assert "emutrace revision:" in md and "machine:" in md and "Cost-model assumptions" in md
    assert "fib 5" in md


def test_missing_program_is_a_row_of_na(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """A missing program is an n/a row and an error exit, and the report
    claims no agreement it did not see."""
    from emutrace.cli.bench import EXIT_CELL_ERROR

    without_charts(monkeypatch)
    out = tmp_path / "out"
    rc = bench(out, "--arch", "x86_64", "--backend", "step", f"{TESTBINS}/{{isa}}/no_such")
    assert rc == EXIT_CELL_ERROR
    rows = read_csv(out)
    assert [r["agreement"] for r in rows] == ["n/a", "n/a"]
    assert "missing" in rows[0]["error"]
    md = (out / "results.md").read_text()
    assert "All " not in md and "Only 0 of 1 tracing cells were compared" in md


def liar_module() -> types.ModuleType:
    """A backend that is `step` except that it reports one call going to the wrong function:
    the kind of bug the agreement check exists to catch."""
    from emutrace.backends import step

    def lying(port):  # type: ignore[no-untyped-def]
        def create(image, cpu, hooks, emit, options):  # type: ignore[no-untyped-def]
            targets: list[int] = []

            def lying_emit(ev):  # type: ignore[no-untyped-def]
                if isinstance(ev, Call):
                    targets.append(ev.target)
                    others = [t for t in targets if t != ev.target]
                    if len(targets) == 20 and others:
                        ev = replace(ev, target=others[0])
                emit(ev)
            return port(image, cpu, hooks, lying_emit, options)
        return create

    name = "emutrace.backends.liar"
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    # the functions step's recipe names for its engine ports (mechanisms/descriptors.py)
    for port in ("on_reference", "on_hot_path", "on_c_loop"):
        setattr(module, port, lying(getattr(step, port)))
    return module


def test_a_disagreeing_backend_fails_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(BACKENDS, "liar", replace(BACKENDS["step"], name="liar",
                                                  help="step, misreporting one callee"))
    monkeypatch.setitem(sys.modules, "emutrace.backends.liar", liar_module())
    without_charts(monkeypatch)
    out = tmp_path / "out"
    rc = bench(out, "--arch", "x86_64", "--backend", "step,int3,liar",
               f"{TESTBINS}/{{isa}}/hello_fs")
    assert rc == 1
    err = capfd.readouterr().err
    assert "FAIL" in err and "liar" in err and "trace differs from step's: line" in err
    agreement = {r["backend"]: r["agreement"] for r in read_csv(out)}
    assert agreement == {"none": "baseline", "step": "ok", "int3": "ok", "liar": "FAIL"}
    assert "**FAIL**" in (out / "results.md").read_text()


def test_a_different_exit_code_is_a_failure() -> None:
    program = expand("x", "x86_64")
    cells = [Cell("x86_64", program, NONE_SPEC, [1.0], exit_code=0),
             Cell("x86_64", program, parse_spec("step"), [2.0], exit_code=0, trace="> a\n"),
             Cell("x86_64", program, parse_spec("int3"), [2.0], exit_code=139, trace="> a\n")]
    row = Row("x86_64", program, cells)
    check(row)
    assert [c.agreement for c in cells] == ["baseline", "ok", "FAIL"]
    assert "exit code 139" in cells[2].problems[0]
    assert row.slowdown(cells[1]) == 2.0


@pytest.mark.parametrize("args", [
    ["--backend", "bogus"], ["--backend", "int3:fast"], ["--backend", "hwbp:0"],
    ["--backend", "step:3"], ["--arch", "vax"], ["--arch", ""], ["--repeat", "0"],
    ["--ns-per-insn", "-1"], ["'unterminated"]])
def test_bad_input_is_one_line_and_exit_64(args: list[str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    if args[0].startswith("'"):
        argv = ["bench", "--out", str(tmp_path), *args]
    else:
        argv = ["bench", "--out", str(tmp_path), *args, f"{TESTBINS}/{{isa}}/fib 3"]
    assert main(argv) == 64
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("emutrace: "), err


# ------------------------------------------------------------------ every ISA, every backend
# `entry` refuses a binary without a symbol table (busybox is stripped): an "unsupported"
# cell, the documented exception (backends/entry.py), never a disagreement
STRIPPED_PROGRAMS = ("busybox echo hi",)


def short_name(template: str) -> str:
    """`/repo/testbins/{isa}/fib 3` → `fib 3`."""
    words = template.split()
    return " ".join([words[0].rsplit("/", 1)[-1], *words[1:]])


@pytest.mark.parametrize("isa", ISAS)
def test_every_backend_agrees_on_every_isa(isa: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if isa != "x86_64":
        without_charts(monkeypatch)
    programs = [f"{TESTBINS}/{{isa}}/fib 3", f"{TESTBINS}/{{isa}}/hello_fs"]
    if by_name(isa).capability(Cap.BUSYBOX).works:
        busybox = BUSYBOX / isa / "busybox"
        if not busybox.exists():
            pytest.fail(f"{busybox} missing: run make setup")
        programs.append(f"{BUSYBOX}/{{isa}}/busybox echo hi")
    out = tmp_path / "out"
    rc = bench(out, "--arch", isa, "--backend", "all", *programs)
    rows = read_csv(out)
    assert len(rows) == len(programs) * (1 + len(ALL_SPECS))
    errors = [(r["program"], r["backend"], r["error"]) for r in rows
              if r["agreement"] in ("error", "n/a")]
    assert not errors, errors
    unsupported = {(short_name(r["program"]), r["backend"]) for r in rows
                   if r["agreement"] == "unsupported"}
    assert unsupported == {(p, "entry") for p in STRIPPED_PROGRAMS
                           if any(short_name(q) == p for q in programs)}
    failed = [(short_name(r["program"]), r["backend"]) for r in rows
              if r["agreement"] == "FAIL"]
    assert not failed, f"disagreements {failed}: see {out}/results.md"
    assert rc == 0
