"""The native hot path: ctypes bindings of the C library built from ``hotpath.c`` and the other
C files of this package (setup.py compiles them into one ``_hotpath*.so``), and its one loader,
`load(part, signatures)`: the library is loaded once, each part's functions are declared once,
and a library that is missing, does not load or predates a part is `Unsupported` with a
one-line reason (`unavailable_reason`).  The layouts shared with C are abi.h's.

The library calls Unicorn through function pointers taken from the ``libunicorn.so.2`` the
Python binding loaded (``unicorn.unicorn_py3.unicorn.uclib``): one Unicorn instance, whatever
the library was linked with.  Hooks are installed with that library's ``uc_hook_add`` and
removed with its ``uc_hook_del``.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from emutrace.errors import Unsupported
from emutrace.isa.base import Isa

MAX_REGS = 8  # abi.h NT_MAX_REGS

PY_INTR = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
PY_BLOCK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32)
PY_COUNT = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
PY_DRAIN = ctypes.CFUNCTYPE(None)


class CallAbi(ctypes.Structure):
    """abi.h nt_abi: the calling convention and event buffer of a port's tracer core, the
    first member of each port's configuration (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("pc_reg", ctypes.c_int32), ("sp_reg", ctypes.c_int32),
        ("word", ctypes.c_uint32), ("big_endian", ctypes.c_uint32),
        ("n_args", ctypes.c_uint32), ("n_stack", ctypes.c_uint32),
        ("stack_offset", ctypes.c_int32), ("arg_regs", ctypes.c_int32 * MAX_REGS),
        ("ret_reg", ctypes.c_int32), ("ret_hi_reg", ctypes.c_int32),
        ("buffer_events", ctypes.c_uint32), ("code_mask", ctypes.c_uint64),
    ]


def call_registers(isa: Isa) -> tuple[list[str], list[str]]:
    """The registers C snapshots for isa: the integer argument registers (MAX_REGS at
    most) and the return value's (its high half too, where the ABI has one)."""
    regs = isa.registers
    hi = isa.c_values.retval_hi
    return list(regs.args[:MAX_REGS]), [regs.retval] + ([hi] if hi else [])


def call_abi(isa: Isa, reg_id: Callable[[str], int], word: int, big_endian: bool,
             buffer_events: int) -> CallAbi:
    """isa's nt_abi with the port's register ids (reg_id): after the argument registers,
    stack words up to MAX_REGS (i386: all of them; x86_64: arguments 7 and 8); the code
    mask is the ISA's (ARM: a target's bit 0 is its mode)."""
    regs = isa.registers
    args, rets = call_registers(isa)
    abi = CallAbi()
    abi.pc_reg, abi.sp_reg = reg_id(regs.pc), reg_id(regs.sp)
    abi.word, abi.big_endian = word, int(big_endian)
    abi.n_args, abi.n_stack = len(args), MAX_REGS - len(args)
    abi.stack_offset = regs.stack_args_offset
    for i, name in enumerate(args):
        abi.arg_regs[i] = reg_id(name)
    abi.ret_reg = reg_id(rets[0])
    abi.ret_hi_reg = reg_id(rets[1]) if len(rets) > 1 else -1
    abi.buffer_events = buffer_events
    abi.code_mask = isa.code_mask & ((1 << 64) - 1)
    return abi


class Config(ctypes.Structure):
    """abi.h nt_config (tests/test_native_abi.py checks the layout)."""

    _fields_ = [
        ("abi", CallAbi),
        ("reg_read", ctypes.c_void_p), ("reg_write", ctypes.c_void_p),
        ("mem_read", ctypes.c_void_p), ("mem_write", ctypes.c_void_p),
        ("emu_stop", ctypes.c_void_p),
        ("py_intr", PY_INTR), ("py_block", PY_BLOCK), ("py_count", PY_COUNT),
        ("py_drain", PY_DRAIN),
        ("bp_intno", ctypes.c_uint32), ("pc_after", ctypes.c_uint32),
        ("reg_read_batch", ctypes.c_void_p), ("bp_uncounted", ctypes.c_uint32),
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


_vp, _u32, _u64, _i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
_sz = ctypes.c_size_t
# hotpath.c and ufwrite.c, the record writer
SIGNATURES: Signatures = {
    "nt_event_size": ([], _u32),
    "nt_new": ([_vp, ctypes.POINTER(Config)], _vp),
    "nt_free": ([_vp], None),
    "nt_site_set": ([_vp, _u64, _u32, _u64, _u64, _i32, _i32, _u32, _u32, _u32, _u32, _i32,
                     _u32, _u32, _u32, _u32, _u32, _i32, _u32, _u32], ctypes.c_int),
    "nt_site_extra": ([_vp, _u64, _u32, _u32, _u32, _u32, _u64, _u32,
                       ctypes.POINTER(_i32)], ctypes.c_int),
    "nt_inside_add": ([_vp, _u64, _u64], ctypes.c_int),
    "nt_inside_drop": ([_vp, _u64], ctypes.c_int),
    "nt_switch_jump_add": ([_vp, _u64, _u64], ctypes.c_int),
    "nt_tail_add": ([_vp, _u64, _u64], ctypes.c_int),
    "nt_site_active": ([_vp, _u64, _u32], None),
    "nt_callee_add": ([_vp, _u64], ctypes.c_int),
    "nt_string_args": ([_vp, _u64, _u32], ctypes.c_int),
    "nt_string_return": ([_vp, _u64], ctypes.c_int),
    "nt_strings": ([_vp], _vp),
    "nt_strings_len": ([_vp], _u64),
    "nt_set_attention": ([_vp, _u32], None),
    "nt_get_time": ([_vp], _u64),
    "nt_set_time": ([_vp, _u64], None),
    "nt_counter": ([_vp, _u32], _u64),
    "nt_events": ([_vp], _vp),
    "nt_events_count": ([_vp], _u32),
    "nt_events_clear": ([_vp], None),
    "nt_set_writer": ([_vp, _vp], None),
    "nt_size_map_add": ([_vp, _u64, _u64, _vp, _u32], ctypes.c_int),
    "nt_learned_count": ([_vp], _sz), "nt_learned_at": ([_vp], _vp),
    "nt_counts_preload": ([_vp, ctypes.c_char_p, _sz], ctypes.c_int),
    "uw_new": ([_u32, _u64], _vp),
    "uw_free": ([_vp], None),
    "uw_set_enabled": ([_vp, _u32], None),
    "uw_set_deep": ([_vp, _u32], None),
    "uw_not_recorded": ([_vp], _u64),
    "uw_callee_plan": ([_vp, _u64, _u32, _u32, _vp, _vp, _vp, _vp], ctypes.c_int),
    "uw_return_plan": ([_vp, _u64, _u64, _u32, _u32, _u32, _u32, _u32], ctypes.c_int),
    "uw_frames_count": ([_vp], _sz), "uw_frames_low": ([_vp], _sz), "uw_frames": ([_vp], _vp),
    "uw_tails_count": ([_vp], _sz), "uw_tails_low": ([_vp], _sz), "uw_tails": ([_vp], _vp),
    "uw_clean": ([_vp], None), "uw_changed": ([_vp], ctypes.c_int),
    "uw_frames_set": ([_vp, _sz, ctypes.c_char_p, _sz], ctypes.c_int),
    "uw_tails_set": ([_vp, _sz, ctypes.c_char_p, _sz], ctypes.c_int),
    "uw_bytes": ([_vp], _vp), "uw_bytes_len": ([_vp], _sz),
    "uw_records": ([_vp], _u64), "uw_last_time": ([_vp], _u64),
    "uw_bytes_clear": ([_vp], None),
}

_lib: ctypes.CDLL | None = None
_declared: dict[str, ctypes.CDLL] = {}  # part -> the library its functions were declared on


def library_path() -> Path | None:
    here = Path(__file__).resolve().parent
    return next(iter(sorted(here.glob("_hotpath*.so"))), None)


def _library() -> ctypes.CDLL:
    """The library, loaded once; Unsupported (exit 69) with what to do when it is not built,
    does not load, or was built from another ABI than this emutrace's (abi.h)."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        raise Unsupported("--engine native: the native library is not built (run "
                          "`pip install -e .` or `python setup.py build_ext --inplace` with a C "
                          "compiler and Python headers); --engine python works without it")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise Unsupported(f"--engine native: {path.name} does not load ({e}); rebuild it "
                          f"(`pip install -e .`)") from None
    # hotpath.c's and ufwrite.c's functions first: every other part's engine calls them too
    declare(lib, SIGNATURES, "hotpath.c")
    if lib.nt_event_size() != EVENT.size:
        raise Unsupported(f"--engine native: {path.name} does not match this emutrace "
                          f"(event size {lib.nt_event_size()}); rebuild it")
    _lib = lib
    _declared["hotpath.c"] = lib
    return lib


def load(part: str = "hotpath.c", signatures: Signatures = SIGNATURES) -> ctypes.CDLL:
    """The one way to the library: loaded once (with hotpath.c's and ufwrite.c's functions,
    which every part's engine calls), with the functions of one more part of it (a C file,
    named in the error) given their types once; Unsupported (exit 69) with what to do when
    the library is not built or predates that part.  Each part's module holds its
    signatures: branchlib.py, steplib.py, strictlib.py, ploop.py, disasmlib.py,
    replaytext.py, crashguard.py; this module hotpath.c's and ufwrite.c's."""
    lib = _library()
    if _declared.get(part) is not lib:
        declare(lib, signatures, part)
        _declared[part] = lib
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
