"""ctypes bindings of the `step` backend's C hook (``step.c``, built into the same library
as ``hotpath.c``; see emutrace/native/__init__.py for how Unicorn is reached)."""

from __future__ import annotations

import ctypes

from emutrace import native
from emutrace.errors import Unsupported

PY_FLOW = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
PY_RESOLVE = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                              ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)


class StepConfig(ctypes.Structure):
    """abi.h st_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("reg_read", ctypes.c_void_p), ("mem_read", ctypes.c_void_p),
        ("py_flow", PY_FLOW), ("py_resolve", PY_RESOLVE), ("py_drain", native.PY_DRAIN),
        ("sp_reg", ctypes.c_int32), ("word", ctypes.c_uint32),
        ("big_endian", ctypes.c_uint32), ("delay", ctypes.c_uint32),
        ("code_mask", ctypes.c_uint64),
        ("n_args", ctypes.c_uint32), ("n_stack", ctypes.c_uint32),
        ("stack_offset", ctypes.c_int32), ("arg_regs", ctypes.c_int32 * native.MAX_REGS),
        ("ret_reg", ctypes.c_int32), ("ret_hi_reg", ctypes.c_int32),
        ("buffer_events", ctypes.c_uint32),
    ]


_ready = False


def load() -> ctypes.CDLL:
    """The library with the step functions' signatures set; Unsupported (exit 69) when it is
    not built or predates step.c."""
    global _ready
    lib = native.load()
    if _ready:
        return lib
    vp, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
    signatures = {
        "st_new": ([vp, ctypes.POINTER(StepConfig)], vp),
        "st_free": ([vp], None),
        "st_fast_add": ([vp, u64], ctypes.c_int),
        "st_entry_add": ([vp, u64], ctypes.c_int),
        "st_flows_load": ([vp, ctypes.POINTER(u64), ctypes.POINTER(u32), u32], ctypes.c_int),
        "st_get_time": ([vp], u64),
        "st_set_time": ([vp, u64], None),
        "st_clear_pending": ([vp], None),
        "st_take_pending": ([vp, ctypes.POINTER(u64)], ctypes.c_int),
        "st_put_pending": ([vp, ctypes.POINTER(u64)], None),
        "st_counter": ([vp, u32], u64),
        "st_events": ([vp], vp),
        "st_events_count": ([vp], u32),
        "st_events_clear": ([vp], None),
        "st_event_size": ([], u32),
        "st_set_writer": ([vp, vp], None),
    }
    native.declare(lib, signatures, "the step backend")
    if lib.st_event_size() != lib.nt_event_size():
        raise Unsupported("--engine native: step.c and hotpath.c records differ; rebuild")
    _ready = True
    return lib
