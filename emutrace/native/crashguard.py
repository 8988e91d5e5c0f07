"""A crash inside the emulator library stops the run, not emutrace (crashguard.c, built into
the same library as hotpath.c; ARCHITECTURE.md "Emulator crashes").

`install()` puts crashguard.c's `cg_emu_start` in the place of the `uc_emu_start` that
Unicorn's Python binding calls (its `uclib`), through `guarded_emu_start`, which raises
`EmulatorCrash` when the emulation crashed: the session turns it into a stop of kind
"crash" (its trace written, exit EXIT_EMULATOR_CRASH); where nothing catches it, it is an
EmutraceError like any other (one line, that exit status)."""

from __future__ import annotations

import ctypes
import signal
from typing import Any

from emutrace import native
from emutrace.errors import EXIT_EMULATOR_CRASH, EmutraceError, Unsupported

CG_CRASHED = 0x43524153  # abi.h: the emulation crashed

_vp, _u64 = ctypes.c_void_p, ctypes.c_uint64
SIGNATURES: native.Signatures = {
    "cg_install": ([_vp, _vp], ctypes.c_int),
    "cg_emu_start": ([_vp, _u64, _u64, _u64, ctypes.c_size_t], ctypes.c_int),
    "cg_crash_signal": ([], ctypes.c_int),
    "cg_crash_address": ([], _u64),
}


class EmulatorCrash(EmutraceError):
    """The emulator library took a fatal host signal (`signal`, at host address
    `address`) while it ran the guest."""

    def __init__(self, signal_name: str, address: int) -> None:
        super().__init__(f"the emulator (Unicorn) crashed with {signal_name} (host address "
                         f"{address:#x}), a fault of emutrace's, not of the program: {ADVICE}",
                         EXIT_EMULATOR_CRASH)
        self.signal = signal_name
        self.address = address


# what a user can try (a crash comes from the instructions the guest runs, which a budget
# or another tracing engine changes; a bug in emutrace's own C shows up on one engine only)
ADVICE = ("the trace up to it is kept; another --backend or --engine runs other code and "
          "may avoid it, --max-insns N stops the run before it")

_lib: Any = None  # the library, once installed


def install() -> bool:
    """Guard every emulation from now on (idempotent); False where the native library is
    not built (then a crash ends emutrace as before)."""
    global _lib
    if _lib is not None:
        return True
    try:
        lib = native.load("crashguard.c (emulator crashes)", SIGNATURES)
    except Unsupported:  # not built, or built before crashguard.c
        return False
    from unicorn.unicorn_py3 import unicorn as binding

    uclib: Any = binding.uclib  # (a CDLL whose functions are attributes)
    real = ctypes.cast(uclib.uc_emu_start, ctypes.c_void_p).value
    check = ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p).value
    if lib.cg_install(real, check) != 0:
        return False
    _lib = lib
    start = lib.cg_emu_start

    def guarded_emu_start(uc: Any, begin: int, until: int, timeout: int, count: int) -> int:
        status = start(uc, begin, until, timeout, count)
        if status == CG_CRASHED:
            raise crash()
        return int(status)

    uclib.uc_emu_start = guarded_emu_start  # what the binding's emu_start calls
    return True


def crash() -> EmulatorCrash:
    """The crash that happened (after `guarded_emu_start` raised)."""
    sig = int(_lib.cg_crash_signal())
    return EmulatorCrash(signal.Signals(sig).name, int(_lib.cg_crash_address()))


def test_crash_hook() -> int:
    """The address of crashguard.c's `cg_test_crash_hook`, a Unicorn code hook that crashes
    in C (tests/test_emulator_crash.py)."""
    lib = native.load()
    return int(ctypes.cast(lib.cg_test_crash_hook, ctypes.c_void_p).value or 0)
