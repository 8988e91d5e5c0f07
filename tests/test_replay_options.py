"""`emutrace replay -t N / --tid / --no-args / --no-retval` against Debian's uftrace 0.13
replaying the same directory with the same options (the independent oracle): the same
lines, at the same depths, with the same durations (uftrace shows our instructions as ns)
and the same names for the program's own functions; on a little- and a big-endian guest."""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace.cli.replay import time_threshold
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.format import ReplayOptions, replay_text
from emutrace.trace.time_filter import time_tagged
from emutrace.trace.uftrace_read import load_recording

from .conftest import bin_path, run_emutrace
from .test_viewers import time_range

OWN = {"main", "run_scenario", "scenario_recursion", "fib", "fact"}  # calls.c
LINE = re.compile(r"^(?P<dur>[^|\[]*?)\s*(?:\[\s*\d+\]\s*)?\| (?P<indent> *)(?P<text>.*)$")


def shape(text: str, ours: bool) -> list[tuple[range, int, str, str]]:
    """(duration, depth, name of an own function or "", kind: { } ;) per line; the
    argument text too when it names nothing that differs between the tools."""
    rows = []
    for line in text.splitlines()[1:]:
        m = LINE.match(line)
        assert m, line
        dur = m.group("dur").strip()
        duration = range(int(dur), int(dur) + 1) if ours and dur else time_range(dur)
        body = m.group("text")
        kind = "{" if body.endswith("{") else "}" if body.startswith("}") else ";"
        name = (re.search(r"/\* (\S+)", body) if kind == "}" else re.match(r"[^(]+", body))
        named = name.group(1 if kind == "}" else 0) if name else ""
        rows.append((duration, len(m.group("indent")) // 2, named if named in OWN else "",
                     kind))
    return rows


def same(ours: str, theirs: str) -> None:
    a, b = shape(ours, True), shape(theirs, False)
    assert len(a) == len(b) > 3, (ours, theirs)
    for x, y in zip(a, b, strict=True):
        assert x[0].start in y[0] and x[1:] == y[1:], (x, y)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for isa in ("x86_64", "s390x"):  # a little- and a big-endian guest
        out = tmp_path_factory.mktemp("rec") / isa
        proc = run_emutrace("record", "-d", out, bin_path(isa, "calls"), "recursion")
        assert proc.returncode == 0, proc.stderr.decode()
        made[isa] = out
    return made


def replays(data: Path, *opts: str) -> tuple[str, str]:
    ours = run_emutrace("replay", "-d", data, "-F", "main", *opts)
    assert ours.returncode == 0, ours.stderr.decode()
    theirs = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-F", "main",
                             *opts], capture_output=True, text=True, check=True).stdout
    return ours.stdout.decode(), theirs


@pytest.mark.parametrize(("isa", "threshold"), [("x86_64", "256"), ("s390x", "1.5us")])
def test_time_filter_equals_uftrace(recordings: dict[str, Path], isa: str,
                                    threshold: str) -> None:
    ours, theirs = replays(recordings[isa], "-t", threshold)
    same(ours, theirs)
    # the filter hid something and kept something, so the comparison says something
    full = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(recordings[isa]),
                           "-F", "main"], capture_output=True, text=True, check=True).stdout
    assert 3 < len(ours.splitlines()) < len(full.splitlines()) // 2


def test_no_args_and_tid_equal_uftrace(recordings: dict[str, Path]) -> None:
    ours, theirs = replays(recordings["s390x"], "--no-args", "--tid", "1", "-t", "100")
    same(ours, theirs)
    assert "()" in ours and not re.search(r"\(\w|= ", ours)
    assert not re.search(r"\(\w|= ", theirs)
    ours, theirs = replays(recordings["s390x"], "--tid", "2")  # a task it does not have
    assert ours.strip() == theirs.strip() == ""


def test_no_retval_keeps_arguments(recordings: dict[str, Path]) -> None:
    data = recordings["x86_64"]
    records, symbolize, _isa = load_recording(str(data))
    full = replay_text(records, symbolize, ReplayOptions(time_filter=1000))
    ours = run_emutrace("replay", "-d", data, "-t", "1000", "--no-retval").stdout.decode()
    assert "fib(12) {" in ours and "fib(9);" in ours and not re.search(r"[;}] = ", ours)
    # the same lines with their return values left out
    leaves = re.sub(r'(?m)\) = ([^;"]*|"[^"]*");$', ");", full)
    assert ours == re.sub(r"(?m)\| ( *)\} = [^;]*; /\*", r"| \1} /*", leaves)
    assert ours != full


def test_time_threshold_units() -> None:
    assert time_threshold("256") == 256
    assert time_threshold("1.5us") == 1500  # uftrace's spelling: our instruction is its ns
    assert time_threshold("2ms") == 2 * 10**6
    for bad in ("fast", "-3", "1.5xs", "us", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            time_threshold(bad)


def test_time_filter_streams() -> None:
    """An endless recording: the filter still yields as it reads (it holds only the records
    of frames open for fewer than N instructions)."""
    def endless() -> Iterator[Record]:
        yield Entry(0, 0, 0x10)
        t = 1
        while True:  # short leaves (hidden) and long ones (shown) under one open frame
            for length in (3, 50):
                yield Entry(t, 1, 0x20)
                yield Exit(t + length, 1, 0x20, None, length)
                t += length + 1

    out = list(itertools.islice(time_tagged(endless(), 10), 7))
    assert [(type(r).__name__, r.time, keep) for r, keep in out] == [
        ("Entry", 0, True), ("Entry", 1, False), ("Exit", 4, False), ("Entry", 5, True),
        ("Exit", 55, True), ("Entry", 56, False), ("Exit", 59, False)]
