"""`emutrace ci MATRIX.toml`: the matrix run in this process and on a Dask local cluster of
two worker processes, a worker killed while it runs a cell, a baseline changed by hand, a
cell of target gdb (qemu-user's stub), bad matrix files.

Oracles: which ISAs' `isadep char` traces differ comes from the ABI facts the program's
branch depends on (char signedness, as the ISA modules declare it) and from `emutrace diff`'s
verdict on the same template; `fib 5`'s trace ends with the value the program prints
(fib(5) = 5) and exit 0; a baseline changed by hand gives the divergence where it was
changed; the JUnit document has the shape pytest's own `--junitxml` writer gives.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace.cli.main import main
from emutrace.isa import by_name
from emutrace.matrix.engine import run_on_dask
from emutrace.matrix.isolated import run_isolated
from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import Cell, read_matrix
from emutrace.matrix.tracefile import parse_trace

from .conftest import REPO

distributed = pytest.importorskip("distributed")

ISAS3 = ["x86_64", "aarch64", "riscv64"]
MATRIX = f"""
[matrix]
isas = {ISAS3!r}
backends = ["int3"]
baselines = "baselines"
timeout = 300

[[program]]
name = "fib"
command = "{REPO}/testbins/{{isa}}/fib 5"

[[program]]
name = "isadep"
command = "{REPO}/testbins/{{isa}}/isadep char"
"""


def cases(junit: Path) -> dict[str, tuple[str, str]]:
    """classname/name -> (status, failure or error message) of a JUnit file."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        bad = [c for c in case if c.tag in ("failure", "error")]
        status = bad[0].tag if bad else "pass"
        out[f"{case.get('classname')}/{case.get('name')}"] = \
            (status, bad[0].get("message", "") if bad else "")
    return out


def traces(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.trace"))}


@pytest.fixture
def cluster() -> Iterator[str]:
    """A Dask local cluster of two worker processes (one thread each): its scheduler's
    address, as `--scheduler` takes it."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0",
                                  silence_logs=logging.ERROR) as local:
        yield local.scheduler_address


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The matrix run in this process with --update-baselines: its directory."""
    root = tmp_path_factory.mktemp("ci")
    (root / "m.toml").write_text(MATRIX)
    code = main(["ci", str(root / "m.toml"), "--workers", "0", "-o", str(root / "here"),
                 "--update-baselines"])
    assert code == 1  # isadep differs across ISAs
    return root


def char_signed(isa: str) -> bool:
    return by_name(isa).c_values.char_signed


def test_in_process_verdicts_follow_the_abi_and_diff(here: Path) -> None:
    got = cases(here / "here" / "junit.xml")
    assert len(got) == 6
    for isa in ISAS3:
        assert got[f"fib.int3/{isa}"] == ("pass", "")
    # isadep char takes the branch of the ISA's char signedness: the majority's ISAs pass,
    # the others fail, pointed at classify() with the other sign
    signed = [isa for isa in ISAS3 if char_signed(isa)]
    unsigned = [isa for isa in ISAS3 if not char_signed(isa)]
    minority = signed if len(signed) < len(unsigned) else unsigned
    for isa in ISAS3:
        status, message = got[f"isadep.int3/{isa}"]
        assert status == ("failure" if isa in minority else "pass"), (isa, message)
        if isa in minority:
            assert "at event 2:" in message and "classify(-56)" in message \
                and "classify(200)" in message, message
    diff = subprocess.run([sys.executable, "-m", "emutrace", "diff", "--arch",
                           ",".join(ISAS3), f"{REPO}/testbins/{{isa}}/isadep char"],
                          capture_output=True, text=True, timeout=300)
    assert diff.returncode == 1
    groups = sorted(line.split(": ", 1)[1].split() for line in diff.stdout.splitlines()
                    if line[:2] == "  " and line[3:5] == ": ")
    assert groups == sorted([signed, unsigned])
    # fib(5) = 5 as the program prints it, exit 0
    fib = parse_trace((here / "baselines" / "fib" / "int3" / "x86_64.trace").read_text())
    assert [(t.kind, t.name, t.values) for t in fib.tokens[-3:]] == [
        ("return", "fib", ("5",)), ("return", "main", ("0",)), ("exit", "exit", ("0",))]
    summary = (here / "here" / "summary.md").read_text()
    assert "| fib | ok | ok | ok |" in summary


def test_a_local_cluster_of_two_workers_gives_the_in_process_result(here: Path) -> None:
    """`--workers 2`: the command's own LocalCluster of two worker processes."""
    out = here / "cluster"
    code = main(["ci", str(here / "m.toml"), "--workers", "2", "-o", str(out)])
    assert code == 1
    assert traces(out / "traces") == traces(here / "here" / "traces")
    assert cases(out / "junit.xml") == cases(here / "here" / "junit.xml")


def die_once(marker: str, cell: Cell) -> Outcome:
    """The aarch64 cell kills its own worker process the first time it runs."""
    if cell.isa == "aarch64" and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return run_isolated(cell)


def test_a_killed_worker_loses_no_cell(here: Path, cluster: str) -> None:
    cells = [c for c in read_matrix(here / "m.toml").cells(dict(os.environ))
             if c.program == "fib"]
    marker = here / "killed"
    finished: list[tuple[str, Outcome]] = []
    run_on_dask(cells, functools.partial(die_once, str(marker)),
                lambda cell, outcome: finished.append((cell.key, outcome)), 2, cluster)
    assert marker.exists()  # a worker did die running a cell
    assert sorted(key for key, _ in finished) == sorted(c.key for c in cells)
    for key, outcome in finished:
        assert outcome.ok, outcome.error
        isa = key.rsplit("/", 1)[1]
        assert outcome.text == (here / "here" / "traces" / "fib" / "int3" /
                                f"{isa}.trace").read_text()


def test_a_changed_baseline_fails_that_cell_alone(here: Path) -> None:
    root = here / "changed"
    root.mkdir()
    (root / "m.toml").write_text(MATRIX.replace('isadep char"', 'isadep char"\nisas = '
                                                '["x86_64"]'))
    baselines = root / "baselines"
    for isa in ISAS3:
        path = baselines / "fib" / "int3" / f"{isa}.trace"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((here / "baselines" / "fib" / "int3" / f"{isa}.trace").read_text())
    path = baselines / "isadep" / "int3" / "x86_64.trace"
    path.parent.mkdir(parents=True)
    path.write_text((here / "baselines" / "isadep" / "int3" / "x86_64.trace").read_text())
    edited = baselines / "fib" / "int3" / "riscv64.trace"
    lines = edited.read_text().splitlines(keepends=True)
    at = lines.index('["return",1,"fib",["5"]]\n')
    lines[at] = '["return",1,"fib",["8"]]\n'  # fib(5) returned 8: event `at` (line 1 header)
    edited.write_text("".join(lines))
    code = main(["ci", str(root / "m.toml"), "--workers", "0", "-o", str(root / "out")])
    assert code == 1
    got = cases(root / "out" / "junit.xml")
    assert {k for k, (status, _) in got.items() if status != "pass"} == {"fib.int3/riscv64"}
    message = got["fib.int3/riscv64"][1]
    assert message.startswith(f"differs from its baseline at event {at}: "), message
    assert "main(2, ptr) > fib(5) returns = 8" in message
    assert "this run: main(2, ptr) > fib(5) returns = 5" in message


def test_the_junit_file_has_pytest_junitxml_shape(here: Path, tmp_path: Path) -> None:
    """Every element and attribute of ours is one pytest's writer uses for the same thing
    (a passing, a failing and an erroring test), and the counts add up."""
    (tmp_path / "test_x.py").write_text(
        "import pytest\n@pytest.fixture\ndef broken():\n    raise OSError('x')\n"
        "def test_pass():\n    pass\ndef test_fail():\n    assert 0\n"
        "def test_error(broken):\n    pass\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-o", "junit_family=xunit2", f"--junitxml={tmp_path / 'p.xml'}",
                    str(tmp_path / "test_x.py")], capture_output=True, timeout=300,
                   cwd=tmp_path)

    def shape(root: ET.Element) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for node in root.iter():
            parent = {c: p for p in root.iter() for c in p}.get(node)
            key = f"{parent.tag if parent is not None else ''}>{node.tag}"
            out.setdefault(key, set()).update(node.attrib)
        return out

    theirs = shape(ET.parse(tmp_path / "p.xml").getroot())
    ours_root = ET.parse(here / "here" / "junit.xml").getroot()
    ours = shape(ours_root)
    ours_err = shape(ET.fromstring(
        b"<testsuites><testsuite><testcase><error message='m'/></testcase></testsuite>"
        b"</testsuites>"))
    assert "testcase>error" in theirs and "testcase>failure" in theirs
    for key, attrs in {**ours, "testcase>error": ours_err["testcase>error"]}.items():
        assert key in theirs, key
        assert attrs <= theirs[key], (key, attrs - theirs[key])
    suite = ours_root.find("testsuite")
    assert suite is not None
    tests = suite.findall("testcase")
    assert int(suite.get("tests", "")) == len(tests) == 6
    assert int(suite.get("failures", "")) == sum(t.find("failure") is not None for t in tests)


BAD = [
    ("not toml", "[matrix\n", "not TOML"),
    ("unknown key", "[matrix]\nisa = ['x86_64']\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "unknown key 'isa'"),
    ("unknown ISA", "[matrix]\nisas = ['vax']\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "isas: unknown ISA"),
    ("unknown backend", "[matrix]\nbackends = ['int9']\n[[program]]\nname='a'\n"
     "command='t/{isa}'\n", "unknown backend 'int9'"),
    ("no {isa}", "[[program]]\nname='a'\ncommand='t/fib'\n", "with {isa}"),
    ("no program", "[matrix]\nisas = 'all'\n", "no [[program]]"),
    ("twice", "[[program]]\nname='a'\ncommand='t/{isa}'\n[[program]]\nname='a'\n"
     "command='u/{isa}'\n", "'a' named twice"),
    ("bad type", "[matrix]\ntimeout = 'long'\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "timeout: expected a number"),
    ("bool count", "[matrix]\nmax_insns = true\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "max_insns: expected a int"),
    ("bad regex", "[[program]]\nname='a'\ncommand='t/{isa}'\nkeep='('\n", "bad regex"),
    ("bad name", "[[program]]\nname='../a'\ncommand='t/{isa}'\n", "expected a name"),
    ("bad directory", "[[program]]\nname='a'\ncommand='t/{isa}'\ndirectory=3\n",
     "directory: expected a directory name"),
    ("no trace", "[matrix]\nbackends = ['none']\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "writes no compared trace"),
    ("unknown target", "[matrix]\ntarget = 'qemu'\n[[program]]\nname='a'\ncommand='t/{isa}'\n",
     "[matrix] target: expected one of emulation, gdb, got 'qemu'"),
    ("target of an unknown ISA", "[[program]]\nname='a'\ncommand='t/{isa}'\n"
     "target = { vax = 'gdb' }\n", "target vax: unknown ISA"),
    ("target not a table", "[matrix]\ntarget = ['gdb']\n[[program]]\nname='a'\n"
     "command='t/{isa}'\n", "expected a target or a table of ISA = target"),
    # gdb_session.py's refusals, made before anything runs (GDB_BACKENDS: int3, hwbp)
    ("gdb without a port", "[matrix]\nisas = ['m68k']\nbackends = ['step']\ntarget = 'gdb'\n"
     "[[program]]\nname='a'\ncommand='t/{isa}'\n", "m68k: backend 'step' has no gdb-remote"),
    ("gdb and the native engine", "[matrix]\nisas = ['m68k']\nbackends = ['int3:native']\n"
     "[[program]]\nname='a'\ncommand='t/{isa}'\ntarget = { m68k = 'gdb' }\n",
     "(a) target: m68k: backend 'int3:native' has no gdb-remote"),
    ("gdb counts no instructions", "[matrix]\nisas = ['m68k']\nmax_insns = 1000\n"
     "target = 'gdb'\n[[program]]\nname='a'\ncommand='t/{isa}'\n", "m68k: max_insns counts"),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_matrix_file_is_one_line_and_65(tmp_path: Path, text: str, expected: str,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text)
    assert main(["ci", str(path), "--workers", "0", "-o", str(tmp_path / "o")]) == 65
    out, err = capfd.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"emutrace: {path}: "), err
    assert expected in err, err
    assert not (tmp_path / "o").exists()


def test_usage_errors_are_64_and_a_missing_file_66(tmp_path: Path,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[[program]]\nname='a'\ncommand='t/{isa}'\n")
    assert main(["ci", str(path), "--workers", "-1"]) == 64
    assert main(["ci", str(path), "--workers", "1", "--scheduler", "tcp://x:1"]) == 64
    assert main(["ci", str(path), "--update-baselines", "--workers", "0"]) == 64
    assert main(["ci", str(tmp_path / "none.toml")]) == 66
    gdb = tmp_path / "gdb.toml"  # a gdb cell runs unconfined: --unconfined, as `run` asks
    gdb.write_text("[matrix]\nisas = ['x86_64', 'm68k']\ntarget = { m68k = 'gdb' }\n"
                   "[[program]]\nname='a'\ncommand='t/{isa}'\n")
    assert main(["ci", str(gdb), "--workers", "0", "-o", str(tmp_path / "o")]) == 64
    err = capfd.readouterr().err
    assert err.count("\n") == 5 and "Traceback" not in err, err
    assert "target gdb (m68k) run unconfined" in err and "--unconfined" in err, err
    assert not (tmp_path / "o").exists()


def test_target_is_per_isa_and_per_program(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[matrix]\nisas = ['x86_64', 'm68k', 'sparc64']\n"
                    "target = { m68k = 'gdb', sparc64 = 'gdb' }\n"
                    "[[program]]\nname='a'\ncommand='t/{isa}'\n"
                    "[[program]]\nname='b'\ncommand='t/{isa}'\nisas = ['m68k']\n"
                    "target = 'gdb'\n"
                    "[[program]]\nname='c'\ncommand='t/{isa}'\ntarget = 'emulation'\n")
    got = {c.key: c.target for c in read_matrix(path).cells({})}
    assert got == {"a/int3/x86_64": "emulation", "a/int3/m68k": "gdb", "a/int3/sparc64": "gdb",
                   "b/int3/m68k": "gdb", "c/int3/x86_64": "emulation",
                   "c/int3/m68k": "emulation", "c/int3/sparc64": "emulation"}


def test_a_gdb_cell_runs_in_qemus_stub_equal_to_unicorns(here: Path) -> None:
    """m68k's fib 5 in qemu-m68k's gdb stub (Unicorn does not run m68k's Linux programs: its
    capability table) beside x86_64's on Unicorn: one gdb ISA shows the target's cell (the
    other three gdb-only ISAs' cells: tests/test_ci_demo.py and bench/results/ci-zlib.md).
    Its trace ends with the value the program prints (fib(5) = 5) and exit 0, equal to the
    x86_64 baseline of the run in this process, values included."""
    root = here / "gdb"
    root.mkdir()
    (root / "m.toml").write_text(
        "[matrix]\nisas = ['x86_64', 'm68k']\ntarget = { m68k = 'gdb' }\n"
        f"[[program]]\nname = 'fib'\ncommand = '{REPO}/testbins/{{isa}}/fib 5'\n")
    code = main(["ci", str(root / "m.toml"), "--workers", "0", "--unconfined", "-o",
                 str(root / "out")])
    assert code == 0
    assert cases(root / "out" / "junit.xml") == {"fib.int3/x86_64": ("pass", ""),
                                                 "fib.int3/m68k": ("pass", "")}
    traced = (root / "out" / "traces" / "fib" / "int3" / "m68k.trace").read_text()
    assert traced == (here / "baselines" / "fib" / "int3" / "x86_64.trace").read_text()
    assert [(t.kind, t.name, t.values) for t in parse_trace(traced).tokens[-3:]] == [
        ("return", "fib", ("5",)), ("return", "main", ("0",)), ("exit", "exit", ("0",))]
    assert "| program | x86_64 | m68k (gdb) |" in (root / "out" / "summary.md").read_text()


def test_a_cell_that_cannot_run_is_a_junit_error_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(
        "[matrix]\nisas = ['x86_64']\n[[program]]\nname = 'gone'\n"
        "command = 'testbins/{isa}/no-such-program'\n")
    assert main(["ci", str(tmp_path / "m.toml"), "--workers", "0", "-o",
                 str(tmp_path / "o")]) == 2
    assert cases(tmp_path / "o" / "junit.xml") == {
        "gone.int3/x86_64": ("error", "testbins/x86_64/no-such-program: no such file")}


def test_without_a_toml_parser_ci_says_which_package_and_69(tmp_path: Path) -> None:
    """Python 3.10 without tomli (stood in for here by hiding both tomllib and tomli from the
    import system): `ci` is one line naming the package, exit 69 (docs/exit-codes.md:
    unsupported); the other subcommands and --help still work."""
    path = tmp_path / "m.toml"
    path.write_text("[[program]]\nname='a'\ncommand='t/{isa}'\n")
    hide = ("import sys; sys.modules['tomllib'] = sys.modules['tomli'] = None; "
            "from emutrace.cli.main import main; sys.exit(main(sys.argv[1:]))")
    ci = subprocess.run([sys.executable, "-c", hide, "ci", str(path), "--workers", "0"],
                        capture_output=True, text=True, timeout=120)
    assert (ci.returncode, ci.stdout) == (69, ""), ci.stderr
    assert ci.stderr.count("\n") == 1 and "tomli" in ci.stderr, ci.stderr
    helped = subprocess.run([sys.executable, "-c", hide, "--help"], capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and " ci " in helped.stdout, helped.stderr
