"""ARM 32-bit (ARMv7-A, EABI hard-float), AAPCS; A32 and Thumb-2 code."""

import re

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
    RegFixup,
    Registers,
    SweepFilter,
    SweepKind,
    SyscallConvention,
    branch_records,
    no_block_step,
    no_single_step,
)
from emutrace.isa.nzcv import NZCV_CONDITIONS

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
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# BKPT #0: A32 0xE1200070, Thumb 0xBE00 (Arm ARM A8.8.24).  INTR 7, PC left on the BKPT.
# (The UDF 0xE7F001F0 that gdb uses surfaces as INSN_INVALID in Unicorn.)
BREAKPOINTS = (
    Breakpoint("bkpt #0", bytes.fromhex("700020e1"), hook="intr", intno=7, pc_after=0, works=True),
    Breakpoint("bkpt #0", bytes.fromhex("00be"), hook="intr", intno=7, pc_after=0,
               works=True, alt_mode=True),
)

# Hardware instruction breakpoints (what `hwbp` models):
# Arm ARM v7 C11: DBGDIDR.BRPs + 1 breakpoints (2-16); 6 is what Cortex-A9/A15
# commonly have (unverified: reference/unicorn-and-hardware-facts.md §3.1)
DEBUG_HARDWARE = DebugHardware(6, "address", "DBGBVR<n>",
                               source="Arm ARM v7 C11 DBGDIDR.BRPs+1; typical 6 (unverified)")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-arm64",
    borrowed="arm64 figure applied; no published figure for 32-bit arm",
    notes={
        "btf": no_block_step(),
        "step": no_single_step(),
        "bts": branch_records("ETM/PTM only"),
    },
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


_ALU_WRITES_PC = frozenset(("add", "sub", "orr", "eor", "and", "bic", "rsb", "adc", "sbc"))


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
    if m in _ALU_WRITES_PC and regs.startswith("pc,") and not regs.startswith("pc,pc,"):
        # ALUWritePC from a register (ARM ARM A2.3.1): glibc's A32 long-branch veneer
        # `ldr ip, [pc]; add pc, ip, pc` is an indirect jump.  (`add pc, pc, rN, lsl #2`
        # indexes a table of branches that follows it: left to the linear decode.)
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


def it_block_arm(insn: Insn) -> int:
    """IT{x{y{z}}} (Arm ARM A8.8.54) makes the next 1–4 Thumb instructions conditional."""
    m = insn.mnemonic
    return len(m) - 1 if insn.thumb and m.startswith("it") and len(m) <= 5 \
        and set(m[2:]) <= {"t", "e"} else 0


def sp_effect_arm(insn: Insn) -> int | None:
    """What a transfer adds to sp (Arm ARM DDI 0406C A8.8): POP / LDM SP!, {..., pc}
    releases 4 bytes per listed register, LDR PC, [SP], #imm releases imm; B, BL, BLX, BX,
    CBZ, TBB, MOV/ADD PC and LDM/LDR from another base write no sp: 0.  A list naming sp
    or a range, another write-back to sp, anything else: None.  (Conditional: whether it
    ran is not known from the instruction; backends/hooked_sites.py refuses a non-zero
    effect there.)"""
    m, _cond = _arm_split(insn.mnemonic)
    regs = insn.op_str.replace(" ", "")
    if classify_arm(insn).kind not in (FlowKind.CALL, FlowKind.RETURN, FlowKind.JUMP,
                                       FlowKind.BRANCH):
        return None
    if m == "pop" or (m in ("ldm", "ldmia", "ldmfd") and regs.startswith("sp!,")):
        if "{" not in regs or "}" not in regs:
            return None
        listed = regs[regs.index("{") + 1:regs.index("}")].split(",")
        if "sp" in listed or any("-" in r for r in listed):
            return None
        return 4 * len(listed)
    if m == "ldr" and regs.startswith("pc,[sp],#"):
        return int(regs.split("#", 1)[1], 0)
    first = regs.split(",", 1)[0]
    if first in ("sp", "sp!") or "sp!" in regs or "[sp]," in regs:
        return None
    return 0


def in_it_block_arm(insn: Insn) -> bool:
    """A conditional Thumb site (discovery found it conditional: `predicates`) is inside an
    IT block (A8.8.54), unless it is a branch that carries its own condition: B<c> T1
    (1101 cond imm8) and T3 (11110 S cond imm6, 10 J1 0 J2 imm11), CBZ/CBNZ."""
    m, _cond = _arm_split(insn.mnemonic)
    if not insn.thumb or m in ("cbz", "cbnz"):
        return False
    if m == "b":
        hw1 = int.from_bytes(insn.raw[:2], "little")
        if insn.size == 2 and hw1 & 0xF000 == 0xD000:
            return False
        hw2 = int.from_bytes(insn.raw[2:4], "little")
        if insn.size == 4 and hw1 & 0xF800 == 0xF000 and hw2 & 0xD000 == 0x8000:
            return False
    return True


def sweep_kind_arm(mnemonic: str) -> SweepKind:
    """What classify_arm may make of a mnemonic: B<c> and CBZ/CBNZ to their last operand
    (BX/BL/BLX and TBB/TBH read); an instruction that writes the PC through its operands
    (MOV/LDR/POP/LDM/ALU with pc) read when they name pc; UDF/BKPT STOP; the rest NONE."""
    base, _cond = _arm_split(mnemonic)
    if base in ("b", "cbz", "cbnz"):
        return SweepKind.TARGET
    if base in ("bl", "blx", "bx", "tbb", "tbh"):
        return SweepKind.CLASSIFY
    if base in ("pop", "ldm", "ldmia", "ldmfd", "ldr", "mov") or base in _ALU_WRITES_PC:
        return SweepKind.OPERANDS
    return SweepKind.STOP if base in ("udf", "bkpt") else SweepKind.PLAIN


def outside_it_blocks_arm(insn: Insn, before: bytes) -> bool:
    """Is ITSTATE zero whenever the site runs, so that `simulate_arm` never falls back for
    it (the condition of a virtual breakpoint: backends/hooked_sites.py `virtual`)?  A32:
    always.  Thumb: when no IT instruction (T1: 1011 1111 firstcond mask, mask not 0000,
    A8.8.54) can be one of the four instructions before it: none of the seven halfwords in
    the 14 bytes before it is one.  An over-approximation: the second halfword of a 32-bit
    instruction may look like an IT; such a site keeps its breakpoint.  (ITSTATE is set only
    by an IT and an exception return, Arm ARM B1.3.3; a signal frame the guest forged with
    ITSTATE bits is the one case where the counters would then say `simulated` for what the
    reference counts a fallback: the trace is the same.)"""
    if not insn.thumb:
        return True
    tail = before[-14:]
    tail = tail[len(tail) % 2:]  # (halfwords end at the site, which is 2-aligned)
    for at in range(0, len(tail), 2):
        if tail[at + 1] == 0xBF and tail[at] & 0x0F:
            return False
    return True


CLASSIFIERS = Classifiers(classify=classify_arm, alt_mode=("CS_MODE_THUMB",),
                          literal=literal_arm, predicates=it_block_arm, sp_effect=sp_effect_arm,
                          hooked_when_taken=in_it_block_arm,
                          sweep=SweepFilter(mnemonic_kind=sweep_kind_arm,
                                            operand_marks=("pc",)),
                          virtual_breakpoints=True, virtual_site=outside_it_blocks_arm)
# (virtual breakpoints only where no IT block can hold the site: inside one `simulate_arm`
# falls back — ITSTATE at run time — so the patch's counters would not be known when the
# site is armed)

# ---------------------------------------------------------------- simulation
# The effect of a displaced call/return/jump (Arm ARM DDI 0406C A8.8, A2.3.2): BL sets LR to
# the next instruction (bit 0 set in Thumb); BLX imm switches the instruction set (from
# Thumb, the A32 target is Align(PC, 4) + imm); BX/BLX Rm, POP/LDM SP! {..., pc} and
# LDR PC, [SP], #4 interwork (bit 0 of the new PC selects Thumb); registers load in ascending
# order from SP.  The returned PC carries bit 0 for Thumb: Unicorn's PC write sets CPSR.T
# from it.  A32 conditions test CPSR.NZCV (A8.3); a conditional Thumb instruction other than
# B<cond> (T1/T3) sits in an IT block, and so does any Thumb instruction while CPSR's ITSTATE
# is non-zero (capstone, decoding one instruction, cannot show its condition): not simulated.
ARM_CONDITIONS = {
    "eq": lambda n, z, c, v: z, "ne": lambda n, z, c, v: not z,
    "cs": lambda n, z, c, v: c, "hs": lambda n, z, c, v: c,
    "cc": lambda n, z, c, v: not c, "lo": lambda n, z, c, v: not c,
    "mi": lambda n, z, c, v: n, "pl": lambda n, z, c, v: not n,
    "vs": lambda n, z, c, v: v, "vc": lambda n, z, c, v: not v,
    "hi": lambda n, z, c, v: c and not z, "ls": lambda n, z, c, v: not c or z,
    "ge": lambda n, z, c, v: n == v, "lt": lambda n, z, c, v: n != v,
    "gt": lambda n, z, c, v: not z and n == v, "le": lambda n, z, c, v: z or n != v,
}
_ARM_REGNUM = {f"r{i}": i for i in range(13)} | {
    "sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}


def _thumb_native_bcond(insn: Insn) -> bool:
    """B<cond> encodings T1 / T3, which are never inside an IT block."""
    hw = int.from_bytes(insn.raw[:2], "little")
    if insn.size == 2:
        return hw & 0xF000 == 0xD000
    hw2 = int.from_bytes(insn.raw[2:4], "little")
    return hw & 0xF800 == 0xF000 and hw2 & 0xD000 == 0x8000


def _interwork(value: int, thumb: bool) -> int | None:
    """BXWritePC: bit 0 selects Thumb; an A32 target with bits 1:0 = 10 is UNPREDICTABLE."""
    if value & 3 == 2:
        return None
    return value & 0xFFFFFFFF


def simulate_arm(cpu: CpuPort, insn: Insn, flow: Flow) -> int | None:
    m, cond = _arm_split(insn.mnemonic)
    thumb = insn.thumb
    after = (insn.addr + insn.size) | (1 if thumb else 0)
    op = insn.op_str.replace(" ", "")
    if thumb:
        cpsr = cpu.reg_read("cpsr")
        if cpsr >> 25 & 3 or cpsr >> 10 & 0x3F:
            return None  # inside an IT block (ITSTATE, CPSR[26:25, 15:10]): a lone decode
            # shows no condition, and ITSTATE would need advancing
    if cond:
        if thumb and not (m == "b" and _thumb_native_bcond(insn)):
            return None  # inside an IT block
        test = ARM_CONDITIONS[insn.mnemonic.split(".")[0][-2:]]
        nzcv = cpu.reg_read("cpsr")
        n, z, c, v = (bool(nzcv >> bit & 1) for bit in (31, 30, 29, 28))
        if not test(n, z, c, v):
            return after
    if m in ("bl", "blx") and flow.target is not None:
        cpu.reg_write("lr", after)
        if thumb and m == "blx":
            return flow.target & ~3
        return flow.target
    if m == "b" and flow.target is not None:
        return flow.target
    if m in ("cbz", "cbnz") and flow.target is not None:  # Thumb only, never in an IT block
        reg = op.split(",")[0]
        if reg not in _ARM_REGNUM:
            return None
        return flow.target if (cpu.reg_read(reg) == 0) == (m == "cbz") else after
    if m in ("bx", "blx") and op in _ARM_REGNUM and op != "pc":
        target = _interwork(cpu.reg_read(op), thumb)
        if target is not None and m == "blx":
            cpu.reg_write("lr", after)
        return target
    if m == "mov" and not thumb and op.startswith("pc,") and op[3:] in _ARM_REGNUM \
            and op[3:] != "pc":  # ALUWritePC: interworks in A32 from ARMv7
        return _interwork(cpu.reg_read(op[3:]), thumb)
    if m in ("pop", "ldm", "ldmia", "ldmfd") and op.endswith("pc}"):
        if m != "pop":
            if not op.startswith("sp!,"):
                return None
            op = op[4:]
        names = op.strip("{}").split(",")
        if any(name not in _ARM_REGNUM or name == "sp" for name in names):
            return None
        regs = sorted(_ARM_REGNUM[name] for name in names)
        if len(set(regs)) != len(regs):
            return None
        sp = cpu.reg_read("sp")
        data = cpu.mem_read(sp, 4 * len(regs))
        values = [int.from_bytes(data[4 * i:4 * i + 4], "little") for i in range(len(regs))]
        target = _interwork(values[-1], thumb)
        if target is None:
            return None
        for num, value in zip(regs[:-1], values[:-1], strict=True):
            cpu.reg_write(f"r{num}", value)
        cpu.reg_write("sp", sp + 4 * len(regs))
        return target
    if m == "ldr" and op == "pc,[sp],#4":
        sp = cpu.reg_read("sp")
        target = _interwork(int.from_bytes(cpu.mem_read(sp, 4), "little"), thumb)
        if target is not None:
            cpu.reg_write("sp", sp + 4)
        return target
    return None


# ARM_CONDITIONS as data for the native hot path (isa/nzcv.py)
_NATIVE_CONDITIONS = NZCV_CONDITIONS
# ITSTATE, CPSR[26:25] and [15:10] (Arm ARM B1.3.3): a Thumb site runs in C only outside an
# IT block, as simulate_arm checks first
_NOT_IN_IT_BLOCK = Condition("mask_zero", "cpsr", mask=(3 << 25) | (0x3F << 10))
# BXWritePC (A2.3.2): a target with bits 1:0 = 10 is UNPREDICTABLE (_interwork: Python's)
_INTERWORKS = Condition("clear_or_set", a=1, b=0)


def lower_arm(insn: Insn, flow: Flow) -> NativeOp | None:
    """simulate_arm's BL / BLX imm / BLX Rm / BX Rm / MOV PC, Rm / POP, LDM SP! {..., pc} /
    LDR PC, [SP], #4 / B / B<cond> / CBZ / CBNZ as data for the native hot path: the link
    (LR) and a fall-through get bit 0 in Thumb; a register or popped target interworks."""
    m, cond = _arm_split(insn.mnemonic)
    thumb = insn.thumb
    op = insn.op_str.replace(" ", "")
    guard = _NOT_IN_IT_BLOCK if thumb else Condition("always")
    test = Condition("always")
    if cond:
        if thumb and not (m == "b" and _thumb_native_bcond(insn)):
            return None  # inside an IT block
        bits = _NATIVE_CONDITIONS[insn.mnemonic.split(".")[0][-2:]]
        test = Condition(bits[0], "cpsr", *bits[1])
    kind = flow.kind
    if m in ("bl", "blx") and flow.target is not None and not cond:
        target = flow.target & ~3 if thumb and m == "blx" else flow.target
        return NativeOp(FlowKind.CALL, target=target, link="lr", guard=guard)
    if m == "b" and flow.target is not None:
        return NativeOp(FlowKind.JUMP, target=flow.target, cond=test, guard=guard)
    if m in ("cbz", "cbnz") and flow.target is not None:
        reg = op.split(",")[0]
        if reg not in _ARM_REGNUM:
            return None
        return NativeOp(FlowKind.JUMP, target=flow.target, guard=guard,
                        cond=Condition("zero" if m == "cbz" else "nonzero", reg, 32))
    if m in ("bx", "blx") and op in _ARM_REGNUM and op != "pc":
        if m == "blx":
            if cond:
                return None
            return NativeOp(FlowKind.CALL, reg=op, link="lr", guard=guard,
                            target_test=_INTERWORKS)
        return NativeOp(_returns_or_jumps(kind), reg=op, cond=test, guard=guard,
                        target_test=_INTERWORKS)
    if m == "mov" and not thumb and op.startswith("pc,") and op[3:] in _ARM_REGNUM \
            and op[3:] != "pc":
        return NativeOp(_returns_or_jumps(kind), reg=op[3:], cond=test,
                        target_test=_INTERWORKS)
    if m in ("pop", "ldm", "ldmia", "ldmfd") and op.endswith("pc}") and kind is FlowKind.RETURN:
        names = (op if m == "pop" else op[4:]).strip("{}").split(",")
        if any(name not in _ARM_REGNUM or name == "sp" for name in names):
            return None
        nums = sorted(_ARM_REGNUM[name] for name in names)
        if len(set(nums)) != len(nums):
            return None
        return NativeOp(FlowKind.RETURN, pops=tuple(f"r{n}" for n in nums[:-1]), cond=test,
                        guard=guard, target_test=_INTERWORKS)
    if m == "ldr" and op == "pc,[sp],#4":
        return NativeOp(FlowKind.RETURN, cond=test, guard=guard, target_test=_INTERWORKS)
    return None


def _returns_or_jumps(kind: FlowKind) -> FlowKind:
    return FlowKind.RETURN if kind is FlowKind.RETURN else FlowKind.JUMP


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
# ---------------------------------------------------------------- C values
# AAPCS (IHI 0042) §8.1: char is unsigned; §6.1.2 VFP variant (Debian armhf): floats in
# s0-s15 (back-filled), doubles in d0-d7, results in s0/d0; §6.5 C.3: a doubleword scalar
# starts at an even core register (r0:r1, r2:r3), 64-bit results in r0:r1; a struct of any
# size goes in r0-r3 then on the stack, its words as in memory.  §6.4.1: a variadic
# function uses the base standard: floats and doubles (results too) in core registers.
# §6.5 (result return): a composite up to 4 bytes in r0, larger ones in memory at r0.
# §7.1.2 (VFP): a homogeneous aggregate of 1-4 floats (or doubles) is a CPRC: the lowest
# run of free s (d) registers, else (C.2.cp) every VFP register is marked used and it goes
# on the stack; other structs with floats go in core registers like any struct, starting
# at an even register when doubleword-aligned (C.3).  long double is double (§8.1.1).
# C.2.cp: a float or double that finds no VFP register goes on the stack.
C_VALUES = CValues(char_signed=False,
                   fp_args=("d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"),
                   fp_single_args=tuple(f"s{i}" for i in range(16)),
                   fp_retval="d0", retval_hi="r1", pair_aligned=True,
                   struct_in_slots=1 << 16, variadic_core_only=True,
                   struct_ret_in_regs=4, struct_fp="hfa", hfa_limit=4,
                   hfa_to_stack=True, fp_overflow_stack=True)


ISA = Isa(
    # BFD elf32_arm_plt0_entry (5 words) and elf32_arm_plt_entry (3 words, short form)
    plt=Plt(header=20, entry=12),
    # arch/arm/kernel/entry-common.S sys_statfs64_wrapper: glibc passes 88 (the unpacked
    # struct's size), the EABI struct statfs64 is 84 (packed); the kernel takes 88 as 84
    statfs64_size_aliases=(88,),
    c_values=C_VALUES,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=RESET,
    # arch/arm/kernel/elf.c arm_elf_read_implies_exec: EXSTACK_DEFAULT → 1
    exec_stack_by_default=True,
    hwcap=HWCAP,
    hwcap2=0,
    platform="v7l",
    uname_machine="armv7l",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(
            False,
            "a bounded UC_HOOK_MEM_READ over code breaks dynamic programs in Unicorn 2.1.4 "
            "(Debian's sort under int3 misparsed its options); a guest that reads its own code "
            "sees the bkpt bytes where sites are armed"),
        Cap.LINUX_KERNEL: Capability(
            False, "not wired: Debian's armmp kernel is a zImage, which virt-arm loads only "
            "as -bios firmware at 0; loaded where QEMU's -kernel puts it (RAM + 0x1_0000, "
            "r1 = ~0, r2 = the DTB: measured, not yet a board option) it decompresses itself "
            "and boots to its PSCI probe, where the hvc traps with the MMU on and "
            "isa/kernel_arm.py reads instructions at physical addresses (no ARMv7 table "
            "walk); no GIC or CP15 generic timer is modelled on arm"),
        Cap.KERNEL: Capability(True),  # isa/kernel_arm.py, machine/board/presets.py
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
        Cap.STEP_CLOCK: Capability(
            False, "Unicorn runs no code hook for a Thumb IT-block instruction whose condition "
                   "fails: step counts fewer instructions than the block counts (fib 6: "
                   "29,912 against 30,094)"),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(
            False, "Thumb-2 instructions are 2 or 4 bytes and ARM's filter reads "
            "mnemonics and operands (a load or data-processing instruction may "
            "write the PC): capstone decodes every instruction swept (~2.4 µs "
            "each)"),
        Cap.DESCENT_WALK_NATIVE: Capability(
            False, "descent reads literal pools (LDR literal, Arm ARM A8.8.64) and "
            "IT-block state (A8.8.54) from every instruction: stripped ARM code "
            "is descended one instruction at a time in Python"),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
        Cap.COLD_PARTITIONS: Capability(False, "GCC 12 refuses -freorder-blocks-and-partition "
                                      "on ARM (arm_option_override), so no ARM binary of "
                                      "the optimised tier has a .cold part to trace"),
    },
    private_syscalls={"ARM_set_tls": set_tls},
    thumb_bit=True,
    alt_mode_flag=("cpsr", 0x20),  # ARM ARM B1.3.3: CPSR.T (bit 5) set = Thumb state
    classifiers=CLASSIFIERS,
    simulate=simulate_arm,
    lower=lower_arm,
)
