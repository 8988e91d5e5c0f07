"""Oracle: every committed test program behaves under emutrace exactly as under
qemu-<isa>-static — same stdout, same stderr, same exit status — on all ten ISAs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import ISAS, TESTBINS, run_emutrace, run_qemu, shell_status

# Programs that hit a documented emulator gap: (isa, program, args) → capability key.  The
# test is an xfail exactly while the ISA's capability table says the feature does not work.
KNOWN_GAPS = {
    ("s390x", "edge_exrl", ()): Cap.EXRL_RELATIVE_LONG,
    ("s390x", "edge_exrl", ("brasl",)): Cap.EXRL_RELATIVE_LONG,
}
EXTRA_ARGS = {("s390x", "edge_exrl"): [("basr",), ("brasl",)]}

SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp", "fileio",
             "heap", "float", "tail", "deep", "exit42", "all")


def cases() -> list:
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for isa in ISAS:
        out += [(isa, "calls", (s,)) for s in SCENARIOS]
        out += [(isa, "calls.stripped", ("all",)), (isa, "calls.instr", ("all",)),
                (isa, "fib", ("20",)), (isa, "hello_fs", ())]
        if (TESTBINS / isa / "calls.pie").exists():
            out.append((isa, "calls.pie", ("all",)))
        for p in sorted((TESTBINS / isa).glob("edge_*")):
            out += [(isa, p.name, a) for a in [(), *EXTRA_ARGS.get((isa, p.name), [])]]
    return [pytest.param(*c, marks=gap_mark(*c)) for c in out]


def gap_mark(isa: str, program: str, args: tuple[str, ...]) -> list[pytest.MarkDecorator]:
    cap = KNOWN_GAPS.get((isa, program, args))
    if cap is None:
        return []
    state = by_name(isa).capability(cap)
    return [pytest.mark.xfail(not state.works, reason=state.reason, strict=True)]


@pytest.mark.oracle
@pytest.mark.parametrize("backend", ["none", "int3"])
@pytest.mark.parametrize(("isa", "program", "args"), cases(),
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_same_as_qemu(isa: str, program: str, args: tuple[str, ...], backend: str,
                      tmp_path: Path, emutrace_here: Callable[..., CompletedProcess]) -> None:
    """With tracing on (int3, the trace written out) the guest behaves exactly the same.
    The trace goes to /dev/null: `deep` and `all` write 0.2-0.8 GB of text per cell, which
    filled the disk across runs (pytest keeps three base directories).  `emutrace run` runs
    in this process (conftest's `emutrace_here`: ~800 cells); the tests below run it as a
    command."""
    path = TESTBINS / isa / program
    (tmp_path / "q").mkdir()
    (tmp_path / "e").mkdir()
    want = run_qemu(isa, path, *args, cwd=tmp_path / "q")
    # (the trace to /dev/null: the guest's own stdout and stderr are compared; untraced,
    # `run` takes no trace option)
    trace = ["-o", os.devnull] if backend != "none" else []
    got = emutrace_here("run", "--backend", backend, *trace, path, *args,
                        cwd=tmp_path / "e")
    assert got.stdout == want.stdout
    assert got.stderr == want.stderr
    assert got.returncode == shell_status(want.returncode)
    assert list((tmp_path / "e").iterdir()) == []  # fileio cleans up after itself


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_crash_is_reported_like_a_killed_process(isa: str, tmp_path: Path) -> None:
    """`calls crash` dereferences NULL: same stdout and status as qemu (128 + SIGSEGV); our
    stderr is one line naming the signal, the PC with its symbol and the faulting address."""
    path = TESTBINS / isa / "calls"
    want = run_qemu(isa, path, "crash", cwd=tmp_path)
    got = run_emutrace("run", path, "crash", cwd=tmp_path)
    assert got.stdout == want.stdout
    assert shell_status(want.returncode) == 139
    assert got.returncode == 139
    lines = got.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("emutrace: guest killed by SIGSEGV at pc 0x")
    assert "crash_deref" in lines[0]
    assert "memory at 0x0" in lines[0]


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_stdin_passes_through(isa: str, tmp_path: Path) -> None:
    """The guest's stdin is the process's stdin: `calls` ignores it, busybox tests read it;
    here a freestanding program must still exit normally with stdin closed early."""
    path = TESTBINS / isa / "hello_fs"
    got = run_emutrace("run", path, cwd=tmp_path, stdin=b"ignored\n")
    want = run_qemu(isa, path, cwd=tmp_path, stdin=b"ignored\n")
    assert (got.stdout, got.returncode) == (want.stdout, shell_status(want.returncode))
