"""`emutrace ci` on a third-party project: zlib's own test programs (Debian's source package,
fetched by scripts/setup.sh, built by scripts/build_ci_demo.sh with the cross compilers) in
the committed matrix examples/ci/zlib/matrix.toml, against its committed baselines, on three
of its fifteen ISAs: x86_64 and riscv64 on Unicorn, m68k in qemu-m68k's gdb stub (one of the
four ISAs only the gdb target runs; the full matrix's run and report: bench/results/ci-zlib.md).

Oracles: the unchanged build's traces equal the committed baselines (traces of the full
matrix's run, one file per ISA, equal across the fifteen ISAs); a rebuild of one ISA's
programs from a source with one changed branch in inflate() (the script's REGRESSION:
inflate_fast() only with 4096 bytes of output space, not 258) fails exactly that ISA's
infcover cell, and the first divergence lies where the source changed: a call inflate() made
to inflate_fast() in the baseline is gone, at the first line where the trace file and the
baseline file differ (a plain line comparison).  The program's own checks do not see the
change: infcover's output and exit status under qemu-user are the same for both builds.

The programs are built once and kept in .cache/ci-demo/test/{unchanged,regressed}/<isa>
(rebuilt only when the script's variant marker says otherwise); each test runs them from
copies in its own directory (example writes foo.gz where it runs).
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import REPO, qemu_binary, run_emutrace

DEMO = REPO / "examples" / "ci" / "zlib"
CACHE = REPO / ".cache" / "ci-demo"
BUILDS = CACHE / "test"
UNICORN_ISAS = ("x86_64", "riscv64")
GDB_ISA = "m68k"  # target gdb in the committed matrix
PROGRAMS = ("example", "infcover", "minigzip", "input.txt")


def build(out: Path, isas: tuple[str, ...], regress: str | None = None) -> None:
    argv = ["bash", str(REPO / "scripts" / "build_ci_demo.sh"), "--out", str(out),
            "--isas", " ".join(isas)]
    done = subprocess.run(argv + (["--regress", regress] if regress else []),
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def builds() -> Path:
    """The unchanged programs of the three ISAs, and riscv64's and m68k's regressed ones."""
    if not (CACHE / "zlib" / "zlib.h").is_file():
        pytest.fail(f"zlib's source is not in {CACHE / 'zlib'}: scripts/setup.sh (make "
                    "setup) fetches it")
    BUILDS.mkdir(parents=True, exist_ok=True)
    with open(BUILDS / ".lock", "w") as lock:  # one build at a time (xdist's workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        build(BUILDS / "unchanged", (*UNICORN_ISAS, GDB_ISA))
        for isa in ("riscv64", GDB_ISA):
            build(BUILDS / "regressed", (isa,), regress=isa)
    for isa in ("riscv64", GDB_ISA):
        assert (BUILDS / "regressed" / isa / ".variant").read_text().strip() == "regressed"
    return BUILDS


def matrix(root: Path, programs: dict[str, dict[str, str]]) -> Path:
    """The committed matrix, run in root: programs {name: {ISA: variant}}, each ISA's
    programs copied from the build of that variant into root/build/<isa>; the baselines the
    committed ones."""
    isas: list[str] = []
    for variants in programs.values():
        for isa, variant in variants.items():
            isas += [isa] if isa not in isas else []
            if not (root / "build" / isa).exists():
                (root / "build" / isa).mkdir(parents=True)
                for name in PROGRAMS:
                    shutil.copy2(BUILDS / variant / isa / name, root / "build" / isa)
    text = (DEMO / "matrix.toml").read_text()
    text, n = re.subn(r"(?ms)^isas = \[.*?\]", f"isas = {isas!r}", text)
    assert n == 1
    text = text.replace('baselines = "baselines"', f'baselines = "{DEMO / "baselines"}"')
    for name in ("example", "infcover", "minigzip"):  # a program not asked for: gone
        table = re.search(rf'(?ms)^\[\[program\]\]\nname = "{name}".*?(?=^\[\[|\Z)', text)
        assert table is not None, name
        text = text.replace(table[0], f"{table[0].rstrip()}\nisas = "
                                      f"{list(programs[name])!r}\n\n" if name in programs
                                      else "")
    (root / "matrix.toml").write_text(text)
    return root / "matrix.toml"


def ci(path: Path, out: Path) -> tuple[int, dict[str, tuple[str, str]]]:
    """The exit status of `emutrace ci` and its JUnit cases: cell -> (status, message)."""
    done = run_emutrace("ci", path, "--workers", "0", "--unconfined", "-o", out,
                        timeout=1200)
    assert "Traceback" not in done.stderr.decode(), done.stderr
    cases = {}
    for case in ET.parse(out / "junit.xml").getroot().iter("testcase"):
        bad = [c for c in case if c.tag in ("failure", "error")]
        cases[f"{case.get('classname')}/{case.get('name')}"] = \
            (bad[0].tag, bad[0].get("message", "")) if bad else ("pass", "")
    return done.returncode, cases


def own_check(isa: str, program: Path) -> tuple[int, bytes, bytes]:
    """infcover run by qemu-user: zlib's own verdict on its inflate."""
    done = subprocess.run([qemu_binary(isa), str(program)], capture_output=True, timeout=300,
                          cwd=program.parent)
    return done.returncode, done.stdout, done.stderr


def test_the_unchanged_build_equals_the_baselines_on_unicorn_and_gdb(
        builds: Path, tmp_path: Path) -> None:
    """Every program on the two Unicorn ISAs, infcover (the program the regression shows
    in) on m68k: a gdb cell costs tens of seconds; the full matrix runs all twelve."""
    both = dict.fromkeys(UNICORN_ISAS, "unchanged")
    path = matrix(tmp_path, {"example": both, "infcover": {**both, GDB_ISA: "unchanged"},
                             "minigzip": both})
    status, cases = ci(path, tmp_path / "out")
    assert status == 0, cases
    assert set(cases) == {f"{p}.int3/{isa}" for p in ("example", "infcover", "minigzip")
                          for isa in UNICORN_ISAS} | {f"infcover.int3/{GDB_ISA}"}
    assert f"| {GDB_ISA} (gdb) |" in (tmp_path / "out" / "summary.md").read_text()


def changed_branch_caught(builds: Path, tmp_path: Path, isa: str, message: str) -> None:
    """message (the failing cell's) points at the changed branch, at the first line where
    the cell's trace file and its baseline differ; infcover's own checks under qemu-user
    see no difference."""
    match = re.search(r"differs from its baseline at event (\d+): baseline: (.*?) \\?\| "
                      r"this run: (.*?);", message)
    assert match is not None, message
    assert match[2].endswith("inflate() > inflate_fast()"), message
    assert match[3].startswith("main() > inflate() > ") and \
        not match[3].endswith("inflate_fast()"), message
    assert "differs from x86_64" in message, message
    baseline = (DEMO / "baselines" / "infcover" / "int3" / f"{isa}.trace").read_text()
    traced = (tmp_path / "out" / "traces" / "infcover" / "int3" / f"{isa}.trace").read_text()
    first = next(n for n, (a, b) in enumerate(zip(baseline.splitlines(),
                                                  traced.splitlines(), strict=False)) if a != b)
    assert int(match[1]) == first, (match[1], first)  # line 0: the header; line n: event n
    assert own_check(isa, builds / "regressed" / isa / "infcover") == \
        own_check(isa, builds / "unchanged" / isa / "infcover")


def test_a_changed_branch_on_riscv64_fails_its_infcover_cell_alone(
        builds: Path, tmp_path: Path) -> None:
    cells = {"x86_64": "unchanged", "riscv64": "regressed"}
    path = matrix(tmp_path, dict.fromkeys(("example", "infcover", "minigzip"), cells))
    status, cases = ci(path, tmp_path / "out")
    assert status == 1
    failed = {cell: m for cell, (s, m) in cases.items() if s != "pass"}
    assert list(failed) == ["infcover.int3/riscv64"], failed
    changed_branch_caught(builds, tmp_path, "riscv64", failed["infcover.int3/riscv64"])


def test_a_changed_branch_on_a_gdb_isa_fails_its_cell(builds: Path, tmp_path: Path) -> None:
    """m68k, traced in qemu-m68k's gdb stub: infcover alone (the full matrix's report shows
    example and minigzip passing on a regressed gdb ISA)."""
    path = matrix(tmp_path, {"infcover": {"x86_64": "unchanged", GDB_ISA: "regressed"}})
    status, cases = ci(path, tmp_path / "out")
    assert status == 1
    failed = {cell: m for cell, (s, m) in cases.items() if s != "pass"}
    assert list(failed) == [f"infcover.int3/{GDB_ISA}"], cases
    changed_branch_caught(builds, tmp_path, GDB_ISA, failed[f"infcover.int3/{GDB_ISA}"])
