"""Each ISA's signal frame as the guest sees it: where `struct ucontext` keeps the
interrupted registers, the signal mask and the sigaltstack state that `rt_sigreturn`
restores.  Pure data; `machine/linux/sys_sigdeliver.py` writes and reads
the frame.

The offsets are the kernel's uapi layouts, which glibc's `ucontext_t` mirrors (measured:
`offsetof` compiled with each Debian cross gcc 12 and printed under qemu-user,
tests/test_sigframe.py keeps that check):

* x86_64  arch/x86/include/uapi/asm/ucontext.h + sigcontext.h (struct sigcontext_64: r8..r15,
          rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags — glibc gregs[REG_R8..REG_EFL]).
* i386    the same headers, struct sigcontext_32: gs fs es ds edi esi ebp esp ebx edx ecx eax
          trapno err eip cs eflags sp_at_signal ss (restore_sigcontext reads `sp`, index 7).
* aarch64 arch/arm64/include/uapi/asm/ucontext.h (uc_sigmask before a 1024-bit pad, then
          uc_mcontext 16-aligned at 176) + sigcontext.h (fault_address, regs[31], sp, pc, pstate).
* arm     arch/arm/include/asm/ucontext.h + uapi sigcontext.h (trap_no, error_code, oldmask,
          arm_r0..arm_r10, fp, ip, sp, lr, pc, cpsr, fault_address).
* mips    arch/mips/include/uapi/asm/ucontext.h + sigcontext.h (o32: sc_regmask, sc_status,
          sc_pc, sc_regs[32], ... sc_mdhi, sc_mdlo: 64-bit slots); stack_t is ss_sp, ss_size,
          ss_flags on MIPS.
* riscv64 arch/riscv/include/uapi/asm/ucontext.h + ptrace.h (user_regs_struct: pc, x1..x31).
* ppc     arch/powerpc/include/uapi/asm/ucontext.h (32-bit: uc_regs points to uc_mcontext at
          192, after uc_sigmask and glibc's 1024-bit mask room) + ptrace.h PT_* indices.
* ppc64le the same, 64-bit: uc_mcontext (struct sigcontext) at 168, gp_regs at 232,
          `regs` pointing to them.
* s390x   arch/s390/include/uapi/asm/ucontext.h + sigcontext.h (_sigregs: psw mask/addr,
          gprs[16], acrs[16]).

The handler returns to a page emutrace maps (the ISA's system-call instruction), for every
ISA — the role the kernel's vdso/sigpage trampoline plays on aarch64, arm, riscv64, ppc; the
sa_restorer glibc passes with SA_RESTORER (x86_64, i386, s390x) is kept and reported by
sigaction, but not used: see ARCHITECTURE.md "Processes and signals".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emutrace.isa.base import Isa


@dataclass(frozen=True)
class Slot:
    reg: str  # the register, by the ISA's Unicorn name
    offset: int  # from the start of the ucontext
    size: int  # bytes (MIPS keeps 32-bit registers in 64-bit slots)
    restored: bool = True  # False: saved for the handler to read, not taken back


@dataclass(frozen=True)
class SigFrame:
    ucontext_size: int  # bytes reserved (glibc's sizeof(ucontext_t), at least the kernel's)
    stack: tuple[int, int, int]  # offsets of uc_stack.ss_sp, .ss_flags, .ss_size
    stack_sizes: tuple[int, int, int]  # their sizes
    sigmask: int  # offset of uc_sigmask (the kernel's sigset_t)
    slots: tuple[Slot, ...]  # the interrupted registers in uc_mcontext
    pc: str  # the slot holding the resume address
    # (offset of a pointer in the ucontext, offset it points to): ppc's uc_regs, ppc64's regs
    pointers: tuple[tuple[int, int], ...] = ()
    # ARM: the PC slot holds the address only; the Thumb state is this bit of this slot
    thumb: tuple[str, int] | None = None


def _run(base: int, size: int, names: Sequence[str | None], restored: bool = True
         ) -> list[Slot]:
    return [Slot(n, base + size * i, size, restored) for i, n in enumerate(names) if n]


def _x86_64() -> SigFrame:
    names: list[str | None] = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi",
                               "rsi", "rbp", "rbx", "rdx", "rax", "rcx", "rsp", "rip",
                               "eflags"]
    return SigFrame(968, (16, 24, 32), (8, 4, 8), 296, tuple(_run(40, 8, names)), "rip")


def _i386() -> SigFrame:
    names: list[str | None] = [None, None, None, None, "edi", "esi", "ebp", "esp", "ebx",
                               "edx", "ecx", "eax", None, None, "eip", None, "eflags"]
    slots = _run(20, 4, names) + [Slot("esp", 20 + 4 * 17, 4, restored=False)]  # UESP
    return SigFrame(364, (8, 12, 16), (4, 4, 4), 108, tuple(slots), "eip")


def _aarch64() -> SigFrame:
    slots = _run(184, 8, [f"x{i}" for i in range(31)])
    slots += [Slot("sp", 432, 8), Slot("pc", 440, 8), Slot("nzcv", 448, 8, restored=False)]
    return SigFrame(4560, (16, 24, 32), (8, 4, 8), 40, tuple(slots), "pc")


def _arm() -> SigFrame:
    names = [f"r{i}" for i in range(13)] + ["sp", "lr", "pc"]
    slots = _run(32, 4, names) + [Slot("cpsr", 96, 4, restored=False)]
    return SigFrame(744, (8, 12, 16), (4, 4, 4), 104, tuple(slots), "pc",
                    thumb=("cpsr", 1 << 5))  # CPSR.T (Arm ARM A2.5)


def _mips() -> SigFrame:
    slots = [Slot("pc", 32, 8)] + _run(40, 8, [None] + [str(i) for i in range(1, 32)])
    slots += [Slot("hi", 576, 8), Slot("lo", 584, 8)]
    return SigFrame(744, (8, 16, 12), (4, 4, 4), 616, tuple(slots), "pc")


def _riscv64() -> SigFrame:
    slots = _run(176, 8, ["pc"] + [f"x{i}" for i in range(1, 32)])
    return SigFrame(960, (16, 24, 32), (8, 4, 8), 40, tuple(slots), "pc")


def _power(word: int, ucontext_size: int, sigmask: int, gregs: int, regs_ptr: int
           ) -> SigFrame:
    # PT_R0..PT_R31, PT_NIP 32, PT_MSR 33, PT_CTR 35, PT_LNK 36, PT_XER 37, PT_CCR 38
    names: list[str | None] = [f"r{i}" for i in range(32)]
    names += ["pc", None, None, "ctr", "lr", "xer", "cr"]
    slots = _run(gregs, word, names) + [Slot("msr", gregs + 33 * word, word, restored=False)]
    stack = (16, 24, 32) if word == 8 else (8, 12, 16)
    sizes = (8, 4, 8) if word == 8 else (4, 4, 4)
    return SigFrame(ucontext_size, stack, sizes, sigmask, tuple(slots), "pc",
                    pointers=((regs_ptr, gregs),))


def _s390x() -> SigFrame:
    slots = [Slot("pswm", 40, 8, restored=False), Slot("pc", 48, 8)]
    slots += _run(56, 8, [f"r{i}" for i in range(16)])
    slots += _run(184, 4, [f"a{i}" for i in range(16)])
    return SigFrame(512, (16, 24, 32), (8, 4, 8), 384, tuple(slots), "pc")


SIGFRAMES: dict[str, SigFrame] = {
    "x86_64": _x86_64(),
    "i386": _i386(),
    "aarch64": _aarch64(),
    "arm": _arm(),
    "mips": _mips(),
    "mipsel": _mips(),
    "riscv64": _riscv64(),
    "ppc": _power(4, 1184, 52, 192, 48),
    "ppc64le": _power(8, 1440, 40, 232, 224),
    "s390x": _s390x(),
}


def sigframe(isa: Isa) -> SigFrame | None:
    """The ISA's frame, or None (handlers then get a zeroed ucontext)."""
    return SIGFRAMES.get(isa.name)
