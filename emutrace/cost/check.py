"""The cost model checked against native runs: pure arithmetic on what
`emutrace bench --target native` measured, no emulator, no ptrace.

For one program, ISA and mechanism the bench gives the median untraced and traced native
times, the counters of the native run and those of the same program under emulation.  From
them, per cell:

* measured slowdown = traced / untraced (native, this machine);
* measured cost per stop = (traced − untraced) / stops, the stops being what the mechanism
  stopped the native program for (`NATIVE_STOPS`);
* predicted slowdown = the model's (`predict`, setting ``vm``) from the *emulated* counters
  and instruction count, as `emutrace bench` predicts it;
* ratio = predicted / measured, flagged outside ±30 %;
* the two ways the prediction can be wrong, apart: the untraced base (the model assumes
  instructions × ns/insn; the run measured `untraced`) and the tracing time (the model's
  Σ events × price against the measured traced − untraced).  ``predicted_measured_base`` is
  the model's tracing time over the measured untraced time: its ratio to the measured
  slowdown is the error of the prices alone.

That kernel-price model is the *mechanism*'s share.  The corrected prediction
(``calibrated_slowdown``) adds what the tracer itself costs, measured on a calibration
program in the same bench run (`emutrace.cost.calibrate`): predicted untraced = the
calibration's untraced time (a process's fixed cost) + instructions × ns/insn; predicted
traced = that + the calibration's per-run tracer cost + its per-stop cost × the stops the
emulated run counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emutrace.cost.calibrate import NATIVE_STOPS, Calibration
from emutrace.cost.predict import DEFAULT_NS_PER_INSN, backend_of, predict

TOLERANCE = 0.30  # predicted within ±30 % of measured (the bar)

# the same under emulation (btf counts taken branches there: the VM price is per instruction)
EMULATED_STOPS: dict[str, tuple[str, ...]] = {**NATIVE_STOPS, "btf": ("traps",)}


def stops(backend: str, stats: Mapping[str, int], keys: Mapping[str, tuple[str, ...]]
          = NATIVE_STOPS) -> int:
    return sum(int(stats.get(k, 0)) for k in keys.get(backend_of(backend), ()))


@dataclass(frozen=True)
class NativeCell:
    """What the bench measured for one (ISA, program, mechanism)."""
    isa: str
    program: str  # the template
    spec: str  # "int3:strict"
    untraced_s: float  # median untraced native time
    traced_s: float  # median traced native time
    native_stats: dict[str, int]
    emulated_stats: dict[str, int]
    emulated_insns: int
    native_insns: int | None = None  # btf/step count them natively
    rounds: int = 1
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    cell: NativeCell
    measured_slowdown: float
    native_stops: int
    us_per_stop: float | None  # measured (traced − untraced) / stops
    predicted_slowdown: float
    model_base_s: float  # instructions × ns/insn
    model_tracing_s: float  # Σ emulated events × vm price
    emulated_stops: int
    model_us_per_stop: float | None  # model tracing time / emulated stops
    predicted_measured_base: float  # (untraced + model tracing) / untraced
    calibration: Calibration | None = None
    predicted_untraced_s: float | None = None  # calibration base + insns × ns/insn
    predicted_extra_s: float | None = None  # the calibration's per-run + per-stop × stops
    held: dict[str, tuple[int, int]] = field(default_factory=dict)  # counter → (emulated
    # count of this program, count in the calibration): the difference is not priced

    @property
    def calibrated_slowdown(self) -> float | None:
        if self.predicted_untraced_s is None or self.predicted_extra_s is None:
            return None
        return (self.predicted_untraced_s + self.predicted_extra_s) / self.predicted_untraced_s

    @property
    def calibrated_ratio(self) -> float | None:
        s = self.calibrated_slowdown
        return None if s is None else s / self.measured_slowdown

    @property
    def mechanism_share(self) -> float | None:
        """The kernel prices' time (the mechanism) over the measured traced − untraced time;
        the rest is emutrace's own work."""
        extra = self.cell.traced_s - self.cell.untraced_s
        return self.model_tracing_s / extra if extra > 0 else None

    @property
    def ratio(self) -> float:
        return self.predicted_slowdown / self.measured_slowdown

    @property
    def ratio_measured_base(self) -> float:
        return self.predicted_measured_base / self.measured_slowdown

    @property
    def within(self) -> bool:
        return within(self.ratio)

    def record(self) -> dict[str, Any]:
        c = self.cell
        return {
            "isa": c.isa, "program": c.program, "backend": c.spec, "rounds": c.rounds,
            "untraced_s": c.untraced_s, "traced_s": c.traced_s,
            "measured_slowdown": self.measured_slowdown,
            "native_stops": self.native_stops, "us_per_stop": self.us_per_stop,
            "emulated_insns": c.emulated_insns, "native_insns": c.native_insns,
            "emulated_stops": self.emulated_stops,
            "model_us_per_stop": self.model_us_per_stop,
            "model_base_s": self.model_base_s, "model_tracing_s": self.model_tracing_s,
            "predicted_slowdown": self.predicted_slowdown, "ratio": self.ratio,
            "within_30pct": self.within,
            "predicted_measured_base": self.predicted_measured_base,
            "ratio_measured_base": self.ratio_measured_base,
            "within_30pct_measured_base": within(self.ratio_measured_base),
            "native_stats": dict(c.native_stats), "emulated_stats": dict(c.emulated_stats),
            "calibrated_slowdown": self.calibrated_slowdown,
            "calibrated_ratio": self.calibrated_ratio,
            "within_30pct_calibrated": None if self.calibrated_ratio is None
            else within(self.calibrated_ratio),
            "predicted_untraced_s": self.predicted_untraced_s,
            "predicted_extra_s": self.predicted_extra_s,
            "calibration": None if self.calibration is None else self.calibration.record(),
            "held": {k: list(v) for k, v in self.held.items()},
            "mechanism_share": self.mechanism_share,
            "notes": list(c.notes),
        }


def within(ratio: float) -> bool:
    return abs(ratio - 1) <= TOLERANCE


def check(cell: NativeCell, ns_per_insn: float = DEFAULT_NS_PER_INSN,
          calibration: Calibration | None = None, base_s: float | None = None) -> Check:
    """The model's prediction for the cell beside what was measured (see the module doc);
    with a calibration and its untraced base also the corrected prediction."""
    if cell.untraced_s <= 0 or cell.traced_s <= 0:
        raise ValueError("times must be positive")
    p = predict(cell.isa, cell.spec, cell.emulated_stats, cell.emulated_insns, "vm",
                ns_per_insn)
    native_stops = stops(cell.spec, cell.native_stats)
    extra = cell.traced_s - cell.untraced_s
    emulated_stops = stops(cell.spec, cell.emulated_stats, EMULATED_STOPS)
    if backend_of(cell.spec) == "btf" and p.breakdown["traps"].price is not None \
            and p.breakdown["traps"].price.basis == "guest_insn":
        emulated_stops = cell.emulated_insns  # the model stops at every instruction
    tracing_s = p.tracing_ns / 1e9
    counts = emulated_stop_counts(cell, degraded_btf=emulated_stops == cell.emulated_insns
                                  and backend_of(cell.spec) == "btf")
    predicted_untraced = predicted_extra = None
    held: dict[str, tuple[int, int]] = {}
    if calibration is not None and base_s is not None:
        predicted_untraced = base_s + cell.emulated_insns * ns_per_insn * 1e-9
        predicted_extra = calibration.extra_s(counts)
        held = {k: (counts.get(k, 0), n) for k, n in calibration.held.items()}
    return Check(
        cell=cell,
        measured_slowdown=cell.traced_s / cell.untraced_s,
        native_stops=native_stops,
        us_per_stop=extra / native_stops * 1e6 if native_stops else None,
        predicted_slowdown=p.slowdown,
        model_base_s=p.native_ns / 1e9,
        model_tracing_s=tracing_s,
        emulated_stops=emulated_stops,
        model_us_per_stop=tracing_s / emulated_stops * 1e6 if emulated_stops else None,
        predicted_measured_base=(cell.untraced_s + tracing_s) / cell.untraced_s,
        calibration=calibration,
        predicted_untraced_s=predicted_untraced,
        predicted_extra_s=predicted_extra,
        held=held,
    )


def emulated_stop_counts(cell: NativeCell, degraded_btf: bool) -> dict[str, int]:
    """The emulated run's counts under the native stop counters' names: btf's native
    `stops` are every instruction where BTF is degraded, else the taken branches (`traps`)."""
    stats = {k: int(v) for k, v in cell.emulated_stats.items()}
    if backend_of(cell.spec) == "btf":
        stats["stops"] = cell.emulated_insns if degraded_btf else stats.get("traps", 0)
    return stats
