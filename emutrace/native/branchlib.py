"""ctypes bindings of the `bts` / `btf` block hook (``branch.c``, built into the same library
as ``hotpath.c``; see emutrace/native/__init__.py for how Unicorn is reached)."""

from __future__ import annotations

import ctypes

from emutrace import native

PY_BLOCK_INFO = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_uint64))
PY_FLUSH = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
PY_LIVE = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                           ctypes.c_uint32)

# block flags (abi.h B_*)
B_SITE, B_CONDITIONAL, B_SPLIT = 1, 2, 4
B_KIND_SHIFT = 8
B_MAYBE_RETURN, B_RET_FAST = 1 << 11, 1 << 12
# record kinds (abi.h EV_*: a call, a return, a jump to an entry, a bts record)
BR_CALL, BR_RETURN, BR_JUMP, BR_RAW = 1, 2, 3, 4
# counters (bb_counter)
TAKEN, INTERRUPTS, FILL, LIVE, BUFFERED = range(5)


class BranchConfig(ctypes.Structure):
    """abi.h bb_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("abi", native.CallAbi),
        ("reg_read", ctypes.c_void_p), ("mem_read", ctypes.c_void_p),
        ("py_block", PY_BLOCK_INFO), ("py_flush", PY_FLUSH), ("py_live", PY_LIVE),
        ("alt_reg", ctypes.c_int32), ("alt_mask", ctypes.c_uint64),
        ("live", ctypes.c_uint32), ("capacity", ctypes.c_uint64),
    ]


_vp, _u32, _u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
SIGNATURES: native.Signatures = {
    "bb_new": ([_vp, ctypes.POINTER(BranchConfig)], _vp),
    "bb_free": ([_vp], None),
    "bb_fast_add": ([_vp, _u64], ctypes.c_int),
    "bb_entry_add": ([_vp, _u64], ctypes.c_int),
    "bb_get_time": ([_vp], _u64),
    "bb_set_time": ([_vp, _u64], None),
    "bb_interrupted": ([_vp], None),
    "bb_fill_reset": ([_vp], None),
    "bb_counter": ([_vp, _u32], _u64),
    "bb_records": ([_vp], _vp),
    "bb_records_count": ([_vp], _u32),
    "bb_records_clear": ([_vp], None),
}


def load() -> ctypes.CDLL:
    """The library with the branch functions' signatures set; Unsupported (exit 69) when it
    is not built or predates branch.c."""
    return native.load("branch.c (the bts/btf hook)", SIGNATURES)
