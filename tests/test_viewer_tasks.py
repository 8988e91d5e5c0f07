"""The viewers of a recording with several tasks (`emutrace record` of testbins `threads`:
main and three workers, one task each) against Debian's uftrace 0.13 reading the same
directory (the independent oracle): `replay`, `report`, `graph`, `dump` (raw, `--chrome`,
`--flame-graph`) and `info -d` read every task, and `--tid` chooses tasks as uftrace's.

The normalisation, written once (`replay_shape`, `report_rows`, `graph_lines`, `time_range`):

* times: ours are guest instructions, uftrace's the same numbers read as ns and printed
  `%7.3f us`; ours must lie in the range uftrace's text stands for (digits past three cut);
* names in `replay`: ours names only a symbol's exact start (an address inside a symbol,
  such as a PLT slot in `_init`, stays hex), uftrace's the symbol containing the address —
  a hex name of ours stands for any name (a rule of `replay` and `diff`, docs
  recording-and-viewers.md "Names");
* arguments and return values in `replay`: ours are shown by their C kinds (`'>'`, a
  pointer in hex), uftrace's by its spec (`62`, `&main`); compared elsewhere
  (test_uftrace_args.py), not here;
* headers: ours say `[insns]` where uftrace says TIME, and the graph's title leaves out
  uftrace's `(session: ...)`.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import bin_path, run_emutrace
from .test_viewers import graph_lines, report_rows, time_range

ISAS = ("x86_64", "s390x")  # a little- and a big-endian guest
LINE = re.compile(r"^(?P<dur>[^|\[]*?)\s*(?:\[\s*(?P<tid>\d+)\]\s*)?\| (?P<indent> *)"
                  r"(?P<text>.*)$")


def uftrace(*argv: str | Path) -> str:
    return subprocess.run(["uftrace", *map(str, argv)], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def emutrace(*argv: str | Path) -> str:
    proc = run_emutrace(*argv)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(isa: str) -> Path:
        if isa not in made:
            out = tmp_path_factory.mktemp("rec") / isa
            proc = run_emutrace("record", "-d", out, bin_path(isa, "threads"))
            assert proc.returncode == 0, proc.stderr.decode()[-500:]
            assert sorted(p.name for p in out.glob("*.dat")) == [
                "1.dat", "2.dat", "3.dat", "4.dat"]
            made[isa] = out
        return made[isa]

    return get


@pytest.fixture(params=ISAS)
def data(request: pytest.FixtureRequest, recordings: Callable[[str], Path]) -> Path:
    return recordings(request.param)


def replay_shape(text: str, ours: bool) -> list[tuple[str, int, str, str, range]]:
    """(task, depth, kind `{` `}` `;`, name, duration) per line after the header."""
    rows = []
    for line in text.splitlines()[1:]:
        m = LINE.match(line)
        assert m and m.group("tid"), line
        body = m.group("text")
        kind = "{" if body.endswith("{") else "}" if body.startswith("}") else ";"
        found = (re.search(r"/\* (\S+)", body) if kind == "}" else re.match(r"[^(]+", body))
        assert found, line
        dur = m.group("dur").strip()
        duration = range(int(dur), int(dur) + 1) if ours and dur else time_range(dur)
        rows.append((m.group("tid"), len(m.group("indent")) // 2, kind,
                     found.group(1 if kind == "}" else 0), duration))
    return rows


def same_replay(ours: str, theirs: str) -> int:
    a, b = replay_shape(ours, True), replay_shape(theirs, False)
    assert len(a) == len(b), (len(a), len(b))
    for x, y in zip(a, b, strict=True):
        assert x[:3] == y[:3], (x, y)
        assert x[3] == y[3] or x[3].startswith("0x"), (x, y)
        assert x[4].start in y[4], (x, y)
    return len(a)


@pytest.mark.parametrize("opts", [
    ("-F", "main", "-F", "start_thread"),  # every task, interleaved in time order
    ("-F", "main", "-F", "start_thread", "-N", "pthread_create", "-D", "3"),
    ("--tid", "2,4", "-t", "100"),  # two of the tasks, with the time filter
    ("--tid", "3", "-F", "worker"),
])
def test_replay_every_task_equals_uftrace(data: Path, opts: tuple[str, ...]) -> None:
    """The same lines in the same order: each task's calls at their depths, tasks
    interleaved as their records' times say, a call that another task's record
    interrupts shown opened (`name(...) {`) rather than as one line, the TID column."""
    ours = emutrace("replay", "-d", data, *opts)
    theirs = uftrace("replay", "--no-pager", "-d", data, *opts)
    assert same_replay(ours, theirs) > 20
    tasks = {row[0] for row in replay_shape(ours, True)}
    chosen = opts[opts.index("--tid") + 1] if "--tid" in opts else "1,2,3,4"
    want = set(chosen.split(","))
    assert tasks == want
    # the interleaving shows: some line of one task comes between two lines of another
    if len(want) > 1:
        order = [row[0] for row in replay_shape(ours, True)]
        assert sum(a != b for a, b in zip(order, order[1:], strict=False)) >= len(want)


def test_replay_of_a_task_it_does_not_have_is_empty(data: Path) -> None:
    assert emutrace("replay", "-d", data, "--tid", "9") == ""
    assert uftrace("replay", "--no-pager", "-d", data, "--tid", "9").strip() == ""


@pytest.mark.parametrize("opts", [(), ("--tid", "3"), ("--tid", "1,2")])
def test_report_every_task_equals_uftrace(data: Path, opts: tuple[str, ...]) -> None:
    ours = report_rows(emutrace("report", "-d", data, *opts), ours=True)
    theirs = report_rows(uftrace("report", "-d", data, *opts), ours=False)
    assert len(ours) == len(theirs) > 10
    for (name, times, count), (their_name, their_times, their_count) in zip(
            ours, theirs, strict=True):
        assert (name, count) == (their_name, their_count)
        assert all(t.start in u for t, u in zip(times, their_times, strict=True)), name
    # a worker runs in each of tasks 2, 3, 4: its calls are those of the tasks chosen
    chosen = opts[1].split(",") if opts else ["1", "2", "3", "4"]
    calls = dict((name, c) for name, _t, c in ours)
    assert calls.get("worker") == len({"2", "3", "4"}.intersection(chosen))


@pytest.mark.parametrize("args", [(), ("worker",), ("add",), ("--tid", "2,3")])
def test_graph_every_task_equals_uftrace(data: Path, args: tuple[str, ...]) -> None:
    ours = graph_lines(emutrace("graph", "-d", data, *args), ours=True)
    theirs = graph_lines(uftrace("graph", "-d", data, *args), ours=False)
    assert len(ours) == len(theirs) > 5
    for (mine, text), (shown, their_text) in zip(ours, theirs, strict=True):
        assert text == their_text
        assert mine.start in shown, (text, mine, shown)
    if not args:  # the program's root holds every task's outermost calls
        assert any(text.endswith("(3) start_thread") for _t, text in ours)


_RAW = re.compile(r"^\s*(?P<time>[\d.]+)\s+(?P<tid>\d+): \[(?P<kind>entry|exit ) *\] "
                  r"(?P<rest>.*)$")


def raw_records(text: str, ours: bool) -> list[tuple[str, ...]]:
    """(`reading N.dat`) or (time in ns, task, kind, `name(addr) depth: d`) per line;
    uftrace's header lines and the argument lines under a record are left out, and so is
    its `reading N.dat` of a task `--tid` did not choose (uftrace opens every task file
    and names it; ours names the tasks it shows: a rule of ours, docs
    recording-and-viewers.md `dump`)."""
    out: list[tuple[str, ...]] = []
    for line in text.splitlines():
        if line.startswith("reading "):
            if out and len(out[-1]) == 1:
                out.pop()  # the task before showed no record
            out.append((line,))
        elif m := _RAW.match(line):
            time = m.group("time") if ours else str(int(m.group("time").replace(".", "")))
            out.append((time, m.group("tid"), m.group("kind"), m.group("rest")))
    if out and len(out[-1]) == 1:
        out.pop()
    return out


def chrome_events(doc: str) -> list[tuple[str, int, str, int]]:
    """(phase, thread, name, time in ns) of every B/E event; uftrace leaves out `tid` for
    the main task (its tid is the pid)."""
    events = json.loads(doc)["traceEvents"]
    return [(e["ph"], e.get("tid", e["pid"]), e["name"], round(e["ts"] * 1000))
            for e in events if e["ph"] in "BE"]


def test_dump_chrome_and_flame_graph_equal_uftrace(data: Path) -> None:
    want = chrome_events(uftrace("dump", "--chrome", "-d", data))
    assert {e[1] for e in want} == {1, 2, 3, 4}
    assert chrome_events(emutrace("dump", "--chrome", "-d", data)) == want
    flame = uftrace("dump", "--flame-graph", "-d", data)
    assert "start_thread;worker" in flame
    assert emutrace("dump", "--flame-graph", "-d", data) == flame


def test_info_counts_every_task(data: Path) -> None:
    ours = dict(line.split(":", 1) for line in emutrace("info", "-d", data).splitlines())
    theirs = uftrace("info", "-d", data)
    assert "number of tasks     : 4" in theirs
    assert ours["tasks"].split()[0] == "4"
    entries = uftrace("dump", "-d", data).count("[entry]")
    assert ours["calls"].split()[0] == str(entries)


def test_perfetto_has_one_thread_per_task(data: Path, tmp_path: Path) -> None:
    """Perfetto's protobuf (uftrace writes none): a thread track per task, each slice on
    its task's track, the same slices as uftrace's Chrome JSON."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    emutrace("dump", "--perfetto", "-d", data, "-o", tmp_path / "t.pb")
    trace = Trace()
    trace.ParseFromString((tmp_path / "t.pb").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.thread.tid for p in trace.packet
              if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    assert sorted(tracks.values()) == [1, 2, 3, 4]
    got = []
    open_names: dict[int, list[str]] = {}
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        tid = tracks[p.track_event.track_uuid]
        names = open_names.setdefault(tid, [])
        if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
            names.append(p.track_event.name)
            got.append(("B", tid, p.track_event.name, p.timestamp))
        else:
            got.append(("E", tid, names.pop(), p.timestamp))
    assert got == chrome_events(uftrace("dump", "--chrome", "-d", data))


def test_bad_task_lists_are_one_line(recordings: Callable[[str], Path], tmp_path: Path) -> None:
    """A recording is untrusted input: a task id that is not a number, a listed task
    without its file, more tasks than the viewers read side by side — one line, exit 65
    (the raw dump and `info -d` read tasks one at a time, any number)."""
    import shutil

    def with_tids(name: str, tids: str) -> Path:
        out = tmp_path / name
        shutil.copytree(recordings("x86_64"), out)
        info = (out / "info").read_bytes()
        (out / "info").write_bytes(info.replace(b"taskinfo:tids=1,2,3,4",
                                                f"taskinfo:tids={tids}".encode()))
        return out

    for data, message in [(with_tids("x", "1,x"), "task id 'x' is not a positive number"),
                          (with_tids("gone", "1,2,7"), "7.dat: missing")]:
        proc = run_emutrace("report", "-d", data)
        assert proc.returncode == 65 and message in proc.stderr.decode(), proc.stderr
        assert proc.stderr.decode().count("\n") == 1
    many = with_tids("many", ",".join(map(str, range(1, 301))))
    for n in range(5, 301):
        (many / f"{n}.dat").write_bytes(b"")
    proc = run_emutrace("graph", "-d", many)
    assert proc.returncode == 65 and "--tid" in proc.stderr.decode()
    assert "start_thread" in emutrace("graph", "-d", many, "--tid", "1,2")
    assert emutrace("dump", "-d", many).count("reading ") == 300
    assert emutrace("info", "-d", many).splitlines()[5].split()[1] == "300"


def test_a_program_that_forks_and_waits_in_threads(tmp_path: Path) -> None:
    """`threadwait` (threads that block in wait4, two forked children): `record` writes one
    task per thread of the first process and one per forked child (uftrace's recording of
    a forking program); replay, report and graph of the first process's six tasks equal
    uftrace's (a child's, which starts inside its parent's frames, is compared in
    tests/test_uftrace_conformance.py)."""
    data = tmp_path / "d"
    proc = run_emutrace("record", "-d", data, bin_path("x86_64", "threadwait"))
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    assert len(list(data.glob("*.dat"))) == 8
    first = ("--tid", "1,2,3,4,5,6")
    opts = ("-F", "main", "-F", "start_thread", *first)
    assert same_replay(emutrace("replay", "-d", data, *opts),
                       uftrace("replay", "--no-pager", "-d", data, *opts)) > 100
    ours = report_rows(emutrace("report", "-d", data, *first), ours=True)
    theirs = report_rows(uftrace("report", "-d", data, *first), ours=False)
    assert [(n, c) for n, _t, c in ours] == [(n, c) for n, _t, c in theirs]
    assert [text for _t, text in graph_lines(emutrace("graph", "-d", data, *first),
                                             ours=True)] == \
        [text for _t, text in graph_lines(uftrace("graph", "-d", data, *first), ours=False)]
