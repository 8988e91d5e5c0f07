"""`emutrace bench --target native`: its usage errors, the arithmetic of the
cost check and of its report on fixed numbers (hand-computed), and one real run on
testbins/x86_64/counts, whose events tests/test_counts.py derives by hand.  No timing is
asserted: times are whatever the machine gave; only what is computed from them is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emutrace.benchgrid import native_report
from emutrace.benchgrid.native_runner import NativeRow, Timed, native_specs
from emutrace.benchgrid.spec import expand, parse_spec
from emutrace.cli.main import main
from emutrace.cost.calibrate import Sample, fit
from emutrace.cost.check import NativeCell, check
from emutrace.errors import UsageError

from .conftest import TESTBINS

FIB = f"{TESTBINS}/{{isa}}/fib 5"


@pytest.mark.parametrize(("argv", "message"), [
    (("--target", "native", "--unconfined", "--arch", "arm", FIB), "runs only x86_64"),
    (("--target", "native", "--unconfined", "--arch", "x86_64,mips", FIB), "--arch mips"),
    (("--target", "native", "--arch", "x86_64", FIB), "pass --unconfined"),
    (("--unconfined", "--arch", "x86_64", FIB), "only with --target native"),
    (("--target", "native", "--unconfined", "--backend", "int3:native", FIB),
     "--backend int3:native"),
    (("--target", "native", "--unconfined", "--backend", "step:record", FIB),
     "--backend step:record"),
    (("--target", "native", "--unconfined", "--machine", "virt-arm64", FIB), "--machine"),
    (("--target", "native", "--unconfined", "--repeat", "0", FIB), "--repeat"),
    (("--target", "native", "--unconfined", "--calibration-sizes", "1000,100", FIB),
     "--calibration-sizes 1000,100"),
    (("--target", "native", "--unconfined", "--calibration-sizes", "x", FIB),
     "two sizes"),
    (("--target", "native", "--unconfined", "--calibration", "testbins/{isa}/calls deep",
      FIB), "needs {n}"),
    (("--target", "native", "--unconfined", "--statistic", "mean", FIB), "--statistic"),
])
def test_usage_errors_exit_64_before_anything_runs(
        argv: tuple[str, ...], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["bench", "--out", str(out), *argv]) == 64
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (out / "native-cost.json").exists()


def test_native_specs() -> None:
    labels = [s.label for s in native_specs("all")]
    assert labels == ["int3", "int3:strict", "hwbp", "btf", "entry", "step", "bts"]
    assert [s.hw_slots for s in native_specs("hwbp:2")] == [2]
    with pytest.raises(UsageError):
        native_specs("int3:record")


def int3_cell(traced_s: float) -> NativeCell:
    return NativeCell("x86_64", "prog", "int3", untraced_s=0.002, traced_s=traced_s,
                      native_stats={"traps": 990, "fallbacks": 10, "patches": 100},
                      emulated_stats={"traps": 1000, "patches": 100, "simulated": 1000,
                                      "cache_removals": 100},
                      emulated_insns=1_000_000, rounds=3)


def test_check_arithmetic_by_hand() -> None:
    c = check(int3_cell(traced_s=0.202))
    # measured: 0.202 / 0.002 = 101x; (0.202 − 0.002) s over 990 traps + 10 fallbacks
    assert c.measured_slowdown == pytest.approx(101)
    assert c.native_stops == 1000
    assert c.us_per_stop == pytest.approx(200)
    # model (vm): base 1e6 × 0.3 ns = 300 µs; tracing 1000 × 6.4 µs (int3 stop) + 100 ×
    # 0.522 µs (POKETEXT) + 1000 × 0.125 µs (SETREGS ≈ syscall) = 6,577.2 µs; cache
    # removals 0
    assert c.model_base_s == pytest.approx(300e-6)
    assert c.model_tracing_s == pytest.approx(6577.2e-6)
    assert c.predicted_slowdown == pytest.approx((300 + 6577.2) / 300)
    assert c.model_us_per_stop == pytest.approx(6.5772)
    assert c.ratio == pytest.approx(22.924 / 101, rel=1e-5)
    assert not c.within
    # the prices alone, over the measured base: (2,000 + 6,577.2) / 2,000 µs = 4.2886x
    assert c.predicted_measured_base == pytest.approx(4.2886)
    assert c.ratio_measured_base == pytest.approx(4.2886 / 101)


def test_check_within_30_percent_at_the_edges() -> None:
    predicted = (300 + 6577.2) / 300  # as above
    for factor, inside in ((1.0, True), (1 / 1.29, True), (1 / 1.31, False), (1 / 0.71, True),
                           (1 / 0.69, False)):
        c = check(int3_cell(traced_s=0.002 * predicted * factor))
        assert c.within is inside, factor


def test_btf_in_the_vm_is_priced_per_instruction() -> None:
    cell = NativeCell("i386", "prog", "btf", 0.001, 0.5, {"stops": 10_000, "traps": 900},
                      {"traps": 1000, "calls": 50}, emulated_insns=9_000)
    c = check(cell)
    # KVM drops BTF: the model stops at each of the 9,000 instructions × 31.7 µs
    assert c.emulated_stops == 9000 and c.native_stops == 10_000
    assert c.model_tracing_s == pytest.approx(9000 * 31.7e-6)
    assert c.us_per_stop == pytest.approx(0.499 / 10_000 * 1e6)


def test_arming_is_added_to_the_traced_run() -> None:
    program = expand("testbins/{isa}/fib 5", "x86_64")
    base = Timed(parse_spec("none"), start_s=[0.010, 0.012, 0.011], run_s=[0.002, 0.003, 0.001])
    cell = Timed(parse_spec("entry"), start_s=[0.040, 0.050, 0.041], run_s=[0.5, 0.7, 0.6],
                 emulated_insns=1000)
    row = NativeRow("x86_64", program, base, [cell])
    got = row.measured(cell)
    assert got is not None
    # untraced: median run 0.002; traced: median run 0.6 + (median start 0.041 − 0.011)
    assert got.untraced_s == pytest.approx(0.002)
    assert got.traced_s == pytest.approx(0.630)
    cell.error = "exit code 1, untraced 0"
    assert row.measured(cell) is None


def test_report_flags_and_factors(tmp_path: Path) -> None:
    # int3 calibration: 100 µs per trap, 40 ms per run, untraced base 2 ms (hand-made)
    cal = fit("int3", Sample(0.002, 0.052, {"traps": 100}), Sample(0.002, 0.142, {"traps": 1000}))
    predicted = 142.3 / 2.3  # (2.3 ms + 40 ms + 1,000 × 100 µs) / 2.3 ms = 61.87x
    recs = [check(int3_cell(0.202), 0.3, cal, 0.002).record(),
            check(int3_cell(0.002 * predicted), 0.3, cal, 0.002).record()]
    meta = native_report.NativeMeta(
        "m", "rev", "cmd", "now", 3, 0.3, (1.0, 2.0, 3.0), (1.5, 2.5, 3.5), ("probe line",),
        [{"isa": "x86_64", "programs": ["calls deep 100", "calls deep 2000"], "base_s": 0.002,
          **cal.record()}])
    native_report.write_markdown(tmp_path / "n.md", meta, recs, ["x86_64 `p` bts: no PMU"])
    text = (tmp_path / "n.md").read_text()
    # measured 101x, calibrated 61.9x (ratio 0.613), kernel prices 22.9x (0.227)
    assert "| 101x | 61.9x | **0.613 off** | 22.9x | **0.227 off** |" in text
    assert "| 61.9x | 61.9x | 1 | 22.9x |" in text
    assert "1 of 2 cells outside ±30% with the calibrated model; 2 of 2 with the kernel " \
        "prices alone" in text
    # the cell off: its untraced 2 ms against 2.3 predicted, tracing 200 ms against 140
    assert "untraced measured / predicted 0.87; tracing time measured / predicted 1.43" in text
    # the calibration table: base, per run, per stop
    assert "| x86_64 | int3 | 0.0020 | 0.040 | 100.0 | traps | fallbacks 0 |" in text
    # mechanism: 6,577.2 µs of kernel prices over 200 ms measured tracing = 3 %
    assert "| 3% |" in text
    # emulated 1000 traps against 990 + 10 native stops: within, in both cells
    assert "within ±30% of the stops the native run took in 2 of 2 cells" in text
    assert "load average at start 1.0, 2.0, 3.0, at end 1.5, 2.5, 3.5" in text
    # factors of the kernel-price model: base 300 µs / 2,000 µs = 0.15 in both cells
    assert "| int3 | 2 | " in text and " | 0.15 | " in text
    assert "- x86_64 `p` bts: no PMU" in text
    assert "| mechanism | prog x86_64 |" in text and \
        "| int3 | 61.9x / 61.9x |" in text  # the last cell of the key
    assert native_report.short_program(".cache/busybox/{isa}/busybox sort in.txt") == \
        "busybox sort"
    native_report.write_csv(tmp_path / "n.csv", recs)
    header = (tmp_path / "n.csv").read_text().splitlines()[0].split(",")
    assert header == list(native_report.COLUMNS)


def test_real_run_on_the_counts_program(tmp_path: Path) -> None:
    """counts: int3 lazy traps 8 times (4 calls, 4 returns), step stops 16 times, natively
    and under emulation (tests/test_counts.py's hand derivation); bts is reported as having
    no native delivery, not as an error."""
    out = tmp_path / "out"
    rc = main(["bench", "--target", "native", "--unconfined", "--arch", "x86_64",
               "--backend", "int3,step,bts", "--repeat", "2", "--out", str(out),
               f"{TESTBINS}/{{isa}}/counts"])
    assert rc == 0
    doc = json.loads((out / "native-cost.json").read_text())
    cells = {c["backend"]: c for c in doc["cells"]}
    assert set(cells) == {"int3", "step"}
    assert (cells["int3"]["native_stops"], cells["int3"]["emulated_stops"]) == (8, 8)
    assert (cells["step"]["native_stops"], cells["step"]["emulated_stops"]) == (16, 16)
    for c in cells.values():
        assert c["rounds"] == 2
        assert c["measured_slowdown"] == pytest.approx(c["traced_s"] / c["untraced_s"])
        assert c["ratio"] == pytest.approx(c["predicted_slowdown"] / c["measured_slowdown"])
    # 8 traps × 6.4 µs + 7 patches × 0.522 µs + 8 simulated × 0.125 µs (hand counts)
    assert cells["int3"]["model_tracing_s"] == pytest.approx((8 * 6400 + 7 * 522 + 8 * 125)
                                                             * 1e-9)
    assert any("bts" in e and "unsupported" in e for e in doc["errors"])
    assert "--target native --unconfined" in doc["meta"]["command"]
    for name in ("native-cost.md", "native-cost.csv"):
        assert (out / name).stat().st_size > 0


def test_the_recorded_command_repeats_the_native_options() -> None:
    """The results file's command must re-run the same bench: the statistic and the
    calibration sizes are part of it (they were left out once)."""
    import argparse

    from emutrace.cli import bench
    args = argparse.Namespace(
        target="native", arch="x86_64,i386", backend="all", repeat=3, out="out", timeout=0,
        allow_write=[], ns_per_insn=bench.DEFAULT_NS_PER_INSN, machine=None, bios=None,
        dtb=None, until=None, input=None, input_after=None, statistic="min",
        calibration="testbins/{isa}/calls deep {n}", calibration_sizes="100,8000",
        programs=["testbins/{isa}/fib 15"])
    words = bench.command_line(args).split()
    assert words[words.index("--statistic") + 1] == "min"
    assert words[words.index("--calibration-sizes") + 1] == "100,8000"
