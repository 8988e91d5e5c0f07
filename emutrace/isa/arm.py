"""ARM 32-bit (ARMv7-A, EABI hard-float), AAPCS; A32 and Thumb-2 code."""

import re

from emutrace.isa.base import (
    NO_FLOW,
    Breakpoint,
    Capability,
    Classifiers,
    CpuPort,
    Engines,
    Flow,
    FlowKind,
    Identity,
    Insn,
    Isa,
    RegFixup,
    Registers,
    SyscallConvention,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="arm",
    aliases=("armhf", "armv7", "arm32"),
    elf_machine="EM_ARM",
    elf_class=32,
    endian="little",
    qemu="arm",
    debian_arch="armhf",
    triple="arm-linux-gnueabihf",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_ARM",
    uc_mode=("UC_MODE_ARM",),
    uc_reg_module="arm_const",
    uc_reg_prefix="UC_ARM_REG_",
    cs_arch="CS_ARCH_ARM",
    cs_mode=("CS_MODE_ARM",),
    ks_arch="KS_ARCH_ARM",
    ks_mode=("KS_MODE_ARM",),
)

# ---------------------------------------------------------------- registers
# AAPCS §6.1: arguments r0–r3, result r0, link register r14 (lr); stacked arguments at sp.
# The thread pointer lives in TPIDRURO (CP15 c13, c0, 3), read by `mrc p15,0,rX,c13,c0,3`.
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="r0",
    args=("r0", "r1", "r2", "r3"),
    link="lr",
    tls="c13_c0_3",
    general=("r0", "r1", "r4", "r7", "r11", "r12", "lr"),
)

# ---------------------------------------------------------------- syscalls
# EABI `svc #0`: number in r7, arguments r0–r6, result r0 (-errno).  Unicorn: INTR 2.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("000000ef"),  # svc #0
    hook="intr",
    intno=2,
    insn=None,
    number="r7",
    args=("r0", "r1", "r2", "r3", "r4", "r5", "r6"),
    ret="r0",
    pair_aligned=True,
)

# ---------------------------------------------------------------- traps
# BKPT #0: A32 0xE1200070, Thumb 0xBE00 (Arm ARM A8.8.24).  INTR 7, PC left on the BKPT.
# (The UDF 0xE7F001F0 that gdb uses surfaces as INSN_INVALID in Unicorn.)
BREAKPOINTS = (
    Breakpoint("bkpt #0", bytes.fromhex("700020e1"), hook="intr", intno=7, pc_after=0, works=True),
    Breakpoint("bkpt #0 (thumb)", bytes.fromhex("00be"), hook="intr", intno=7, pc_after=0,
               works=True),
)


# ---------------------------------------------------------------- classifiers
# Arm ARM (DDI 0406C) A8.8: BL imm stays in the current instruction set, BLX imm switches
# ARM↔Thumb (the target gets bit 0 when it is Thumb), BLX Rm is an indirect call.  Returns:
# BX LR, MOV PC, LR, POP/LDM SP!, {…, PC}, LDR PC, [SP], #4.  B / BX Rm / LDR PC / TBB / TBH
# jump; B<cond> / CBZ / CBNZ and anything inside an IT block (capstone prints the condition)
# are conditional.  UDF and BKPT never fall through.
_ARM_CONDS = frozenset(
    {"eq", "ne", "hs", "lo", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt",
     "le"})
_ARM_BASES = frozenset(
    {"b", "bl", "blx", "bx", "cbz", "cbnz", "pop", "ldm", "ldmia", "ldmfd", "ldr", "mov",
     "tbb", "tbh", "udf", "bkpt"})


def _arm_split(mnemonic: str) -> tuple[str, bool]:
    """(base mnemonic, conditional) from e.g. `bxeq`, `ldmia.w`, `blo`."""
    m = mnemonic.split(".")[0]
    if m in _ARM_BASES:
        return m, False
    if m[:-2] in _ARM_BASES and m[-2:] in _ARM_CONDS:
        return m[:-2], True
    return m, False


def classify_arm(insn: Insn) -> Flow:
    m, cond = _arm_split(insn.mnemonic)
    op = insn.op_str.strip()
    regs = op.replace(" ", "")
    if m in ("bl", "blx") and op.startswith("#"):
        target = int(op.lstrip("#"), 0)
        thumb = insn.thumb != (m == "blx")  # BLX imm switches the instruction set
        return Flow(FlowKind.CALL, target=target | 1 if thumb else target, conditional=cond)
    if m == "blx":
        return Flow(FlowKind.CALL, indirect=op, conditional=cond)
    if m == "bx" or (m == "mov" and regs.startswith("pc,")):
        src = op if m == "bx" else regs.split(",")[1]
        if src == "lr":
            return Flow(FlowKind.RETURN, conditional=cond)
        return Flow(FlowKind.JUMP, indirect=src, conditional=cond)
    if m in ("pop", "ldm", "ldmia", "ldmfd") and regs.endswith("pc}"):
        if m == "pop" or regs.startswith("sp!,"):
            return Flow(FlowKind.RETURN, conditional=cond)
        return Flow(FlowKind.JUMP, indirect=op, conditional=cond)
    if m == "ldr" and regs.startswith("pc,"):
        if regs == "pc,[sp],#4":
            return Flow(FlowKind.RETURN, conditional=cond)
        return Flow(FlowKind.JUMP, indirect=op.split(",", 1)[1].strip(), conditional=cond)
    if m == "b":
        target = int(op.lstrip("#"), 0) | (1 if insn.thumb else 0)
        return Flow(FlowKind.BRANCH if cond else FlowKind.JUMP, target=target, conditional=cond)
    if m in ("cbz", "cbnz"):
        target = int(op.split(",")[-1].strip().lstrip("#"), 0) | 1  # Thumb only
        return Flow(FlowKind.BRANCH, target=target, conditional=True)
    if m in ("tbb", "tbh"):
        return Flow(FlowKind.JUMP, indirect=op, conditional=cond)  # jump table
    if m in ("udf", "bkpt") and not cond:
        return Flow(FlowKind.STOP)
    return NO_FLOW


_LITERAL = re.compile(r"\[pc, #(-?(?:0x[0-9a-f]+|\d+))\]")


def literal_arm(insn: Insn) -> tuple[int, int] | None:
    """LDR (literal), Arm ARM A8.8.64: the address is Align(PC, 4) + imm, where PC reads as
    the instruction's address + 8 in A32 and + 4 in Thumb; LDRD/VLDR load 8 bytes."""
    if not insn.mnemonic.startswith(("ldr", "vldr")):
        return None
    m = _LITERAL.search(insn.op_str)
    if m is None:
        return None
    base = (insn.addr + (4 if insn.thumb else 8)) & ~3
    size = 8 if insn.mnemonic.startswith(("ldrd", "vldr")) else 4
    return base + int(m.group(1), 0), size


CLASSIFIERS = Classifiers(classify=classify_arm, alt_mode=("CS_MODE_THUMB",),
                          literal=literal_arm)

# ---------------------------------------------------------------- quirks
def set_tls(cpu: CpuPort, args: tuple[int, ...]) -> int:
    """__ARM_NR_set_tls (0xF0005): the kernel writes TPIDRURO."""
    cpu.reg_write("c13_c0_3", args[0])
    return 0


RESET = (
    # FPEXC.EN (bit 30): VFP is off at reset; the first VFP instruction would be UNDEFINED.
    RegFixup("fpexc", 0x40000000, "VFP disabled at reset (FPEXC.EN = 0)", combine="set"),
)

# asm/hwcap.h: SWP HALF THUMB FAST_MULT VFP EDSP VFPv3 TLS IDIVA IDIVT (no NEON, no VFPD32
# claims beyond what Cortex-A15 has)
HWCAP = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 4) | (1 << 6) | (1 << 7) | (1 << 13) | (1 << 15)
HWCAP |= (1 << 17) | (1 << 18)

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
    platform="v7l",
    uname_machine="armv7l",
    capabilities={
        "run_static": Capability(True),
        "run_dynamic": Capability(False, "dynamic linking is not implemented yet"),
        "sw_breakpoint": Capability(True),
        "busybox": Capability(True),
        # ISA-specific:
        "int3_stripped": Capability(
            False, "stripped Thumb/A32 code (calls.stripped recursion): int3 misses a return "
                   "that step sees (the frame closes as unwound); cause not yet pinned down, "
                   "suspected: a mode-switching stub found by recursive descent"),
        "int3_strict_stripped": Capability(
            False, "strict cleanup on stripped code (busybox): descent from a mid-function "
                   "address yields a fragment of the function; strict mode disarms the "
                   "fragment holding the next call site and the trace loses events"),
    },
    private_syscalls={"ARM_set_tls": set_tls},
    thumb_bit=True,
    classifiers=CLASSIFIERS,
)
