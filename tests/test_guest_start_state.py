"""How a program starts, and starts again at execve, as Linux starts it: the path of the
program (/proc/self/exe, AT_EXECFN) after an exec by a relative path, an executable stack
where PT_GNU_STACK (or the ISA's default without one) asks for it, the x87 control word and
MXCSR at start, after fork, in a thread and after execve.  Each program prints what it
sees; the oracle is the same program under qemu-user and, where this x86_64 host runs it,
natively (testbins/src/execrel.c, execstack.c, fpstate.c)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import ENV, ISAS, TESTBINS, bin_path, qemu_binary, run_emutrace, shell_status

X86 = ("x86_64", "i386")  # what this x86_64 host also runs natively
PT_GNU_STACK, PT_NULL = 0x6474E551, 0


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, timeout=120)


def qemu(isa: str, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return run([qemu_binary(isa), *argv], cwd)


# ---------------------------------------------------------------- exec by a relative path
@pytest.mark.oracle
@pytest.mark.parametrize("mode", ["fork", "vfork", "thread", "spawn"])
@pytest.mark.parametrize("isa", ISAS)
def test_exec_by_relative_path(isa: str, mode: str) -> None:
    """`./execrel MODE ./execrel`: the child execs `./execrel show` by a relative path
    (through fork, vfork, a second thread of a forked child, posix_spawn).  Its
    /proc/self/exe is absolute (static glibc asserts it before main) and AT_EXECFN is the
    path as given: what qemu-user shows for `./execrel show` started the same way from the
    same directory, and the parent then sees the child exit 0."""
    here = TESTBINS / isa
    child = qemu(isa, here, "./execrel", "show")
    assert child.returncode == 0, child.stderr
    assert b"exe: absolute=1 name=execrel\nexecfn: ./execrel\n" in child.stdout  # Linux's
    expected = child.stdout.decode() + f"{mode}: exited=1 status=0\n"
    got = run_emutrace("run", "./execrel", mode, "./execrel", cwd=here, timeout=300)
    assert (got.stdout.decode(), got.returncode) == (expected, 0), got.stderr.decode()
    if isa in X86:  # the whole run natively, exec and all
        native = run(["./execrel", mode, "./execrel"], here)
        assert native.stdout.decode() == expected


# ---------------------------------------------------------------- PT_GNU_STACK
@pytest.mark.oracle
@pytest.mark.parametrize("program", ["execstack", "execstack.nx"])
@pytest.mark.parametrize("isa", ISAS)
def test_gnu_stack_decides_the_stack(isa: str, program: str, tmp_path: Path) -> None:
    """GCC's nested-function trampoline runs on the stack: `execstack` (PT_GNU_STACK RWE)
    prints its sum, `execstack.nx` (linked -z noexecstack, PT_GNU_STACK RW) dies of
    SIGSEGV at the trampoline, as under qemu-user (and natively on x86)."""
    path = bin_path(isa, program)
    _same_as_oracles(isa, path, tmp_path)


def without_gnu_stack(src: Path, dst: Path) -> Path:
    """A copy of `src` whose PT_GNU_STACK header is PT_NULL: a program that says nothing
    about its stack (what old toolchains and hand-written assembly produce)."""
    data = bytearray(src.read_bytes())
    wide, order = data[4] == 2, "little" if data[5] == 1 else "big"
    field = (lambda at, n: int.from_bytes(data[at:at + n], order))  # noqa: E731
    phoff = field(0x20, 8) if wide else field(0x1C, 4)
    entsize, count = (field(0x36, 2), field(0x38, 2)) if wide else (field(0x2A, 2),
                                                                     field(0x2C, 2))
    found = 0
    for at in range(phoff, phoff + count * entsize, entsize):
        if field(at, 4) == PT_GNU_STACK:
            data[at:at + 4] = PT_NULL.to_bytes(4, order)
            found += 1
    assert found == 1
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    return dst


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_stack_without_gnu_stack_follows_the_isa(isa: str, tmp_path: Path) -> None:
    """No PT_GNU_STACK: the stack is executable where the kernel's elf_read_implies_exec
    says so for EXSTACK_DEFAULT (i386, arm, ppc, mips, mipsel: the trampoline runs) and not
    elsewhere (SIGSEGV), as qemu-user, which follows the same rule, and the host kernel
    (x86_64 and i386 natively) show."""
    path = without_gnu_stack(bin_path(isa, "execstack.nx"), tmp_path / "execstack.nognu")
    _same_as_oracles(isa, path, tmp_path)


def _same_as_oracles(isa: str, path: Path, cwd: Path) -> None:
    ref = qemu(isa, cwd, str(path))
    oracles = [(shell_status(ref.returncode), ref.stdout.decode())]
    if isa in X86:
        native = run([str(path)], cwd)
        oracles.append((shell_status(native.returncode), native.stdout.decode()))
    got = run_emutrace("run", path, cwd=cwd)
    for oracle in oracles:
        assert (got.returncode, got.stdout.decode()) == oracle, got.stderr.decode()
    assert oracles[0][0] in (0, 139)
    if got.returncode == 0:  # nothing to report: the trampoline's cache flush (arm's,
        assert got.stderr.decode() == ""  # mips's, riscv64's system call) is served


# ---------------------------------------------------------------- x87 and SSE state
@pytest.mark.oracle
@pytest.mark.parametrize("isa", X86)
def test_fpu_state_at_start_fork_thread_exec(isa: str, tmp_path: Path) -> None:
    """`fpstate all`: the x87 control word 0x37f and MXCSR 0x1f80 at start (64-bit x87
    precision: 1 + 2^-60 - 1 is 2^-60), the changed state kept by a forked child and a new
    thread, the initial state again after execve: as natively and under qemu-user."""
    path = bin_path(isa, "fpstate")
    native = run([str(path), "all"], tmp_path)
    ref = qemu(isa, tmp_path, str(path), "all")
    assert native.returncode == ref.returncode == 0
    assert native.stdout == ref.stdout
    assert native.stdout.startswith(b"start: cw=0x37f mxcsr=0x1f80 x87_sum=0x8p-63")
    got = run_emutrace("run", path, "all", cwd=tmp_path)
    assert (got.returncode, got.stdout.decode()) == (0, native.stdout.decode()), \
        got.stderr.decode()

