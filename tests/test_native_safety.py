"""`run --target native` when ptrace is refused (the bad-input rule: "a ptrace failure
(no permission, ptrace_scope, running inside a tracer) is one line with the reason (exit
69)"), and `--backend bts` natively, refused with the host's reason and a strict xfail read
from the capability table (`native_bts`: isa/native_pmu.py).

Refusals are made real, not simulated: emutrace run under `strace -f` (the traced child is
already strace's tracee: PTRACE_TRACEME fails with EPERM, ptrace(2)), and emutrace run
under a seccomp filter (seccomp(2), SECCOMP_RET_ERRNO) that makes ptrace fail with EPERM.
(Yama's ptrace_scope 3 cannot be set without root; `ptrace_refusal` reads it.)  The
traced child never outliving emutrace is tests/test_native_target.py's
test_native_child_dies_with_emutrace."""

from __future__ import annotations

import ctypes
import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.errors import UsageError
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.native_session import NativeProcess
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_text
from tests.conftest import ENV, TESTBINS, bin_path, run_emutrace
from tests.test_native_target import NATIVE, namer

COUNTS = TESTBINS / "x86_64" / "counts"
NR_PTRACE = 101  # x86_64 <asm/unistd_64.h>
# <linux/filter.h> classic BPF, <linux/seccomp.h>
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x00050000, 0x7FFF0000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def deny_ptrace() -> None:
    """In the child before exec: ptrace(2) fails with EPERM, every other call is allowed
    (seccomp_data.nr at offset 0; this x86_64 test process makes native calls only)."""
    program = (SockFilter * 4)(SockFilter(BPF_LD_W_ABS, 0, 0, 0),
                               SockFilter(BPF_JEQ_K, 0, 1, NR_PTRACE),
                               SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
                               SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    prog = SockFprog(4, program)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter not installed")


def one_line_69(r: subprocess.CompletedProcess[bytes], reason: str) -> None:
    err = r.stderr.decode()
    assert r.returncode == 69, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert reason in err, err


def test_ptrace_denied_by_seccomp_is_one_line_69(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "emutrace", "run", *NATIVE, "--backend",
                        "int3", str(COUNTS)], capture_output=True, timeout=120, env=ENV,
                       cwd=tmp_path, preexec_fn=deny_ptrace)
    one_line_69(r, "PTRACE_TRACEME: Operation not permitted (a seccomp filter")


def test_ptrace_inside_a_tracer_is_one_line_69(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    assert strace is not None, "strace missing (Debian package strace)"
    r = subprocess.run([strace, "-f", "-qq", "-e", "trace=none", "-o", "/dev/null",
                        sys.executable, "-m", "emutrace", "run", *NATIVE, "--backend",
                        "int3", str(COUNTS)], capture_output=True, timeout=120, env=ENV,
                       cwd=tmp_path)
    one_line_69(r, "already traced by pid")


def test_native_bts_is_refused_with_the_hosts_reason() -> None:
    """`--target native --backend bts`: exit 64, one line, the capability's reason (on this
    VM: no branch-trace PMU in /sys/bus/event_source/devices)."""
    r = run_emutrace("run", *NATIVE, "--backend", "bts", COUNTS)
    err = r.stderr.decode()
    assert r.returncode == 64 and err.count("\n") == 1, err
    assert by_name("x86_64").capability(Cap.NATIVE_BTS).reason in err


def bts_gap(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capability(Cap.NATIVE_BTS)
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


@pytest.mark.parametrize("isa", [pytest.param(i, marks=bts_gap(i))
                                 for i in ("x86_64", "i386")])
def test_native_bts_equals_emulated_bts(isa: str) -> None:
    """bts natively == bts under emulation on calls `recursion` (the program's own
    functions).  A strict xfail while `native_bts` says no: where a PMU exists and the
    perf_event_open delivery is built, it passes and the table must be updated."""
    program = bin_path(isa, "calls")
    try:
        got = NativeProcess(RunConfig(str(program), ["recursion"], backend="bts")).run()
    except UsageError as e:
        pytest.fail(str(e))
    emulated = Process(RunConfig(str(program), ["recursion"], backend="bts"),
                       warn=lambda m: None).run()
    name = namer(str(program))
    keep = {"main", "run_scenario", "scenario_recursion", "fact", "fib", "is_even", "is_odd"}
    text = canonical_text(got.records, name, keep)
    assert text.count("\n") > 100
    assert text == canonical_text(emulated.records, name, keep)
