"""`emutrace bench --backend BACKEND:record`: the trace streamed into a uftrace data
directory as `emutrace record` writes it, timed; its records read back agree with the
plain backend's trace; results carry records/s and bytes per record."""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.benchgrid import report, results
from emutrace.benchgrid.runner import run_row
from emutrace.benchgrid.spec import expand, parse_spec
from emutrace.errors import UsageError

from .conftest import TESTBINS


def test_record_cells(tmp_path: Path) -> None:
    """The grid's runner and results (`emutrace bench` adds tables and plots around them)."""
    program = expand(f"{TESTBINS}/{{isa}}/fib 8", "x86_64")
    row = run_row("x86_64", program, [parse_spec("int3"), parse_spec("int3:record")], 1,
                  [str(tmp_path)], 0.0, lambda cell, seconds, runs: None)
    recs = {r["backend"]: r for r in results.records([row], 0.3)}
    rec, plain = recs["int3:record"], recs["int3"]
    # the records read back agree with int3's trace
    assert rec["agreement"] == "ok" and rec["error"] is None
    assert rec["calls"] == plain["calls"] > 50
    assert rec["records_per_s"] > 0
    # every call is two 16-byte records, and fib's argument and result follow them
    assert 16 < rec["bytes_per_record"] < 64
    assert plain["records_per_s"] is None
    report.write_markdown(tmp_path / "r.md", results.Meta("m", "r", "s", "c", 1, 0.3),
                          list(recs.values()), [], ["x86_64"], [])
    assert "## Recording" in (tmp_path / "r.md").read_text()


def test_record_spec() -> None:
    assert parse_spec("hwbp:record").record and parse_spec("hwbp:record").backend == "hwbp"
    with pytest.raises(UsageError, match="step:record"):
        parse_spec("step:recorder")


def test_native_engine_cell(tmp_path: Path) -> None:
    """`int3:native` is int3 on the native hot path beside the reference-engine cells (the
    grid compares mechanisms on one engine; this spec adds the native one): the same trace,
    so it agrees."""
    assert parse_spec("int3").engine == "python"
    assert parse_spec("int3:native").engine == "native"
    with pytest.raises(UsageError, match="int3:native"):
        parse_spec("int3:fast")
    program = expand(f"{TESTBINS}/{{isa}}/fib 8", "x86_64")
    row = run_row("x86_64", program, [parse_spec("int3"), parse_spec("int3:native")], 1,
                  [str(tmp_path)], 0.0, lambda cell, seconds, runs: None)
    recs = {r["backend"]: r for r in results.records([row], 0.3)}
    assert recs["int3:native"]["agreement"] == "ok"
    assert recs["int3:native"]["calls"] == recs["int3"]["calls"] > 50
