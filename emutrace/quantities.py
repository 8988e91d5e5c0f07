"""Checked quantities read from text: durations, counts and byte sizes.  Every numeric
option and backend setting goes through one of these, so a bad value (`nan`, `inf`, `1e300`,
a negative count) is refused with argparse.ArgumentTypeError — a usage error (exit 64)
before anything runs, never a traceback from the watcher thread or a silent no-limit run."""

from __future__ import annotations

import argparse
import math

# a year: far above any useful budget, far below threading.TIMEOUT_MAX and time_t limits
MAX_SECONDS = 365 * 24 * 3600.0
MAX_COUNT = 1 << 62  # fits Unicorn's uint64 count and every int64 on the way


def seconds(text: str) -> float:
    """A duration in seconds: finite, 0 (no limit) .. MAX_SECONDS."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0.0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a finite number of seconds from 0 to {MAX_SECONDS:.0f}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0.0 or value > 1e12:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite positive number")
    return value


def _integer(text: str, low: int) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not low <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer from {low} to 2^62")
    return value


def count(text: str) -> int:
    """A non-negative integer (0 often means no limit)."""
    return _integer(text, 0)


def positive_count(text: str) -> int:
    return _integer(text, 1)


UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size(text: str) -> int:
    """A byte count with an optional K/M/G/T suffix (powers of 1024), at least 1 MiB."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = UNITS.get(t[-1:], None) if t and t[-1:].isalpha() else 1
    digits = t[:-1] if t and t[-1:].isalpha() else t
    if unit is None or not digits.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 512M or 4G")
    value = int(digits) * unit
    if not 1 << 20 <= value <= 1 << 47:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size from 1M to 128T")
    return value
