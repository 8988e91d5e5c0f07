"""AArch64 (ARMv8-A, LP64), Procedure Call Standard for the Arm 64-bit Architecture."""

import re

from emutrace.isa.arm import ARM_CONDITIONS
from emutrace.isa.base import (
    CLONE_BACKWARDS,
    NO_FLOW,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    Condition,
    CpuPort,
    CValues,
    DebugHardware,
    Engines,
    Flow,
    FlowKind,
    Identity,
    Insn,
    Isa,
    NativeOp,
    NativeTracing,
    Plt,
    Registers,
    SweepFilter,
    SyscallConvention,
    branch_records,
    no_block_step,
    transfer_sp_effect,
)
from emutrace.isa.nzcv import NZCV_CONDITIONS

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
    # arm64 takes clone's tls before the child's tid pointer, as glibc's clone.S passes
    # them (x3 = tls, x4 = ctid): the CONFIG_CLONE_BACKWARDS order
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# BRK #0 = 0xD4200000 (Arm ARM C6.2.38): INTR 7 (EXCP_BKPT), PC left on the BRK.
BREAKPOINTS = (
    Breakpoint("brk #0", bytes.fromhex("000020d4"), hook="intr", intno=7, pc_after=0, works=True),
)

# Hardware instruction breakpoints (what `hwbp` models):
# Arm ARM D2: ID_AA64DFR0_EL1.BRPs + 1 breakpoints (2-16); Cortex-A53 has
# BRPs=5, so 6 (AMD UG1087, A53_DBG_3 reset value 0x10305106)
DEBUG_HARDWARE = DebugHardware(6, "address", "DBGBVR<n>_EL1",
                               source="Arm ARM D2 ID_AA64DFR0_EL1.BRPs+1; Cortex-A53: 6")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-arm64",
    notes={
        "btf": no_block_step(),
        "bts": branch_records("BRBE, 32/64 entries"),
    },
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


# The words classify_aarch64 may read as a transfer (Arm ARM C4.1 "Branches, exception
# generating and system instructions"): B/BL (x00101), B.cond/BC.cond (0101010x),
# CBZ/CBNZ (x011010x), TBZ/TBNZ (x011011x), the branches through a register (1101011x: BR,
# BLR, RET and their authenticated forms).  Among them the ones that jump or branch to the
# target capstone prints last, never calls: B, B.cond, CBZ/CBNZ, TBZ/TBNZ, all but B
# conditional (B: the jump).  BRK, HLT and UDF are STOPs.
SWEEP_AARCH64 = SweepFilter(
    encodings=((4, 0x7C000000, 0x14000000), (4, 0xFF000000, 0x54000000),
               (4, 0x7C000000, 0x34000000), (4, 0xFE000000, 0xD6000000)),
    target_encodings=((4, 0xFC000000, 0x14000000), (4, 0xFF000010, 0x54000000),
                      (4, 0x7C000000, 0x34000000)),
    branch_encodings=((4, 0xFF000010, 0x54000000), (4, 0x7C000000, 0x34000000)),
    jump_encodings=((4, 0xFC000000, 0x14000000),),
    call_encodings=((4, 0xFC000000, 0x94000000),),  # BL
    stop_encodings=((4, 0xFFE0001F, 0xD4200000), (4, 0xFFE0001F, 0xD4400000),
                    (4, 0xFFFF0000, 0x00000000)),
    fixed_size=4)


CLASSIFIERS = Classifiers(classify=classify_aarch64,
                          sp_effect=transfer_sp_effect(classify_aarch64),
                          virtual_breakpoints=True,
                          sweep=SWEEP_AARCH64)

# ---------------------------------------------------------------- simulation
# The effect of a displaced call/return/jump (Arm ARM C6.2): BL/BLR set X30 to the next
# instruction (the target register is read first: `blr x30`), RET/BR/B jump, B.cond tests
# NZCV (ConditionHolds, J1.1.3.x), CBZ/CBNZ test a register, TBZ/TBNZ one bit of it.
# Pointer-authenticated forms (blraa, retab, ...) are not simulated: the backend falls back.
# the A32 condition codes with the same meaning (Arm ARM J1 ConditionHolds), plus AL/NV
_A64_TESTS = {**ARM_CONDITIONS, "al": lambda n, z, c, v: True, "nv": lambda n, z, c, v: True}


def condition_holds(cond: str, nzcv: int) -> bool | None:
    """An A64/A32 condition (eq, ne, ...) from NZCV in bits 31–28; None if unknown."""
    test = _A64_TESTS.get(cond)
    if test is None:
        return None
    n, z, c, v = (bool(nzcv >> bit & 1) for bit in (31, 30, 29, 28))
    return bool(test(n, z, c, v))


def simulate_aarch64(cpu: CpuPort, insn: Insn, flow: Flow) -> int | None:
    m, op = insn.mnemonic, insn.op_str.replace(" ", "")
    after = insn.addr + insn.size
    if m in ("bl", "b") and flow.target is not None:
        if m == "bl":
            cpu.reg_write("x30", after)
        return flow.target
    if m in ("blr", "br") and re.fullmatch(r"x([0-9]|[12][0-9]|30)", op):
        target = cpu.reg_read(op)
        if m == "blr":
            cpu.reg_write("x30", after)
        return target
    if m == "ret" and (op == "" or re.fullmatch(r"x([0-9]|[12][0-9]|30)", op)):
        return cpu.reg_read(op or "x30")
    if flow.target is None:
        return None
    if m.startswith("b."):
        taken = condition_holds(m[2:], cpu.reg_read("nzcv"))
        if taken is None:
            return None
        return flow.target if taken else after
    parts = op.split(",")
    reg = parts[0]
    if not re.fullmatch(r"[xw]([0-9]|[12][0-9]|30)|[xw]zr", reg):
        return None
    value = 0 if reg.endswith("zr") else cpu.reg_read("x" + reg[1:])
    if reg.startswith("w"):
        value &= 0xFFFFFFFF
    if m in ("cbz", "cbnz") and len(parts) == 2:
        return flow.target if (value == 0) == (m == "cbz") else after
    if m in ("tbz", "tbnz") and len(parts) == 3:
        bit = int(parts[1].lstrip("#"), 0)
        return flow.target if (value >> bit & 1 == 0) == (m == "tbz") else after
    return None


# _A64_TESTS as data for the native hot path (isa/nzcv.py)
_NATIVE_CONDITIONS = {**NZCV_CONDITIONS, "al": ("always", ()), "nv": ("always", ())}
_XREG = re.compile(r"x([0-9]|[12][0-9]|30)")


def lower_aarch64(insn: Insn, flow: Flow) -> NativeOp | None:
    """The simulator's BL / BLR Xn / RET [Xn] / B / BR Xn / B.cond / CBZ / CBNZ / TBZ / TBNZ
    as data for the native hot path (Arm ARM C6.2: the link goes to X30; BLR reads its
    register before writing X30)."""
    m, op = insn.mnemonic, insn.op_str.replace(" ", "")
    if m in ("bl", "b") and flow.target is not None:
        kind = FlowKind.CALL if m == "bl" else FlowKind.JUMP
        return NativeOp(kind, target=flow.target, link="x30" if m == "bl" else None)
    if m in ("blr", "br") and _XREG.fullmatch(op):
        kind = FlowKind.CALL if m == "blr" else FlowKind.JUMP
        return NativeOp(kind, reg=op, link="x30" if m == "blr" else None)
    if m == "ret" and (op == "" or _XREG.fullmatch(op)):
        return NativeOp(FlowKind.RETURN, reg=op or "x30")
    if flow.target is None:
        return None
    if m.startswith("b."):
        test = _NATIVE_CONDITIONS.get(m[2:])
        if test is None:
            return None
        return NativeOp(FlowKind.JUMP, target=flow.target,
                        cond=Condition(test[0], "nzcv", *test[1]))
    parts = op.split(",")
    reg = parts[0]
    if not re.fullmatch(r"[xw]([0-9]|[12][0-9]|30)", reg):
        return None  # (xzr/wzr: never taken or always; left to Python)
    xreg, width = "x" + reg[1:], 32 if reg.startswith("w") else 64
    if m in ("cbz", "cbnz") and len(parts) == 2:
        return NativeOp(FlowKind.JUMP, target=flow.target,
                        cond=Condition("zero" if m == "cbz" else "nonzero", xreg, width))
    if m in ("tbz", "tbnz") and len(parts) == 3:
        bit = int(parts[1].lstrip("#"), 0)
        return NativeOp(FlowKind.JUMP, target=flow.target,
                        cond=Condition("clear" if m == "tbz" else "set", xreg, bit))
    return None


# ---------------------------------------------------------------- capabilities
HWCAP_FP, HWCAP_ASIMD = 1 << 0, 1 << 1  # asm/hwcap.h; no CPUID bit: glibc never reads MIDR

# ---------------------------------------------------------------- C values
# AAPCS64 §10.1 (Arm C/C++ language mappings): char is unsigned; §6.8.2: float/double in
# v0-v7 (s/d views: the low 32/64 bits), results in v0; a composite of up to 16 bytes in
# x registers, larger ones by reference (B.4: a pointer to a caller's copy); §6.8.2 C.2: an
# HFA (1-4 members, all float or all double) one member per v register when NSRN + members
# <= 8, else (C.3) NSRN = 8 and it goes on the stack.  Composite results up to 16 bytes in
# x0:x1, larger ones in memory at the address the caller passes in x8 (§6.9).  §10.1.1:
# long double is IEEE binary128 (GCC: __LDBL_MANT_DIG__ 113), a quad in q0-q7, result q0.
# C.5/C.6: an FP argument once v0-v7 are taken goes on the stack (a quad 16-byte aligned).
C_VALUES = CValues(char_signed=False,
                   fp_args=("d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"),
                   fp_retval="d0", struct_in_slots=16, struct_large="ref",
                   retval_hi="x1", struct_ret_in_regs=16, sret_reg="x8",
                   struct_fp="hfa", hfa_limit=4, hfa_to_stack=True, long_double="binary128",
                   long_double_args="fp", long_double_ret="fp",
                   fp_quad=tuple(f"q{i}" for i in range(8)), long_double_align=16,
                   fp_overflow_stack=True, long_double_size=16)


# how far Debian's arm64 kernel gets (emutrace info)
LINUX_ARM64 = (
    "Debian's linux-image-cloud-arm64 boots on virt-arm64 (--initrd, --append) with a "
    "busybox-static initramfs to its /init's command output and a PSCI SYSTEM_OFF, and is "
    "traced at its link address under its System.map's names (--symbols; --trace-after "
    "to trace only the command); timer interrupts reach the CPU only while it idles "
    "(wfi): a busy CPU takes no tick")

ISA = Isa(
    # AArch64 ELF ABI / BFD elfNN_aarch64_small_plt0_entry: PLT0 32 bytes, stubs 16
    plt=Plt(header=32, entry=16),
    c_values=C_VALUES,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=(),  # FP/SIMD are enabled at reset in Unicorn's EL0-like state
    hwcap=HWCAP_FP | HWCAP_ASIMD,
    hwcap2=0,
    platform="aarch64",
    uname_machine="aarch64",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        # Debian's linux-image-cloud-arm64 on virt-arm64 with a busybox initramfs runs its
        # command and powers off (tests/test_linux_boot.py)
        Cap.LINUX_KERNEL: Capability(True, LINUX_ARM64),
        Cap.KERNEL: Capability(True),  # isa/kernel_aarch64.py, machine/board/presets.py
        Cap.SIGNAL_HANDLERS: SIGNAL_HANDLERS,
        Cap.RUN_STATIC: Capability(True),
        Cap.RUN_DYNAMIC: Capability(True),
        Cap.TRACE_DYNAMIC: Capability(True),
        Cap.PLT_NAMES: Capability(True),
        Cap.SW_BREAKPOINT: Capability(True),
        Cap.THREAD_PREEMPTION: Capability(True),
        Cap.CPU_TIMERS: Capability(True),  # ITIMER_PROF/VIRTUAL (cpu_timers.py)
        Cap.BUSYBOX: Capability(True),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
        Cap.ENTRY_SEES_EVERY_CALL: Capability(
            False,
            "glibc calls main through a `b main` placed inside _start "
            "(_start+0x34): eager entry probes see main as called directly "
            "(compared at named entries)"),
    },
    classifiers=CLASSIFIERS,
    simulate=simulate_aarch64,
    lower=lower_aarch64,
)
