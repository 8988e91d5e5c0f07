"""ctypes bindings of discovery's decoding in C (``disasm.c``): capstone's own C library, the
one its wheel ships, without capstone's Python binding, whose import alone costs ~30 ms of a
~160 ms small run.  The binding stays the reference (emutrace/discover/decode.py);
tests/test_disasm.py decodes each ISA's fib (and ARM's Thumb) both ways."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from emutrace import native
from emutrace.errors import Unsupported

MAX_INSNS = 1024  # instructions decoded per call at most (a caller asks again for more)
# per instruction at most: capstone's mnemonic (32) and op_str (160) fields, NUL-ended
TEXT_BYTES = MAX_INSNS * (32 + 160)

Lite = tuple[int, int, str, str]  # (address, size, mnemonic, op_str), as disasm_lite's
# a descent's straight-run walker (Sweeper.walker): (addr, seen, entry, is_entry, todo,
# followed) -> (instruction stopped at, where, branches left to the descent, direct calls
# walked past) or None
Walker = Callable[[int, dict[int, int], int, Callable[[int], bool], list[int], set[int]],
                  tuple[Any, int, list[tuple[int, int]], list[Any]] | None]


def _capstone_library() -> Path | None:
    """libcapstone.so of the capstone wheel, found without importing the binding."""
    spec = importlib.util.find_spec("capstone")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "lib" / "libcapstone.so"
    return path if path.is_file() else None


_vp, _i64, _u64, _sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t
SIGNATURES: native.Signatures = {
    "dis_value": ([ctypes.c_char_p, ctypes.POINTER(_i64)], ctypes.c_int),
    "dis_bind": ([_vp, _vp, _vp, _vp], None),
    "dis_open": ([_i64, _i64, ctypes.POINTER(_u64)], ctypes.c_int),
    "dis_close": ([_u64], None),
    "dis_run": ([_u64, ctypes.c_char_p, _sz, _u64, _sz, _vp, _vp, _sz, _vp, _sz,
                 ctypes.POINTER(_sz)], _i64),
}


@functools.cache
def _load() -> ctypes.CDLL | None:
    """The library with capstone's functions handed in (once); None where it cannot decode
    (not built, built without capstone's header, no libcapstone.so in the wheel)."""
    cs = _capstone()
    if cs is None:
        return None
    try:
        lib = native.load("disasm.c (discovery's decoding)", SIGNATURES)
    except Unsupported:
        return None
    probe = ctypes.c_int64()
    if lib.dis_value(b"CS_ARCH_X86", ctypes.byref(probe)) != 0:
        return None  # built without capstone's header
    lib.dis_bind(*(ctypes.cast(getattr(cs, f), _vp) for f in
                   ("cs_open", "cs_disasm", "cs_free", "cs_close")))
    return lib


@functools.cache
def _capstone() -> ctypes.CDLL | None:
    """The capstone wheel's C library, loaded once (kept: disasm.c and sweep.c call it)."""
    path = _capstone_library()
    return None if path is None else ctypes.CDLL(str(path))


@functools.cache
def _sweep() -> tuple[Any, dict[str, int]] | None:
    """sweep.c (`stretch`, `scan`, `count`, `walk`) with the addresses of the capstone
    functions it calls, or None where the extension is not built (Decoder and descent keep
    their Python loops)."""
    cs = _capstone()
    try:
        from emutrace.native import _sweep  # type: ignore[attr-defined]
    except ImportError:
        return None
    # (built without capstone's header: no functions)
    if _load() is None or cs is None or not hasattr(_sweep, "scan"):
        return None
    found = {f: ctypes.cast(getattr(cs, f), ctypes.c_void_p).value
             for f in ("cs_disasm", "cs_free", "cs_disasm_iter", "cs_malloc")}
    addrs = {f: a for f, a in found.items() if a is not None}
    return (_sweep, addrs) if len(addrs) == len(found) else None


class Sweeper:
    """sweep.c's loops on one capstone handle (a NativeDisassembler's), each the C form of a
    Python loop in discover/ that stays its reference (tests/test_disasm.py,
    tests/test_sweep_filter.py)."""

    def __init__(self, module: Any, f: dict[str, int], handle: int) -> None:
        self._module = module
        self._batch = (f["cs_disasm"], f["cs_free"], handle)  # a call decodes a stretch
        self._one = (f["cs_disasm_iter"], f["cs_malloc"], f["cs_free"], handle)  # one by one

    def stretch(self, code: bytes, addr: int, stop: int, count: int, alt: bool,
                cache: dict[tuple[int, bool], Any], insn: type) -> list[Any]:
        """Decoder._decode_stretch's loop for code at addr: the instructions from addr on as
        `insn` tuples, each kept in cache under (addr, alt), ending before one cache holds
        None for, after the one reaching stop, after a Thumb IT (alt); None kept at addr
        where nothing decodes."""
        return self._module.stretch(*self._batch, code, addr, stop, count, alt, cache, insn)  # type: ignore[no-any-return]

    def scan(self, data: bytes, base: int, addr: int, stop: int, count: int, align: int,
             alt: bool, cache: dict[tuple[int, bool], Any], insn: type, rule: Any, lo: int,
             hi: int, sizes: bytearray) -> tuple[list[Any], int, Any]:
        """Decoder.scan's sweep: (the instructions rule keeps in a function [lo, hi), where
        the sweep stopped, the last instruction)."""
        return self._module.scan(*self._batch, data, base, addr, stop, count, align, alt,  # type: ignore[no-any-return]
                                 cache, insn, rule, lo, hi, sizes)

    def count(self, data: bytes, base: int, sizes: bytearray, addr: int, size: int,
              align: int) -> int:
        """How many instructions start in the block [addr, addr + size) of data (the code at
        base; Decoder.insn_starts), reading and filling the size map `sizes`."""
        return self._module.count(*self._one, data, base, sizes, addr, size, align)  # type: ignore[no-any-return]

    def walker(self, range_of: Callable[[int], tuple[int, bytes] | None], alt: bool,
               cache: dict[tuple[int, bool], Any], insn: type, rule: Any,
               sizes: Callable[[int, int, bool], bytearray]) -> Walker:
        """Descent's straight runs by sweep.c `walk`: a function of an address, the
        descent's `seen` (address -> size), its entry, is_entry, todo list and followed set
        that puts in seen the instructions rule leaves out from that address on, up to one
        seen already or the first it keeps, follows the conditional branches walked past
        into the function (as descent.py `branch`), and gives the instruction it stopped at
        (None: seen, or nothing decodes), where it stopped and the (address, target) of the
        conditional branches it left to the descent; None outside code (range_of: the code
        range holding an address).  sizes(base, length, alt): the size map of a range, which
        the walk fills.  The direct calls walked past come back too, in order."""
        walk = functools.partial(self._module.walk, *self._one)
        maps: dict[int, bytearray] = {}  # each range's size map, asked for once

        def walker(addr: int, seen: dict[int, int], entry: int,
                   is_entry: Callable[[int], bool], todo: list[int], followed: set[int]
                   ) -> tuple[Any, int, list[tuple[int, int]], list[Any]] | None:
            found = range_of(addr)
            if found is None:
                return None
            base, data = found
            sized = maps.get(base)
            if sized is None:
                sized = maps[base] = sizes(base, len(data), alt)
            return walk(data, base, addr, alt, cache, insn, rule, sized, seen,  # type: ignore[no-any-return]
                        entry, is_entry, todo, followed)
        return walker


class NativeDisassembler:
    """One capstone handle: `disasm_lite` as the binding's (same tuples, same stops), a
    stretch of up to MAX_INSNS instructions per call; `sweeper`, discovery's loops on it in
    C (None where sweep.c is not built).  Its buffers are its own: one thread
    decodes with it at a time (guest threads share the one emulating thread)."""

    def __init__(self, lib: ctypes.CDLL, handle: int) -> None:
        self._lib = lib
        self._handle = handle
        sweep = _sweep()
        # discovery's loops over this handle in C (sweep.c), where the extension is built
        self.sweeper = None if sweep is None else Sweeper(*sweep, handle)
        self._addrs = (ctypes.c_uint64 * MAX_INSNS)()
        self._sizes = (ctypes.c_uint8 * MAX_INSNS)()
        self._text = ctypes.create_string_buffer(TEXT_BYTES)
        self._used = ctypes.c_size_t()

    def disasm_lite(self, code: bytes, offset: int, count: int = 0) -> Iterable[Lite]:
        n = self._lib.dis_run(self._handle, code, len(code), offset, count, self._addrs,
                              self._sizes, MAX_INSNS, self._text, TEXT_BYTES,
                              ctypes.byref(self._used))
        if n <= 0:
            return ()
        # mnemonic, op_str, ..., "" (after the last NUL)
        texts = ctypes.string_at(self._text, self._used.value).decode("ascii").split("\0")
        return zip(self._addrs[:n], self._sizes[:n], texts[0:-1:2], texts[1::2], strict=True)

    def __del__(self) -> None:
        if self._handle:
            self._lib.dis_close(self._handle)
            self._handle = 0


def disassembler(arch: str, modes: tuple[str, ...]) -> NativeDisassembler | None:
    """A decoder for capstone's arch and mode names (an ISA's Engines), None where the C
    path cannot give one (the caller uses the binding)."""
    lib = _load()
    if lib is None:
        return None
    value = ctypes.c_int64()
    numbers = []
    for name in (arch, *modes):
        if lib.dis_value(name.encode(), ctypes.byref(value)) != 0:
            return None
        numbers.append(value.value)
    mode = 0
    for m in numbers[1:]:
        mode |= m
    handle = ctypes.c_uint64()
    if lib.dis_open(numbers[0], mode, ctypes.byref(handle)) != 0:
        return None
    return NativeDisassembler(lib, handle.value)
