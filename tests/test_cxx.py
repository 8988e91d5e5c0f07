"""C++ programs: names shown demangled by `--demangle=full|simple|no`, `-F/-A` naming C++
functions as they are shown, and typed arguments of member functions (`this` first) and
functions in namespaces from DWARF.

The program is testbins/<isa>/cxx (src/cxx.cpp), on every ISA, under emulation and, on
x86_64, natively.  The oracles: c++filt (binutils, `-i`) for full names, Debian's uftrace 0.13
replaying the same recording for uftrace's `simple`/`full`/`no` names and its filter rule,
and the program's own output (the `this` it prints, the values it passes and gets back,
the log of every geo::level2/geo::level3 call it keeps in a static array).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from emutrace.discover.demangle import demangled
from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import ISAS, bin_path, isa_params, run_emutrace, run_qemu
from .test_uftrace_write import UFTRACE

PROGRAM = "cxx"


def cxxfilt(names: list[str]) -> list[str]:
    """c++filt's demangling of each name (one per line through its standard input),
    without its verbose spelling of the standard abbreviations (`-i`: `std::string`, not
    `std::basic_string<char, ...>`), as the C++ runtime and uftrace show them."""
    out = subprocess.run(["c++filt", "-i"], input="".join(n + "\n" for n in names), text=True,
                         capture_output=True, check=True).stdout
    return out.splitlines()


def function_symbols(isa: str) -> list[str]:
    with open(bin_path(isa, PROGRAM), "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        assert isinstance(symtab, SymbolTableSection)
        return sorted({s.name for s in symtab.iter_symbols()
                       if s["st_info"]["type"] == "STT_FUNC" and s.name})


@functools.cache
def own_output(isa: str) -> str:
    """What the program prints under qemu-user (`cxx this`: with the address of
    geo::tally, the `this` of every geo::Counter::add call)."""
    done = run_qemu(isa, bin_path(isa, PROGRAM), "this")
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


# The module's traces and recordings, kept while its tests read them (the memos below)
# and removed with the memos when the module is done (a worker may come back to the
# module later: it then starts a new directory).
_SCRATCH: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _scratch_removed_at_the_end() -> Iterator[None]:
    _SCRATCH.append(Path(tempfile.mkdtemp(prefix="cxx-")))
    yield
    traced.cache_clear()
    recorded.cache_clear()
    shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)


@functools.cache
def traced(isa: str, *options: str) -> tuple[str, str]:
    """(text trace, the program's stdout) of `emutrace run OPTIONS cxx this`."""
    out = Path(tempfile.mkdtemp(dir=_SCRATCH[-1])) / "trace"
    done = run_emutrace("run", "--backend", "int3", "-o", out, *options,
                        bin_path(isa, PROGRAM), "this")
    assert done.returncode == 0, done.stderr.decode()
    return out.read_text(), done.stdout.decode()


@functools.cache
def recorded(isa: str) -> Path:
    data = Path(tempfile.mkdtemp(dir=_SCRATCH[-1])) / "data"
    done = run_emutrace("record", "--backend", "int3", "-d", data, bin_path(isa, PROGRAM))
    assert done.returncode == 0, done.stderr.decode()
    return data


def closing_names(text: str) -> list[str]:
    """The function named by every closing line `} /* NAME */` (`} = V; /* NAME */`), in
    order: the one place a line names its function in every mode without an argument
    list after it."""
    return re.findall(r"\} (?:= [^;]*; )?/\* (.*?)(?: \((?:unwound|at exit)\))? \*/$", text,
                      re.M)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("isa", ISAS)
def test_full_names_are_cxxfilts(isa: str) -> None:
    names = function_symbols(isa)
    assert sum(n.startswith("_Z") for n in names) > 100  # the program's and libstdc++'s
    assert [demangled(n, "full") for n in names] == cxxfilt(names)


@pytest.mark.parametrize("isa", ["x86_64", "s390x", "arm"])
def test_run_shows_each_name_as_cxxfilt_demangles_it(isa: str) -> None:
    raw, _ = traced(isa, "--demangle=no")
    full, _ = traced(isa, "--demangle=full")
    simple, _ = traced(isa)  # the default
    mangled = closing_names(raw)
    assert "_ZN3geo7guardedEi" in mangled and "_ZN3geo4RectD2Ev" in mangled
    assert closing_names(full) == cxxfilt(mangled)
    shown = closing_names(simple)
    assert len(shown) == len(mangled)
    assert "geo::guarded" in shown and "geo::Rect::~Rect" in shown
    assert not any(n.startswith("_Z") for n in shown)


def uftrace_lines(data: Path, *options: str) -> list[str]:
    done = subprocess.run([UFTRACE, "replay", "--no-pager", "-d", str(data), *options],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [line.split("|", 1)[1].rstrip() for line in done.stdout.splitlines()
            if "|" in line and not line.startswith("#")]


def our_lines(data: Path, *options: str) -> list[str]:
    done = run_emutrace("replay", "-d", data, *options)
    assert done.returncode == 0, done.stderr.decode()
    return [line.split("|", 1)[1].rstrip().removesuffix(" /* unwound */")
            for line in done.stdout.decode().splitlines()
            if "|" in line and not line.startswith("#")]


@pytest.mark.parametrize("mode", ["simple", "full", "no"])
def test_replay_names_calls_as_uftrace_does(mode: str) -> None:
    """Debian's uftrace and emutrace replay the same recording: the same lines, names
    included, three levels under main (deeper, the two tell PLT slots inside `_init`
    apart differently); uftrace marks no unwound frame."""
    data = recorded("x86_64")
    want = uftrace_lines(data, f"--demangle={mode}", "-F", "main", "-D", "3")
    assert any("geo::" in line or "_ZN3geo" in line for line in want)
    assert our_lines(data, f"--demangle={mode}", "-F", "main", "-D", "3") == want


@pytest.mark.parametrize(("mode", "filters"), [
    ("simple", ("-F", "geo::level2")), ("simple", ("-F", "_ZN3geo6level2Ei")),
    ("no", ("-F", "_ZN3geo6level2Ei")),
    ("simple", ("-F", "geo::twice")),  # both overloads: their simple names are one
    ("full", ("-F", "geo::twice(long)")),
    ("simple", ("-F", "main", "-D", "3", "-N", "geo::level3")),
    ("full", ("-F", "main", "-D", "3", "-N", "_ZN3geo6level3Ei")),
])
def test_filters_name_functions_as_uftrace_does(mode: str, filters: tuple[str, ...]) -> None:
    data = recorded("x86_64")
    # (uftrace reads a name with `(` as a regular expression: escaped, it is the name)
    theirs = [re.sub(r"([()])", r"\\\1", f) for f in filters]
    want = uftrace_lines(data, f"--demangle={mode}", *theirs)
    assert any("geo::" in line or "_ZN3geo" in line for line in want)
    assert our_lines(data, f"--demangle={mode}", *filters) == want


def uftrace_out(data: Path, *args: str) -> str:
    done = subprocess.run([UFTRACE, *args, "--no-pager", "-d", str(data)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def our_out(data: Path, *args: str) -> str:
    done = run_emutrace(*args, "-d", data)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def report_names(text: str) -> list[str]:
    """The Function column (from where its header starts) of each line."""
    lines = text.splitlines()
    at = lines[0].index("Function")
    return [line[at:] for line in lines[2:] if line.strip()]


def chrome_names(text: str) -> set[str]:
    return {e["name"] for e in json.loads(text)["traceEvents"] if e.get("ph") in ("B", "E")}


@pytest.mark.parametrize("mode", ["simple", "full", "no"])
def test_viewers_show_names_as_uftrace_does(mode: str) -> None:
    """report's functions (in its order) and the Chrome trace's event names, as Debian's
    uftrace shows them from the same recording."""
    data = recorded("x86_64")
    want = report_names(uftrace_out(data, "report", f"--demangle={mode}"))
    assert any("geo" in n for n in want)
    assert report_names(our_out(data, "report", f"--demangle={mode}")) == want
    assert chrome_names(our_out(data, "dump", "--chrome", f"--demangle={mode}")) == \
        chrome_names(uftrace_out(data, "dump", "--chrome", f"--demangle={mode}"))


def test_graph_of_a_function_named_as_shown() -> None:
    data = recorded("x86_64")
    simple = our_out(data, "graph", "geo::level1")
    assert "geo::level2" in simple and "geo::level3" in simple
    assert our_out(data, "graph", "_ZN3geo6level1Ei") == simple
    full = our_out(data, "graph", "--demangle=full", "geo::level1(int)")
    assert "geo::level2(int)" in full and "geo::level3(int)" in full


@pytest.mark.parametrize("mode", ["simple", "full"])
def test_every_cxx_symbol_is_named_as_uftrace_names_it(mode: str, tmp_path: Path) -> None:
    """A recording that calls each C++ function of the program once (made from a real
    one: its symbol table and map, records written here), replayed by Debian's uftrace:
    each line names the function as emutrace's demangling does."""
    data = tmp_path / "data"
    shutil.copytree(recorded("x86_64"), data)
    sym = next(data.glob("*.sym"))
    base = int(next(data.glob("sid-*.map")).read_text().split("-", 1)[0], 16)
    first: dict[int, str] = {}  # uftrace names an address by its first symbol
    for line in sym.read_text().splitlines():
        m = re.fullmatch(r"([0-9a-f]{16}) [TtWw] (.*)", line)
        if m:
            first.setdefault(int(m[1], 16), m[2])
    funcs = [(addr, name) for addr, name in sorted(first.items()) if name.startswith("_Z")]
    assert len(funcs) > 500
    records = bytearray()
    for time, (addr, _name) in enumerate(funcs):  # entry, exit: uftrace.h's record words
        for kind in (0, 1):
            records += struct.pack("<QQ", 2 * time + kind + 1,
                                   kind | 5 << 3 | (base + addr) << 16)
    (data / "1.dat").write_bytes(bytes(records))
    (data / "emutrace-exits.txt").write_text("")
    got = uftrace_lines(data, f"--demangle={mode}")
    assert len(got) == len(funcs)
    want = []
    for _addr, name in funcs:
        shown = demangled(name, mode)
        want.append(f" {shown}{'' if shown.endswith(')') else '()'};")
    assert [(w, g) for w, g in zip(want, got, strict=True) if w != g] == []
    # uftrace's own spellings in simple: a standard abbreviation, an anonymous namespace
    assert mode == "full" or {" std::basic_string<>::basic_string<>();",
                              " _GLOBAL__N_1::pool::free();"} <= set(got)


# ---------------------------------------------------------------- -F on C++ names


def logged_calls(output: str) -> list[tuple[str, int]]:
    """The program's log: every geo::level2 / geo::level3 call, in order."""
    return [(m[0], int(m[1])) for m in re.findall(r"^log: (geo::level\d)\((-?\d+)\)$",
                                                  output, re.M)]


@pytest.mark.parametrize("isa", isa_params(Cap.RUN_STATIC))
def test_filter_traces_exactly_the_named_function(isa: str) -> None:
    text, stdout = traced(isa, "-F", "geo::level2")
    assert stdout == own_output(isa)
    log = logged_calls(stdout)
    assert [c for c, _ in log] == ["geo::level2", "geo::level3"] * 2
    body = [line.split("|", 1)[1] for line in text.splitlines()[1:]]
    top = [line[1:] for line in body if not line.startswith("  ")]
    # depth 0 holds geo::level2's calls and nothing else, with the arguments it logged
    calls = [int(a) for a in re.findall(r"^geo::level2\((-?\d+)\) \{$", "\n".join(top), re.M)]
    assert calls == [arg for name, arg in log if name == "geo::level2"]
    assert all(re.fullmatch(r"geo::level2\(-?\d+\) \{|\} = -?\d+; /\* geo::level2 \*/", line)
               for line in top), top
    inner = [int(a) for a in re.findall(r"^   geo::level3\((-?\d+)\) \{$", "\n".join(body),
                                        re.M)]
    assert inner == [arg for name, arg in log if name == "geo::level3"]


def test_filter_names_a_function_mangled_or_in_full() -> None:
    text, stdout = traced("x86_64", "-F", "geo::level2")
    assert traced("x86_64", "-F", "_ZN3geo6level2Ei")[0] == text
    full, _ = traced("x86_64", "--demangle=full", "-F", "geo::level2(int)")
    assert re.findall(r"^ +\| geo::level2\(int\)\((-?\d+)\) \{$", full, re.M) == \
        [str(arg) for name, arg in logged_calls(stdout) if name == "geo::level2"]
    # --start by the shown name
    start = traced("x86_64", "--start", "geo::level1")[0].splitlines()
    assert start[1].endswith("| geo::level1(3) {")
    # in full, the simple name is no function's name: the filter matches nothing, so it
    # filters nothing (uftrace's rule: tests/test_filter_semantics.py)
    unfiltered = traced("x86_64", "--demangle=full")[0]
    assert traced("x86_64", "--demangle=full", "-F", "geo::level2")[0] == unfiltered


# ---------------------------------------------------------------- typed arguments


def counter_calls(output: str) -> tuple[int, list[tuple[int, int, int]]]:
    """(the `this` the program printed, (amount, times, result) of each add call)."""
    this = int(re.search(r"^add: this=(0x[0-9a-f]+)$", output, re.M)[1], 16)  # type: ignore[index]
    calls = [(int(a), int(t), int(r)) for a, t, r in
             re.findall(r"^add: amount=(-?\d+) times=(-?\d+) -> (-?\d+)$", output, re.M)]
    return this, calls


def member_calls(text: str) -> list[tuple[int, int, int, int]]:
    return [(int(this, 16), int(a), int(t), int(r)) for this, a, t, r in re.findall(
        r"\| +geo::Counter::add\((0x[0-9a-f]+), (-?\d+), (-?\d+)\) = (-?\d+);$", text, re.M)]


@pytest.mark.parametrize("isa", isa_params(Cap.RUN_STATIC))
def test_member_function_shows_this_and_its_ints(isa: str) -> None:
    text, stdout = traced(isa)
    assert stdout == own_output(isa)
    this, calls = counter_calls(stdout)
    assert len(calls) == 2
    assert member_calls(text) == [(this, *call) for call in calls]
    # functions in a namespace: their DWARF prototype's int, the template's and the
    # overloads' parameters
    assert re.search(r"\| +geo::level1\(3\) \{$", text, re.M)
    assert re.search(r"\| +geo::biggest\(3, 9\) = 9;$", text, re.M)
    assert re.search(r"\| +geo::twice\(21\) = 43;$", text, re.M)  # the long overload
    assert re.search(r"\| +geo::guarded\(50\) \{$", text, re.M)


@pytest.mark.parametrize("isa", [
    pytest.param(isa, id=isa, marks=[] if cap.works else
                 [pytest.mark.xfail(reason=cap.reason, strict=True)])
    for isa, cap in ((i, by_name(i).capability(Cap.NATIVE_TARGET)) for i in ("x86_64", "i386"))])
def test_member_function_natively(isa: str) -> None:
    """The program on this host's CPU (`--target native`): the x86 ISAs."""
    text, stdout = traced(isa, "--target", "native")
    this, calls = counter_calls(stdout)
    assert member_calls(text) == [(this, *call) for call in calls]


def test_argument_count_names_a_cxx_function_as_shown() -> None:
    text, stdout = traced("x86_64", "-A", "geo::Counter::add@arg2")
    this, calls = counter_calls(stdout)
    got = re.findall(r"\| +geo::Counter::add\((0x[0-9a-f]+), (-?\d+)\) = (-?\d+);$", text,
                     re.M)
    assert got == [(hex(this), str(a), str(r)) for a, _t, r in calls]


def test_a_bad_mode_is_a_usage_error() -> None:
    done = run_emutrace("replay", "--demangle=mangled", "-d", "nowhere")
    assert done.returncode == 64
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("name", ["main", "_Z", "_Zgarbage", "_ZN3geo", "x" * 20000,
                                  "_Z1f" + "P" * 20000 + "i", "_GLOBAL__sub_I_main.c"])
def test_names_not_demangled_are_shown_as_they_are(name: str) -> None:
    """C names, and what is not a mangled name the runtime demangles (c++filt leaves
    them too), or is too long to try: shown as the symbol table has them."""
    if len(name) < 100:
        assert cxxfilt([name]) == [name]
    assert {demangled(name, mode) for mode in ("simple", "full", "no")} == {name}
