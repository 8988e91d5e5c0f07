"""AArch64 (ARMv8-A, LP64), Procedure Call Standard for the Arm 64-bit Architecture."""

from emutrace.isa.base import (
    NO_FLOW,
    Breakpoint,
    Capability,
    Classifiers,
    Engines,
    Flow,
    FlowKind,
    Identity,
    Insn,
    Isa,
    Registers,
    SyscallConvention,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="aarch64",
    aliases=("arm64",),
    elf_machine="EM_AARCH64",
    elf_class=64,
    endian="little",
    qemu="aarch64",
    debian_arch="arm64",
    triple="aarch64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_ARM64",
    uc_mode=("UC_MODE_ARM",),
    uc_reg_module="arm64_const",
    uc_reg_prefix="UC_ARM64_REG_",
    cs_arch="CS_ARCH_ARM64",
    cs_mode=("CS_MODE_ARM",),
    ks_arch="KS_ARCH_ARM64",
    ks_mode=("KS_MODE_LITTLE_ENDIAN",),
)

# ---------------------------------------------------------------- registers
# AAPCS64 §6.8.2: arguments x0–x7, result x0, link register x30; stacked arguments at sp.
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="x0",
    args=("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"),
    link="x30",
    tls="tpidr_el0",
    general=("x0", "x1", "x7", "x8", "x19", "x28", "x29", "x30"),
)

# ---------------------------------------------------------------- syscalls
# `svc #0`: number in x8, arguments x0–x5, result x0 (-errno).  Unicorn: INTR 2 (EXCP_SWI),
# PC already on the next instruction.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("010000d4"),  # svc #0
    hook="intr",
    intno=2,
    insn=None,
    number="x8",
    args=("x0", "x1", "x2", "x3", "x4", "x5"),
    ret="x0",
)

# ---------------------------------------------------------------- traps
# BRK #0 = 0xD4200000 (Arm ARM C6.2.38): INTR 7 (EXCP_BKPT), PC left on the BRK.
BREAKPOINTS = (
    Breakpoint("brk #0", bytes.fromhex("000020d4"), hook="intr", intno=7, pc_after=0, works=True),
)

# ---------------------------------------------------------------- classifiers
# Arm ARM (DDI 0487) C6: BL imm26 / BLR Xn are calls (X30 = return address), RET {Xn}
# returns, B imm26 / BR Xn jump, B.cond / CBZ / CBNZ / TBZ / TBNZ branch conditionally;
# BRK and UDF never fall through.
_A64_COND = frozenset({"cbz", "cbnz", "tbz", "tbnz"})


def _a64_imm(op: str) -> int:
    return int(op.split(",")[-1].strip().lstrip("#"), 0)


def classify_aarch64(insn: Insn) -> Flow:
    m, op = insn.mnemonic, insn.op_str.strip()
    if m == "bl":
        return Flow(FlowKind.CALL, target=_a64_imm(op))
    if m in ("blr", "blraa", "blrab", "blraaz", "blrabz"):
        return Flow(FlowKind.CALL, indirect=op.split(",")[0])
    if m in ("ret", "retaa", "retab"):
        return Flow(FlowKind.RETURN)
    if m == "b":
        return Flow(FlowKind.JUMP, target=_a64_imm(op))
    if m in ("br", "braa", "brab", "braaz", "brabz"):
        return Flow(FlowKind.JUMP, indirect=op.split(",")[0])
    if m.startswith("b.") or m in _A64_COND:
        return Flow(FlowKind.BRANCH, target=_a64_imm(op), conditional=True)
    if m in ("brk", "udf", "hlt"):
        return Flow(FlowKind.STOP)
    return NO_FLOW


CLASSIFIERS = Classifiers(classify=classify_aarch64)

# ---------------------------------------------------------------- capabilities
HWCAP_FP, HWCAP_ASIMD = 1 << 0, 1 << 1  # asm/hwcap.h; no CPUID bit: glibc never reads MIDR

ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    reset=(),  # FP/SIMD are enabled at reset in Unicorn's EL0-like state
    hwcap=HWCAP_FP | HWCAP_ASIMD,
    hwcap2=0,
    platform="aarch64",
    uname_machine="aarch64",
    capabilities={
        "run_static": Capability(True),
        "run_dynamic": Capability(False, "dynamic linking is not implemented yet"),
        "sw_breakpoint": Capability(True),
        "busybox": Capability(True),
    },
    classifiers=CLASSIFIERS,
)
