"""x86_64 (AMD64), System V psABI."""

from dataclasses import replace

from emutrace.isa.base import (
    NO_FLOW,
    Breakpoint,
    Capability,
    Classifiers,
    CpuPort,
    Engines,
    Flow,
    FlowKind,
    GuestError,
    Identity,
    Insn,
    Isa,
    Registers,
    SyscallConvention,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="x86_64",
    aliases=("amd64", "x86-64", "x64"),
    elf_machine="EM_X86_64",
    elf_class=64,
    endian="little",
    qemu="x86_64",
    debian_arch="amd64",
    triple="x86_64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_X86",
    uc_mode=("UC_MODE_64",),
    uc_reg_module="x86_const",
    uc_reg_prefix="UC_X86_REG_",
    cs_arch="CS_ARCH_X86",
    cs_mode=("CS_MODE_64",),
    ks_arch="KS_ARCH_X86",
    ks_mode=("KS_MODE_64",),
)

# ---------------------------------------------------------------- registers
# psABI §3.2.3: integer arguments in rdi, rsi, rdx, rcx, r8, r9; result in rax; the
# seventh argument and later at 8(%rsp) on entry (0(%rsp) is the return address).
REGISTERS = Registers(
    pc="rip",
    sp="rsp",
    retval="rax",
    args=("rdi", "rsi", "rdx", "rcx", "r8", "r9"),
    tls="fs_base",
    stack_args_offset=8,
    general=("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r15"),
)

# ---------------------------------------------------------------- syscalls
# psABI A.2.1: `syscall`, number in rax, arguments rdi, rsi, rdx, r10, r8, r9 (r10 for rcx,
# which the instruction clobbers), result in rax, -4095..-1 is -errno.  Unicorn does not raise
# an interrupt for `syscall`: it needs UC_HOOK_INSN with UC_X86_INS_SYSCALL.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("0f05"),  # syscall
    hook="insn",
    intno=None,
    insn="UC_X86_INS_SYSCALL",
    number="rax",
    args=("rdi", "rsi", "rdx", "r10", "r8", "r9"),
    ret="rax",
    pc_in_hook=0,  # UC_HOOK_INSN runs before the instruction; Unicorn moves RIP on after it
)

# ---------------------------------------------------------------- traps
# int3 (0xCC, Intel SDM vol. 2 "INT n/INTO/INT3"): INTR 3, PC already past the byte.
BREAKPOINTS = (Breakpoint("int3", b"\xcc", hook="intr", intno=3, pc_after=1, works=True),)


# ---------------------------------------------------------------- classifiers
# Intel SDM vol. 2: CALL rel32 / r/m (E8, FF /2), RET (C3, C2 iw), JMP rel / r/m (E9, EB,
# FF /4), Jcc, JrCXZ and LOOPcc (conditional).  The i386 PC thunk (`call
# __x86.get_pc_thunk.bx`) is an ordinary call.  HLT, UD2 and INT3 never fall through.
_X86_COND_JUMPS = frozenset({"jrcxz", "jecxz", "jcxz", "loop", "loope", "loopne"})
_X86_STOPS = frozenset({"hlt", "ud2", "int3", "ud1", "ud0"})


def _x86_target(op: str) -> Flow:
    try:
        return Flow(FlowKind.NONE, target=int(op, 0))
    except ValueError:
        return Flow(FlowKind.NONE, indirect=op)  # register ("rax") or memory ("qword ptr [...]")


def classify_x86(insn: Insn) -> Flow:
    """x86 and x86_64 (capstone Intel syntax; prefixes like `notrack`/`bnd` are skipped)."""
    m = insn.mnemonic.split()[-1] if insn.mnemonic else ""
    if m in ("ret", "retf"):
        return Flow(FlowKind.RETURN)
    if m == "call":
        return replace(_x86_target(insn.op_str), kind=FlowKind.CALL)
    if m == "jmp":
        return replace(_x86_target(insn.op_str), kind=FlowKind.JUMP)
    if m.startswith("j") or m in _X86_COND_JUMPS:
        return replace(_x86_target(insn.op_str), kind=FlowKind.BRANCH, conditional=True)
    if m in _X86_STOPS:
        return Flow(FlowKind.STOP)
    return NO_FLOW


CLASSIFIERS = Classifiers(classify=classify_x86, insn_align=1)


# ---------------------------------------------------------------- quirks
ARCH_SET_FS = 0x1002  # <asm/prctl.h>
ARCH_GET_FS = 0x1003


def arch_prctl(cpu: CpuPort, args: tuple[int, ...]) -> int:
    """arch_prctl(2): glibc sets the TLS base with ARCH_SET_FS; FS_BASE is the register."""
    code, addr = args[0], args[1]
    if code == ARCH_SET_FS:
        cpu.reg_write("fs_base", addr)
        return 0
    if code == ARCH_GET_FS:
        cpu.mem_write(addr, cpu.reg_read("fs_base").to_bytes(8, "little"))
        return 0
    raise GuestError("EINVAL")


# ---------------------------------------------------------------- capabilities
ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    reset=(),  # the reset state (long mode, SSE on) already runs Linux user code
    hwcap=0,  # AT_HWCAP is CPUID.1:EDX on x86; glibc reads CPUID itself, 0 is safe
    hwcap2=0,
    platform="x86_64",
    uname_machine="x86_64",
    capabilities={
        "run_static": Capability(True),
        "run_dynamic": Capability(False, "dynamic linking is not implemented yet"),
        "sw_breakpoint": Capability(True),
        "busybox": Capability(True),
    },
    private_syscalls={"arch_prctl": arch_prctl},
    classifiers=CLASSIFIERS,
)
