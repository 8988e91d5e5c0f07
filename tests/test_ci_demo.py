"""`emutrace ci` on a third-party project: zlib's own test programs (Debian's source package,
built by scripts/build_ci_demo.sh with the cross compilers) in the committed matrix
examples/ci/zlib/matrix.toml, on two ISAs here (the full matrix's run and report:
bench/results/ci-zlib.md).

Oracles: the unchanged build's traces equal the committed baselines (traces of the full
matrix's run, one file per ISA, equal across the ten ISAs); a rebuild of one ISA's programs
from a source with one changed branch in inflate() (the script's REGRESSION: inflate_fast()
only with 4096 bytes of output space, not 258) fails exactly that ISA's infcover cell, and
the first divergence lies where the source changed: a call inflate() made to inflate_fast()
in the baseline is gone.  The program's own checks do not see the change: infcover's output
and exit status under qemu-user are the same for both builds.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import ENV, REPO, qemu_binary

DEMO = REPO / "examples" / "ci" / "zlib"
ISAS = ("x86_64", "riscv64")
REGRESSED = "riscv64"


def build(out: Path, regress: str | None = None) -> None:
    argv = ["bash", str(REPO / "scripts" / "build_ci_demo.sh"), "--out", str(out),
            "--isas", " ".join(ISAS)]
    done = subprocess.run(argv + (["--regress", regress] if regress else []),
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr


def ci(matrix: Path, out: Path) -> tuple[int, dict[str, tuple[str, str]]]:
    """The exit status of `emutrace ci` and its JUnit cases: cell -> (status, message)."""
    done = subprocess.run([sys.executable, "-m", "emutrace", "ci", str(matrix), "--workers",
                           "0", "-o", str(out)], capture_output=True, text=True, timeout=1200,
                          env=ENV)
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


def test_zlib_matrix_catches_a_changed_branch_on_one_isa(tmp_path: Path) -> None:
    # the committed matrix on two ISAs, its programs built here, its baselines the committed
    text = (DEMO / "matrix.toml").read_text()
    text, n = re.subn(r"(?ms)^isas = \[.*?\]", f"isas = {list(ISAS)!r}", text)
    assert n == 1
    text = text.replace('baselines = "baselines"', f'baselines = "{DEMO / "baselines"}"')
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(text)
    build(tmp_path / "build")
    status, cases = ci(matrix, tmp_path / "clean")
    assert status == 0, cases
    assert set(cases) == {f"{p}.int3/{isa}" for p in ("example", "infcover", "minigzip")
                          for isa in ISAS}
    clean = own_check(REGRESSED, tmp_path / "build" / REGRESSED / "infcover")
    assert clean[0] == 0 and clean[2], clean

    build(tmp_path / "build", regress=REGRESSED)
    assert (tmp_path / "build" / REGRESSED / ".variant").read_text().strip() == "regressed"
    assert own_check(REGRESSED, tmp_path / "build" / REGRESSED / "infcover") == clean
    status, cases = ci(matrix, tmp_path / "regressed")
    assert status == 1
    failed = {cell: m for cell, (s, m) in cases.items() if s != "pass"}
    assert list(failed) == [f"infcover.int3/{REGRESSED}"], failed
    message = failed[f"infcover.int3/{REGRESSED}"]
    # the baseline's side of the first divergence: inflate() calling inflate_fast()
    baseline = re.search(r"differs from its baseline at event \d+: baseline: (.*?) \\?\| "
                         r"this run: (.*?);", message)
    assert baseline is not None, message
    assert baseline[1].endswith("inflate() > inflate_fast()"), message
    assert baseline[2].startswith("main() > inflate() > ") and \
        not baseline[2].endswith("inflate_fast()"), message
    assert "differs from x86_64" in message, message
