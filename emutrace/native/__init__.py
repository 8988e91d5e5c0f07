"""The native hot path: ctypes bindings of the C library built from ``hotpath.c`` (setup.py
compiles it into this package as ``_hotpath*.so``).

The library calls Unicorn through function pointers taken from the ``libunicorn.so.2`` the
Python binding loaded (``unicorn.unicorn_py3.unicorn.uclib``): one Unicorn instance, whatever
the library was linked with.  Hooks are installed with that library's ``uc_hook_add`` and
removed with its ``uc_hook_del``.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emutrace.errors import Unsupported

MAX_REGS = 8  # abi.h NT_MAX_REGS

PY_INTR = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
PY_BLOCK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32)
PY_COUNT = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
PY_DRAIN = ctypes.CFUNCTYPE(None)


class Config(ctypes.Structure):
    """abi.h nt_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("reg_read", ctypes.c_void_p), ("reg_write", ctypes.c_void_p),
        ("mem_read", ctypes.c_void_p), ("mem_write", ctypes.c_void_p),
        ("emu_stop", ctypes.c_void_p),
        ("py_intr", PY_INTR), ("py_block", PY_BLOCK), ("py_count", PY_COUNT),
        ("py_drain", PY_DRAIN),
        ("pc_reg", ctypes.c_int32), ("sp_reg", ctypes.c_int32),
        ("bp_intno", ctypes.c_uint32), ("pc_after", ctypes.c_uint32),
        ("word", ctypes.c_uint32), ("big_endian", ctypes.c_uint32),
        ("n_args", ctypes.c_uint32), ("n_stack", ctypes.c_uint32),
        ("stack_offset", ctypes.c_int32), ("arg_regs", ctypes.c_int32 * MAX_REGS),
        ("ret_reg", ctypes.c_int32), ("ret_hi_reg", ctypes.c_int32),
        ("buffer_events", ctypes.c_uint32),
        ("reg_read_batch", ctypes.c_void_p),
        ("code_mask", ctypes.c_uint64), ("bp_uncounted", ctypes.c_uint32),
        ("fixed_insn", ctypes.c_uint32), ("alt_reg", ctypes.c_int32),
        ("alt_bit", ctypes.c_uint32), ("align", ctypes.c_uint32),
        ("alt_align", ctypes.c_uint32),
    ]


# a block count C read from a size map (abi.h nt_learned): addr, size, alt, count, padding
LEARNED = struct.Struct("=QIIII")
# one event record (abi.h nt_event): kind, nregs or flags, time, site, target, sp,
# fallthrough, entry_sp, regs[8]
EVENT_FORMAT = f"=IIq5Q{MAX_REGS}Q"  # (time signed: a fallback may take it below 0)
EVENT = struct.Struct(EVENT_FORMAT)
EV_CALL, EV_RETURN, EV_TAIL = 1, 2, 3  # EV_TAIL: a jump to a function entry (abi.h)
# nregs >> STRINGS_SHIFT: the event's string copies in the string area (abi.h; hotpath.c
# nt_strings: per copy a u8 word index, a u16 length or STRING_NONE, the bytes)
STRINGS_SHIFT, STRING_NONE = 8, 0xFFFF
OP_NONE, OP_CALL, OP_RETURN, OP_JUMP = 0, 1, 2, 3
# a site as the C tables (hotpath.c, ploop.c) take it after its address: op, target, after,
# src_reg, link_reg, release, fast, conditional, condition test, condition register, its
# bits a, b, c, clear_low, guard test, guard register, its bits a, b
SiteOp = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int,
               int, int]

Signatures = Mapping[str, tuple[Any, Any]]  # C function -> (argtypes, restype)


def declare(lib: ctypes.CDLL, signatures: Signatures, part: str) -> None:
    """Give each C function of one part of the library (step.c, branch.c, ploop.c) its
    argument and result types; a library built before that part is Unsupported (exit 69)."""
    try:
        for name, (args, res) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
    except AttributeError:
        raise Unsupported(f"--engine native: the native library predates {part}; rebuild it "
                          f"(`pip install -e .`)") from None


_lib: ctypes.CDLL | None = None


def library_path() -> Path | None:
    here = Path(__file__).resolve().parent
    return next(iter(sorted(here.glob("_hotpath*.so"))), None)


def load() -> ctypes.CDLL:
    """The library, loaded once; Unsupported (exit 69) with what to do when it is not built."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        raise Unsupported("--engine native: the native library is not built (run "
                          "`pip install -e .` or `python setup.py build_ext --inplace` with a C "
                          "compiler and Python headers); --engine python works without it")
    lib = ctypes.CDLL(str(path))
    vp, u32, u64, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
    sz = ctypes.c_size_t
    signatures = {
        "nt_new": ([vp, ctypes.POINTER(Config)], vp),
        "nt_free": ([vp], None),
        "nt_site_set": ([vp, u64, u32, u64, u64, i32, i32, u32, u32, u32, u32, i32, u32, u32,
                         u32, u32, u32, i32, u32, u32], ctypes.c_int),
        "nt_site_extra": ([vp, u64, u32, u32, u32, u32, u64, u32,
                           ctypes.POINTER(i32)], ctypes.c_int),
        "nt_inside_add": ([vp, u64, u64], ctypes.c_int),
        "nt_inside_drop": ([vp, u64], ctypes.c_int),
        "nt_switch_jump_add": ([vp, u64, u64], ctypes.c_int),
        "nt_tail_add": ([vp, u64, u64], ctypes.c_int),
        "nt_site_active": ([vp, u64, u32], None),
        "nt_callee_add": ([vp, u64], ctypes.c_int),
        "nt_string_args": ([vp, u64, u32], ctypes.c_int),
        "nt_string_return": ([vp, u64], ctypes.c_int),
        "nt_strings": ([vp], vp),
        "nt_strings_len": ([vp], u64),
        "nt_set_attention": ([vp, u32], None),
        "nt_get_time": ([vp], u64),
        "nt_set_time": ([vp, u64], None),
        "nt_counter": ([vp, u32], u64),
        "nt_events": ([vp], vp),
        "nt_events_count": ([vp], u32),
        "nt_events_clear": ([vp], None),
        "nt_event_size": ([], u32),
        "nt_set_writer": ([vp, vp], None),
        "nt_size_map_add": ([vp, u64, u64, vp, u32], ctypes.c_int),
        "nt_learned_count": ([vp], sz), "nt_learned_at": ([vp], vp),
        "nt_counts_preload": ([vp, ctypes.c_char_p, sz], ctypes.c_int),
        # the record writer (ufwrite.c)
        "uw_new": ([u32, u64], vp),
        "uw_free": ([vp], None),
        "uw_set_enabled": ([vp, u32], None),
        "uw_set_deep": ([vp, u32], None),
        "uw_not_recorded": ([vp], u64),
        "uw_callee_plan": ([vp, u64, u32, u32, vp, vp, vp, vp], ctypes.c_int),
        "uw_return_plan": ([vp, u64, u64, u32, u32, u32, u32, u32], ctypes.c_int),
        "uw_frames_count": ([vp], sz), "uw_frames_low": ([vp], sz), "uw_frames": ([vp], vp),
        "uw_tails_count": ([vp], sz), "uw_tails_low": ([vp], sz), "uw_tails": ([vp], vp),
        "uw_clean": ([vp], None), "uw_changed": ([vp], ctypes.c_int),
        "uw_frames_set": ([vp, sz, ctypes.c_char_p, sz], ctypes.c_int),
        "uw_tails_set": ([vp, sz, ctypes.c_char_p, sz], ctypes.c_int),
        "uw_bytes": ([vp], vp), "uw_bytes_len": ([vp], sz),
        "uw_records": ([vp], u64), "uw_last_time": ([vp], u64),
        "uw_bytes_clear": ([vp], None),
    }
    for name, (args, res) in signatures.items():
        fn = getattr(lib, name, None)
        if fn is None:  # a library older than this function: `available` says so
            continue
        fn.argtypes, fn.restype = args, res
    if lib.nt_event_size() != ctypes.sizeof(ctypes.c_uint64) * (7 + MAX_REGS):
        raise Unsupported(f"--engine native: {path.name} does not match this emutrace "
                          f"(event size {lib.nt_event_size()}); rebuild it")
    _lib = lib
    return lib


# per backend with a native path: the library function its engine starts with (a library
# built before that backend's C file lacks it)
ENTRY_POINTS = {"int3": "nt_new", "step": "st_new", "bts": "bb_new", "btf": "bb_new",
                "entry": "ep_new"}


def available(backend: str = "int3") -> bool:
    return unavailable_reason(backend) is None


def unavailable_reason(backend: str = "int3") -> str | None:
    """Why backend's native path cannot run here (None: it can)."""
    try:
        lib = load()
    except Unsupported as e:
        return str(e)
    entry = ENTRY_POINTS.get(backend, "nt_new")
    if not hasattr(lib, entry):
        return f"the native library predates {backend}'s C path ({entry}); rebuild it"
    return None
