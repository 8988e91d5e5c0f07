"""Confinement of `--target native`: the seccomp filter and the tracer's
checks give a native run the file sandbox of emulation (tests/test_confinement.py runs the
common tests against both targets; these are the native mechanism's own).

Oracles: the sandbox's documented rules (emutrace/sandbox.py) and the host file system
after the run (nothing created, changed or removed outside the allowed directory); the same
program's stdout under emulation; for the BPF program, an interpreter written here from
<linux/filter.h> run against the filter's declared policy; the kernel's own mount table."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from emutrace.isa.abi import load_abi
from emutrace.target import seccomp_filter as sf

from .conftest import BUSYBOX, bin_path, run_emutrace

NATIVE = ("--target", "native")
DENIED = "emutrace: sandbox: write to"
AUDIT_ARCH_AARCH64 = 0xC00000B7


def busybox(isa: str = "x86_64") -> Path:
    path = BUSYBOX / isa / "busybox"
    if not path.exists():
        pytest.fail(f"{path} missing: run `make setup`")
    return path


def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """Classic BPF as <linux/filter.h> defines the instructions the filter uses, over a
    struct seccomp_data (<linux/seccomp.h>: nr, arch, instruction_pointer, args[6])."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld word abs
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        elif code == 0x05:  # ja
            pc += k
        elif code in (0x15, 0x25, 0x35):  # jeq, jgt, jge (unsigned)
            taken = acc == k if code == 0x15 else acc > k if code == 0x25 else acc >= k
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected BPF opcode {code:#x}")
        pc += 1


def test_filter_program_is_the_declared_policy() -> None:
    """Every number of both tables gets its policy's action; numbers the tables do not know
    get ENOSYS; an x32 call or another audit arch kills the process."""
    program = sf.packed_program()
    assert len(program) // 8 < 4096  # BPF_MAXINSNS
    enosys = sf.SECCOMP_RET_ERRNO | 38
    for arch, audit in sf.ARCHES.items():
        actions = sf.policy(arch)
        for nr in range(max(actions) + 64):
            want = actions[nr].value if nr in actions else enosys
            assert run_bpf(program, nr, audit) == want, (arch, nr)
    assert run_bpf(program, sf.X32_SYSCALL_BIT | 2, sf.AUDIT_ARCH_X86_64) \
        == sf.SECCOMP_RET_KILL_PROCESS
    assert run_bpf(program, 0, AUDIT_ARCH_AARCH64) == sf.SECCOMP_RET_KILL_PROCESS


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_policy_decisions(arch: str) -> None:
    """The decisions ARCHITECTURE.md lists, on both tables (numbers from the ABI tables)."""
    numbers = load_abi(arch).syscalls
    actions = sf.policy(arch)
    for name in ("openat", "execve", "rename", "unlinkat", "chdir", "fchmod", "clone",
                 "socket", "statx"):
        assert actions[numbers[name]] is sf.Action.TRACE, name
    for name in ("io_uring_setup", "open_by_handle_at", "ptrace", "mount", "bpf",
                 "process_vm_writev", "chroot"):
        assert actions[numbers[name]] is sf.Action.REFUSE, name
    for name in ("read", "write", "close", "mmap", "exit_group", "fstat", "getdents64"):
        assert actions[numbers[name]] is sf.Action.ALLOW, name
    assert actions[numbers["clone3"]] is sf.Action.UNAVAILABLE
    assert 452 not in actions  # fchmodat2 (Linux 6.6), newer than the tables: ENOSYS
    # ioctl stops only for the requests that change a file's attributes or inject input
    program, audit = sf.packed_program(), sf.ARCHES[arch]
    setflags = {"x86_64": 0x40086602, "i386": 0x40046602}[arch]  # FS_IOC_SETFLAGS
    for request, action in ((setflags, sf.Action.TRACE), (0x5412, sf.Action.TRACE),
                            (0x5401, sf.Action.ALLOW), (0x40086602 ^ 1, sf.Action.ALLOW)):
        got = run_bpf(program, numbers["ioctl"], audit, (3, request | 0xFFFF_0000_0000_0000
                                                         if arch == "x86_64" else request,
                                                         0, 0, 0, 0))
        assert got == action.value, (arch, hex(request))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cwd").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "victim").write_text("precious\n")
    return tmp_path / "cwd", tmp_path / "other"


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(directory))] = (st.st_mode, path.read_bytes()
                                                 if path.is_file() else b"")
    return out


SCRIPT = ("mkdir d; echo x > d/f; mv d/f d/g; cat d/g; rm d/g; rmdir d; "
          "echo evil > ../other/victim; rm ../other/victim; mv ../other/victim here; "
          "ln ../other/victim hard; chmod 777 ../other/victim; mkdir ../other/dir; "
          "cat ../other/victim; ls")


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_shell_natively_as_under_emulation(dirs: tuple[Path, Path], isa: str) -> None:
    """A busybox shell creating, renaming and removing in the current directory (allowed)
    and writing, removing, renaming, linking, chmod-ing outside (denied): the same stdout
    and status as under emulation, and outside nothing changed."""
    cwd, other = dirs
    before = snapshot(other)
    emulated = run_emutrace("run", busybox(isa), "sh", "-c", SCRIPT, cwd=cwd)
    assert snapshot(other) == before and not list(cwd.iterdir())
    native = run_emutrace("run", *NATIVE, busybox(isa), "sh", "-c", SCRIPT, cwd=cwd)
    assert snapshot(other) == before and not list(cwd.iterdir())
    assert (native.returncode, native.stdout) == (emulated.returncode, emulated.stdout)
    assert native.stdout == b"x\nprecious\n"
    err = native.stderr.decode()
    for what in ("can't create ../other/victim: Permission denied",
                 "can't remove '../other/victim': Permission denied",
                 "can't rename '../other/victim': Permission denied",
                 "ln: hard: Permission denied", "chmod: ../other/victim: Permission denied",
                 "can't create directory '../other/dir': Permission denied"):
        assert what in err, err
    assert err.count(DENIED) == 2  # one line per refused path (victim, dir), as emulation


def test_symlink_in_the_allowed_directory_does_not_lead_out(dirs: tuple[Path, Path]) -> None:
    """A symlink the guest makes in its writable directory, pointing outside: writing
    through it is refused (the sandbox resolves it; the kernel gets the resolved path)."""
    cwd, other = dirs
    got = run_emutrace("run", *NATIVE, busybox(), "sh", "-c",
                       "ln -s ../other/victim esc && echo evil > esc; cat esc", cwd=cwd)
    assert (other / "victim").read_text() == "precious\n"
    assert got.stdout == b"precious\n"  # reading through it is allowed (root /)
    assert f"{DENIED} esc denied (resolves to {other / 'victim'}" in got.stderr.decode()


@pytest.mark.parametrize("target", [(), NATIVE], ids=["emulation", "native"])
def test_forked_children_and_exec_stay_confined(dirs: tuple[Path, Path],
                                                target: tuple[str, ...]) -> None:
    """busybox applets run as forked and exec'd processes (`$BB mkdir`): children are
    confined like their parent, and so is an image after `exec`."""
    cwd, other = dirs
    bb = busybox()
    script = (f"{bb} mkdir made ../other/no1; {bb} echo a | {bb} tee piped ../other/no2; "
              f"exec {bb} mkdir made2 ../other/no3")
    got = run_emutrace("run", *target, bb, "sh", "-c", script, cwd=cwd)
    assert sorted(p.name for p in cwd.iterdir()) == ["made", "made2", "piped"]
    assert sorted(p.name for p in other.iterdir()) == ["victim"]
    assert got.returncode == 1 and got.stdout == b"a\n"
    assert got.stderr.decode().count(DENIED) == 3


def test_refused_calls_are_one_line(tmp_path: Path) -> None:
    """What cannot be confined natively is refused with one line: mount (the kernel's mount
    table shows nothing mounted there, though this test may run as root); a socket as
    under emulation (no network)."""
    got = run_emutrace("run", *NATIVE, busybox(), "mount", "-t", "tmpfs", "none", tmp_path,
                       cwd=tmp_path)
    with open("/proc/self/mountinfo") as f:
        assert str(tmp_path) not in f.read()
    assert "emutrace: native: mount refused (" in got.stderr.decode()
    assert got.returncode != 0
    native = run_emutrace("run", *NATIVE, busybox(), "nc", "127.0.0.1", "9", cwd=tmp_path)
    emulated = run_emutrace("run", busybox(), "nc", "127.0.0.1", "9", cwd=tmp_path)
    assert (native.returncode, native.stderr) == (emulated.returncode, emulated.stderr)
    assert b"socket of address family 2 denied (no network)" in native.stderr


def test_threads_are_refused_natively(tmp_path: Path) -> None:
    """A thread would run beside the tracee in its memory, racing the checks: refused with
    one line (pthread_create fails); --unconfined runs it."""
    program = bin_path("x86_64", "threads")
    got = run_emutrace("run", *NATIVE, program, cwd=tmp_path)
    err = got.stderr.decode()
    assert "emutrace: native: a thread (clone sharing memory or descriptors) refused" in err
    assert got.returncode != 0
    free = run_emutrace("run", *NATIVE, "--unconfined", program, cwd=tmp_path)
    assert free.returncode == 0 and "refused" not in free.stderr.decode()


def test_root_directory_and_exec_inside_the_root(tmp_path: Path) -> None:
    """With --root the guest sees guest paths: getcwd (`pwd -P`) as under emulation; a
    `#!` script in the root is refused natively (the kernel would take its interpreter
    from the host)."""
    root = tmp_path / "root"
    (root / "data").mkdir(parents=True)
    script = root / "s.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    cmd = ("--root", root, busybox(), "sh", "-c", "cd /data && pwd -P")
    native = run_emutrace("run", *NATIVE, *cmd, cwd=root)
    emulated = run_emutrace("run", *cmd, cwd=root)
    assert native.stdout == emulated.stdout == b"/data\n"
    got = run_emutrace("run", *NATIVE, "--root", root, busybox(), "sh", "-c", "exec /s.sh",
                       cwd=root)
    assert b"ran" not in got.stdout and got.returncode != 0
    assert "exec of" in got.stderr.decode() and "interpreter would be the host's" in \
        got.stderr.decode()


def test_unconfined_does_not_take_sandbox_options(tmp_path: Path) -> None:
    got = run_emutrace("run", *NATIVE, "--unconfined", "--allow-write", tmp_path,
                       bin_path("x86_64", "calls"), "fileio", cwd=tmp_path)
    err = got.stderr.decode()
    assert got.returncode == 64 and err.count("\n") == 1 and "--unconfined" in err


class FakeConfinement:
    """Stands for the stopped tracee: every path resolves to /host/<index>."""

    def resolve(self, call, index, dirfd, **kw):  # type: ignore[no-untyped-def]
        call.paths[index] = b"/host/%d" % index
        self.kw = kw
        return call.paths[index]


@pytest.mark.parametrize(("name", "args", "flags", "mode", "follow"), [
    ("openat", [2**32 - 100, 0x1000, 0o1101, 0o6755], 0o1101, 0o755, True),  # O_CREAT|TRUNC|W
    ("open", [0x1000, 0o400000, 0o644], 0o400000, 0, False),  # O_NOFOLLOW, no mode
    ("creat", [0x1000, 0o4777], 0o1101, 0o777, True),
])
def test_open_is_made_as_openat2_without_symlinks(name: str, args: list[int], flags: int,
                                                   mode: int, follow: bool) -> None:
    """open, openat and creat run as openat2(AT_FDCWD, host path, {flags, mode,
    RESOLVE_NO_SYMLINKS = 4}) (<linux/openat2.h>); the mode loses set-user/group-ID bits
    and is 0 without O_CREAT (openat2 refuses another)."""
    from emutrace.target import confine_checks as cc

    if not cc.host_has_openat2():
        pytest.fail("this kernel has no openat2 (Linux 5.6): the test host is too old")
    fake = FakeConfinement()
    call = cc.Call("x86_64", name, args)
    cc.CHECKS[name](fake, call)  # type: ignore[arg-type]
    assert call.becomes == "openat2"
    assert call.values == {0: 2**32 - 100, 3: 24}
    assert call.paths[1].startswith(b"/host/")
    assert struct.unpack("=QQQ", call.paths[2]) == (flags, mode, 4)
    assert fake.kw["follow_final"] is follow


@pytest.mark.parametrize("target", [(), NATIVE], ids=["emulation", "native"])
def test_signals_reach_only_guest_processes(tmp_path: Path, target: tuple[str, ...]) -> None:
    """kill(2) of a host process finds none (ESRCH, as in a PID namespace; the process lives
    on), of the guest's
    own child works (a shell sees 128 + SIGTERM), and `kill 0` reaches the guest's processes
    but not emutrace, which shares their process group and reports the guest's end."""
    victim = subprocess.Popen(["sleep", "300"])
    try:
        bb = busybox()
        got = run_emutrace("run", *target, bb, "kill", "-9", str(victim.pid), cwd=tmp_path)
        assert got.returncode == 1 and b"No such process" in got.stderr
        assert victim.poll() is None
        got = run_emutrace("run", *target, bb, "sh", "-c",
                           f"{bb} sleep 10 & kill $!; wait $!; echo status $?; kill 0; "
                           f"echo not reached", cwd=tmp_path)
        assert got.stdout == b"status 143\n" and got.returncode == 143
        assert b"guest killed by SIGTERM" in got.stderr
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
