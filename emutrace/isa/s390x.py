"""IBM z/Architecture (s390x), ELF ABI for the zSeries / s390x ELF ABI Supplement."""

from emutrace.isa.base import (
    Breakpoint,
    Capability,
    Engines,
    Identity,
    Isa,
    RegFixup,
    Registers,
    SyscallConvention,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="s390x",
    aliases=("s390", "systemz", "zarch"),
    elf_machine="EM_S390",
    elf_class=64,
    endian="big",
    qemu="s390x",
    debian_arch="s390x",
    triple="s390x-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_S390X",
    uc_mode=("UC_MODE_BIG_ENDIAN",),
    uc_reg_module="s390x_const",
    uc_reg_prefix="UC_S390X_REG_",
    cs_arch="CS_ARCH_SYSZ",
    cs_mode=("CS_MODE_BIG_ENDIAN",),
    uc_tlb_virtual=True,  # measured faster (63 vs 50 MIPS on fib)
    ks_arch="KS_ARCH_SYSTEMZ",
    ks_mode=("KS_MODE_BIG_ENDIAN",),
)

# ---------------------------------------------------------------- registers
# s390x ABI supplement §1.2.3: arguments r2–r6, result r2, return address r14, stack pointer
# r15; stacked arguments follow the 160-byte register save area.  The thread pointer is the
# pair of access registers a0:a1, set by glibc itself (`sar`).
REGISTERS = Registers(
    pc="pc",
    sp="r15",
    retval="r2",
    args=("r2", "r3", "r4", "r5", "r6"),
    link="r14",
    stack_args_offset=160,
    general=("r0", "r1", "r2", "r6", "r7", "r13", "r14"),
)

# ---------------------------------------------------------------- syscalls
# `svc n`: number n from the instruction's immediate byte, or r1 when n = 0 (numbers ≥ 256);
# arguments r2–r7, result r2 (-errno).  Unicorn: INTR 2 (EXCP_SVC) with PC still AT the svc
# (QEMU's do_svc_interrupt adds the length, Unicorn skips it): the hook adds 2.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("0a00"),  # svc 0
    hook="intr",
    intno=2,
    insn=None,
    number="r1",
    args=("r2", "r3", "r4", "r5", "r6", "r7"),
    ret="r2",
    pc_advance=2,
    pc_in_hook=0,  # PC still on the svc
    imm_number=(1, 1),
)

# ---------------------------------------------------------------- traps
# 0x0001 is the gdb breakpoint (asm/ptrace.h S390_BREAKPOINT): an invalid opcode that Unicorn
# reports as INTR 3 (program interrupt) with PC at the breakpoint.
BREAKPOINTS = (
    Breakpoint("0x0001", bytes.fromhex("0001"), hook="intr", intno=3, pc_after=0, works=True),
)

# ---------------------------------------------------------------- quirks
RESET = (
    # PSW mask EA|BA: Unicorn resets to 24-bit addressing; the stack lives far above 16 MiB.
    RegFixup("pswm", 0x180000000, "reset PSW uses 24-bit addressing", combine="set"),
    # CR0.AFP (additional floating-point registers), else `std %f8` is a data exception.
    RegFixup("cr0", 0x40000, "f1–f15 unavailable at reset (CR0.AFP = 0)"),
)

# asm/elf.h HWCAP_S390_: ESAN3 ZARCH STFLE MSA LDISP EIMM ETF3EH HIGH_GPRS; no vector facility
# (advertising VXRS would need CR0.VE too)
HWCAP = 1 | 2 | 4 | 8 | 16 | 32 | 256 | 512

# ---------------------------------------------------------------- capabilities
ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    reset=RESET,
    hwcap=HWCAP,
    hwcap2=0,
    platform="z900",
    uname_machine="s390x",
    capabilities={
        "run_static": Capability(True),
        "run_dynamic": Capability(False, "dynamic linking is not implemented yet"),
        "sw_breakpoint": Capability(True),
        "busybox": Capability(True),
        # ISA-specific:
        "exrl_relative_long": Capability(
            False, "Unicorn 2.1.4 (QEMU 5.0) takes the target of a relative-long instruction "
                   "run by EXRL (e.g. BRASL) relative to the EXRL, not to the executed "
                   "instruction (fixed in QEMU 8.0): such a call goes astray"),
    },
)
