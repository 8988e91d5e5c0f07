"""Optimised code on every ISA with every backend (testbins optimised tier, README
"Optimised tier"): emutrace's trace of the very binary that records itself equals that
binary's own record of its machine-level calls (tests/optimised_oracle.py: inlined copies
dropped by the compiler's DWARF, clone and `.cold` suffixes ignored).

Programs, on all ten ISAs: `calls.{O0,Os,O3,split}.instr`, riscv64 `calls.msr.instr`
(-msave-restore), `savres.Os.instr` (ppc, ppc64le, riscv64: out-of-line register saves
and a noreturn call at the end of main) and `cold.split.instr` (hot/cold partitions that
run).  Backends: int3 (lazy and strict cleanup), step, bts, btf, hwbp and entry.

Cost (CI): one test per (ISA, program) runs every backend, so the qemu oracle and the DWARF
inline ranges are read once and discovery's per-file memo (emutrace/discover/memo.py) is
shared by the seven runs.  `calls` runs the `recursion` scenario (self-recursive inlining,
clones) and the `tail` scenario (sibling calls, jumps through pointers) with every backend
but int3-strict, which runs `tail` alone: its recursion costs 13 s on x86_64 -O3 (it
re-patches at every call and return) and is checked for every mechanism on `calls.instr`
by tests/test_trace_oracle.py.

A gap is a strict xfail read from the ISA's capability table: `optimised_code` (every
backend) and `entry_out_of_line_saves` (entry on savres and riscv64's -msave-restore
build), each in its own cell.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.events import Exit

from .conftest import ISAS, bin_path, run_qemu
from .optimised_oracle import oracle, symbols, traced

LEVELS = ("O0", "Os", "O3", "split")
BACKENDS = ("int3", "int3-strict", "step", "bts", "btf", "hwbp", "entry")
# the programs whose prologues and epilogues go through out-of-line register save/restore
# routines (ppc `_savegpr0_N`, RISC-V `__riscv_save_N`): entry's declared gap
OUT_OF_LINE_SAVES = ("savres.Os.instr", "calls.msr.instr")


def programs(isa: str) -> list[str]:
    names = [f"calls.{level}.instr" for level in LEVELS]
    names += [n for n in ("calls.msr.instr", "savres.Os.instr", "cold.split.instr")
              if bin_path(isa, n).exists()]
    return names


def runs(prog: str, backend: str) -> tuple[str, ...]:
    if prog.startswith("savres"):
        return ("4",)
    if prog.startswith("cold"):
        return ("9",)
    return ("tail",) if backend == "int3-strict" else ("recursion", "tail")


def gap(isa: str, prog: str, backend: str) -> str | None:
    """The capability-table reason why backend cannot trace prog on isa, if any."""
    caps = by_name(isa).capabilities
    names = [Cap.OPTIMISED_CODE]
    if backend == "entry" and prog in OUT_OF_LINE_SAVES:
        names.append(Cap.ENTRY_OUT_OF_LINE_SAVES)
    for name in names:
        cap = caps.get(name)
        if cap is not None and not cap.works:
            return cap.reason
    return None


@dataclass(frozen=True)
class Expected:
    """What qemu ran: the canonical self-record, the names it keeps, the exit status."""

    want: str
    keep: set[str]
    record: str
    status: int


class Oracle:
    """The qemu run and the record of each scenario of one binary, made once."""

    def __init__(self, isa: str, prog: str) -> None:
        self.isa, self.path = isa, str(bin_path(isa, prog))
        self.table, self.thumb = symbols(self.path), by_name(isa).thumb_bit
        self._runs: dict[str, Expected] = {}

    def expected(self, arg: str) -> Expected:
        if arg not in self._runs:
            done = run_qemu(self.isa, self.path, arg)
            record = done.stderr.decode()
            want, keep = oracle(record, self.path, self.table, self.thumb)
            self._runs[arg] = Expected(want, keep, record, done.returncode)
        return self._runs[arg]


def check(o: Oracle, backend: str, arg: str, tmp_path: Path) -> None:
    exp = o.expected(arg)
    name, cleanup = ("int3", "strict") if backend == "int3-strict" else (backend, "lazy")
    out = tmp_path / f"{backend}-{arg}.rec"
    config = RunConfig(o.path, [arg], backend=name, cleanup=cleanup,
                       env={"CALLTRACE_OUT": str(out)}, allow_write=[str(tmp_path)])
    result = Process(config, warn=lambda m: None).run()
    assert result.exit_code == exp.status
    assert out.read_text() == exp.record  # the same run under emutrace as under qemu
    assert exp.want.count("\n") > 10
    assert traced(result.records, o.table, o.thumb, exp.keep) == exp.want
    # nothing in these runs leaves a function but by returning (exit() aside), so no frame
    # of the whole trace, helpers and libc included, may be closed as unwound
    unwound = [hex(r.func) for r in result.records
               if isinstance(r, Exit) and r.unwound and not r.at_exit]
    assert unwound == []


CELLS = [pytest.param(isa, prog, id=f"{isa}-{prog}") for isa in ISAS for prog in programs(isa)]
GAPS = [pytest.param(isa, prog, backend, id=f"{isa}-{prog}-{backend}",
                     marks=pytest.mark.xfail(reason=reason, strict=True))
        for isa in ISAS for prog in programs(isa) for backend in BACKENDS
        if (reason := gap(isa, prog, backend)) is not None]


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "prog"), CELLS)
def test_every_backend_equals_self_record(isa: str, prog: str, tmp_path: Path) -> None:
    o = Oracle(isa, prog)
    failed = []
    for backend in BACKENDS:
        if gap(isa, prog, backend) is not None:
            continue  # its own strict-xfail cell (test_declared_gaps)
        for arg in runs(prog, backend):
            try:
                check(o, backend, arg, tmp_path)
            except AssertionError as e:
                failed.append(f"{backend} {arg}: {str(e).splitlines()[0][:200]}")
    assert failed == []


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "prog", "backend"), GAPS)
def test_declared_gaps(isa: str, prog: str, backend: str, tmp_path: Path) -> None:
    o = Oracle(isa, prog)
    for arg in runs(prog, backend):
        check(o, backend, arg, tmp_path)


def cold_marks(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities.get(Cap.COLD_PARTITIONS)
    if cap is None or cap.works:
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


def references_to(isa: str, path: str, name: str) -> list[int]:
    """Addresses of the instructions that name `name` (objdump's `<name>` / `<name+0x8>`,
    ELFv2's local entry), from the cross binutils' disassembly."""
    triple = by_name(isa).identity.triple
    text = subprocess.run([f"{triple}-objdump", "-d", path], capture_output=True,
                          text=True, check=True).stdout
    ref = re.compile(rf"^\s*([0-9a-f]+):.*<{re.escape(name)}(\+0x[0-9a-f]+)?>\s*$")
    return [int(m.group(1), 16) for line in text.splitlines() if (m := ref.match(line))]


@pytest.mark.oracle
@pytest.mark.parametrize("isa", [pytest.param(isa, marks=cold_marks(isa)) for isa in ISAS])
def test_cold_parts_run(isa: str) -> None:
    """cold.split.instr's unlikely paths are GCC partitions `work.cold`, `settle.cold` and
    `pick.cold`, which run: report() is named (objdump, the cross binutils) only by
    instructions inside those parts, and the binary's own record shows it entered 4 times.
    So the tier above traces code in `.cold` parts.  arm: GCC refuses the partitioning
    (capability `cold_partitions`)."""
    path = str(bin_path(isa, "cold.split.instr"))
    table = symbols(path)
    parts = [f for f in table.funcs if f.part_of in ("work", "settle", "pick")]
    report = table.by_name("report")
    assert report is not None
    refs = [a for a in references_to(isa, path, "report")
            if not report.start <= a < report.start + report.size]
    holders = {next((f.name for f in parts if f.start <= a < f.start + f.size), None)
               for a in refs}
    assert holders == {"work.cold", "settle.cold", "pick.cold"}
    record = run_qemu(isa, path, "9").stderr.decode().splitlines()
    entries = [line for line in record if line.startswith(f"> {report.start:#x} ")]
    assert len(entries) == 4
