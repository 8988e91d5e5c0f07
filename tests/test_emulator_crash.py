"""A crash inside the emulator library is emutrace's, told apart from the guest's own fault:
one line naming it with what to try, exit 71 (EXIT_EMULATOR_CRASH), and the trace recorded
up to the crash written (`run -o`, `record -d`).

Two crashes: a real one (Unicorn 2.1.4 faults at a NULL host address running Debian's mipsel
`sha256sum`, from the root `emutrace rootfs mipsel` makes, when it is in .cache/rootfs), and
one made in C inside a Unicorn code hook (crashguard.c `cg_test_crash_hook`: a write through
a NULL pointer with the GIL released, as a bug in the library would), which needs no root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emutrace import native
from emutrace.errors import EXIT_EMULATOR_CRASH
from emutrace.trace.events import Entry
from emutrace.trace.uftrace_read import load_recording

from .conftest import ENV, REPO, bin_path, run_emutrace

MIPSEL_ROOT = REPO / ".cache" / "rootfs" / "mipsel"

pytestmark = pytest.mark.skipif(not native.available(), reason="native library not built")

# main(argv) with cg_test_crash_hook on the first instruction of FUNC (argv[1]): the hook is
# added to each Process's CPU before it runs
CRASH_AT = """
import ctypes, sys
from unicorn import unicorn_const as ucc
from unicorn.unicorn_py3 import unicorn as binding
from emutrace import session
from emutrace.cli.main import main
from emutrace.discover.symbols import read_symbols
from emutrace.native.crashguard import test_crash_hook

func, argv = sys.argv[1], sys.argv[2:]
run = session.Process.run

def crashing_run(self):
    at = read_symbols(self.image).by_name(func).start
    handle = ctypes.c_size_t()
    status = binding.uclib.uc_hook_add(self.cpu.uc._uch, ctypes.byref(handle),
                                       ucc.UC_HOOK_CODE, ctypes.c_void_p(test_crash_hook()),
                                       None, ctypes.c_uint64(at), ctypes.c_uint64(at))
    assert status == 0, status
    return run(self)

session.Process.run = crashing_run
sys.exit(main(argv))
"""


def crashing(func: str, *argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CRASH_AT, func, *map(str, argv)], cwd=cwd,
                          env=ENV, capture_output=True, text=True, timeout=300)


def crash_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "emulator (Unicorn) crashed" in line]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_crash_in_a_unicorn_hook_is_emutraces_and_keeps_the_trace(engine: str,
                                                                   tmp_path: Path) -> None:
    """fib calls nothing before fib(): the trace holds main's entry, still open."""
    done = crashing("fib", "run", "--engine", engine, "-o", "t.txt",
                    bin_path("x86_64", "fib"), "5", cwd=tmp_path)
    assert done.returncode == EXIT_EMULATOR_CRASH, done.stderr
    line = crash_line(done.stderr)
    assert line.startswith("emutrace: the emulator (Unicorn) crashed with SIGSEGV")
    assert "--engine" in line and "--max-insns" in line
    assert "guest killed" not in done.stderr and done.stdout == ""
    trace = (tmp_path / "t.txt").read_text().splitlines()
    assert trace[0] == "# DURATION [insns]   FUNCTION" and "main(" in trace[1], trace


def test_a_crash_while_recording_keeps_the_recording(tmp_path: Path) -> None:
    data = tmp_path / "d"
    done = crashing("fib", "record", "-d", data, bin_path("x86_64", "fib"), "5", cwd=tmp_path)
    assert done.returncode == EXIT_EMULATOR_CRASH, done.stderr
    crash_line(done.stderr)
    records, symbolize, _isa = load_recording(str(data))
    entered = [symbolize(r.func) for r in records if isinstance(r, Entry)]
    # main entered, then fib(5), where the crash came before its first instruction ran
    assert entered[-3:] == ["strtoq", "____strtoll_l_internal", "fib"], entered
    info = run_emutrace("info", "-d", data).stdout.decode()
    assert "state:       cut short: the emulator (Unicorn) crashed with SIGSEGV" in info, info


def test_the_guests_own_fault_is_not_an_emulator_crash(tmp_path: Path) -> None:
    done = run_emutrace("run", bin_path("x86_64", "calls"), "crash", cwd=tmp_path)
    assert done.returncode == 128 + 11 and b"guest killed by SIGSEGV" in done.stderr
    assert b"emulator (Unicorn) crashed" not in done.stderr


@pytest.mark.skipif(not (MIPSEL_ROOT / "usr" / "bin" / "sha256sum").exists(),
                    reason="no mipsel root in .cache/rootfs (emutrace rootfs mipsel)")
def test_unicorn_crashing_on_debians_mipsel_sha256sum(tmp_path: Path) -> None:
    """A real crash of the library (Unicorn 2.1.4): once it is fixed, this test says so."""
    program = MIPSEL_ROOT / "usr" / "bin" / "sha256sum"
    done = run_emutrace("run", "--backend", "int3", "-o", tmp_path / "t.txt", "--root",
                        MIPSEL_ROOT, program, "/usr/bin/sha256sum", cwd=tmp_path)
    assert done.returncode == EXIT_EMULATOR_CRASH, done.stderr
    crash_line(done.stderr.decode())
    trace = (tmp_path / "t.txt").read_text()
    assert "sha256_stream" in trace  # the calls before the crash
    stack = [line for line in done.stderr.decode().splitlines() if "call stack:" in line]
    assert len(stack) == 1 and "> main > " in stack[0] and "sha256_stream" in stack[0]


def test_a_dynamic_programs_fault_names_its_frames(tmp_path: Path) -> None:
    """The report's PC and call stack are named by every module (they were `??`)."""
    done = run_emutrace("run", "--backend", "int3", bin_path("x86_64", "calls.dyn"), "crash",
                        cwd=tmp_path)
    assert done.returncode == 128 + 11
    err = done.stderr.decode()
    assert "(crash_deref)" in err and "main > run_scenario > scenario_crash" in err, err
