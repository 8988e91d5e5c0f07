"""ctypes bindings of strict cleanup in C (``strict.c``, built into the same library as
``hotpath.c``, which calls it from its trap hook; see emutrace/native/__init__.py for how
Unicorn is reached)."""

from __future__ import annotations

import ctypes
import struct

from emutrace import native

JOURNAL_ENTRY = struct.Struct("=2Q")  # abi.h ns_entry: kind, function start
ARMED, DISARMED = 1, 2
FRAME = struct.Struct("=2QI4x")  # abi.h ns_frame: start, end, function index

_ready = False


def load() -> ctypes.CDLL:
    """The library with the strict functions' signatures set; Unsupported (exit 69) when it
    is not built or predates strict.c."""
    global _ready
    lib = native.load()
    if _ready:
        return lib
    vp, u32, u64, sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
    words = ctypes.POINTER(ctypes.c_uint64)
    native.declare(lib, {
        "ns_new": ([vp, vp, vp, u64], vp),
        "ns_free": ([vp], None),
        "nt_set_strict": ([vp, vp], None),
        "ns_site_bytes": ([vp, u64, u32, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int),
        "ns_site_armed": ([vp, u64, u32, u64], ctypes.c_int),
        "ns_site_hooked": ([vp, u64], ctypes.c_int),
        "ns_bind_hooked": ([vp, vp, vp], None),
        "ns_func_sites": ([vp, u64, u64, u32, words], ctypes.c_int),
        "ns_func_armed": ([vp, u64, u32], ctypes.c_int),
        "ns_func_forget": ([vp, u64], None),
        "ns_target": ([vp, u64, u64], ctypes.c_int),
        "ns_chain_set": ([vp, sz, words, words], ctypes.c_int),
        "ns_disable": ([vp], None),
        "ns_switches": ([vp], u64),
        "ns_journal": ([vp], vp),
        "ns_journal_count": ([vp], u32),
        "ns_journal_clear": ([vp], None),
        "ns_journal_patches": ([vp], u64),
        "ns_journal_removals": ([vp], u64),
        "ns_sites_state": ([vp, u32, words, words, ctypes.POINTER(ctypes.c_uint8)], None),
        "ns_chain": ([vp], vp),
        "ns_chain_depth": ([vp], sz),
        "ns_chain_low": ([vp], sz),
        "ns_chain_seen": ([vp], None),
        "ns_frame_size": ([], u32),
        "ns_set_slots": ([vp, u32, u32], None),
        "ns_func_slots": ([vp, u64, u32], ctypes.c_int),
        "ns_func_in_use": ([vp, u64], u32),
        "ns_switches_at": ([vp], vp),
        "ns_journal_slot_writes": ([vp], u64),
        "ns_journal_fallbacks": ([vp], u64),
        "ns_journal_max_slots": ([vp], u64),
    }, "strict.c (int3 strict cleanup)")
    _ready = True
    return lib
