"""The uftrace conformance harness: the scenarios of testbins/src/conform.c traced by
Debian's uftrace and by emutrace, compared.

* The oracle: a native `-pg` build of conform.c on this host, recorded by `uftrace record
  -a` (arguments and results from its DWARF) and shown by `uftrace replay -f tid
  --no-libcall`.
* Ours: the committed static cross build of every ISA (no instrumentation), recorded by
  `emutrace record` and shown by `emutrace replay --no-libcall`.

Both call graphs are reduced to the same form: per task (in the order tasks first appear),
the sequence of entries and exits of the program's own functions (main and c_*: uftrace
sees only those in a -pg build; ours also shows static libc's, left out), each entry with
its arguments and each exit with its result.  Values are compared as values: a float by
its six decimals (uftrace prints %f), an address (a pointer above 64 KiB: main's argv)
as "an address".

Where the two differ on purpose, or where uftrace 0.13's answer is wrong, a rule in RULES
names the difference and says what checks ours instead; a scenario whose difference is
emutrace's fault is a strict xfail naming it."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import ISAS, bin_path, run_emutrace

SOURCES = Path(__file__).resolve().parent.parent / "testbins" / "src"
SOURCE = SOURCES / "conform.c"
OWN = re.compile(r"^(main|c_\w+|geo::.*)$")  # conform.c's functions, and cxx.cpp's

# What the scenarios print (their own output: the oracle of a value uftrace gets wrong)
SCENARIOS = ("calls", "args", "signal", "thread", "fork", "longjmp", "context")

LINE = re.compile(r"^[^|]*?(?:\[\s*(?P<tid>\d+)\]\s*)?\| (?P<text>.*)$")
ENTRY = re.compile(r"^(?P<name>[^\s(]+)\((?P<args>.*)\)(?: (?P<open>\{)| = (?P<ret>.*);|;)"
                   r"(?: /\*.*\*/)?$")
EXIT = re.compile(r"^\}(?: = (?P<ret>.*?);)? /\* (?P<name>[^ ]+)(?: \(.*\))? \*/$")

Event = tuple[str, str, tuple[object, ...]]  # ("enter"/"exit", function, values)


# ---------------------------------------------------------------- reading both replays


def split_values(text: str) -> list[str]:
    """`1, "a, b", 'c'` → its values (commas inside quotes kept)."""
    out, cur, quote = [], "", ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote and not cur.endswith("\\" + quote):
                quote = ""
        elif ch in "\"'":
            quote, cur = ch, cur + ch
        elif ch == ",":
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def canon(value: str) -> object:
    """A shown value as a comparable one."""
    if value[:1] in "\"'":
        return value
    if value.startswith("&"):  # uftrace: a pointer to a data symbol (`&geo::tally`)
        return "an address"
    if re.fullmatch(r"-?0x[0-9a-f]+", value):
        n = int(value, 16)
        return "an address" if n >= 0x10000 else n
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    try:
        return f"{float(value):.6f}"
    except ValueError:
        return value


def graph(replay_text: str) -> list[list[Event]]:
    """Per task, the own functions' entries and exits, in the replay's order."""
    tasks: dict[str, list[Event]] = {}
    for line in replay_text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = LINE.match(line)
        if m is None:  # uftrace's end-of-replay notes
            continue
        tid = m["tid"] or "main"
        text = m["text"].strip()
        events = tasks.setdefault(tid, [])
        entry, leave = ENTRY.match(text), EXIT.match(text)
        if entry is not None and OWN.match(entry["name"]):
            name = entry["name"]
            events.append(("enter", name, tuple(canon(v) for v in split_values(entry["args"]))))
            if not entry["open"]:
                ret = entry["ret"]
                events.append(("exit", name, () if ret is None else (canon(ret),)))
        elif leave is not None and OWN.match(leave["name"]):
            ret = leave["ret"]
            events.append(("exit", leave["name"], () if ret is None else (canon(ret),)))
    return [events for events in tasks.values() if events]


@functools.cache
def pg_build() -> Path:
    """conform.c built natively for uftrace (-pg, the testbins' flags otherwise)."""
    out = Path(tempfile.mkdtemp(prefix="conform-pg-")) / "conform"
    subprocess.run(["gcc", "-pg", "-g", "-O1", "-fno-inline", "-fno-optimize-sibling-calls",
                    "-pthread", "-o", str(out), str(SOURCE)], check=True, timeout=120)
    return out


@functools.cache
def uftrace_data(scenario: str) -> tuple[Path, str]:
    """(uftrace's recording of the scenario, the program's stdout)."""
    data = pg_build().parent / f"uftrace.{scenario}"
    done = subprocess.run(["uftrace", "record", "-a", "-d", str(data), str(pg_build()),
                           scenario], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return data, done.stdout


def uftrace_run(scenario: str, *options: str) -> tuple[list[list[Event]], str]:
    """(graph of `uftrace replay OPTIONS`, the program's stdout) of the scenario."""
    data, output = uftrace_data(scenario)
    shown = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-f", "tid",
                            "--no-libcall", *options], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    return graph(shown.stdout), output


_ours: dict[tuple[str, str], tuple[Path, str]] = {}  # (isa, scenario) → recording, stdout


def emutrace_run(isa: str, scenario: str, tmp: Path, *options: str
                 ) -> tuple[list[list[Event]], str]:
    """(graph of `emutrace replay OPTIONS`, the program's stdout) of our recording of the
    scenario on isa (recorded once per module run)."""
    if (isa, scenario) not in _ours:
        data = tmp / f"{isa}.{scenario}"
        done = run_emutrace("record", "-d", data, bin_path(isa, "conform"), scenario)
        assert done.returncode == 0, done.stderr.decode()
        _ours[isa, scenario] = data, done.stdout.decode()
    data, output = _ours[isa, scenario]
    shown = run_emutrace("replay", "-d", data, "--no-libcall", *options)
    assert shown.returncode == 0, shown.stderr.decode()
    return graph(shown.stdout.decode()), output


# ---------------------------------------------------------------- the rules


def without_result(function: str) -> Callable[[list[list[Event]]], list[list[Event]]]:
    """The graph with `function`'s results left out (compared elsewhere)."""
    def drop(tasks: list[list[Event]]) -> list[list[Event]]:
        return [[(kind, name, () if kind == "exit" and name == function else values)
                 for kind, name, values in events] for events in tasks]
    return drop



# scenario → (what differs and why, the transformation applied to both graphs before they
# are compared, what checks ours instead)
RULES: dict[str, tuple[str, Callable[[list[list[Event]]], list[list[Event]]]]] = {
    "args": ("uftrace 0.13 shows c_scale's double result as 1.5, its first argument (the "
             "program prints 6): the result is left out of the comparison and ours is "
             "checked against the program's output (test_double_result_is_the_programs)",
             without_result("c_scale")),
}

# scenarios uftrace 0.13 cannot be the oracle of, with the reason and where ours is checked
NOT_AN_ORACLE = {
    "longjmp": "uftrace 0.13 closes c_jump_down(0) as c_setjmp_case and loses the frames the "
               "longjmp leaves (its replay ends with 'stopped tracing with remaining "
               "functions'); ours is checked against signals.instr's own record of its "
               "siglongjmp in tests/test_signal_traces.py",
    "context": "uftrace 0.13 stops tracing at the first swapcontext (its replay ends inside "
               "c_context_case)",
}

# scenarios where ours differs from uftrace's by emutrace's fault (strict xfails)
OURS_WRONG: dict[str, str] = {}


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="conform-"))
    yield path
    _ours.clear()
    shutil.rmtree(path, ignore_errors=True)


def test_the_oracle_runs_every_scenario() -> None:
    """uftrace records each comparable scenario with the program's own functions in it."""
    for scenario in SCENARIOS:
        if scenario in NOT_AN_ORACLE:
            continue
        tasks, _ = uftrace_run(scenario)
        assert tasks and tasks[0][0] == ("enter", "main", (2, "an address")), scenario


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in NOT_AN_ORACLE])
@pytest.mark.parametrize("isa", ISAS)
def test_call_graph_is_uftraces(isa: str, scenario: str, scratch: Path,
                                request: pytest.FixtureRequest) -> None:
    if scenario in OURS_WRONG:
        request.applymarker(pytest.mark.xfail(reason=OURS_WRONG[scenario], strict=True))
    theirs, their_output = uftrace_run(scenario)
    ours, our_output = emutrace_run(isa, scenario, scratch)
    assert our_output == their_output  # the same program, the same answer
    rule = RULES.get(scenario, ("", lambda tasks: tasks))[1]
    assert rule(ours) == rule(theirs)


@pytest.mark.parametrize("isa", ISAS)
def test_double_result_is_the_programs(isa: str, scratch: Path) -> None:
    """The value RULES["args"] leaves out: ours equals what the program prints."""
    ours, output = emutrace_run(isa, "args", scratch)
    printed = output.split()[2]  # "%lld %c %g ..."
    results = [values for kind, name, values in ours[0] if kind == "exit" and name == "c_scale"]
    assert results == [(f"{float(printed):.6f}",)]


# ---------------------------------------------------------------- processes
# `record` follows a forked child into the same directory as uftrace does: a task of its own
# (`<pid>.dat`, a FORK line in task.txt), whose file starts inside its parent's frames.


def their_fork_lines(data: Path) -> list[str]:
    """task.txt's lines, each reduced to its kind and the fields that do not vary."""
    return [re.sub(r" (?:timestamp|pid|ppid|tid|sid)=\S+| exename=.*", "", line)
            for line in (data / "task.txt").read_text().splitlines()]


# two ISAs: a little-endian 64-bit and a big-endian one (the child's records, written by a
# second host process, are read by uftrace as the parent's); every ISA's graph is compared
# in test_call_graph_is_uftraces
@pytest.mark.parametrize("isa", ["x86_64", "s390x"])
def test_forked_child_in_our_recording_as_uftrace_reads_it(isa: str, scratch: Path) -> None:
    """uftrace's replay of our recording shows the forked child's task as uftrace's replay
    of its own recording does; task.txt says the child was forked (uftrace's FORK line)."""
    emutrace_run(isa, "fork", scratch)
    ours = _ours[isa, "fork"][0]
    shown = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(ours), "-f", "tid",
                            "--no-libcall"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    theirs = uftrace_run("fork")[0]
    assert len(theirs) == 2 and theirs[1][0] == ("enter", "c_child_work", (3,))
    assert graph(shown.stdout) == theirs
    assert their_fork_lines(ours) == ["SESS", "TASK", "FORK"]
    assert their_fork_lines(uftrace_data("fork")[0]) == ["SESS", "TASK", "FORK"]


@pytest.mark.parametrize("isa", ["x86_64", "arm"])
def test_forked_child_recorded_alike_by_both_engines(isa: str, scratch: Path) -> None:
    """The reference engine and the native one record the same child: `emutrace dump` of
    both recordings is the same but for the child's pid (which fork returns in the parent);
    report and graph show the child's calls."""
    dumps = []
    for engine in ("python", "native"):
        data = scratch / f"{isa}.fork.{engine}"
        done = run_emutrace("record", "--engine", engine, "-d", data, bin_path(isa, "conform"),
                            "fork")
        assert done.returncode == 0, done.stderr.decode()
        child = [p.stem for p in data.glob("*.dat") if p.stem != "1"]
        assert len(child) == 1
        dump = run_emutrace("dump", "-d", data).stdout.decode()
        dumps.append(re.sub(rf"\b{child[0]}\b", "CHILD", dump))
        report = run_emutrace("report", "-d", data).stdout.decode()
        assert re.search(r"\b1 +c_child_work$", report, re.M), report
        assert "c_child_work" in run_emutrace("graph", "-d", data).stdout.decode()
    assert "reading CHILD.dat" in dumps[0]
    assert dumps[0] == dumps[1]


# uftrace's replay filters and triggers over both recordings of one scenario (its names
# and options: docs/run.md "Tracing"); `--max-stack` is left out, as it counts the frames of
# the whole call stack, which in a static program include libc's below main
FILTERS = {
    "filter": ("calls", "-F", "c_middle"),
    "notrace": ("calls", "-N", "c_leaf"),
    "depth": ("calls", "-D", "2"),
    "filter-depth": ("calls", "-F", "c_fact", "-D", "2"),
    "trigger-depth": ("calls", "-T", "c_fact@depth=2"),
    "trigger-trace-off": ("calls", "-T", "c_middle@trace_off"),
    "hide": ("calls", "-H", "c_middle"),
    "caller-filter": ("calls", "-C", "c_leaf"),
    "regex": ("args", "-F", "^c_[sw]"),
    "handler-filter": ("signal", "-F", "c_on_signal"),
    "thread-filter": ("thread", "-F", "c_thread_body", "-D", "3"),
}


@pytest.mark.parametrize("case", list(FILTERS))
@pytest.mark.parametrize("isa", ISAS)
def test_filtered_call_graph_is_uftraces(isa: str, case: str, scratch: Path) -> None:
    scenario, *options = FILTERS[case]
    theirs, _ = uftrace_run(scenario, *options)
    ours, _ = emutrace_run(isa, scenario, scratch, *options)
    assert theirs  # the options leave something to compare
    rule = RULES.get(scenario, ("", lambda tasks: tasks))[1]
    assert rule(ours) == rule(theirs)


# ---------------------------------------------------------------- C++ (testbins cxx)
# cxx.cpp (namespaces, classes, a template, an overload, a virtual call, a constructor and
# a destructor, an exception thrown two frames up and caught): uftrace's graph from main on
# (it also shows the static constructors before main, which our trace starts after) against
# `emutrace run`'s text trace, whose values C++ functions keep (a recording keeps none for
# them: docs/recording-and-viewers.md).

CXX_RULES = {
    "geo::note": "uftrace 0.13 shows no arguments for geo::note, a function with internal "
                 "linkage (_ZN3geoL4noteEPKci); ours are the program's own log "
                 "(test_cxx_static_function_values_are_the_programs_log)",
}
# ARM C++ ABI §3.1.5: constructors and destructors return `this` (GCC's DWARF for arm says
# so: a pointer result); the x86-64 build uftrace traces returns nothing from them
RETURNS_THIS = {"arm"}
STRUCTORS = re.compile(r"^geo::(\w+)::~?\1$")


@functools.cache
def uftrace_cxx() -> list[list[Event]]:
    out = pg_build().parent / "cxx"
    subprocess.run(["g++", "-pg", "-g", "-O1", "-fno-inline", "-fno-optimize-sibling-calls",
                    "-std=gnu++17", "-o", str(out), str(SOURCES / "cxx.cpp")], check=True,
                   timeout=300)
    data = out.parent / "uftrace.cxx"
    done = subprocess.run(["uftrace", "record", "-a", "-d", str(data), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-f", "tid",
                            "--no-libcall"], capture_output=True, text=True, timeout=120)
    tasks = graph(shown.stdout)
    main = tasks[0].index(("enter", "main", (1, "an address")))
    return [tasks[0][main:]]


def without_values_of(tasks: list[list[Event]], names: set[str], exits_only: bool = False
                      ) -> list[list[Event]]:
    return [[(kind, name, () if name in names and (kind == "exit" or not exits_only)
              else values) for kind, name, values in events] for events in tasks]


def cxx_trace(isa: str, scratch: Path) -> tuple[str, str]:
    """(`emutrace run`'s text trace of cxx on isa, the program's stdout)."""
    out = scratch / f"{isa}.cxx.txt"
    if not out.exists():
        done = run_emutrace("run", "--backend", "int3", "--no-libcall", "-o", out,
                            bin_path(isa, "cxx"))
        assert done.returncode == 0, done.stderr.decode()
        (scratch / f"{isa}.cxx.out").write_bytes(done.stdout)
    return out.read_text(), (scratch / f"{isa}.cxx.out").read_text()


@pytest.mark.parametrize("isa", ISAS)
def test_cxx_static_function_values_are_the_programs_log(isa: str, scratch: Path) -> None:
    """The values CXX_RULES leaves out: each geo::note call's, as the program logs it."""
    trace, output = cxx_trace(isa, scratch)
    logged = re.findall(r"^log: (\S+)\((-?\d+)\)$", output, re.M)
    assert len(logged) == 4
    assert re.findall(r'geo::note\("([^"]*)", (-?\d+)\);', trace) == logged


@pytest.mark.parametrize("isa", ISAS)
def test_cxx_call_graph_is_uftraces(isa: str, scratch: Path) -> None:
    ours = graph(cxx_trace(isa, scratch)[0])
    theirs = uftrace_cxx()
    ours, theirs = (without_values_of(t, set(CXX_RULES)) for t in (ours, theirs))
    if isa in RETURNS_THIS:
        structors = {name for kind, name, _ in ours[0] if STRUCTORS.match(name)}
        assert structors  # (the rule applies to something)
        ours, theirs = (without_values_of(t, structors, exits_only=True) for t in (ours, theirs))
    assert ours == theirs


@pytest.mark.parametrize("isa", ["x86_64", "aarch64", "s390x"])
def test_time_range_is_uftraces(isa: str, scratch: Path) -> None:
    """`replay -r START~STOP` over our recording, by uftrace 0.13 and by us: the records made
    from c_middle's entry to c_fact(5)'s (timestamps as `uftrace replay -f time` shows
    them: our instruction counts, read as nanoseconds)."""
    emutrace_run(isa, "calls", scratch)
    data = _ours[isa, "calls"][0]
    timed = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-f", "time"],
                           capture_output=True, text=True, timeout=120).stdout
    when = {name: stamp for stamp, name in
            re.findall(r"^\s*(\d+\.\d+) \|\s+(c_middle|c_fact)\(", timed, re.M)[::-1]}
    span = f"{when['c_middle']}~{when['c_fact']}"
    theirs = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-r", span,
                             "-f", "tid", "--no-libcall"], capture_output=True, text=True,
                            timeout=120).stdout
    ours = run_emutrace("replay", "-d", data, "-r", span, "--no-libcall")
    assert ours.returncode == 0, ours.stderr.decode()
    expected = graph(theirs)
    assert [e[:2] for e in expected[0]][:2] == [("enter", "c_middle"), ("enter", "c_leaf")]
    assert graph(ours.stdout.decode()) == expected


def shown_lines(replay_text: str) -> list[str]:
    """A replay's call lines as shown (indentation kept), without durations, TID column and
    uftrace's end-of-replay notes."""
    return [line.split("| ", 1)[1].rstrip() for line in replay_text.splitlines()
            if "| " in line and not line.startswith("#")]


# two ISAs: a 64-bit little-endian and a 32-bit big-endian one (the range is found from
# uftrace's own timestamps of each recording; the rule is the replay's, not the ISA's)
@pytest.mark.parametrize("isa", ["x86_64", "ppc"])
def test_time_range_shows_exits_of_earlier_frames_at_their_depth(isa: str, scratch: Path
                                                                 ) -> None:
    """`replay -r` and `live -r` from c_middle's second c_leaf to c_fact(2)'s entry: the
    exit of c_middle, entered before the range, is shown, and every line at its depth in
    the whole recording, as uftrace's replay -r of our recording shows them (durations
    aside: uftrace measures an exit whose entry it did not read from the range's start,
    ours is the frame's)."""
    emutrace_run(isa, "calls", scratch)
    data = _ours[isa, "calls"][0]
    timed = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-f", "time"],
                           capture_output=True, text=True, timeout=120).stdout
    leaves = re.findall(r"^\s*(\d+\.\d+) \|\s+c_leaf\(", timed, re.M)
    facts = re.findall(r"^\s*(\d+\.\d+) \|\s+c_fact\(", timed, re.M)
    span = f"{leaves[1]}~{facts[3]}"
    theirs = shown_lines(subprocess.run(
        ["uftrace", "replay", "--no-pager", "-d", str(data), "-r", span, "--no-libcall"],
        capture_output=True, text=True, timeout=120).stdout)
    assert [line.strip() for line in theirs[:3]] == ["c_leaf(4, 2) = 14;",
                                                     "} = 27; /* c_middle */", "c_fact(5) {"]
    ours = run_emutrace("replay", "-d", data, "-r", span, "--no-libcall")
    assert ours.returncode == 0, ours.stderr.decode()
    assert shown_lines(ours.stdout.decode()) == theirs
    live = run_emutrace("live", "-r", span, "--no-libcall", bin_path(isa, "conform"), "calls")
    assert live.returncode == 0, live.stderr.decode()
    assert shown_lines(live.stderr.decode() + live.stdout.decode()) == theirs


# ---------------------------------------------------------------- contexts
# uftrace 0.13 stops tracing at the first swapcontext (NOT_AN_ORACLE["context"]); the oracle
# is the program's own record of its calls: conform.c built natively with
# -finstrument-functions, each entry logged with its call site (the caller) and each exit

PROFILE_HOOKS = r"""
#include <stdio.h>
__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *f, void *at)
{ fprintf(stderr, "E %p %p\n", f, at); }
__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *f, void *at)
{ fprintf(stderr, "X %p %p\n", f, at); }
"""


def _function_at(symbols: list[tuple[int, str]], addr: int) -> str:
    """The function of the native build that holds addr ("" outside every one)."""
    below = [name for start, name in symbols if start <= addr]
    return below[-1] if below else ""


@functools.cache
def own_record_of_contexts() -> tuple[list[tuple[str, str]], dict[str, int]]:
    """([(function, its caller)] of each call the program's own code made to its own
    functions, in order; {function: returns}) from the program's own record of the
    `context` scenario."""
    out = pg_build().parent / "conform.instr"
    hooks = out.parent / "hooks.c"
    hooks.write_text(PROFILE_HOOKS)
    subprocess.run(["gcc", "-finstrument-functions", "-g", "-O1", "-fno-inline",
                    "-fno-optimize-sibling-calls", "-no-pie", "-pthread", "-o", str(out),
                    str(SOURCE), str(hooks)], check=True, timeout=120)
    nm = subprocess.run(["nm", "--defined-only", str(out)], capture_output=True, text=True,
                        check=True).stdout
    symbols = sorted((int(a, 16), n) for a, k, n in (line.split()[:3] for line in
                     nm.splitlines() if len(line.split()) == 3) if k in "Tt")
    log = subprocess.run([str(out), "context"], capture_output=True, text=True, timeout=60,
                         check=True).stderr
    calls, returns = [], {}
    for kind, func, site in (line.split() for line in log.splitlines()):
        name = _function_at(symbols, int(func, 16))
        if kind == "E" and OWN.match(_function_at(symbols, int(site, 16))):
            calls.append((name, _function_at(symbols, int(site, 16))))
        elif kind == "X":
            returns[name] = returns.get(name, 0) + 1
    return calls, returns


def calls_and_returns(trace: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The same from a text trace: each own function's entry (not one resumed) whose frame
    opens directly in an own function's, with that function, and each own function's exits
    that were returns (not unwound: a context switched away)."""
    open_frames: list[str] = []
    calls, returns = [], {}
    for line in trace.splitlines():
        m = LINE.match(line)
        if m is None or line.startswith("#"):
            continue
        text = m["text"].strip()
        entry, leave = ENTRY.match(text), EXIT.match(text)
        unwound = "unwound" in text or "at exit" in text
        if entry is not None:
            name = entry["name"]
            caller = open_frames[-1] if open_frames else ""
            if OWN.match(name) and OWN.match(caller) and "resumed" not in text:
                calls.append((name, caller))
            if entry["open"]:
                open_frames.append(name)
            elif OWN.match(name) and not unwound and "resumed" not in text:
                returns[name] = returns.get(name, 0) + 1
        elif leave is not None:
            name = open_frames.pop()
            if OWN.match(name) and not unwound:
                returns[name] = returns.get(name, 0) + 1
    return calls, returns


@pytest.mark.parametrize("isa", ISAS)
def test_context_switches_nest_as_the_programs_own_record(isa: str, scratch: Path,
                                                         request: pytest.FixtureRequest
                                                         ) -> None:
    """After swapcontext/setcontext (conform.c's `context`: a coroutine entered, left,
    resumed and finished), each call of the program's own functions nests under its real
    caller and every return is a return: the shadow stack keeps one segment per stack
    (trace/shadow.py policy 8).  Checked against the program's own record (a native
    -finstrument-functions build: each entry's call site, each exit)."""
    gap = by_name(isa).capabilities.get(Cap.UCONTEXT_SYSCALL)
    if gap is not None and not gap.works:
        request.applymarker(pytest.mark.xfail(reason=gap.reason, strict=True))
    expected = own_record_of_contexts()
    assert ("c_leaf", "c_co_body") in expected[0] and expected[1]["c_co_body"] == 1
    out = scratch / f"{isa}.context.txt"
    done = run_emutrace("run", "--backend", "int3", "--no-libcall", "-o", out,
                        bin_path(isa, "conform"), "context")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == "8\n"
    assert calls_and_returns(out.read_text()) == expected


@pytest.mark.parametrize("isa", ["x86_64", "mips", "ppc"])
def test_context_switches_alike_on_both_engines(isa: str, scratch: Path) -> None:
    """The reference engine and the native one trace the context switches alike (C hands a
    call on another stack to Python: ufwrite.c UW_STACK_SWITCH).  x86_64 and mips: one
    returns from swapcontext by its return instruction, the other by a jump; ppc: the
    switch happens inside the swapcontext system call (the Linux layer tells the tracer,
    sys_ucontext.py)."""
    traces = []
    for engine in ("python", "native"):
        out = scratch / f"{isa}.context.{engine}.txt"
        done = run_emutrace("run", "--backend", "int3", "--engine", engine, "-o", out,
                            bin_path(isa, "conform"), "context")
        assert done.returncode == 0, done.stderr.decode()
        traces.append(out.read_text())
    assert "/* resumed */" in traces[0]
    assert traces[0] == traces[1]


@pytest.mark.parametrize("backend", ["step", "entry", "bts"])
def test_context_switches_in_the_system_call_on_other_backends(backend: str,
                                                               scratch: Path) -> None:
    """ppc's switch inside the swapcontext system call under the other mechanisms too (the
    Linux layer tells each where a loaded context goes on, as it tells int3; hwbp is int3's
    placement): the same program's own record.  ppc only: no other ISA switches contexts
    in a system call."""
    out = scratch / f"ppc.context.{backend}.txt"
    done = run_emutrace("run", "--backend", backend, "--no-libcall", "-o", out,
                        bin_path("ppc", "conform"), "context")
    assert done.returncode == 0, done.stderr.decode()
    assert calls_and_returns(out.read_text()) == own_record_of_contexts()
