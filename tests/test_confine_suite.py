"""The confinement suite: one hostile guest (testbins/src/hard_confine.c, raw system calls),
the same expectations on both targets — under emulation (the Linux layer and its Sandbox)
and natively (`--target native`: the kernel sandbox and the tracer's checks) — with canary
files around the sandbox: one beside the writable directory, one in the directory above it.

Oracles, none of them emutrace:
* the same program in a sandbox made by util-linux alone (unshare(1) with user, PID, mount
  with a fresh /proc, network, IPC and UTS namespaces, setpriv(1) with no capabilities and
  no_new_privs): what a sandboxed process gets when it signals, ptrace-attaches or looks up
  a host process;
* the same program run plainly on the host: a directory descriptor and the current
  directory follow their directory through a rename, and a child outlives its parent
  (exit(2): reparented) and does its work;
* the sandbox's documented rule (docs/hardening.md): a write outside --allow-write is
  EACCES and the canaries keep their bytes.

Other files test each mechanism alone (test_native_sandbox.py, test_confinement*.py)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import BUSYBOX, ENV, bin_path, hard_results, run_emutrace

PROGRAM = bin_path("x86_64", "hard_confine")
CANARY = b"canary: the host's own bytes\n"
TARGETS = {"emulation": (), "native": ("--target", "native")}
SANDBOX = by_name("x86_64").capability(Cap.NATIVE_SANDBOX)
NO_PID = 4_194_303  # above every pid this host gives out (pid_max 2^22 at most)
# lines about the host's processes: a sandboxed process's answers (unshare's)
PROCESS_LINES = ("kill host", "ptrace attach host", "open host /proc entry")
# lines about a renamed directory and the orphan: a plain process's answers
DIRECTORY_LINES = ("open d", "chdir d", "rename d to e", "openat dirfd after rename",
                   "open in cwd after rename", "getcwd names e", "e/by-dirfd exists",
                   "e/by-cwd exists", "fchdir dirfd", "getcwd after fchdir names e",
                   "fork orphan", "create in writable")
# the documented rule: a write outside every --allow-write directory
WRITE_LINES = {"open canary for writing": "-1 EACCES", "truncate canary": "-1 EACCES",
               "rename over canary": "-1 EACCES"}


def layout(top: Path) -> tuple[Path, list[Path]]:
    """(the writable directory, the canaries around it)."""
    writable = top / "sandbox" / "w"
    writable.mkdir(parents=True)
    canaries = [top / "sandbox" / "canary", top / "canary"]
    for c in canaries:
        c.write_bytes(CANARY)
    return writable, canaries


def wait_for(path: Path, seconds: float = 5.0) -> bytes | None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and path.read_bytes():
            return path.read_bytes()
        time.sleep(0.05)
    return None


@pytest.fixture(scope="module")
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], bytes | None]:
    """The program run plainly on the host (no pid of a host process given to it)."""
    writable, canaries = layout(tmp_path_factory.mktemp("plain"))
    done = subprocess.run([PROGRAM, writable, canaries[0], str(NO_PID)], capture_output=True,
                          cwd=writable, env=ENV, timeout=60)
    assert done.returncode == 0, done.stderr
    return hard_results(done.stdout), wait_for(writable / "orphan")


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory, sleeper: int) -> dict[str, str]:
    """The program in util-linux's sandbox (its canary is its own to write: that sandbox
    leaves the root writable)."""
    writable, canaries = layout(tmp_path_factory.mktemp("unshare"))
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork",
                           "--mount", "--mount-proc", "--net", "--ipc", "--uts", "setpriv",
                           "--no-new-privs", "--bounding-set", "-all", "--inh-caps", "-all",
                           "--ambient-caps", "-all", PROGRAM, writable, canaries[0],
                           str(sleeper)], capture_output=True, cwd=writable, env=ENV,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return hard_results(done.stdout)


def native_xfail(target: str) -> None:
    if target == "native" and not SANDBOX.works:
        pytest.xfail(SANDBOX.reason)  # the capability table says why


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_hostile_guest_gets_a_sandboxed_process_answers(
        target: str, tmp_path: Path, sleeper: int, plain: tuple[dict[str, str], bytes | None],
        sandboxed: dict[str, str]) -> None:
    native_xfail(target)
    writable, canaries = layout(tmp_path)
    got = run_emutrace("run", *TARGETS[target], "--allow-write", writable, PROGRAM, writable,
                       canaries[0], str(sleeper), cwd=writable, timeout=120)
    out = hard_results(got.stdout)
    assert got.returncode == 0, got.stderr
    for what in PROCESS_LINES:
        assert out[what] == sandboxed[what], (what, out, sandboxed)
    plain_out, plain_orphan = plain
    for what in DIRECTORY_LINES:
        assert out[what] == plain_out[what], (what, out, plain_out)
    for what, answer in WRITE_LINES.items():
        assert out[what] == answer, (what, out)
    # the run ends with the orphan: its file is there, written, when the run has returned
    assert plain_orphan == b"ran on\n"
    assert (writable / "orphan").read_bytes() == plain_orphan
    assert [c.read_bytes() for c in canaries] == [CANARY, CANARY]
    assert sorted(p.name for p in writable.iterdir()) == ["e", "mine", "orphan"]
    assert b"Traceback" not in got.stderr


def left_behind(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv:
                out.append(int(entry.name))
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_timeout_ends_the_children_left_running(target: str, tmp_path: Path) -> None:
    """A parent that exits leaves a child sleeping: the run waits for it (as Linux lets it
    run), and --timeout ends it with the run (124); nothing of the guest is left."""
    native_xfail(target)
    busybox = BUSYBOX / "x86_64" / "busybox"
    marker = str(600 + os.getpid() % 1000)  # the sleep's argument, to find it again
    started = time.monotonic()
    got = run_emutrace("run", *TARGETS[target], "--timeout", "1", busybox, "sh", "-c",
                       f"{busybox} sleep {marker} & echo started; exit 3", cwd=tmp_path,
                       timeout=60)
    assert got.stdout == b"started\n"
    assert got.returncode == 124, got.stderr
    assert time.monotonic() - started < 30
    end = time.monotonic() + 5
    while left_behind(marker) and time.monotonic() < end:
        time.sleep(0.05)
    assert left_behind(marker) == []
