"""ctypes bindings of strict cleanup in C (``strict.c``, built into the same library as
``hotpath.c``, which calls it from its trap hook; see emutrace/native/__init__.py for how
Unicorn is reached)."""

from __future__ import annotations

import ctypes
import struct

from emutrace import native

JOURNAL_ENTRY = struct.Struct("=3Q")  # ns_entry: kind, site, target

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
    }, "strict.c (int3 strict cleanup)")
    _ready = True
    return lib
