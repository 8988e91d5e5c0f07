"""Each ISA's signal frame in guest memory (emutrace/isa/sigframe.py).

* The layout data against each Debian cross gcc's own `ucontext_t` (glibc mirrors the
  kernel's uapi struct): `_Static_assert`s on offsetof, compiled with -fsyntax-only.
* `testbins/<isa>/sigctx` (src/sigctx.c) under emutrace == under qemu-user on all ten ISAs:
  a handler reads the interrupted PC and SP from its ucontext and changes the interrupted
  system call's result, adds a signal to uc_sigmask (blocked after the return), reads
  uc_stack; a SIGSEGV handler on a sigaltstack moves the PC and SP to a landing function;
  SIGALRM reaches a loop that makes no system call (delivered between blocks); children
  that stop themselves with SIGSTOP and SIGTSTP (default action: the host process stops
  itself) are seen stopped by wait4(WUNTRACED) and continue after SIGCONT.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa.base import Cap
from emutrace.isa.sigframe import SIGFRAMES, SigFrame

from .conftest import ENV, ISAS, bin_path, isa_params, qemu_binary

COMPILERS = {
    "x86_64": "x86_64-linux-gnu-gcc", "i386": "i686-linux-gnu-gcc",
    "aarch64": "aarch64-linux-gnu-gcc", "arm": "arm-linux-gnueabihf-gcc",
    "mips": "mips-linux-gnu-gcc", "mipsel": "mipsel-linux-gnu-gcc",
    "riscv64": "riscv64-linux-gnu-gcc", "ppc": "powerpc-linux-gnu-gcc",
    "ppc64le": "powerpc64le-linux-gnu-gcc", "s390x": "s390x-linux-gnu-gcc",
}
# (register in the frame data, glibc's C expression of its offset in ucontext_t)
U = "offsetof(ucontext_t, uc_mcontext"
PPC32 = "((offsetof(ucontext_t, uc_reg_space) + 15) & ~15) + offsetof(mcontext_t, gregs"
REGISTERS: dict[str, list[tuple[str, str]]] = {
    "x86_64": [("rip", f"{U}.gregs[REG_RIP])"), ("rsp", f"{U}.gregs[REG_RSP])"),
               ("rax", f"{U}.gregs[REG_RAX])"), ("r8", f"{U}.gregs[REG_R8])"),
               ("eflags", f"{U}.gregs[REG_EFL])")],
    "i386": [("eip", f"{U}.gregs[REG_EIP])"), ("esp", f"{U}.gregs[REG_ESP])"),
             ("eax", f"{U}.gregs[REG_EAX])"), ("edi", f"{U}.gregs[REG_EDI])"),
             ("eflags", f"{U}.gregs[REG_EFL])")],
    "aarch64": [("pc", f"{U}.pc)"), ("sp", f"{U}.sp)"), ("x0", f"{U}.regs[0])"),
                ("x30", f"{U}.regs[30])"), ("nzcv", f"{U}.pstate)")],
    "arm": [("pc", f"{U}.arm_pc)"), ("sp", f"{U}.arm_sp)"), ("r0", f"{U}.arm_r0)"),
            ("lr", f"{U}.arm_lr)"), ("cpsr", f"{U}.arm_cpsr)")],
    "mips": [("pc", f"{U}.pc)"), ("29", f"{U}.gregs[29])"), ("2", f"{U}.gregs[2])"),
             ("hi", f"{U}.mdhi)"), ("lo", f"{U}.mdlo)")],
    "riscv64": [("pc", f"{U}.__gregs[REG_PC])"), ("x2", f"{U}.__gregs[REG_SP])"),
                ("x10", f"{U}.__gregs[REG_A0])"), ("x31", f"{U}.__gregs[31])")],
    "ppc": [("pc", f"{PPC32}[32])"), ("r1", f"{PPC32}[1])"), ("r3", f"{PPC32}[3])"),
            ("lr", f"{PPC32}[36])"), ("cr", f"{PPC32}[38])")],
    "ppc64le": [("pc", f"{U}.gp_regs[32])"), ("r1", f"{U}.gp_regs[1])"),
                ("r3", f"{U}.gp_regs[3])"), ("ctr", f"{U}.gp_regs[35])"),
                ("cr", f"{U}.gp_regs[38])")],
    "s390x": [("pc", f"{U}.psw.addr)"), ("pswm", f"{U}.psw.mask)"),
              ("r15", f"{U}.gregs[15])"), ("r2", f"{U}.gregs[2])"),
              ("a0", f"{U}.aregs[0])")],
}
REGISTERS["mipsel"] = REGISTERS["mips"]
# ppc's uc_regs and ppc64's regs point into the frame: (where the pointer is, where to)
POINTERS = {"ppc": ("offsetof(ucontext_t, uc_mcontext.uc_regs)", f"{PPC32}[0])"),
            "ppc64le": ("offsetof(ucontext_t, uc_mcontext.regs)",
                        "offsetof(ucontext_t, uc_mcontext.gp_regs)")}


def _offset(sf: SigFrame, reg: str) -> int:
    return next(s.offset for s in sf.slots if s.reg == reg)


def _asserts(isa: str) -> str:
    sf = SIGFRAMES[isa]
    checks = [(f"sizeof(ucontext_t) >= {sf.ucontext_size - 15}", "size"),
              (f"offsetof(ucontext_t, uc_sigmask) == {sf.sigmask}", "uc_sigmask")]
    for field, off, size in zip(("ss_sp", "ss_flags", "ss_size"), sf.stack, sf.stack_sizes,
                                strict=True):
        checks.append((f"offsetof(ucontext_t, uc_stack.{field}) == {off}", field))
        checks.append((f"sizeof(((stack_t *)0)->{field}) == {size}", field))
    for reg, expr in REGISTERS[isa]:
        checks.append((f"{expr} == {_offset(sf, reg)}", reg))
    assert len(sf.pointers) == (isa in POINTERS)
    for at, target in sf.pointers:
        checks.append((f"{POINTERS[isa][0]} == {at}", "pointer"))
        checks.append((f"{POINTERS[isa][1]} == {target}", "pointer target"))
    lines = [f'_Static_assert({c}, "{isa}: {what}");' for c, what in checks]
    return ("#define _GNU_SOURCE\n#include <stddef.h>\n#include <signal.h>\n"
            "#include <ucontext.h>\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("isa", ISAS)
def test_layout_is_glibcs(isa: str, tmp_path: Path) -> None:
    cc = COMPILERS[isa]
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} missing: scripts/setup.sh installs the cross compilers")
    src = tmp_path / "layout.c"
    src.write_text(_asserts(isa))
    got = subprocess.run([cc, "-fsyntax-only", str(src)], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0, got.stderr


def params() -> list:
    return isa_params(Cap.SIGNAL_HANDLERS)


@pytest.mark.oracle
@pytest.mark.parametrize("isa", params())
def test_handler_reads_and_changes_its_ucontext(isa: str, tmp_path: Path) -> None:
    program = str(bin_path(isa, "sigctx"))
    # both at once: each waits a second for its alarm
    with subprocess.Popen([qemu_binary(isa), program], cwd=tmp_path, env=ENV, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as qemu:
        ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                               program], cwd=tmp_path, env=ENV, capture_output=True,
                              text=True, timeout=60)
        out, err = qemu.communicate(timeout=60)
    ref = subprocess.CompletedProcess(qemu.args, qemu.returncode, out, err)
    assert ref.returncode == 0
    # what the reference shows, so that a change in qemu-user cannot pass unnoticed
    assert "kill returned 42" in ref.stdout
    assert "after the handler added it to uc_sigmask: HUP blocked=1" in ref.stdout
    assert "SIGSEGV 1: landed=2 handler on altstack=1 interrupted off it=1" in ref.stdout
    assert "alarm interrupted a loop without system calls: rang=1" in ref.stdout
    assert "STOP: stopped=1 by STOP, after SIGCONT exited=1 status=5" in ref.stdout
    # SIGTSTP: Linux discards it for a process in an orphaned process group (signal(7),
    # POSIX job control), which depends on how the test run was started: only the equality
    # with qemu-user below is asserted for it
    assert ours.stdout == ref.stdout
    assert ours.returncode == 0, ours.stderr


@pytest.mark.parametrize("isa", ["arm", "ppc64le"])
def test_traced_program_sees_the_same(isa: str, tmp_path: Path) -> None:
    """Under the int3 backend (breakpoints in the code the frames interrupt, a block hook
    beside its own hooks), the program behaves as untraced: stdout == qemu-user's (ARM:
    Thumb code, the resume state from cpsr; ppc64le: the ELFv2 r12 of a redirected PC)."""
    program = str(bin_path(isa, "sigctx"))
    with subprocess.Popen([qemu_binary(isa), program], cwd=tmp_path, env=ENV, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as qemu:
        ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "int3",
                               "-o", "trace.txt", program], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=120)
        out, _ = qemu.communicate(timeout=60)
    assert "SIGSEGV 1: landed=2" in out
    assert ours.stdout == out
    assert ours.returncode == 0, ours.stderr
    # traced on after the redirects: the calls main makes after the last handler
    assert "sigaction(14" in (tmp_path / "trace.txt").read_text()
