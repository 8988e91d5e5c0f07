"""`run`'s text trace formatted in C (native/replaytext.c, native/replaytext.py) against the
reference, trace/format.py `iter_replay_lines`: the same bytes.

* Real traces: on all ten ISAs the committed programs (fib, `calls all` — recursion 10^4
  deep, past uftrace's 1,024 levels and format.py's MAX_INDENT, longjmp's unwound frames,
  qsort, strings —, `calls.O0.instr tail` for `char *` values C copied, typed for enums,
  floats and structs, threads for a section per thread, sigctx for signal handlers) run
  once into the spill file as `run` keeps it, then formatted both ways under a set of
  options: --start (main, none, a function in the middle), -F, -N, -D (0 and 3), -A
  counts, no arguments or return values, no header.  Most of their records are C's
  (packed), the rest Python's.
* The command: `run -o FILE` of `signals` (forks, handlers, a fatal signal) on all ten
  ISAs, every process's text formatted both ways; on x86_64 the whole command with C
  formatting against the command with the reference alone (write_replay stubbed out), and
  to stderr.
* Made-up traces (hypothesis): random nested records of several threads, each written by
  "C" (packed by the writer's Python reference, trace/spill.py `pack_layout`, where the
  writer could have written it) or by Python, values of every kind, unwound and at-exit
  frames, signal and exception marks, random options; the same over a plain list.
* Where C declines (write_replay returns False, nothing written) the reference is what
  `write_lines` writes.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emutrace.cli.run import write_lines
from emutrace.discover.symbols import read_symbols
from emutrace.isa import by_name
from emutrace.native import replaytext
from emutrace.native.replaytext import write_replay
from emutrace.session import Process, RunConfig
from emutrace.trace import spill
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.format import MAX_INDENT, ReplayOptions, iter_replay_lines
from emutrace.trace.spill import SpillSink
from emutrace.trace.uftrace_write import pack_record
from emutrace.trace.values import Value

from .conftest import ENV, ISAS, bin_path
from .test_native_engine import _stdout_to_devnull

pytestmark = pytest.mark.skipif(replaytext.load() is None,
                                reason="the native library is not built")

PROGRAMS = (("fib", ("15",)), ("calls", ("all",)), ("calls.O0.instr", ("tail",)),
            ("typed", ()), ("threads", ()), ("sigctx", ()))


def python_text(records: Iterable[Record], name: Callable[[int], str],
                opts: ReplayOptions) -> bytes:
    return "".join(line + "\n" for line in iter_replay_lines(records, name, opts)).encode()


def native_text(records: Iterable[Record], name: Callable[[int], str],
                opts: ReplayOptions) -> bytes:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")
    assert write_replay(records, name, opts, stream), "C declined"
    stream.flush()
    return raw.getvalue()


def assert_same(records: Iterable[Record], name: Callable[[int], str],
                opts: ReplayOptions) -> bytes:
    want = python_text(records, name, opts)
    got = native_text(records, name, opts)
    if got != want:  # the first line that differs, not two megabytes
        for k, (a, b) in enumerate(zip(want.splitlines(), got.splitlines(), strict=False)):
            assert b == a, (k, opts)
    assert got == want, opts
    return got


@cache
def spilled(isa: str, program: str, args: tuple[str, ...]
            ) -> tuple[SpillSink, Callable[[int], str], int]:
    """The program's records as `run` keeps them (cli/run.py spill_trace), the names
    `run` shows and the word width."""
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend="int3"),
                      warn=lambda m: None)
    sink = SpillSink()
    process.sink = sink
    with _stdout_to_devnull():
        result = process.run()
    name = read_symbols(result.image).namer(result.image.isa.code_mask)
    return sink, name, 8 * by_name(isa).identity.word_size


def option_sets(sink: SpillSink, name: Callable[[int], str], bits: int
                ) -> list[ReplayOptions]:
    """Options naming functions main calls: a third of the way through them (by first call)
    for -F, two thirds for -N, the middle one for --start."""
    seen: dict[str, None] = {}
    for rec in sink:
        if isinstance(rec, Entry) and (seen or name(rec.func) == "main"):
            seen.setdefault(name(rec.func))
    names = list(seen)[1:] or ["main"]
    some, other, middle = (names[len(names) // 3], names[2 * len(names) // 3],
                           names[len(names) // 2])
    base = ReplayOptions(word_bits=bits)
    return [
        base,
        ReplayOptions(word_bits=bits, start=None),
        ReplayOptions(word_bits=bits, start=middle),
        ReplayOptions(word_bits=bits, filters=(some,), notrace=(other,), depth=3),
        ReplayOptions(word_bits=bits, start=None, filters=(some, other)),
        ReplayOptions(word_bits=bits, notrace=(some,), depth=0),
        ReplayOptions(word_bits=bits, arg_counts={some: 0, middle: 1}, default_args=2),
        ReplayOptions(word_bits=bits, start=None, show_args=False, show_retval=False,
                      header=False),
    ]


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # `calls all` writes calls-out.txt where it runs


@pytest.mark.parametrize("isa", ISAS)
def test_real_traces_print_as_the_reference(isa: str) -> None:
    packed = 0
    for program, args in PROGRAMS:
        if not bin_path(isa, program).exists():
            continue
        sink, name, bits = spilled(isa, program, args)
        assert len(sink) > 100, (program, args)
        for opts in option_sets(sink, name, bits):
            text = assert_same(sink, name, opts)
            assert opts.filters or opts.depth == 0 or text.count(b"\n") > 10, (program, opts)
        packed += sum(len(part) for part in sink.segments() if not isinstance(part, list))
        if program == "calls":  # 10^4 deep: past MAX_INDENT, and the indentation stops
            text = native_text(sink, name, ReplayOptions(word_bits=bits))
            assert b"[depth %d] " % (MAX_INDENT + 1) in text
        if program in ("threads", "sigctx"):
            text = native_text(sink, name, ReplayOptions(word_bits=bits))
            assert b"# thread 1\n" in text if program == "threads" else \
                b"/* signal handler */" in text
    assert packed > 100_000  # C wrote most records: its bytes were formatted in C


def test_a_list_of_records_prints_as_the_reference() -> None:
    sink, name, bits = spilled("x86_64", "calls", ("all",))
    records = list(sink)
    for opts in option_sets(sink, name, bits)[:4]:
        assert_same(records, name, opts)


# ---------------------------------------------------------------- the command


def run_command(tmp: Path, formatter: str, *argv: str) -> tuple[dict[str, str], str, int]:
    """(trace files, stderr, status) of `emutrace run ARGV` in tmp, the text formatted by
    C or (`python`) by the reference alone; host pids replaced by their order."""
    tmp.mkdir()
    stub = "import emutrace.cli.run as r; r.write_replay = lambda *a: False; " \
        if formatter == "python" else ""
    code = f"import sys; {stub}from emutrace.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "run", *argv], cwd=tmp, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=600)
    texts = {p.name: p.read_text() for p in sorted(tmp.glob("t*")) if p.stat().st_size}
    # the children in the order the program forked them (its trace's _Fork results; sorted
    # pids would misorder them when the host's pids wrap around between two forks), then
    # any child only a trace file names
    forked = [int(pid) for pid in re.findall(r"_Fork\(.*\) = (\d+);", texts.get("t", ""))
              if pid != "0"]
    others = {int(n[2:]) for n in texts if n != "t"}
    others |= {int(pid) for text in texts.values()
               for pid in re.findall(r"_Fork\(.*\) = (\d+);", text) if pid != "0"}
    order = [proc.pid, *dict.fromkeys(forked), *sorted(others - set(forked))]
    pids = {pid: f"PID{k}" for k, pid in enumerate(order)}

    def plain(text: str) -> str:
        return re.sub(r"\b(\d+)\b", lambda m: pids.get(int(m.group(1)), m.group(1)), text)

    return ({plain(n): plain(t) for n, t in texts.items()}, plain(err.decode()),
            proc.returncode)


@pytest.mark.parametrize(("isa", "options", "program", "args"), [
    ("x86_64", ("-o", "t", "-A", "main@arg1"), "signals", ()),
    ("riscv64", (), "fib", ("12",)),  # to stderr
])
def test_the_command_prints_what_the_reference_prints(
        isa: str, options: tuple[str, ...], program: str, args: tuple[str, ...],
        tmp_path: Path) -> None:
    argv = (*options, str(bin_path(isa, program)), *args)
    want = run_command(tmp_path / "py", "python", *argv)
    got = run_command(tmp_path / "c", "c", *argv)
    assert got == want
    files, err, _status = got
    if "-o" in options:  # forked children's traces, a handler frame
        assert len(files) > 2 and "signal handler" in files["t"]
    else:
        assert "fib(12) {" in err


# the command, each process's text formatted both ways: `check.<pid>` says whether they were
# the same, the file gets the reference's
BOTH_WAYS = """
import io, os, sys
import emutrace.cli.run as run
from emutrace.native.replaytext import write_replay
from emutrace.trace.format import iter_replay_lines

def both(records, name, options, out):
    c = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert write_replay(records, name, options, c)
    c.flush()
    text = "".join(line + "\\n" for line in iter_replay_lines(records, name, options))
    with open(f"check.{os.getpid()}", "w") as f:
        f.write("same" if c.buffer.getvalue() == text.encode() else "DIFFERENT")
    out.write(text)

run.write_lines = both
from emutrace.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("isa", ISAS)
def test_signals_print_as_the_reference(isa: str, tmp_path: Path) -> None:
    """`signals`: forked children (each writes its own FILE.<pid>), handlers, a fatal
    signal; every process's text the same both ways."""
    proc = subprocess.run([sys.executable, "-c", BOTH_WAYS, "run", "-o", "t", "-D", "5",
                           str(bin_path(isa, "signals"))], cwd=tmp_path, env=ENV,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    checks = {p.name: p.read_text() for p in tmp_path.glob("check.*")}
    traces = [p for p in tmp_path.glob("t*") if p.stat().st_size]
    assert len(checks) >= len(traces) > 2, (proc.stderr.decode(), checks)
    assert set(checks.values()) == {"same"}
    assert "signal handler" in (tmp_path / "t").read_text()


# ---------------------------------------------------------------- made-up traces

FUNCS = {0x1000: "main", 0x1010: "alpha", 0x1020: "beta", 0x1030: "gamma", 0x2000: "delta",
         0: "at_zero", 0xFFFF_FFFF_F000: "high"}
C_KINDS = ("auto", "int", "uint", "hex", "oct", "char", "uchar", "bool", "ptr")
STRING_KINDS = ("str", "buf")
WIDTHS = (8, 16, 32, 64)
# words at the edges of how values print: a char's sign, auto's decimal range and its
# 32-bit negatives on 64-bit ISAs, the sign bits
EDGES = (0, 1, 0x20, 0x27, 0x5C, 0x7E, 0x7F, 0x80, 0xFF, 99_999, 100_000, 100_001,
         2**31 - 1, 2**31, 0xFFFF_0000, 0xFFFF_0001, 0xFFFF_FFFF, 2**32, 2**63 - 1, 2**63,
         2**64 - 100_001, 2**64 - 100_000, 2**64 - 1)
# strings: what quote_c escapes, and around its 64-character limit
TEXTS = st.text(st.sampled_from('ab "\\\n\t\r\x00\x1f\x7f\x80\xe9\xff'), max_size=70) \
    | st.text(st.characters(max_codepoint=0xFF), min_size=63, max_size=66)


def words(bits: int) -> st.SearchStrategy[int]:
    mask = (1 << bits) - 1
    return st.sampled_from(sorted({e & mask for e in EDGES})) | st.integers(0, mask)


Slot = tuple[str, int]  # a value's kind and width: what a function's layout holds


@st.composite
def c_value(draw: st.DrawFn, slot: Slot) -> Value:
    """A value C's writer may write: an integer kind, or a `char *` with the copy."""
    kind, bits = slot
    if kind in STRING_KINDS:
        raw = draw(st.sampled_from((0, 0x5000, (1 << bits) - 1)))
        return Value(kind, bits, raw, draw(st.none() | TEXTS))
    return Value(kind, bits, draw(words(bits)))


SLOTS = st.tuples(st.sampled_from(C_KINDS), st.sampled_from(WIDTHS)) \
    | st.tuples(st.sampled_from(STRING_KINDS), st.sampled_from((32, 64)))


@st.composite
def python_value(draw: st.DrawFn) -> object:
    """Values only Python writes: enums, floats, structs, unknown kinds, plain words, text
    beyond Latin-1."""
    return draw(st.one_of(
        st.builds(Value, st.just("enum"), st.just(32), st.integers(0, 2**32 - 1),
                  st.none() | st.sampled_from(("RED", "GREEN"))),
        st.builds(Value, st.just("float"), st.sampled_from((32, 64)),
                  st.integers(0, 2**32 - 1)),
        st.builds(Value, st.just("struct"), st.just(64), st.integers(0, 2**64 - 1),
                  st.none() | st.just("{ .a = 1, .b = 2 }")),
        st.builds(Value, st.just("weird"), st.just(16), st.integers(0, 2**16 - 1)),
        st.integers(-(2**70), 2**70),
        st.builds(Value, st.just("str"), st.just(64), st.just(0x40), st.text(max_size=70)),
    ))


def c_writes(values: Iterable[object]) -> bool:
    return all(isinstance(v, Value) and v.kind in (*C_KINDS, *STRING_KINDS) for v in values)


@st.composite
def traces(draw: st.DrawFn) -> list[tuple[Record, bool]]:
    """(record, C may write it) in order: each thread's records nested, threads interleaved,
    frames sometimes left open at the end.  Each function has a layout its values mostly
    follow (as a function's calls do), so C's records hold many values."""
    out: list[tuple[Record, bool]] = []
    tids = draw(st.sampled_from(((0,), (0,), (0, 1), (0, 2, 1))))
    layouts = {f: draw(st.lists(SLOTS, max_size=4)) for f in FUNCS}
    returns = {f: draw(st.none() | SLOTS) for f in FUNCS}
    stacks: dict[int, list[tuple[int, int]]] = {t: [] for t in tids}  # (func, entry time)
    time = 0
    for _ in range(draw(st.integers(0, 80))):
        tid = draw(st.sampled_from(tids))
        stack = stacks[tid]
        time += draw(st.integers(0, 3000))
        if stack and draw(st.integers(0, 9)) < 4:
            func, start = stack.pop()
            unwound = draw(st.integers(0, 9)) == 0
            at_exit = unwound and draw(st.booleans())
            slot = returns[func]
            ret: object = None
            if not unwound and slot is not None:
                ret = draw(c_value(slot)) if draw(st.integers(0, 9)) else draw(python_value())
            duration = time - start if draw(st.integers(0, 9)) else draw(
                st.integers(-(2**62), 2**62))
            rec: Record = Exit(time, len(stack), func, ret, duration, unwound, at_exit, tid)
            c_may = tid == 0 and not unwound and duration == time - start and c_writes(
                [] if ret is None else [ret])
        else:
            func = draw(st.sampled_from(sorted(FUNCS)))
            if draw(st.integers(0, 9)):
                args = tuple(draw(c_value(slot)) for slot in layouts[func])
            else:
                args = tuple(draw(st.lists(python_value(), max_size=5)))
            entered = "call" if draw(st.integers(0, 5)) else draw(
                st.sampled_from(("signal", "trap")))
            rec = Entry(time, len(stack), func, args, tid, entered)
            stack.append((func, time))
            c_may = tid == 0 and entered == "call" and c_writes(args)
        out.append((rec, c_may and draw(st.integers(0, 5)) > 0))
    if draw(st.booleans()):  # close every frame, so exits of C's may end the trace
        for tid in tids:
            while stacks[tid]:
                func, start = stacks[tid].pop()
                time += 1
                out.append((Exit(time, len(stacks[tid]), func, None, time - start, tid=tid),
                            tid == 0))
    return out


def spill_of(trace: list[tuple[Record, bool]]) -> SpillSink:
    """The records in a spill file: C's (where the writer could have written them and the
    sink accepts their layout) packed, Python's as records."""
    sink = SpillSink()
    data, count = b"", 0
    for rec, c_may in trace:
        values = list(rec.args) if isinstance(rec, Entry) else \
            ([] if rec.retval is None else [rec.retval])
        plan = sink.plan_values(rec.func, values, isinstance(rec, Exit)) \
            if c_may and all(isinstance(v, Value) for v in values) else None
        if plan is None:
            if data:
                sink.write_packed(data, count, rec.time)
                data, count = b"", 0
            sink.write([rec])
            continue
        layout = (sink._rets if isinstance(rec, Exit) else sink._args).get(rec.func)
        packed_values = spill.pack_layout(values, layout) if plan and layout else b""  # type: ignore[arg-type]
        head = pack_record(rec, bool(packed_values))
        if rec.depth >= 1024:  # the spill file's deep record: magic 6, the depth after it
            word = int.from_bytes(head[8:], "little") & ~(7 << 3) | (6 << 3)
            head = head[:8] + word.to_bytes(8, "little") + rec.depth.to_bytes(8, "little")
        data += head + packed_values
        count += 1
    if data:
        sink.write_packed(data, count, 0)
    return sink


@st.composite
def options(draw: st.DrawFn) -> ReplayOptions:
    names = sorted(FUNCS.values())
    some = st.sampled_from(names)
    return ReplayOptions(
        filters=tuple(draw(st.lists(some, max_size=2))) if draw(st.integers(0, 3)) == 0
        else (),
        notrace=tuple(draw(st.lists(some, max_size=1))) if draw(st.integers(0, 3)) == 0
        else (),
        depth=draw(st.none() | st.integers(0, 4)) if draw(st.integers(0, 3)) == 0 else None,
        start=draw(st.none() | st.none() | st.sampled_from([*names, "nowhere"])),
        show_args=draw(st.booleans()), show_retval=draw(st.booleans()),
        word_bits=draw(st.sampled_from((32, 64))), header=draw(st.booleans()),
        arg_counts=draw(st.dictionaries(st.sampled_from(names), st.integers(0, 6),
                                        max_size=2)),
        default_args=draw(st.none() | st.integers(0, 3)))


@pytest.fixture
def small_spill_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments on file as well as held, several of each."""
    monkeypatch.setattr(spill, "CHUNK", 5)
    monkeypatch.setattr(spill, "HELD", 11)
    monkeypatch.setattr(spill, "HELD_BYTES", 200)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(trace=traces(), opts=options())
def test_made_up_traces_print_as_the_reference(trace: list[tuple[Record, bool]],
                                               opts: ReplayOptions,
                                               small_spill_parts: None) -> None:
    records = [rec for rec, _ in trace]
    assert_same(records, FUNCS.__getitem__, opts)
    try:
        want = python_text(spill_of(trace), FUNCS.__getitem__, opts)
    except (ValueError, IndexError, KeyError):
        return  # (a trace the reference cannot read back either)
    assert native_text(spill_of(trace), FUNCS.__getitem__, opts) == want


def test_deep_records_of_both_kinds(small_spill_parts: None) -> None:
    """1,100 levels: C's records past 1,024 carry their depth after them; Python's entries
    in between; lines past MAX_INDENT say their depth."""
    trace: list[tuple[Record, bool]] = []
    for k in range(1100):
        trace.append((Entry(k, k, 0x1010 + 16 * (k % 3), (Value("int", 32, k),)), k % 7 != 0))
    for k in reversed(range(1100)):
        trace.append((Exit(5000 - k, k, 0x1010 + 16 * (k % 3), Value("auto", 64, k),
                           5000 - 2 * k), k % 5 != 0))
    names = {0x1010: "alpha", 0x1020: "beta", 0x1030: "gamma"}.__getitem__
    sink = spill_of(trace)
    assert any(not isinstance(part, list) for part in sink.segments())
    text = assert_same(sink, names, ReplayOptions(start=None))
    assert b"| " + b"  " * MAX_INDENT + b"[depth 1099] beta(1099) = 1099;\n" in text
    assert_same(sink, names, ReplayOptions(start="beta", depth=1050, filters=("gamma",)))


def test_every_value_c_reads_prints_as_the_reference() -> None:
    """Each integer kind at each width with every edge word, and strings with what quote_c
    escapes and around its limit, as C's records (one function per kind and width, as
    arguments and as return values)."""
    trace: list[tuple[Record, bool]] = []
    slots = [(kind, bits) for kind in C_KINDS for bits in WIDTHS]
    slots += [(kind, bits) for kind in STRING_KINDS for bits in (32, 64)]
    texts = [None, "", "a", 'q"uote', "back\\slash", "\n\t\r\x00\x7f\x80\xe9\xff",
             "x" * 63, "y" * 64, "z" * 65, "\t" * 70]
    time = 0
    for k, (kind, bits) in enumerate(slots):
        func = 0x4000 + 16 * k
        if kind in STRING_KINDS:
            values = [Value(kind, bits, raw, text) for text in texts
                      for raw in (0, 0x5000, (1 << bits) - 1)]
        else:
            values = [Value(kind, bits, raw) for raw in sorted({e & ((1 << bits) - 1)
                                                                for e in EDGES})]
        for v in values:
            trace += [(Entry(time, 0, func, (v, v)), True),
                      (Exit(time + 5, 0, func, v, 5), True)]
            time += 10
    sink = spill_of(trace)
    assert all(not isinstance(part, list) for part in sink.segments())  # all C's
    text = assert_same(sink, lambda f: f"f{f:x}", ReplayOptions(start=None))
    assert b"(100000, 100000) = 100000;" in text and b"= 0x186a1;" in text


# ---------------------------------------------------------------- where C declines


def reference_written(records: Iterable[Record], name: Callable[[int], str],
                      opts: ReplayOptions, stream: io.TextIOWrapper) -> bytes:
    write_lines(records, name, opts, stream)
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue()


def test_where_c_declines_the_reference_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    sink, name, bits = spilled("x86_64", "typed", ())
    opts = ReplayOptions(word_bits=bits)
    want = python_text(sink, name, opts)
    with monkeypatch.context() as m:  # no library (not built, or not loadable)
        m.setattr(replaytext, "load", lambda: None)
        plain = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        assert not write_replay(sink, name, opts, plain)
        assert reference_written(sink, name, opts, plain) == want
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    assert not write_replay(sink, name, opts, latin)  # not UTF-8
    assert reference_written(sink, name, opts, latin) == want
    assert not write_replay(sink, name, opts, io.StringIO())  # no binary layer
    timed = ReplayOptions(word_bits=bits, time_filter=50)  # -t: the reference's stream
    assert not write_replay(sink, name, timed, io.TextIOWrapper(io.BytesIO()))
    assert not write_replay(iter(list(sink)), name, opts, io.TextIOWrapper(io.BytesIO()))
    odd = spill_of([(Entry(0, 0, 0x1000, (Value("int", 32, 5),)), True),
                    (Exit(9, 0, 0x1000, None, 9), True)])
    odd._args[0x1000] = (("float",), (64,), (8,))  # a layout C does not read
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert not write_replay(odd, FUNCS.__getitem__, ReplayOptions(start=None), stream)
    assert stream.buffer.getvalue() == b""  # type: ignore[attr-defined]


def test_an_exit_without_entry_fails_after_the_lines_before_it() -> None:
    records: list[Record] = [Entry(0, 0, 0x1000), Entry(1, 1, 0x1010), Exit(2, 1, 0x1010,
                                                                          None, 1),
                             Exit(3, 0, 0x1000, None, 3), Exit(4, 0, 0x1020, None, 4)]
    opts = ReplayOptions(start=None)
    with pytest.raises(ValueError, match="exit without entry"):
        python_text(records, FUNCS.__getitem__, opts)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")
    with pytest.raises(ValueError, match="exit without entry"):
        write_replay(records, FUNCS.__getitem__, opts, stream)
    lines = list(_lines_until_error(records, opts))
    assert raw.getvalue() == "".join(line + "\n" for line in lines).encode()


def _lines_until_error(records: list[Record], opts: ReplayOptions) -> Iterator[str]:
    try:
        yield from iter_replay_lines(records, FUNCS.__getitem__, opts)
    except ValueError:
        return


def test_control_characters_in_names_are_escaped_by_both() -> None:
    """A hostile symbol name (an escape sequence, a newline) prints as \\xNN in both
    formatters, the same bytes, and no raw control character reaches the output."""
    sink, name, bits = spilled("x86_64", "calls", ("all",))
    records = list(sink)
    evil = {}

    def hostile(func: int) -> str:
        return evil.setdefault(func, f"\x1b[2J{name(func)}\n\x07")

    opts = ReplayOptions(word_bits=bits, start=None)  # (no function is called "main")
    text = python_text(records, hostile, opts)
    assert text == native_text(records, hostile, opts)
    body = text.decode()
    assert "\\x1b[2J" in body and "\\x0a\\x07" in body
    assert not any(ch in body for ch in "\x1b\x07") and "\n\n" not in body
