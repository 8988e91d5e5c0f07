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

_vp, _u32, _u64, _sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
_words = ctypes.POINTER(ctypes.c_uint64)
SIGNATURES: native.Signatures = {
    "ns_new": ([_vp, _vp, _vp, _u64], _vp),
    "ns_free": ([_vp], None),
    "nt_set_strict": ([_vp, _vp], None),
    "ns_site_bytes": ([_vp, _u64, _u32, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int),
    "ns_site_armed": ([_vp, _u64, _u32, _u64], ctypes.c_int),
    "ns_site_hooked": ([_vp, _u64], ctypes.c_int),
    "ns_bind_hooked": ([_vp, _vp, _vp], None),
    "ns_func_sites": ([_vp, _u64, _u64, _u32, _words], ctypes.c_int),
    "ns_func_armed": ([_vp, _u64, _u32], ctypes.c_int),
    "ns_func_forget": ([_vp, _u64], None),
    "ns_target": ([_vp, _u64, _u64], ctypes.c_int),
    "ns_chain_set": ([_vp, _sz, _words, _words], ctypes.c_int),
    "ns_disable": ([_vp], None),
    "ns_switches": ([_vp], _u64),
    "ns_journal": ([_vp], _vp),
    "ns_journal_count": ([_vp], _u32),
    "ns_journal_clear": ([_vp], None),
    "ns_journal_patches": ([_vp], _u64),
    "ns_journal_removals": ([_vp], _u64),
    "ns_sites_state": ([_vp, _u32, _words, _words, ctypes.POINTER(ctypes.c_uint8)], None),
    "ns_chain": ([_vp], _vp),
    "ns_chain_depth": ([_vp], _sz),
    "ns_chain_low": ([_vp], _sz),
    "ns_chain_seen": ([_vp], None),
    "ns_frame_size": ([], _u32),
    "ns_set_slots": ([_vp, _u32, _u32], None),
    "ns_func_slots": ([_vp, _u64, _u32], ctypes.c_int),
    "ns_func_in_use": ([_vp, _u64], _u32),
    "ns_switches_at": ([_vp], _vp),
    "ns_journal_slot_writes": ([_vp], _u64),
    "ns_journal_fallbacks": ([_vp], _u64),
    "ns_journal_max_slots": ([_vp], _u64),
}


def load() -> ctypes.CDLL:
    """The library with the strict functions' signatures set; Unsupported (exit 69) when it
    is not built or predates strict.c."""
    return native.load("strict.c (int3 strict cleanup)", SIGNATURES)
