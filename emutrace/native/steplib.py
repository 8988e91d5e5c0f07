"""ctypes bindings of the `step` backend's C hook (``step.c``, built into the same library
as ``hotpath.c``; see emutrace/native/__init__.py for how Unicorn is reached)."""

from __future__ import annotations

import ctypes

from emutrace import native

# abi.h's flow word: length in bits 0-15, kind (K_*) in 16-18, then flags
KIND_SHIFT = 16
CONDITIONAL, MAYBE_RETURN, ALT_LINK, RET_FAST = 1 << 19, 1 << 20, 1 << 21, 1 << 22
PENDING_WORDS = 6  # st_take_pending/st_put_pending: flow, site, fall-through, time, sp, countdown

PY_FLOW = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
PY_RESOLVE = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                              ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)


class StepConfig(ctypes.Structure):
    """abi.h st_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("abi", native.CallAbi),
        ("reg_read", ctypes.c_void_p), ("mem_read", ctypes.c_void_p),
        ("py_flow", PY_FLOW), ("py_resolve", PY_RESOLVE), ("py_drain", native.PY_DRAIN),
        ("delay", ctypes.c_uint32),
    ]


_vp, _u32, _u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
SIGNATURES: native.Signatures = {
    "st_new": ([_vp, ctypes.POINTER(StepConfig)], _vp),
    "st_free": ([_vp], None),
    "st_fast_add": ([_vp, _u64], ctypes.c_int),
    "st_entry_add": ([_vp, _u64], ctypes.c_int),
    "st_flows_load": ([_vp, ctypes.POINTER(_u64), ctypes.POINTER(_u32), _u32], ctypes.c_int),
    "st_get_time": ([_vp], _u64),
    "st_set_time": ([_vp, _u64], None),
    "st_clear_pending": ([_vp], None),
    "st_take_pending": ([_vp, ctypes.POINTER(_u64)], ctypes.c_int),
    "st_put_pending": ([_vp, ctypes.POINTER(_u64)], None),
    "st_counter": ([_vp, _u32], _u64),
    "st_events": ([_vp], _vp),
    "st_events_count": ([_vp], _u32),
    "st_events_clear": ([_vp], None),
    "st_set_writer": ([_vp, _vp], None),
}


def load() -> ctypes.CDLL:
    """The library with the step functions' signatures set; Unsupported (exit 69) when it is
    not built or predates step.c."""
    return native.load("step.c (the step backend)", SIGNATURES)
