"""The kernel sandbox around a confined native guest (target/namespaces.py, target/landlock.py;
ARCHITECTURE.md "Sandbox policy"): a hostile guest (testbins/src/hard_sandbox.c, raw system
calls, first a seccomp filter of its own whose SECCOMP_RET_TRACE data the kernel reports
instead of the tracer's) tries to write outside --allow-write, ptrace-attach and kill a host
process (this test's own sleeper), mount, freeze the file system, read outside the root.

Oracles: the host after the run (the canary file's bytes, the sleeper alive and untraced,
the kernel's mount table); util-linux's unshare(1) and setpriv(1) — a sandbox built without
emutrace (PID, user, mount, network namespaces, no capabilities, no_new_privs) — for what
the kernel answers a guest about processes, mounts, file handles and ioctls; open(2),
mount(2) and the Landlock documentation for a read-only mount (EROFS) and a path outside
every rule (EACCES).  Where the host cannot give the sandbox, the x86_64 capability
`native_sandbox` says why and these are strict xfails reading it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import ENV, bin_path, hard_results, run_emutrace

NATIVE = ("--target", "native")
PROGRAM = bin_path("x86_64", "hard_sandbox")
CANARY = b"canary: the host's own bytes\n"
SANDBOX = by_name("x86_64").capability(Cap.NATIVE_SANDBOX)
needs_sandbox = pytest.mark.xfail(not SANDBOX.works, reason=SANDBOX.reason, strict=True)
# what the kernel alone answers (no tracer): compared with unshare(1) + setpriv(1)
KERNEL_LINES = ("name_to_handle_at outside", "open_by_handle_at outside",
                "ptrace attach host", "kill host", "mount tmpfs", "ioctl FIFREEZE")


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def layout(tmp_path: Path, root: bool) -> tuple[Path, Path, Path, Path]:
    """(sandbox root, writable dir, canary outside it, mount point): the canary outside the
    writable directory (and outside the root when `root`)."""
    top = tmp_path / "root" if root else tmp_path
    writable = top / "w"
    mnt = top / "mnt"
    for d in (writable, mnt):
        d.mkdir(parents=True)
    canary = tmp_path / "canary"
    canary.write_bytes(CANARY)
    return top, writable, canary, mnt


def left_behind(sleeper: int) -> list[int]:
    """Processes of hard_sandbox still running with this test's sleeper as argument (its
    CLONE_UNTRACED child)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"hard_sandbox") and argv[1:2] == [str(sleeper).encode()]:
            out.append(int(entry.name))
    return out


def assert_host_unchanged(canary: Path, sleeper: int, mnt: Path) -> None:
    assert canary.read_bytes() == CANARY
    assert left_behind(sleeper) == []  # the PID namespace ended with the run
    status = Path(f"/proc/{sleeper}/status").read_text()
    assert re.search(r"^State:\s+S", status, re.M), status  # alive, asleep, not stopped
    assert re.search(r"^TracerPid:\s+0$", status, re.M)
    assert str(mnt) not in Path("/proc/self/mountinfo").read_text()


@needs_sandbox
def test_hostile_guest_native(tmp_path: Path, sleeper: int) -> None:
    """Its own filter installed, every escape fails: the tracer's answers first (as under
    emulation: EACCES for a write outside, EPERM for what cannot be confined natively, ESRCH
    for a process that is not the guest's, as its PID namespace answers), the kernel's for
    the ioctl it lets through."""
    top, writable, canary, mnt = layout(tmp_path, root=False)
    got = run_emutrace("run", *NATIVE, "--allow-write", writable, PROGRAM, str(sleeper),
                       canary, mnt, cwd=writable)
    out = hard_results(got.stdout)
    assert got.returncode == 0, got.stderr
    assert out["own seccomp filter"] == "0"
    assert out["open outside for writing"] == "-1 EACCES"
    assert out["name_to_handle_at outside"] == "-1 EPERM"
    assert out["open_by_handle_at outside"] == "-1 EPERM"
    assert out["ptrace attach host"] == "-1 ESRCH"  # not in its PID namespace
    assert out["kill host"] == "-1 ESRCH"
    assert out["mount tmpfs"] == "-1 EPERM"
    assert out["ioctl FIFREEZE"] == "-1 EPERM"  # CAP_SYS_ADMIN, dropped (ioctl_fsfreeze)
    assert "write outside" not in out and "write through handle" not in out
    assert "ioctl FITHAW" not in out
    assert out["clone untraced"] == "1"
    assert_host_unchanged(canary, sleeper, mnt)
    assert b"Traceback" not in got.stderr


@needs_sandbox
def test_hostile_guest_outside_the_root(tmp_path: Path, sleeper: int) -> None:
    """Under --root a file outside the root is not there for the guest (ENOENT, as after
    chroot), not even through a host process's /proc/PID/root."""
    top, writable, canary, mnt = layout(tmp_path, root=True)
    got = run_emutrace("run", *NATIVE, "--root", top, "--allow-write", writable, PROGRAM,
                       str(sleeper), canary, "/mnt", cwd=writable)
    out = hard_results(got.stdout)
    assert got.returncode == 0, got.stderr
    assert out["open outside for reading"] == "-1 ENOENT"
    assert out["open /proc/1/root outside"].startswith("-1 ")
    assert CANARY.decode().strip() not in got.stdout.decode()
    assert_host_unchanged(canary, sleeper, mnt)


KERNEL_ONLY = """
import os, sys
from emutrace.target.namespaces import Layers, PidNamespace, enter
root, writable, program, *args = sys.argv[1:]
pid_ns = PidNamespace()
pid = pid_ns.fork()
if pid == 0:
    enter(Layers(root=root, writable=(writable,), program=program))
    os.chdir(writable)
    os.execv(program, [program, *args])
_, status = os.waitpid(pid, 0)
pid_ns.end()
sys.exit(os.waitstatus_to_exitcode(status))
"""


@needs_sandbox
def test_kernel_layer_alone_holds(tmp_path: Path, sleeper: int) -> None:
    """Without the tracer (no seccomp check at all) the kernel sandbox alone answers: as a
    sandbox made by unshare(1) and setpriv(1) for processes, mounts, handles and ioctls;
    EROFS for a write outside the writable directory (a read-only mount), EACCES for a read
    outside the root (no Landlock rule there); the host unchanged."""
    top, writable, canary, mnt = layout(tmp_path, root=True)
    env = {**ENV, "HARD_SANDBOX_NO_FILTER": "1", "PYTHONPATH": str(Path.cwd())}
    args = [str(sleeper), str(canary), str(mnt)]
    ours = subprocess.run([sys.executable, "-c", KERNEL_ONLY, str(top), str(writable),
                           str(PROGRAM), *args], capture_output=True, env=env, cwd=writable,
                          timeout=60)
    assert ours.returncode == 0, ours.stderr
    assert_host_unchanged(canary, sleeper, mnt)
    out = hard_results(ours.stdout)
    assert out["ptrace attach host"] == "-1 ESRCH"  # outside the PID namespace
    assert out["open outside for writing"] == "-1 EROFS"
    assert out["open outside for reading"] == "-1 EACCES"
    assert out["open /proc/1/root outside"] == "-1 EACCES"
    # the oracle's sandbox has no read-only root: it gets a canary of its own to write
    spare = tmp_path / "canary.oracle"
    spare.write_bytes(CANARY)
    theirs = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork",
                             "--mount", "--net", "--ipc", "--uts", "setpriv",
                             "--no-new-privs", "--bounding-set", "-all", "--inh-caps", "-all",
                             "--ambient-caps", "-all", str(PROGRAM), str(sleeper), str(spare),
                             str(mnt)], capture_output=True, env=env, cwd=writable, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    oracle = hard_results(theirs.stdout)
    for what in KERNEL_LINES:
        assert out[what] == oracle[what], (what, out, oracle)


def test_refused_without_the_pid_namespace(tmp_path: Path) -> None:
    """emutrace without CAP_SYS_ADMIN (setpriv drops it from the bounding set before the
    exec) cannot make the guest's PID namespace: a confined run is refused with one line
    naming it; --unconfined still runs."""
    program = bin_path("x86_64", "fib")
    base = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin",
            sys.executable, "-m", "emutrace", "run", "--backend", "none", *NATIVE]
    env = {**ENV, "PYTHONPATH": str(Path.cwd())}
    if os.geteuid() != 0:
        base = [sys.executable, "-m", "emutrace", "run", "--backend", "none", *NATIVE]
    got = subprocess.run([*base, str(program)], capture_output=True, env=env, cwd=tmp_path,
                         timeout=120)
    err = got.stderr.decode()
    assert got.returncode != 0 and len(err.splitlines()) == 1, err
    assert "cannot sandbox a native guest" in err and "PID namespace" in err
    assert "--unconfined runs without" in err
    free = subprocess.run([*base, "--unconfined", str(program)], capture_output=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert free.returncode == 0, free.stderr
    info = subprocess.run([*base[:base.index("-m") + 2], "info"], capture_output=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert re.search(rb"x86_64 native_sandbox: no: .*no PID namespace", info.stdout)
