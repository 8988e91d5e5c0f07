"""Options that would do nothing say so: a function pattern (-F, -N, -A, --start) naming no
function of the program is a one-line warning naming it (the run goes on); an option the
subcommand would ignore (`record -o`, `record -F`, `run --backend none -o`, `--symbols` of a
file without function symbols) is refused with exit 64 before the program runs; `run --tid`
shows only the threads named."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import bin_path, run_emutrace

FIB = bin_path("x86_64", "fib")


def warnings(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if "no function of that name" in line]


def test_patterns_naming_no_function_warn_and_the_run_goes_on() -> None:
    done = run_emutrace("run", "--backend", "int3", "-F", "fibb", "-N", "nosuch", "-A",
                        "fob@arg2", "--start", "mian", FIB, "5")
    assert done.returncode == 0 and done.stdout == b"fib(5) = 5\n"
    got = warnings(done.stderr)
    assert [line.split(":")[1].strip() for line in got] == [
        "-F fibb", "-N nosuch", "-A fob", "--start mian"], got
    # the trace is written: an -F naming nothing filters nothing, as uftrace's replay
    # (tests/test_filter_semantics.py compares it), from the first function shown
    lines = done.stderr.decode().splitlines()
    trace = lines[lines.index("# DURATION [insns]   FUNCTION") + 1:]
    assert "| __libc_start_main_impl(" in trace[0], trace[:3]
    assert any(re.search(r"\| +main\(", line) for line in trace), trace


def test_patterns_naming_functions_do_not_warn() -> None:
    done = run_emutrace("run", "--backend", "int3", "-F", "fib", "-A", "fib@arg1",
                        "--start", "main", FIB, "5")
    assert done.returncode == 0 and warnings(done.stderr) == []


def test_cxx_names_match_as_shown_or_mangled() -> None:
    """A C++ function named as the trace shows it (--demangle simple) or by its symbol."""
    cxx = bin_path("x86_64", "cxx")
    shown = run_emutrace("run", "--backend", "int3", "-F", "geo::Rect::area", cxx)
    assert shown.returncode == 0 and warnings(shown.stderr) == []
    mangled = subprocess.run(["nm", "--defined-only", str(cxx)], capture_output=True,
                             text=True, check=True).stdout.split()
    symbol = next(s for s in mangled if s.startswith("_ZNK3geo4Rect4area"))
    done = run_emutrace("run", "--backend", "int3", "-F", symbol, cxx)
    assert done.returncode == 0 and warnings(done.stderr) == []
    typo = run_emutrace("run", "--backend", "int3", "-F", "geo::Rect::aera", cxx)
    assert len(warnings(typo.stderr)) == 1


def test_start_main_in_a_stripped_program_says_so() -> None:
    done = run_emutrace("run", "--backend", "int3", "--start", "main",
                        bin_path("x86_64", "calls.stripped"))
    got = warnings(done.stderr)
    assert len(got) == 1 and "--start main" in got[0] and "no symbols" in got[0], got


@pytest.mark.parametrize("option", [["-o", "t.txt"], ["-F", "fib"], ["-N", "fib"],
                                    ["-D", "2"], ["--start", "fib"], ["--tid", "0"],
                                    ["--stats"]])
def test_record_refuses_what_it_would_ignore(option: list[str], tmp_path: Path) -> None:
    done = run_emutrace("record", *option, "-d", tmp_path / "d", FIB, "5", cwd=tmp_path)
    assert done.returncode == 64 and done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and option[0] in lines[0], lines
    assert not (tmp_path / "d").exists() and not (tmp_path / "t.txt").exists()


@pytest.mark.parametrize("option", [["-o", "t.txt"], ["-F", "fib"], ["-A", "fib@arg1"],
                                    ["--start", "fib"], ["--tid", "0"]])
def test_run_without_a_backend_refuses_trace_options(option: list[str],
                                                     tmp_path: Path) -> None:
    done = run_emutrace("run", "--backend", "none", *option, FIB, "5", cwd=tmp_path)
    assert done.returncode == 64 and done.stdout == b""
    assert option[0] in done.stderr.decode() and not (tmp_path / "t.txt").exists()


def test_symbols_of_a_file_without_function_symbols_is_refused(tmp_path: Path) -> None:
    """`strip --strip-unneeded` keeps a .symtab of sections and files: no function names."""
    if shutil.which("strip") is None:
        pytest.skip("no strip(1)")
    bare = tmp_path / "bare"
    subprocess.run(["strip", "--strip-unneeded", "-o", str(bare), str(FIB)], check=True)
    subprocess.run(["objcopy", "--add-symbol", "marker=.text:0,section", str(bare)],
                   check=True)
    done = run_emutrace("run", "--backend", "int3", "--symbols", bare,
                        bin_path("x86_64", "calls.stripped"))
    assert done.returncode == 64 and b"--symbols" in done.stderr and done.stdout == b""


def test_run_tid_shows_only_those_threads() -> None:
    program = bin_path("x86_64", "threads")
    every = run_emutrace("run", "--backend", "int3", program)
    one = run_emutrace("run", "--backend", "int3", "--tid", "1", program)
    assert every.returncode == one.returncode == 0
    sections = [line for line in every.stderr.decode().splitlines()
                if line.startswith("# thread ")]
    assert "# thread 0" in sections and "# thread 1" in sections
    text = one.stderr.decode()
    assert "# thread 1" in text.splitlines() and "# thread 0" not in text
    # the thread's section has the calls of the full trace's (the values hold pids)
    full = every.stderr.decode().split("# thread 1\n")[1].split("# thread ")[0]
    assert full and calls(full) == calls(text.split("# thread 1\n")[1])


def calls(text: str) -> list[str]:
    return re.findall(r"\| +(\w+)\(", text)


def test_machine_refuses_fork_following(tmp_path: Path) -> None:
    """A kernel image forks no host process: the option would do nothing."""
    done = run_emutrace("run", "--backend", "int3", "--machine", "virt-arm64",
                        "--no-follow-forks", tmp_path / "image", cwd=tmp_path)
    assert done.returncode == 64 and b"follow-forks" in done.stderr


def test_replay_patterns_naming_no_function_warn(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert run_emutrace("record", "-d", data, FIB, "5", cwd=tmp_path).returncode == 0
    typo = run_emutrace("replay", "-d", data, "-F", "fibb", "--start", "mian", cwd=tmp_path)
    assert typo.returncode == 0
    got = warnings(typo.stderr)
    assert [line.split(":")[1].strip() for line in got] == ["-F fibb", "--start mian"], got
    right = run_emutrace("replay", "-d", data, "-F", "fib", "--start", "main", cwd=tmp_path)
    assert right.returncode == 0 and warnings(right.stderr) == [] and b"fib(" in right.stdout


@pytest.mark.parametrize("command", ["run", "record"])
def test_unconfined_without_a_native_target_is_refused(command: str, tmp_path: Path) -> None:
    """--unconfined names the native target's sandbox; an emulated run is always confined."""
    done = subprocess.run([sys.executable, "-m", "emutrace", command, "--unconfined",
                           str(FIB), "5"], cwd=tmp_path, capture_output=True, timeout=60)
    assert done.returncode == 64 and done.stdout == b""
    assert done.stderr.decode().count("\n") == 1 and "--target native" in done.stderr.decode()
    assert not (tmp_path / "uftrace.data").exists()
