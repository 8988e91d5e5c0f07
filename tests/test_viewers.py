"""The viewers of a recording (`emutrace report`, `graph`, `dump --chrome/--perfetto/
--flame-graph`, `info -d`) against Debian's uftrace 0.13 reading the same directory (the
independent oracle): the same functions, call counts and times (uftrace shows our guest
instructions as ns), the same call graph, the same timeline, the same folded stacks."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from .conftest import ISAS, bin_path, run_emutrace

UFTRACE = "uftrace"  # Debian's 0.13, installed by scripts/setup.sh
SCALE = {"us": 1, "ms": 1000, "s": 10**6, "m": 60 * 10**6, "h": 3600 * 10**6}


def uftrace(*argv: str | Path) -> str:
    return subprocess.run([UFTRACE, *map(str, argv)], capture_output=True, text=True,
                          check=True).stdout


Here = Callable[..., CompletedProcess]  # tests/conftest.py emutrace_here


def emutrace(here: Here, *argv: str | Path) -> str:
    """A viewer's output, the command line run in this process (`emutrace_here`)."""
    proc = here(*argv, cwd=Path.cwd())
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def time_range(text: str) -> range:
    """The instruction counts uftrace's `%7.3f %2s` time column can stand for
    (utils/debug.c __print_time_unit: ns shown in us, ms, s…, digits past 3 cut off;
    blank is 0)."""
    text = text.strip()
    if not text:
        return range(0, 1)
    m = re.fullmatch(r"(\d+)\.(\d{3}) +(us|ms|s|m|h)", text)
    assert m, text
    unit = SCALE[m.group(3)]
    low = (int(m.group(1)) * 1000 + int(m.group(2))) * unit
    return range(low, low + unit)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """ISA -> a recording of `calls recursion` (made once per module)."""
    made: dict[str, Path] = {}

    def get(isa: str) -> Path:
        if isa not in made:
            out = tmp_path_factory.mktemp("rec") / isa
            proc = run_emutrace("record", "-d", out, bin_path(isa, "calls"), "recursion")
            assert proc.returncode == 0, proc.stderr.decode()
            made[isa] = out
        return made[isa]

    return get


@pytest.fixture(params=ISAS)  # every ISA: word sizes, byte orders, Thumb addresses
def data(request: pytest.FixtureRequest, recordings: Callable[[str], Path]) -> Path:
    return recordings(request.param)


def report_rows(text: str, ours: bool) -> list[tuple[str, list[range], int]]:
    """(function, [total, self] as ranges, calls) per row of a report table."""
    rows = []
    for line in text.splitlines()[2:]:
        if ours:
            total, own, calls, name = line.split()
            rows.append((name, [range(int(total), int(total) + 1),
                                range(int(own), int(own) + 1)], int(calls)))
        else:  # "  %10s  %10s  %10s  name" (utils/report.c)
            rows.append((line[38:], [time_range(line[2:12]), time_range(line[14:24])],
                         int(line[26:36])))
    return rows


# the default key; a second key breaking ties, and `func` (names, ascending) breaking more
@pytest.mark.parametrize("keys", ["total", "self,call,func"])
def test_report_equals_uftrace(data: Path, keys: str, emutrace_here: Here) -> None:
    ours = report_rows(emutrace(emutrace_here, "report", "-d", data, "-s", keys), ours=True)
    theirs = report_rows(uftrace("report", "-d", data, "-s", keys), ours=False)
    assert len(ours) > 20
    # the same rows in the same order (uftrace breaks ties by name, as we do)
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    for (name, times, calls), (_n, their_times, their_calls) in zip(ours, theirs, strict=True):
        assert calls == their_calls, name
        for mine, shown in zip(times, their_times, strict=True):
            assert mine.start in shown, (name, mine.start, shown)


def test_report_averages_equal_uftrace(data: Path, emutrace_here: Here) -> None:
    ours = emutrace(emutrace_here, "report", "-d", data, "--avg-self", "-s",
                    "self_max").splitlines()[2:]
    theirs = uftrace("report", "-d", data, "--avg-self", "-s", "self_max").splitlines()[2:]
    assert [line.split()[-1] for line in ours] == [line[38:] for line in theirs]
    for mine, shown in zip(ours, theirs, strict=True):
        values = [int(v) for v in mine.split()[:3]]
        for value, col in zip(values, (2, 14, 26), strict=True):
            assert value in time_range(shown[col:col + 10]), (mine, shown)


def graph_lines(text: str, ours: bool) -> list[tuple[range, str]]:
    """(time, the rest of the line) per line of the call graph; backtrace times too."""
    out = []
    for line in text.splitlines():
        bt = re.match(r"( backtrace #\d+: hit \d+, time )(.*?)( insns)?$", line)
        if bt:
            t = bt.group(2)
            out.append((range(int(t), int(t) + 1) if ours else time_range(t), bt.group(1)))
        elif " : " in line and not line.startswith("#"):
            t, rest = line.split(" : ", 1)
            mine = range(int(t), int(t) + 1) if ours and t.strip() else (
                range(0, 1) if ours else time_range(t))
            out.append((mine, rest))
        elif not line.startswith("#"):
            out.append((range(0, 1), line))
    return out


# the whole program; a recursion; a function reached by 4 call paths (4 backtraces)
@pytest.mark.parametrize("func", [None, "fib", "malloc"])  # malloc: the alias `run` shows
def test_graph_equals_uftrace(data: Path, func: str | None, emutrace_here: Here) -> None:
    extra = [func] if func else []
    ours = graph_lines(emutrace(emutrace_here, "graph", "-d", data, *extra), ours=True)
    theirs = graph_lines(uftrace("graph", "-d", data, *extra), ours=False)
    assert len(ours) == len(theirs) > 5
    if func == "__libc_malloc":
        assert sum(" backtrace #" in text for _t, text in ours) == 4
    for (mine, text), (shown, their_text) in zip(ours, theirs, strict=True):
        assert text == their_text
        assert mine.start in shown, (text, mine, shown)


def chrome_slices(doc: str) -> list[tuple[str, str, int]]:
    events = json.loads(doc)["traceEvents"]
    return [(e["ph"], e["name"], round(e["ts"] * 1000)) for e in events if e["ph"] in "BE"]


def test_chrome_and_perfetto_equal_uftrace_chrome(data: Path, tmp_path: Path,
                                                   emutrace_here: Here) -> None:
    want = chrome_slices(uftrace("dump", "--chrome", "-d", data))
    assert len(want) > 100
    assert chrome_slices(emutrace(emutrace_here, "dump", "--chrome", "-d", data)) == want

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    emutrace(emutrace_here, "dump", "--perfetto", "-d", data, "-o", tmp_path / "t.pb")
    trace = Trace()
    trace.ParseFromString((tmp_path / "t.pb").read_bytes())
    threads = [p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")]
    assert [t.thread.tid for t in threads if t.HasField("thread")] == [1]
    got = []
    open_names: list[str] = []
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        assert p.track_event.track_uuid == threads[-1].uuid
        if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_names.append(p.track_event.name)
            got.append(("B", p.track_event.name, p.timestamp))
        else:
            assert p.track_event.type == TrackEvent.TYPE_SLICE_END
            got.append(("E", open_names.pop(), p.timestamp))  # an end names no slice
    assert got == want


# calls per path; self time in samples (a callee's part below 250 counts for its caller)
@pytest.mark.parametrize("sample", [None, "250"])
def test_flame_graph_equals_uftrace(data: Path, sample: str | None, emutrace_here: Here
                                    ) -> None:
    ours = ["--sample-time", sample] if sample else []
    theirs = ["--sample-time", f"{sample}ns"] if sample else []
    want = uftrace("dump", "--flame-graph", "-d", data, *theirs)
    assert want.count("\n") > 20 and ";fib;fib " in want
    assert emutrace(emutrace_here, "dump", "--flame-graph", "-d", data, *ours) == want


def test_info_equals_uftrace(data: Path, emutrace_here: Here) -> None:
    ours = dict(line.split(":", 1)
                for line in emutrace(emutrace_here, "info", "-d", data).splitlines())
    theirs = {k.strip("# ").strip(): v.strip() for k, _, v in
              (line.partition(" : ") for line in uftrace("info", "-d", data).splitlines())}
    assert ours["command"].strip() == theirs["cmdline"]
    assert ours["program"].strip() == theirs["exe image"]
    status = ours["state"].split("exit status ")[1]
    assert theirs["exit status"] == f"exited with code: {status}"
    assert ours["tasks"].strip().startswith(theirs["number of tasks"] + " ")
    assert ours["ISA"].strip() == data.name
    dump = uftrace("dump", "-d", data)
    entries = re.findall(r"\[entry\] \S+\(([0-9a-f]+)\)", dump)
    calls = ours["calls"].split()
    assert int(calls[0]) == len(entries) > 100
    assert int(calls[2]) == len(set(entries))
    last = re.findall(r"^(\d+)\.(\d{9}) ", dump, re.M)[-1]
    assert f"the last record at {int(''.join(last))};" in ours["time"]


def test_viewer_bad_input(recordings: Callable[[str], Path], tmp_path: Path,
                          emutrace_here: Here) -> None:
    data = recordings("x86_64")
    for argv, code, needle in (
            (["report", "-d", tmp_path / "none"], 66, "no such data directory"),
            (["graph", "-d", tmp_path / "none"], 66, "no such data directory"),
            (["report", "-d", data, "-s", "size"], 64, "sort keys are"),
            (["dump", "--chrome", "-d", data, "-o", tmp_path / "no" / "f.json"], 64,
             "No such file or directory"),
            (["dump", "-d", data, "--sample-time", "5"], 64, "--flame-graph"),
            (["info", "-d", tmp_path], 65, "info: missing")):
        proc = emutrace_here(*argv, cwd=tmp_path)
        err = proc.stderr.decode().strip()
        assert proc.returncode == code and len(err.splitlines()) == 1 and needle in err, err
