"""The tracer's own prices, measured on a calibration program in the same bench run (issue
13 item 4): pure arithmetic, no ptrace.

A native traced run costs, beyond the untraced run, a per-run part (arming, discovering the
first calls, reading the ELF, the stops of the C library's start-up) and a part per stop.
The calibration program (`calls deep N`: a recursion N deep, one call and one return per
level) runs untraced and traced with each mechanism at two depths, small and large; only the
stops that the depth drives change between them, so

    per stop = (extra(large) − extra(small)) / (stops(large) − stops(small))
    per run  = extra(small) − per stop × stops(small)

with extra = traced − untraced.  The stop counters of a mechanism (`NATIVE_STOPS`) that the
depth does not change (hwbp's start-up instructions `stepped`) are *held*: their cost at the
calibration's count is inside the per-run part, and a program whose count differs is
mispredicted by that difference (reported beside the cell).  The per-run untraced cost of a
process (fork, exec, page faults, exit) is the calibration's untraced run at the small depth.

Never fitted on the cells it predicts: the checked programs are not the calibration program.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from emutrace.cost.predict import backend_of

# The counters that say how often each mechanism stopped the native program: int3 traps and
# the displaced instructions it single-stepped (fallbacks), hwbp slot hits and the
# instructions it stepped where a function has more sites than slots, btf stops (every
# instruction where BTF is degraded), entry traps and their step-overs, step steps.
NATIVE_STOPS: dict[str, tuple[str, ...]] = {
    "int3": ("traps", "fallbacks"),
    "hwbp": ("hits", "stepped"),
    "btf": ("stops",),
    "entry": ("traps", "stepovers"),
    "step": ("steps",),
}

# a counter "varies" when the large depth has at least this much more of it than the small
VARIES = 0.05


@dataclass(frozen=True)
class Sample:
    """One calibration point: median untraced and traced native times, the native counters."""
    untraced_s: float
    traced_s: float
    stats: Mapping[str, int]

    @property
    def extra_s(self) -> float:
        return self.traced_s - self.untraced_s


@dataclass(frozen=True)
class Calibration:
    spec: str
    per_run_s: float  # the tracer's cost per run at the held counters' calibration counts
    per_stop_s: float  # per stop of the varying counters
    varying: tuple[str, ...]
    held: dict[str, int] = field(default_factory=dict)  # counter → its calibration count
    # the small size's other counters (functions discovered, code writes): per-run work
    # that a program with other counts does differently (reported, not priced)
    others: dict[str, int] = field(default_factory=dict)

    def extra_s(self, counts: Mapping[str, int]) -> float:
        """Predicted traced − untraced time for a run with these stop counts."""
        return self.per_run_s + self.per_stop_s * sum(int(counts.get(k, 0))
                                                      for k in self.varying)

    def record(self) -> dict[str, object]:
        return {"spec": self.spec, "per_run_s": self.per_run_s,
                "per_stop_us": self.per_stop_s * 1e6, "varying": list(self.varying),
                "held": dict(self.held), "others": dict(self.others)}


def stop_counters(spec: str) -> tuple[str, ...]:
    return NATIVE_STOPS.get(backend_of(spec), ())


def fit(spec: str, small: Sample, large: Sample) -> Calibration:
    """The two-depth fit of the module doc.  ValueError when no stop counter grew from the
    small depth to the large one (nothing to take a per-stop price from)."""
    counters = stop_counters(spec)
    varying = tuple(k for k in counters
                    if int(large.stats.get(k, 0)) - int(small.stats.get(k, 0))
                    > VARIES * max(1, int(small.stats.get(k, 0))))
    if not varying:
        raise ValueError(f"calibration of {spec}: no stop counter grew with the depth "
                         f"({', '.join(counters) or 'none counted'})")
    n_small = sum(int(small.stats.get(k, 0)) for k in varying)
    n_large = sum(int(large.stats.get(k, 0)) for k in varying)
    per_stop = (large.extra_s - small.extra_s) / (n_large - n_small)
    held = {k: int(small.stats.get(k, 0)) for k in counters if k not in varying}
    others = {k: int(v) for k, v in small.stats.items() if k not in counters}
    return Calibration(spec, small.extra_s - per_stop * n_small, per_stop, varying, held,
                       others)
