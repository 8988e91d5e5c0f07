"""`emutrace run` on the native engine: C writes run's records itself (native/ufwrite.c
through backends/native_writer.py into the spill file, trace/spill.py, which reads its
uftrace-format bytes back into records when the text is printed).

* Differential, records: on all ten ISAs the records `run` keeps (a `SpillSink`, as
  cli/run.py's `spill_trace` makes it) equal the Python reference's, record for record —
  times, depths, functions, argument and return values (integers written by C; strings,
  floats, structs by Python), unwinding — on test_native_writer's cells (fib: C wrote almost
  every record; calls tail; typed; on x86_64 also `calls deep`, whose recursion past
  uftrace's 1024 levels C writes with each record's depth, and `calls longjmp`), strings
  (`calls.O0.instr tail`: C writes the `char *` values), and with
  `--backend step` (fib, calls tail: step.c writes tail calls too; x86_64, aarch64, mips).
  The text is a pure function of the records and the options (trace/format.py), so equal
  records give equal text under every filter, depth, start and argument option; the text
  the formatter makes from the spill file's rows (C's values read as their text) equals
  the text of the reference's records.
* Differential, the command: `emutrace run -o FILE --engine native` prints byte for byte
  what `--engine python` prints (the trace files, the forked children's FILE.<pid>, the
  guest's stdout, emutrace's stderr, the exit status) on a program that forks, takes
  signals and is killed by one (pids, the host's, mapped to their order); and with
  options on a budget stop (`--max-insns`: the open frames closed `at exit`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.session import Process, RunConfig
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.spill import SpillSink

from .conftest import ENV, ISAS, bin_path
from .test_native_engine import _stdout_to_devnull
from .test_native_writer import CELLS, LOWERED, ONCE_ISA, STEP_CELLS, STRING_CELL

# once (x86_64): recursion 10^4 deep, past uftrace's 1024 levels (the spill file keeps those
# records: C writes each with its depth after it), and longjmp unwinding
ONCE = (("calls", ("deep",)), ("calls", ("longjmp",)))


def run_records(isa: str, program: str, args: tuple[str, ...], engine: str,
                backend: str = "int3") -> tuple[Process, SpillSink]:
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend=backend,
                                engine=engine), warn=lambda m: None)
    sink = SpillSink()
    process.sink = sink  # as cli/run.py spill_trace
    process.run()
    return process, sink


@pytest.mark.parametrize("isa", ISAS)
def test_native_run_records_equal_python(isa: str) -> None:
    for program, args in (*CELLS, *(ONCE if isa == ONCE_ISA else ())):
        if not bin_path(isa, program).exists():
            continue
        with _stdout_to_devnull():
            _, want = run_records(isa, program, args, "python")
            process, got = run_records(isa, program, args, "native")
        assert len(want) > 100, (program, args)
        assert len(got) == len(want), (program, args)
        assert list(got) == list(want), (program, args)
        # the formatter reads C's records as rows, their values as text (SpillSink.rows)
        opts = ReplayOptions(start=None, word_bits=8 * by_name(isa).identity.word_size)
        assert list(iter_replay_lines(got, hex, opts)) == \
            list(iter_replay_lines(list(want), hex, opts)), (program, args)
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if program == "fib" and isa in LOWERED or args == ("deep",):  # C wrote them
            assert stats["c_records"] > 0.9 * len(want), (stats, len(want))


@pytest.mark.parametrize("isa", ISAS)
def test_native_run_keeps_strings(isa: str) -> None:
    """The spill file holds a `char *` value as its word and the bytes the hot path copied
    (trace/spill.py pack_copy, ufwrite.c UW_COPY): the records read back equal the
    reference's (the Value's word and text), and so does the text printed from its rows."""
    program, args = STRING_CELL
    with _stdout_to_devnull():
        _, want = run_records(isa, program, args, "python")
        process, got = run_records(isa, program, args, "native")
    assert list(got) == list(want)
    opts = ReplayOptions(start=None, word_bits=8 * by_name(isa).identity.word_size)
    lines = list(iter_replay_lines(got, hex, opts))
    assert lines == list(iter_replay_lines(list(want), hex, opts))
    assert sum('"' in line for line in lines) > 100  # strings shown
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_strings_written"] > 100, stats


@pytest.mark.parametrize("isa", ["x86_64", "aarch64", "mips"])
def test_native_step_run_records_equal_python(isa: str) -> None:
    """`run --backend step`: step.c hands the same writer its calls, returns and tail calls
    (test_native_writer's step cells; its directories are compared on all ten ISAs, the
    sink is what differs here)."""
    for program, args in STEP_CELLS[:2]:
        _, want = run_records(isa, program, args, "python", "step")
        process, got = run_records(isa, program, args, "native", "step")
        assert len(want) > 100, (program, args)
        assert list(got) == list(want), (program, args)
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if program == "fib":
            assert stats["c_records"] > 0.8 * len(want), (stats, len(want))


def emutrace_run(tmp: Path, engine: str, *argv: str) -> tuple[dict[str, str], str, str, int]:
    """(trace files by name, stdout, stderr, exit status) of `emutrace run -o tmp/t`, each
    host pid in them replaced by its order (the process's own first, then its children's:
    FILE.<pid> and the values fork returned)."""
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "--engine", engine,
                             "-o", str(tmp / "t"), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV, cwd=tmp)
    out, err = proc.communicate(timeout=600)
    # (a child its parent kills at once may or may not have opened its empty FILE.<pid>
    # yet: a race of the host's fork, under either engine; its pid is fork's value)
    texts = {p.name: p.read_text() for p in sorted(tmp.glob("t*")) if p.stat().st_size}
    children = {int(name[2:]) for name in texts if name != "t"}  # t.<pid>
    children |= {int(pid) for text in texts.values()  # and those killed before they wrote
                 for pid in re.findall(r"_Fork\(.*\) = (\d+);", text) if pid != "0"}
    pids = {pid: f"PID{k}" for k, pid in enumerate([proc.pid, *sorted(children)])}

    def plain(text: str) -> str:
        return re.sub(r"\b(\d+|0x[0-9a-f]+)\b", lambda m: pids.get(
            int(m.group(1), 0), m.group(1)), text)

    files = {plain(name): plain(text) for name, text in texts.items()}
    return files, plain(out.decode()), plain(err.decode()), proc.returncode


@pytest.mark.parametrize(("isa", "options", "program", "args"), [
    ("x86_64", (), "signals", ()),
    ("aarch64", ("--max-insns", "150000", "-A", "fib@arg1", "-D", "6"), "fib", ("20",)),
])
def test_native_run_prints_what_python_prints(isa: str, options: tuple[str, ...], program: str,
                                               args: tuple[str, ...], tmp_path: Path) -> None:
    argv = (*options, str(bin_path(isa, program)), *args)
    want = emutrace_run(tmp_path / "py", "python", *argv)
    got = emutrace_run(tmp_path / "nat", "native", *argv)
    assert got == want
    files, _out, err, status = want
    assert len(files["t"].splitlines()) > 20
    if program == "signals":  # forked children's traces, a handler frame, a fatal signal
        assert len(files) > 2 and "signal handler" in files["t"] and status == 128 + 10
    else:
        assert "budget exhausted" in err and "(at exit) */" in files["t"]
