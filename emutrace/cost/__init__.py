"""Native cost model: what tracing a run would cost on real hardware, per ISA and mechanism.

The emulated backends count events (traps, code patches, branch records, steps); this package
prices each event kind with a native cost taken from measurements in the project VM (label
``vm``) or from published figures (label ``bare-metal``), every price with its source, and
predicts the native slowdown of the run.  Pure arithmetic: it imports no emulator.

    >>> from emutrace.cost import predict
    >>> p = predict("x86_64", "int3", {"traps": 1000}, guest_insns=1_000_000, setting="vm")
    >>> round(p.slowdown, 1)  # (300 µs + 1000 × 6.4 µs) / 300 µs
    22.3

Modules: :mod:`.anchors` (the sourced numbers), :mod:`.prices` (the price list and its
decisions), :mod:`.predict` (the formula), :mod:`.markdown` (the table for reports),
:mod:`.calibrate` (the tracer's own costs measured on a calibration program) and
:mod:`.check` (a prediction against a native run).
"""

from emutrace.cost.predict import (
    DEFAULT_NS_PER_INSN,
    EventCost,
    Prediction,
    backend_of,
    predict,
)
from emutrace.cost.prices import (
    COUNTED,
    HARDWARE_NOTES,
    ISAS,
    MAIN_EVENT,
    SETTINGS,
    Price,
    cost_table,
    price,
)

__all__ = [
    "COUNTED", "DEFAULT_NS_PER_INSN", "HARDWARE_NOTES", "ISAS", "MAIN_EVENT", "SETTINGS",
    "EventCost", "Prediction", "Price", "backend_of", "cost_table", "predict", "price",
]
