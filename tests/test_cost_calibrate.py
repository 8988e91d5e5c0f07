"""The tracer-cost calibration of `emutrace bench --target native` (emutrace.cost.calibrate):
synthetic calibration runs built from known per-run and per-stop costs must give those costs
back, and the corrected prediction of a cell is checked against a hand computation.  No
timing is measured here."""

from __future__ import annotations

import pytest

from emutrace.cost.calibrate import Sample, fit
from emutrace.cost.check import NativeCell, check

PER_RUN = 0.300  # s: arming, discovery, ELF reading
PER_HIT = 1.8e-3  # s per hwbp slot hit
PER_STEPPED = 200e-6  # s per instruction hwbp single-steps (start-up: the same at each size)


def hwbp_sample(hits: int, untraced: float = 0.004) -> Sample:
    stepped = 21_000
    extra = PER_RUN + hits * PER_HIT + stepped * PER_STEPPED
    return Sample(untraced, untraced + extra, {"hits": hits, "stepped": stepped,
                                                "slot_writes": 900})


def test_two_sizes_recover_the_per_stop_and_per_run_costs() -> None:
    cal = fit("hwbp", hwbp_sample(200), hwbp_sample(4000, untraced=0.005))
    assert cal.varying == ("hits",)
    assert cal.per_stop_s == pytest.approx(PER_HIT)
    # what the depth does not change is held at its count, its cost inside the per-run part
    assert cal.held == {"stepped": 21_000}
    assert cal.others == {"slot_writes": 900}  # reported beside a cell, not priced
    assert cal.per_run_s == pytest.approx(PER_RUN + 21_000 * PER_STEPPED)
    # a third size is predicted exactly
    third = hwbp_sample(1234)
    assert cal.extra_s(third.stats) == pytest.approx(third.extra_s)


def test_counters_that_grow_together_share_one_price() -> None:
    # entry: every level of the recursion is 2 traps and 1 step-over; 50 µs per stop
    def sample(levels: int) -> Sample:
        traps, stepovers = 300 + 2 * levels, 150 + levels
        return Sample(0.002, 0.002 + 0.9 + 50e-6 * (traps + stepovers),
                      {"traps": traps, "stepovers": stepovers, "probes": 3000})

    cal = fit("entry", sample(100), sample(2000))
    assert cal.varying == ("traps", "stepovers") and cal.held == {}
    assert cal.per_stop_s == pytest.approx(50e-6)
    assert cal.per_run_s == pytest.approx(0.9)


def test_a_calibration_whose_stops_did_not_grow_is_refused() -> None:
    same = Sample(0.002, 1.0, {"steps": 40_000})
    grew_little = Sample(0.002, 1.1, {"steps": 41_000})  # +2.5 %: below the 5 % bar
    with pytest.raises(ValueError, match="no stop counter grew"):
        fit("step", same, grew_little)
    with pytest.raises(ValueError, match="none counted"):
        fit("bts", same, same)


def test_calibrated_prediction_by_hand() -> None:
    # int3 calibration: 100 traps → 50 ms extra, 1,000 traps → 140 ms: 100 µs per trap,
    # 40 ms per run; the untraced base is the small size's untraced run, 2 ms
    small = Sample(0.002, 0.052, {"traps": 100, "fallbacks": 0})
    large = Sample(0.002, 0.142, {"traps": 1000, "fallbacks": 0})
    cal = fit("int3", small, large)
    assert (cal.per_stop_s, cal.per_run_s) == (pytest.approx(100e-6), pytest.approx(0.040))
    cell = NativeCell("x86_64", "prog", "int3", untraced_s=0.002, traced_s=0.202,
                      native_stats={"traps": 990, "fallbacks": 10},
                      emulated_stats={"traps": 1000, "patches": 100, "simulated": 1000},
                      emulated_insns=1_000_000)
    c = check(cell, 0.3, cal, small.untraced_s)
    # untraced: 2 ms + 1e6 × 0.3 ns = 2.3 ms; tracing: 40 ms + 1,000 × 100 µs = 140 ms
    assert c.predicted_untraced_s == pytest.approx(0.0023)
    assert c.predicted_extra_s == pytest.approx(0.140)
    assert c.calibrated_slowdown == pytest.approx(142.3 / 2.3)
    assert c.calibrated_ratio == pytest.approx(142.3 / 2.3 / 101)
    # the kernel prices' time (1,000 × 6.4 + 100 × 0.522 + 1,000 × 0.125 µs) over the
    # measured 200 ms of tracing: the mechanism's share
    assert c.mechanism_share == pytest.approx(6577.2e-6 / 0.200)
    rec = c.record()
    assert rec["within_30pct_calibrated"] is False
    assert rec["calibration"]["per_stop_us"] == pytest.approx(100)
    # without a calibration there is no corrected prediction
    assert check(cell).calibrated_slowdown is None


def test_btf_degraded_is_predicted_per_emulated_instruction() -> None:
    small = Sample(0.002, 0.002 + 1.0 + 40_000 * 1e-4, {"stops": 40_000})
    large = Sample(0.002, 0.002 + 1.0 + 60_000 * 1e-4, {"stops": 60_000})
    cal = fit("btf", small, large)
    cell = NativeCell("i386", "prog", "btf", 0.002, 5.0, {"stops": 52_000},
                      {"traps": 7_000, "calls": 900}, emulated_insns=50_000)
    c = check(cell, 0.3, cal, 0.002)
    # KVM drops BTF: the emulated run's 50,000 instructions are the stops priced
    assert c.predicted_extra_s == pytest.approx(1.0 + 50_000 * 1e-4)


def test_rounds_run_across_all_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round runs every cell of every row (calibration sizes and checked programs)
    before the next round starts: load drift falls on all of them alike."""
    from emutrace.benchgrid import native_runner
    from emutrace.benchgrid.spec import expand

    order: list[tuple[str, str]] = []

    def fake_native(program, t, baseline, timeout):  # type: ignore[no-untyped-def]
        order.append((program.argv[-1], t.spec.label))
        t.start_s.append(0.0)
        t.run_s.append(1.0)

    monkeypatch.setattr(native_runner, "_native", fake_native)
    plans = [native_runner.RowPlan("x86_64", expand(f"testbins/{{isa}}/calls deep {n}",
                                                    "x86_64"), emulate=False)
             for n in (100, 1000)]
    specs = native_runner.native_specs("int3,step")
    rows = native_runner.run_native_rows(plans, specs, 2, [], 10.0, "no", lambda *a: None)
    one_round = [(n, s) for n in ("100", "1000") for s in ("none", "int3", "step")]
    assert order == one_round * 2
    assert [len(t.run_s) for r in rows for t in (r.baseline, *r.cells)] == [2] * 6
