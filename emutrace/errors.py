"""One error type for everything the user did wrong or the guest did, with its exit code.

Exit codes (documented in the README): a guest's own exit status passes through unchanged;
a guest killed by a signal exits 128 + signal, as a shell reports a killed process; emutrace's
own refusals use the sysexits.h numbers and the coreutils `timeout` convention.
"""

from __future__ import annotations

EXIT_USAGE = 64  # EX_USAGE: bad command line, --arch disagreeing with the ELF header
EXIT_BAD_ELF = 65  # EX_DATAERR: not an ELF file, truncated or garbled ELF
EXIT_NO_INPUT = 66  # EX_NOINPUT: the program file is missing or unreadable
EXIT_UNSUPPORTED = 69  # EX_UNAVAILABLE: machine or feature not supported (dynamic binary)
EXIT_INTERNAL = 70  # EX_SOFTWARE: the emulator failed in a way we did not expect
EXIT_EMULATOR_CRASH = 71  # the emulator library (Unicorn) crashed: a host fault inside it
EXIT_IOERR = 74  # EX_IOERR: writing the trace failed (disk full, I/O error)
EXIT_TIMEOUT = 124  # --timeout elapsed (as timeout(1))
EXIT_MAX_INSNS = 125  # --max-insns budget exhausted


class EmutraceError(Exception):
    """A condition reported to the user as one line on stderr, then exit(code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(EmutraceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class OutputError(EmutraceError):
    """Writing emutrace's own output (the trace file, the data directory) failed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_IOERR)


class BadElf(EmutraceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_BAD_ELF)


class Unsupported(EmutraceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_UNSUPPORTED)
