"""Debian's static shells (bash-static, zsh-static; fetched by scripts/fetch_shells.sh through
apt, never committed) under emutrace and under qemu-user, in Debian's default locale
(LANG=C.UTF-8): the same stdout, stderr and exit status.  The guest's environment is the
user's, with nothing Python adds (PEP 538 locale coercion).  ISAs Debian ships no package
for are strict xfails from the capability table (`busybox`: Debian's static programs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import ISAS, REPO, qemu_binary

SHELLS_DIR = REPO / ".cache" / "shells"
SCRIPTS = Path(__file__).resolve().parent / "shells"
# Debian's default locale; no LC_ALL (the tests' usual C locale would hide the futex path
# glibc takes to set a UTF-8 locale up)
UTF8_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO)}


def debian_params() -> list:
    out = []
    for isa in ISAS:
        cap = by_name(isa).capability(Cap.BUSYBOX)
        marks = [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]
        out.append(pytest.param(isa, marks=marks, id=isa))
    return out


def shell(isa: str, name: str) -> Path:
    path = SHELLS_DIR / isa / name
    if not path.exists():
        pytest.fail(f"{path} missing: run scripts/fetch_shells.sh (make setup does)")
    return path


def both(isa: str, argv: list[str], env: dict[str, str], cwd: Path,
         stdin: bytes = b"") -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """(emutrace, qemu-user) runs of the same command, one after the other in one directory
    (the shell exports its working directory as PWD)."""
    ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           *argv], cwd=cwd, env=env, input=stdin, capture_output=True,
                          timeout=120)
    ref = subprocess.run([qemu_binary(isa), *argv], cwd=cwd, env=env, input=stdin,
                         capture_output=True, timeout=120)
    return ours, ref


def same(ours: subprocess.CompletedProcess, ref: subprocess.CompletedProcess) -> None:
    assert ours.stdout == ref.stdout
    assert ours.stderr == ref.stderr
    assert ours.returncode == ref.returncode


@pytest.mark.busybox
@pytest.mark.parametrize("isa", debian_params())
@pytest.mark.parametrize("name", ["bash", "zsh"])
def test_simple_script_in_utf8_locale(isa: str, name: str, tmp_path: Path) -> None:
    program = shell(isa, name)
    work = tmp_path / "w"
    work.mkdir()
    shutil.copy(SCRIPTS / "simple.sh", work / "simple.sh")
    argv = [str(program), "simple.sh"]
    ours, ref = both(isa, argv, UTF8_ENV, work, b"input line\n")
    assert ref.returncode == 3, ref.stderr  # the oracle itself ran the whole script
    # 11 characters in UTF-8; s390x's big-endian glibc cannot read the host's (little-endian)
    # locale files, stays in "C" and counts 13 bytes, under qemu-user too
    assert b"len=11 first=h\xc3\xa9\n" in ref.stdout or isa == "s390x"
    same(ours, ref)


@pytest.mark.busybox
@pytest.mark.parametrize("isa", ["x86_64", "s390x"])
def test_environment_is_the_users(isa: str, tmp_path: Path) -> None:
    """LANG unset: Python coerces its own locale and sets LC_CTYPE=C.UTF-8 in os.environ;
    the guest must not see it (`export -p` lists bash's whole environment)."""
    env = {k: v for k, v in UTF8_ENV.items() if k != "LANG"}
    work = tmp_path / "w"
    work.mkdir()
    ours, ref = both(isa, [str(shell(isa, "bash")), "-c", "export -p"], env, work)
    assert "LC_CTYPE" not in ref.stdout.decode()
    same(ours, ref)


APPLETS = ("sh", "sort", "tr", "cat", "sleep", "wc", "head", "yes")


def busybox_bin(isa: str, work: Path) -> Path:
    """work/bin: busybox applets of `isa` (what the scripts execute) and work/hashbang.sh, a
    #! script whose interpreter is that busybox's sh."""
    busybox = REPO / ".cache" / "busybox" / isa / "busybox"
    if not busybox.exists():
        pytest.fail(f"{busybox} missing: run scripts/fetch_busybox.sh (make setup does)")
    (work / "bin").mkdir(parents=True)
    for applet in APPLETS:
        (work / "bin" / applet).symlink_to(busybox)
    script = work / "hashbang.sh"
    script.write_text(f'#!{work}/bin/sh\necho "script: $# args: $*"\nexit 6\n')
    script.chmod(0o755)
    shutil.copy(SCRIPTS / "processes.sh", work / "processes.sh")
    return work / "bin"


def shell_argv(isa: str, name: str) -> list[str]:
    if name == "busybox-sh":
        return [str(REPO / ".cache" / "busybox" / isa / "busybox"), "sh"]
    return [str(shell(isa, name))]


PROCESS_CELLS = [*((isa, "bash") for isa in ISAS), ("aarch64", "zsh"), ("arm", "busybox-sh")]


# shells that wait for children in a SIGCHLD handler need guest signal delivery
NEEDS_HANDLERS = {"zsh", "busybox-sh"}
BOUND = "60"  # seconds: a shell that cannot be served waits forever


def process_params() -> list:
    out = []
    for isa, name in PROCESS_CELLS:
        cap = by_name(isa).capability(Cap.BUSYBOX)
        if cap.works and name in NEEDS_HANDLERS:
            cap = by_name(isa).capability(Cap.SIGNAL_HANDLERS)
        marks = [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]
        out.append(pytest.param(isa, name, marks=marks, id=f"{name}-{isa}"))
    return out


@pytest.mark.busybox
@pytest.mark.parametrize(("isa", "name"), process_params())
def test_processes_as_native(isa: str, name: str, tmp_path: Path) -> None:
    """Command substitution, pipes, subshells, `&` and `wait`, exec of busybox applets and
    of a #! script, `exec`, exit statuses, SIGPIPE (`yes | head`), `trap` handlers for
    signals sent with `kill`, a background job killed.  The reference is the
    amd64 build of the same shell and busybox run natively on this host: qemu-user cannot
    be the oracle here, it hands a guest's execve of another foreign program to the host
    kernel, which (without binfmt_misc) refuses it: "Exec format error"."""
    argv = shell_argv(isa, name)
    ref_dir, work = tmp_path / "ref", tmp_path / "w"
    env = dict(UTF8_ENV, PATH=str(busybox_bin("x86_64", ref_dir)))
    ref = subprocess.run([*shell_argv("x86_64", name), "processes.sh"], cwd=ref_dir, env=env,
                         capture_output=True, timeout=60)
    assert ref.returncode == 9, ref.stderr
    assert b"script: 2 args: one two words" in ref.stdout and b"exec-replaced" in ref.stdout
    env = dict(UTF8_ENV, PATH=str(busybox_bin(isa, work)))
    ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           "--timeout", BOUND, *argv, "processes.sh"], cwd=work, env=env,
                          capture_output=True, timeout=120)
    same(ours, ref)


@pytest.mark.busybox
def test_env_options(tmp_path: Path) -> None:
    """--unset-env NAME and --env NAME=VALUE change what the guest gets, as env(1) -u / NAME=
    does for qemu-user; a malformed --env is a usage error (64) before anything runs."""
    bash = str(shell("x86_64", "bash"))
    ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           "--unset-env", "HOME", "--env", "GREETING=hé llo", bash, "-c",
                           "export -p"], cwd=tmp_path, env=UTF8_ENV, capture_output=True,
                          timeout=60)
    env = {k: v for k, v in UTF8_ENV.items() if k != "HOME"}
    ref = subprocess.run([qemu_binary("x86_64"), bash, "-c", "export -p"], cwd=tmp_path,
                         env=dict(env, GREETING="hé llo"), capture_output=True, timeout=60)
    assert 'GREETING="hé llo"' in ref.stdout.decode() and "HOME" not in ref.stdout.decode()
    same(ours, ref)
    bad = subprocess.run([sys.executable, "-m", "emutrace", "run", "--env", "NOEQUALS", bash],
                         cwd=tmp_path, env=UTF8_ENV, capture_output=True, timeout=60)
    assert bad.returncode == 64
    assert len(bad.stderr.decode().strip().splitlines()) == 1


@pytest.mark.busybox
@pytest.mark.parametrize("isa", [p for p in debian_params() if p.id == "mipsel"])
def test_sash_runs_programs_as_native(isa: str, tmp_path: Path) -> None:
    """Debian's sash (standalone shell: builtins start with `-`, everything else is forked
    and executed) running busybox applets and a #! script: as the amd64 sash natively."""
    ref_dir, work = tmp_path / "ref", tmp_path / "w"
    outs = []
    for which, where in (("x86_64", ref_dir), (isa, work)):
        env = dict(UTF8_ENV, PATH=str(busybox_bin(which, where)))
        shutil.copy(SCRIPTS / "sash.txt", where / "sash.txt")
        argv = [str(shell(which, "sash")), "-f", "sash.txt"]
        if which != "x86_64":
            argv = [sys.executable, "-m", "emutrace", "run", "--backend", "none", *argv]
        outs.append(subprocess.run(argv, cwd=where, env=env, capture_output=True,
                                   timeout=60))
    ref, ours = outs
    assert b"script: 2 args: one two" in ref.stdout and b"from sh" in ref.stdout, ref.stderr
    # the #! line names each run's own directory
    assert ours.stdout.replace(str(work).encode(), b"DIR") == \
        ref.stdout.replace(str(ref_dir).encode(), b"DIR")
    assert ours.stderr == ref.stderr
    assert ours.returncode == ref.returncode
