"""`emutrace run --backend step`: the trace goes to stderr or -o FILE, the guest's own
stdout and exit status stay exactly as without tracing (checked against qemu-user)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from .conftest import ISAS, bin_path, run_emutrace, run_qemu, shell_status

# `emutrace_here` (tests/conftest.py): the command line in this process; the crash test keeps
# `python -m emutrace` as a command (its exit status is the process's)
Here = Callable[..., CompletedProcess]


@pytest.mark.parametrize("isa", ISAS)
def test_trace_to_file_keeps_guest_output(isa: str, tmp_path: Path, emutrace_here: Here) -> None:
    calls = bin_path(isa, "calls")
    out = tmp_path / "trace.txt"
    got = emutrace_here("run", "--backend", "step", "-o", out, "-F", "scenario_recursion",
                        "-D", "2", calls, "recursion", cwd=tmp_path)
    want = run_qemu(isa, calls, "recursion", cwd=tmp_path)
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, b"", 0)
    lines = out.read_text().splitlines()
    assert lines[0] == "# DURATION [insns]   FUNCTION"
    assert lines[1].endswith("| scenario_recursion(") or "scenario_recursion(" in lines[1]
    # depth 2 under the filter: fact(10) is shown as a leaf call returning 10! (a long)
    fact = [line for line in lines if "| " in line and line.split("| ", 1)[1].startswith(
        "  fact(10")]
    assert len(fact) == 1 and fact[0].endswith("= 3628800;"), lines
    assert lines[-1].endswith("} /* scenario_recursion */") or "scenario_recursion" in lines[-1]


@pytest.mark.parametrize("isa", ["x86_64", "s390x", "arm", "mipsel"])
def test_crash_reports_the_shadow_call_stack(isa: str, tmp_path: Path) -> None:
    calls = bin_path(isa, "calls")
    got = run_emutrace("run", "--backend", "step", "-o", tmp_path / "t", calls, "crash")
    want = run_qemu(isa, calls, "crash")
    assert got.stdout == want.stdout
    assert got.returncode == shell_status(want.returncode) == 139
    err = got.stderr.decode().splitlines()
    assert err[0].startswith("emutrace: guest killed by SIGSEGV")
    assert err[1].startswith("emutrace: call stack: ")
    assert err[1].endswith("main > run_scenario > scenario_crash > crash_deref")
    # the trace written so far is kept: the open frame is closed "at exit"
    assert "crash_deref" in (tmp_path / "t").read_text()


@pytest.mark.parametrize("isa", ["x86_64", "mipsel", "ppc64le"])
def test_two_runs_print_byte_identical_traces(isa: str, tmp_path: Path,
                                               emutrace_here: Here) -> None:
    """Timestamps are guest instructions: no host time leaks into the trace."""
    calls = bin_path(isa, "calls")
    texts = []
    for n in range(2):
        out = tmp_path / f"t{n}"
        got = emutrace_here("run", "--backend", "int3", "-o", out, calls, "qsort", cwd=tmp_path)
        assert got.returncode == 0
        texts.append(out.read_bytes())
    assert texts[0] == texts[1]
    assert b"compare_ints(" in texts[0]
    durations = [line.split(b"|")[0].strip() for line in texts[0].splitlines()[1:]]
    assert any(d.isdigit() and int(d) > 0 for d in durations)


@pytest.mark.parametrize("isa", ISAS)
def test_arguments_per_abi_with_dwarf_counts(isa: str, tmp_path: Path,
                                             emutrace_here: Here) -> None:
    """combine9(11, 22, …, 99) in calls.c: DWARF says 9 parameters, so all nine are shown,
    read from the ISA's argument registers and then its stack slots; -A limits mixed9."""
    out = tmp_path / "t"
    got = emutrace_here("run", "--backend", "int3", "-o", out, "-F", "scenario_args9", "-D",
                        "2", "-A", "mixed9@arg2", bin_path(isa, "calls"), "args9", cwd=tmp_path)
    assert got.returncode == 0
    text = out.read_text()
    assert "combine9(11, 22, 33, 44, 55, 66, 77, 88, 99) = 3135;" in text
    assert "combine9(-1, 2, -3, 4, -5, 6, -7, 8, -9) = -45;" in text
    assert "mixed9(1, 2) = " in text


def test_bad_argument_spec_is_refused_before_running(tmp_path: Path, emutrace_here: Here
                                                     ) -> None:
    got = emutrace_here("run", "--backend", "int3", "-A", "combine9",
                        bin_path("x86_64", "calls"), "args9", cwd=tmp_path)
    assert got.returncode == 64 and got.stdout == b""
    assert got.stderr.decode().startswith("emutrace: -A combine9: expected FUNC@argN")


def test_parameter_counts_from_dwarf() -> None:
    from emutrace.discover.prototypes import parameter_counts

    counts = parameter_counts(str(bin_path("s390x", "calls")))
    # from testbins/src/calls.c: combine9 has 9 parameters, fact 1, mixed9 9, main 2
    assert (counts["combine9"], counts["fact"], counts["mixed9"], counts["main"]) == (9, 1, 9, 2)
    assert parameter_counts(str(bin_path("s390x", "calls.stripped"))) == {}


def test_uftraces_auto_args_and_estimate_return() -> None:
    """`-a` is uftrace's spelling of emutrace's default (values shown: the same trace);
    `-e` has no use (no return address is replaced) and is a usage error."""
    plain = run_emutrace("run", "--backend", "int3", bin_path("x86_64", "conform"), "calls")
    auto = run_emutrace("run", "-a", "--backend", "int3", bin_path("x86_64", "conform"),
                        "calls")
    assert auto.returncode == plain.returncode == 0
    assert b"c_leaf(4, 1) = 13;" in plain.stderr
    assert auto.stderr == plain.stderr
    refused = run_emutrace("run", "-e", "--backend", "int3", bin_path("x86_64", "fib"))
    assert refused.returncode == 64 and refused.stderr.count(b"\n") == 1
    assert b"never replaces a return address" in refused.stderr
