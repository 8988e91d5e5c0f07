"""Optimised code on every ISA (testbins optimised tier: `calls.O0.instr`, `calls.Os.instr`,
`calls.O3.instr`, `calls.split.instr`, riscv64 `calls.msr.instr`): emutrace's trace of the
very binary that records itself equals that binary's own record of its machine-level calls
(tests/optimised_oracle.py: inlined copies dropped by the compiler's DWARF, clone suffixes
ignored), on all ten ISAs with `int3` (lazy) at every level; `step`, `bts` and `int3
--cleanup strict` on the -Os tier, `btf`, `hwbp` and `entry` there on x86_64, ppc64le and
riscv64 (and riscv64's -msave-restore build for `step`); `savres` with `int3`, `step`,
`bts` and `entry`.  A gap is a strict xfail read from the ISA's capability table
(`optimised_code`, `entry_out_of_line_saves`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.session import Process, RunConfig
from emutrace.trace.events import Exit

from .conftest import ISAS, bin_path, run_qemu
from .optimised_oracle import oracle, symbols, traced

LEVELS = ("O0", "Os", "O3", "split")
# recursion: self-recursive inlining (fact into fact) and clones; tail: sibling calls and
# jumps through pointers; both small enough for every cell
SCENARIOS = ("recursion", "tail")
# btf, hwbp and entry run every scenario on one CISC, one ELFv2 and the RISC-V ISA, and
# (test time) the tail scenario alone on the other seven
SUBSET = ("x86_64", "ppc64le", "riscv64")
SHORT = ("tail",)


def programs(isa: str) -> list[str]:
    names = [f"calls.{level}.instr" for level in LEVELS]
    if bin_path(isa, "calls.msr.instr").exists():
        names.append("calls.msr.instr")
    return names


def marks(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capability("optimised_code")
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


def cells(backends: tuple[str, ...], levels: tuple[str, ...] | None = None) -> list:  # type: ignore[type-arg]
    out = []
    for isa in ISAS:
        for prog in programs(isa):
            if levels is not None and prog.split(".")[1] not in levels:
                continue
            for backend in backends:
                out.append(pytest.param(isa, prog, backend, marks=marks(isa),
                                        id=f"{isa}-{prog}-{backend}"))
    return out


def check(isa: str, prog: str, backend: str, tmp_path: Path, cleanup: str = "lazy",
          runs: tuple[str, ...] = SCENARIOS) -> None:
    path = str(bin_path(isa, prog))
    table, thumb = symbols(path), by_name(isa).thumb_bit
    for arg in runs:
        done = run_qemu(isa, path, arg)
        record = done.stderr.decode()
        want, keep = oracle(record, path, table, thumb)
        out = tmp_path / f"{arg}.rec"
        config = RunConfig(path, [arg], backend=backend, cleanup=cleanup,
                           env={"CALLTRACE_OUT": str(out)}, allow_write=[str(tmp_path)])
        result = Process(config, warn=lambda m: None).run()
        assert result.exit_code == done.returncode
        assert out.read_text() == record  # the same run under emutrace as under qemu
        assert want.count("\n") > 10
        assert traced(result.records, table, thumb, keep) == want, arg
        # nothing in these runs leaves a function but by returning (exit() aside), so no
        # frame of the whole trace, helpers and libc included, may be closed as unwound
        unwound = [hex(r.func) for r in result.records
                   if isinstance(r, Exit) and r.unwound and not r.at_exit]
        assert unwound == [], arg


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "prog", "backend"),
                         cells(("int3",)) + cells(("step",), ("Os", "msr")))
def test_optimised_trace_equals_self_record(isa: str, prog: str, backend: str,
                                            tmp_path: Path) -> None:
    check(isa, prog, backend, tmp_path)


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "prog", "backend"),
                         cells(("bts", "int3-strict", "btf", "hwbp", "entry"), ("Os",)))
def test_optimised_other_mechanisms(isa: str, prog: str, backend: str, tmp_path: Path) -> None:
    if backend == "int3-strict":
        check(isa, prog, "int3", tmp_path, cleanup="strict")
    elif backend in ("bts",) or isa in SUBSET:
        check(isa, prog, backend, tmp_path)
    else:
        check(isa, prog, backend, tmp_path, runs=SHORT)


def savres_marks(isa: str, backend: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capability("entry_out_of_line_saves")
    if backend == "entry" and not cap.works:
        return [pytest.mark.xfail(reason=cap.reason, strict=True)]
    return marks(isa)


SAVRES = [pytest.param(isa, backend, marks=savres_marks(isa, backend), id=f"{isa}-{backend}")
          for isa in ISAS if bin_path(isa, "savres.Os.instr").exists()
          for backend in ("int3", "step", "bts", "entry")]


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "backend"), SAVRES)
def test_out_of_line_register_saves(isa: str, backend: str, tmp_path: Path) -> None:
    """ppc/ppc64le `_savegpr0_N`/`_restgpr0_N` chains and RISC-V `__riscv_save_N` (called
    with `jal t0`), run at every recorded event by the -Os hooks, and `exit` from a
    noreturn function called at the end of main."""
    check(isa, "savres.Os.instr", backend, tmp_path, runs=("4",))
