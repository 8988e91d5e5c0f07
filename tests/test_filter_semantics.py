"""uftrace's filters and triggers (`-F -N -T -H -C -D --match --trace/--disable`) against
Debian's uftrace 0.13 (the independent oracle) replaying the same recording with the same
options: the same lines, in the same order, at the same indentation, naming the same
functions.  Arguments are left out (`--no-args`: their rendering is compared elsewhere),
durations too (compared in tests/test_replay_options.py); an address without a symbol is
`<4010a0>` in uftrace's text and `0x4010a0` in ours; a frame still open when the program
exits is marked `at exit` in ours only.

uftrace shows the calls before `main`; ours start at `main` unless `--start` names the
first function, which these comparisons do.

`run`'s trace applies the same rules while it writes: `emutrace run ... -F X -D 2` against
`uftrace replay -F X -D 2` of the unfiltered recording of the same run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from emutrace.trace.events import Entry, Exit
from emutrace.trace.filters import Filters, FilterState, caller_kept, parse_rule

from .conftest import bin_path, run_emutrace

LINE = re.compile(r"^[^|]*\| (?P<indent> *)(?P<text>.*)$")
FIRST = "__libc_start_main_impl"  # the recordings' first function (static glibc)


def ours_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, line
        text = re.sub(r"\b0x([0-9a-f]+)\b", r"<\1>", m["text"])
        # frames still open when the program exits: ours say so, uftrace's do not
        text = text.replace("; /* at exit */", ";").replace(" (at exit) */", " */")
        out.append(m["indent"] + text)
    return out


def uftrace_lines(data: Path, *opts: str) -> list[str]:
    text = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "--no-args",
                           "-f", "none", *opts], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    return [line for line in text.splitlines() if line.strip()]


def emutrace_replay(data: Path, *opts: str) -> list[str]:
    proc = run_emutrace("replay", "-d", data, "--no-args", "--start", FIRST, *opts)
    assert proc.returncode == 0, proc.stderr.decode()
    return ours_lines(proc.stdout.decode())


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for name, program, args in (("calls", "calls", ("recursion",)), ("cxx", "cxx", ())):
        out = tmp_path_factory.mktemp("rec") / name
        proc = run_emutrace("record", "-d", out, bin_path("x86_64", program), *args)
        assert proc.returncode == 0, proc.stderr.decode()[-500:]
        made[name] = out
    return made


CASES = {
    # nested -F matches: each restarts the -D budget (scenario_recursion, past main's two
    # levels, is hidden; fib under it shows two levels of its own)
    "nested-depth": ("calls", "-F", "main", "-F", "fib", "-D", "2"),
    "depth-restart-below-hidden": ("calls", "-F", "main", "-D", "1", "-F", "fact"),
    # the later of -F and -N wins for a function named by both
    "notrace-then-filter": ("calls", "-N", "fib", "-F", "fib", "-D", "3"),
    "filter-then-notrace": ("calls", "-F", "fib", "-N", "fib"),
    "notrace-inside-filter": ("calls", "-F", "main", "-N", "run_scenario", "-F",
                              "scenario_recursion", "-D", "3"),
    # patterns: a regex searched anywhere in the name, anchored, a glob over the whole name
    "regex-anywhere": ("calls", "-F", "is_.", "-D", "2"),
    "regex-anchored": ("calls", "-F", "^fi", "-D", "3"),
    "regex-alternation": ("calls", "-F", "^(fact|is_odd)$", "-D", "2"),
    "glob": ("calls", "--match", "glob", "-F", "fa?t", "-D", "2"),
    "glob-star": ("calls", "--match", "glob", "-F", "scenario_*", "-D", "2"),
    "several-in-one": ("calls", "-F", "fact;is_odd", "-D", "2"),
    # a pattern matching nothing filters nothing
    "filter-matching-nothing": ("calls", "-F", "no_such_function", "-D", "3"),
    "depth-alone": ("calls", "-D", "4"),
    "filter-action-depth": ("calls", "-F", "run_scenario@depth=2"),
    # -H: the function's own lines go, what it calls moves up
    "hide": ("calls", "-F", "main", "-H", "run_scenario", "-D", "3"),
    "hide-under-filter": ("calls", "-H", "scenario_recursion", "-F", "run_scenario",
                          "-N", "printf"),
    "hide-trigger": ("calls", "-F", "scenario_recursion", "-T", "is_even@hide", "-D", "3"),
    # -T depth, filter and notrace actions
    "trigger-depth": ("calls", "-F", "scenario_recursion", "-N", "printf", "-T",
                      "fib@depth=2"),
    "trigger-filter": ("calls", "-T", "is_odd@filter,depth=2"),
    "trigger-notrace": ("calls", "-F", "scenario_recursion", "-T", "fib@notrace", "-D",
                        "2"),
    # tracing switched off and on
    "trace-on": ("calls", "--disable", "-T", "fib@trace_on", "-F", "run_scenario", "-D",
                 "9"),
    "trace-off-on": ("calls", "-F", "scenario_recursion", "-N", "printf", "-T",
                     "fib@trace_off", "-T", "is_even@trace_on"),
    # -C: the calls that lead to a match, and the match
    "caller": ("calls", "-C", "fact"),
    "caller-depth": ("calls", "-C", "is_odd", "-D", "2"),
    "caller-regex": ("calls", "-C", "^is_(odd|even)$", "-D", "5"),
    # C++: names as demangled, written plain, as a regex or mangled
    "cxx-name": ("cxx", "-F", "geo::level2"),
    "cxx-regex": ("cxx", "-F", "geo::level[13]$", "-D", "2"),
    "cxx-mangled": ("cxx", "-F", "_ZN3geo6level1Ev", "-N", "geo::note"),
}


@pytest.mark.parametrize("case", CASES)
def test_replay_filters_equal_uftrace(recordings: dict[str, Path], case: str) -> None:
    name, *opts = CASES[case]
    data = recordings[name]
    theirs = uftrace_lines(data, *opts)
    ours = emutrace_replay(data, *opts)
    assert ours == theirs
    if case not in ("filter-then-notrace",):
        assert len(theirs) >= 3, theirs  # the comparison says something
    if case == "filter-then-notrace":
        assert theirs == []  # -F matched, so nothing outside fib shows, and fib is out


@pytest.mark.parametrize("levels", [3, 7])
def test_max_stack_equals_uftrace_depth_of_the_whole_trace(recordings: dict[str, Path],
                                                           levels: int) -> None:
    """`--max-stack N` leaves out calls N levels deep, as a recording made with uftrace's
    `--max-stack N` would: from the first function, that is uftrace's `-D N`."""
    data = recordings["calls"]
    theirs = uftrace_lines(data, "-D", str(levels))
    assert emutrace_replay(data, "--max-stack", str(levels)) == theirs
    assert len(theirs) > 10
    if levels == 7:  # under a filter it counts the true call depth: scenario_recursion
        # is called 4 deep, so 3 levels of it are kept
        assert emutrace_replay(data, "--max-stack", "7", "-F", "scenario_recursion") == \
            uftrace_lines(data, "-F", "scenario_recursion", "-D", "3")


OTHER_ISAS = ("aarch64", "s390x")  # a fixed-width RISC and a big-endian guest
ACROSS_ISAS = ("nested-depth", "notrace-then-filter", "regex-alternation", "hide",
               "trigger-depth", "trace-on", "caller-depth")


@pytest.fixture(scope="module")
def isa_recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for isa in OTHER_ISAS:
        out = tmp_path_factory.mktemp("rec") / isa
        proc = run_emutrace("record", "-d", out, bin_path(isa, "calls"), "recursion")
        assert proc.returncode == 0, proc.stderr.decode()[-500:]
        made[isa] = out
    return made


@pytest.mark.parametrize("isa", OTHER_ISAS)
def test_filters_equal_uftrace_on_other_isas(isa_recordings: dict[str, Path],
                                            isa: str) -> None:
    data = isa_recordings[isa]
    for case in ACROSS_ISAS:
        _program, *opts = CASES[case]
        theirs = uftrace_lines(data, *opts)
        assert emutrace_replay(data, *opts) == theirs, case
        assert len(theirs) >= 3, (case, theirs)


def test_no_libcall_equals_uftrace_hiding_the_plt_entries(tmp_path: Path) -> None:
    """`--no-libcall` leaves out each PLT entry's own lines: uftrace's `-H` of the names
    ending in `plt` (its `--no-libcall` knows PLT entries by the symbol type its own
    recordings give them, which ours do not carry)."""
    data = tmp_path / "dyn"
    proc = run_emutrace("record", "-d", data, bin_path("x86_64", "calls.dyn"), "recursion")
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    theirs = uftrace_lines(data, "-F", "main", "-D", "3", "--match", "glob", "-H", "*plt")
    ours = emutrace_replay(data, "-F", "main", "-D", "3", "--no-libcall")
    assert ours == theirs
    assert not any("@plt" in line for line in ours) and len(ours) > 5
    assert any("@plt" in line for line in emutrace_replay(data, "-F", "main", "-D", "3"))


def test_options_change_what_is_shown(recordings: dict[str, Path]) -> None:
    """The cases differ from one another: a rule ignored would still fail one of them."""
    data = recordings["calls"]
    base = emutrace_replay(data, "-F", "main", "-D", "2")
    assert emutrace_replay(data, *CASES["nested-depth"][1:]) != base
    assert emutrace_replay(data, "-N", "fib", "-F", "fib") != emutrace_replay(
        data, "-F", "fib", "-N", "fib")


def test_run_applies_the_filters_as_uftrace_replays_them(recordings: dict[str, Path],
                                                         tmp_path: Path) -> None:
    opts = ("-F", "main", "-F", "fib", "-D", "2", "-N", "printf")
    out = tmp_path / "trace.txt"
    proc = run_emutrace("run", "--backend", "int3", "-o", out, "--start", FIRST,
                        "--no-follow-forks", *opts, bin_path("x86_64", "calls"), "recursion")
    assert proc.returncode == 0, proc.stderr.decode()
    ours = [re.sub(r"\(.*?\)( = [^;]*)?;$", "();", re.sub(r"\(.*\) \{$", "() {",
                                                          re.sub(r"\} = .*?; /\*", "} /*",
                                                                 line)))
            for line in ours_lines(out.read_text())]
    assert ours == uftrace_lines(recordings["calls"], *opts)


@pytest.mark.parametrize(("option", "spec"), [
    ("-F", "("), ("-N", "fib@nonsense"), ("-T", "fib@depth=0"), ("-T", "fib@depth=x"),
    ("-H", "fib@depth=2"), ("-F", ""), ("-T", "fib")])
def test_bad_patterns_are_one_line_exit_64(recordings: dict[str, Path], option: str,
                                           spec: str) -> None:
    for command in (("replay", "-d", recordings["calls"]),
                    ("run", "--backend", "int3", bin_path("x86_64", "calls"), "recursion")):
        proc = run_emutrace(*command[:1], option, spec, *command[1:])
        err = proc.stderr.decode()
        assert proc.returncode == 64, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_bad_option_values_exit_64(recordings: dict[str, Path]) -> None:
    for opts in (("-D", "0"), ("--match", "fuzzy"), ("--trace", "maybe"),
                 ("--max-stack", "0"), ("-D", "1024")):
        proc = run_emutrace("replay", "-d", recordings["calls"], *opts)
        assert proc.returncode == 64, proc.stderr.decode()


def test_plt_suffix_keeps_plt_entries() -> None:
    """`FUNC@plt` matches a PLT entry (`strcmp@plt`, the name the trace shows) by its
    function's name; the plain name matches the library's function only.  Oracle: a plain
    model of the names."""
    names = ["strcmp", "strcmp@plt", "printf@plt", "strcmpx@plt"]
    assert [n for n in names if parse_rule("-F", "strcmp@plt").pattern.matches(n)] == [
        "strcmp@plt"]
    assert [n for n in names if parse_rule("-F", "strcmp").pattern.matches(n)] == ["strcmp"]
    assert [n for n in names if parse_rule("-F", "str.*@plt").pattern.matches(n)] == [
        "strcmp@plt", "strcmpx@plt"]


def test_filter_state_by_hand() -> None:
    """uftrace's fstack rules on a made-up stack: a > b > a > c with -F a -D 1."""
    state = FilterState(Filters([parse_rule("-F", "a")], depth=1, names=["a", "b", "c"]))
    assert state.enter("a") == 0  # a: shown, budget 1 -> 0
    assert state.enter("b") is None  # past the budget
    assert state.enter("a") == 1  # a again: the budget restarts at 1
    assert state.enter("c") is None
    assert [state.leave(), state.leave(), state.leave(), state.leave()] == [None, 1, None, 0]


def test_caller_filter_streams_what_leads_to_a_match() -> None:
    recs = [Entry(0, 0, 1), Entry(1, 1, 2), Exit(2, 1, 2, None, 1), Entry(3, 1, 3),
            Entry(4, 2, 2), Exit(5, 2, 2, None, 1), Exit(6, 1, 3, None, 3),
            Exit(7, 0, 1, None, 7)]
    names = {1: "main", 2: "leaf", 3: "target"}.__getitem__
    kept = list(caller_kept(recs, names, Filters([parse_rule("-C", "target")])))
    assert [(type(r).__name__, names(r.func)) for r in kept] == [
        ("Entry", "main"), ("Entry", "target"), ("Exit", "target"), ("Exit", "main")]
