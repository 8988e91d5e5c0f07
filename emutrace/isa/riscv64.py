"""RISC-V 64-bit (RV64GC, LP64D), RISC-V ELF psABI."""

from emutrace.isa.base import (
    CLONE_BACKWARDS,
    HARDWARE_FACTS,
    NO_FLOW,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    CValues,
    DebugHardware,
    Engines,
    Flow,
    FlowKind,
    Identity,
    Insn,
    Isa,
    NativeTracing,
    Plt,
    RegFixup,
    Registers,
    SweepFilter,
    SyscallConvention,
    branch_records,
    no_block_step,
    no_single_step,
    x86_figure_borrowed,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="riscv64",
    aliases=("riscv", "rv64", "rv64gc"),
    elf_machine="EM_RISCV",
    elf_class=64,
    endian="little",
    qemu="riscv64",
    debian_arch="riscv64",
    triple="riscv64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_RISCV",
    uc_mode=("UC_MODE_RISCV64",),
    uc_reg_module="riscv_const",
    uc_reg_prefix="UC_RISCV_REG_",
    cs_arch="CS_ARCH_RISCV",
    cs_mode=("CS_MODE_RISCV64", "CS_MODE_RISCVC"),
    ks_arch=None,  # keystone has no RISC-V: snippets come from cross `as`
)

# ---------------------------------------------------------------- registers
# psABI "Integer Calling Convention": arguments a0–a7, result a0, return address ra (x1),
# thread pointer tp (x4), stacked arguments at sp.
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="a0",
    args=("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"),
    link="ra",
    tls="tp",
    general=("a0", "a1", "a7", "t0", "t6", "s0", "s11", "ra", "gp", "tp"),
)

# ---------------------------------------------------------------- syscalls
# `ecall`: number in a7, arguments a0–a5, result a0 (-errno).  Unicorn: INTR 8 (reported as
# "ecall from U-mode" although the CPU runs in M-mode), PC already advanced by 4.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("73000000"),  # ecall
    hook="intr",
    intno=8,
    insn=None,
    number="a7",
    args=("a0", "a1", "a2", "a3", "a4", "a5"),
    ret="a0",
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# EBREAK = 0x00100073, C.EBREAK = 0x9002.  Unicorn 2.1.4 turns the breakpoint exception into
# UC_ERR_EXCEPTION: the INSN_INVALID hook fires, but emu_start returns an error even when the
# hook handles it, so every event would need a restart.
BREAKPOINTS = (
    Breakpoint("ebreak", bytes.fromhex("73001000"), hook="insn_invalid", intno=None, pc_after=0,
               works=False,
               reason="Unicorn 2.1.4 stops emulation with UC_ERR_EXCEPTION on EBREAK: use a "
                      "bounded code hook"),
    Breakpoint("c.ebreak", bytes.fromhex("0290"), hook="insn_invalid", intno=None, pc_after=0,
               works=False, reason="as ebreak"),
)

# Hardware instruction breakpoints (what `hwbp` models):
# RISC-V Debug spec, Sdtrig: the trigger count is implementation-defined
# (tselect/tinfo); 2 is our default; S-mode reaches them through SBI DBTR
DEBUG_HARDWARE = DebugHardware(2, "address", "Sdtrig mcontrol6",
                               source="RISC-V Sdtrig (count implementation-defined); default 2")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed=x86_figure_borrowed(),
    notes={
        "btf": no_block_step(),
        "step": no_single_step(),
        "bts": branch_records("CTR, up to 256 entries"),
        "hwbp": ("riscv64: Sdtrig triggers, not usable from Linux user space yet "
                 f"({HARDWARE_FACTS} §4)"),
    },
)

# ---------------------------------------------------------------- classifiers
# RISC-V unprivileged spec ch. 2.5 and 16 (C extension), decoded from the bits (capstone 5
# prints branch offsets, not targets, and uses aliases): JAL / JALR with rd ≠ x0 are calls
# (any link register), JALR x0, 0(ra) is `ret`, JAL x0 (`j`) and JALR x0 (`jr`) jump;
# C.JAL (RV32 only) / C.JALR call through ra, C.JR ra returns, C.JR rs / C.J jump;
# BEQ…BGEU, C.BEQZ / C.BNEZ branch.  EBREAK / C.EBREAK / UNIMP never fall through.
# Link registers: the spec (ch. 2.5, "Return-address stack prediction hints", table 2.1)
# names x1 (ra) and x5 (t0) as link registers; GCC's -msave-restore prologue calls
# `__riscv_save_N` with `jal t0, …` and that routine returns with `jr t0` (riscv-gcc
# libgcc/config/riscv/save-restore.S).  `jr t0` is classified `maybe_return`: a return when
# it goes to the return address of the running call, a jump (tail call) otherwise.
_RA = 1
_ALT_LINK = 5  # t0


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def _rv_reg(n: int) -> str:
    return f"x{n}"


def classify_riscv(insn: Insn) -> Flow:
    w = int.from_bytes(insn.raw, "little")
    if insn.size == 2:
        return _classify_rvc(insn.addr, w)
    opcode, rd, rs1 = w & 0x7F, (w >> 7) & 31, (w >> 15) & 31
    if opcode == 0x6F:  # JAL
        imm = ((w >> 31) << 20) | (((w >> 12) & 0xFF) << 12) | (((w >> 20) & 1) << 11) \
            | (((w >> 21) & 0x3FF) << 1)
        target = insn.addr + _sext(imm, 21)
        return Flow(FlowKind.CALL if rd else FlowKind.JUMP, target=target,
                    alt_link=rd == _ALT_LINK)
    if opcode == 0x67:  # JALR
        off = _sext(w >> 20, 12)
        if rd:
            return Flow(FlowKind.CALL, indirect=f"{off}({_rv_reg(rs1)})",
                        alt_link=rd == _ALT_LINK)
        if rs1 == _RA and off == 0:
            return Flow(FlowKind.RETURN)
        return Flow(FlowKind.JUMP, indirect=f"{off}({_rv_reg(rs1)})",
                    maybe_return=rs1 == _ALT_LINK and off == 0)
    if opcode == 0x63:  # BRANCH
        imm = ((w >> 31) << 12) | (((w >> 7) & 1) << 11) | (((w >> 25) & 0x3F) << 5) \
            | (((w >> 8) & 0xF) << 1)
        return Flow(FlowKind.BRANCH, target=insn.addr + _sext(imm, 13), conditional=True)
    if w in (0x00100073, 0xC0001073):  # EBREAK, UNIMP (csrrw x0, cycle, x0)
        return Flow(FlowKind.STOP)
    return NO_FLOW


def _classify_rvc(addr: int, w: int) -> Flow:
    op, funct3 = w & 3, w >> 13
    if op == 1 and funct3 == 5:  # C.J offset[11|4|9:8|10|6|7|3:1|5]
        b = [(w >> i) & 1 for i in range(16)]
        imm = (b[12] << 11) | (b[8] << 10) | (b[10] << 9) | (b[9] << 8) | (b[6] << 7) \
            | (b[7] << 6) | (b[2] << 5) | (b[11] << 4) | (b[5] << 3) | (b[4] << 2) | (b[3] << 1)
        return Flow(FlowKind.JUMP, target=addr + _sext(imm, 12))
    if op == 1 and funct3 in (6, 7):  # C.BEQZ / C.BNEZ offset[8|4:3], [7:6|2:1|5]
        b = [(w >> i) & 1 for i in range(16)]
        imm = (b[12] << 8) | (b[6] << 7) | (b[5] << 6) | (b[2] << 5) | (b[11] << 4) \
            | (b[10] << 3) | (b[4] << 2) | (b[3] << 1)
        return Flow(FlowKind.BRANCH, target=addr + _sext(imm, 9), conditional=True)
    if op == 2 and funct3 == 4 and (w >> 2) & 31 == 0:
        rs1, link = (w >> 7) & 31, (w >> 12) & 1
        if link and rs1 == 0:
            return Flow(FlowKind.STOP)  # C.EBREAK
        if link:  # C.JALR rs1: ra = pc + 2
            return Flow(FlowKind.CALL, indirect=f"0({_rv_reg(rs1)})")
        if rs1 == _RA:  # C.JR ra
            return Flow(FlowKind.RETURN)
        if rs1:
            return Flow(FlowKind.JUMP, indirect=f"0({_rv_reg(rs1)})",
                        maybe_return=rs1 == _ALT_LINK)
    if w == 0:
        return Flow(FlowKind.STOP)  # the all-zero parcel is defined illegal
    return NO_FLOW


_SP = 2  # x2


def sp_effect_riscv(insn: Insn) -> int | None:
    """JAL/JALR write only rd (unprivileged spec ch. 2.5), branches and the C-extension
    jumps (C.J, C.JR, C.JALR: ra) write no sp: 0, unless rd is sp; anything else: not
    described (None)."""
    w = int.from_bytes(insn.raw, "little")
    if insn.size == 2:
        return 0 if classify_riscv(insn).kind is not FlowKind.NONE else None
    opcode, rd = w & 0x7F, (w >> 7) & 31
    if opcode == 0x63 or (opcode in (0x6F, 0x67) and rd != _SP):
        return 0
    return None


# the parcels classify_riscv may read as a transfer: JAL, JALR, BRANCH (32-bit opcodes 0x6f,
# 0x67, 0x63); C.J, C.BEQZ, C.BNEZ (quadrant 1, funct3 5-7); C.JR/C.JALR (quadrant 2, funct3
# 4, rs2 0, which C.EBREAK is too).  Among them JAL x0, BRANCH, C.J, C.BEQZ/C.BNEZ jump or
# branch (the last three conditionally) by the offset capstone prints last (`relative`).
# EBREAK, UNIMP and the zero parcel are STOPs.
SWEEP_RISCV = SweepFilter(encodings=(
    (4, 0x7F, 0x6F), (4, 0x7F, 0x67), (4, 0x7F, 0x63),
    (2, 0xE003, 0xA001), (2, 0xE003, 0xC001), (2, 0xE003, 0xE001), (2, 0xE07F, 0x8002)),
    target_encodings=((4, 0xFFF, 0x06F), (4, 0x7F, 0x63),
                      (2, 0xE003, 0xA001), (2, 0xE003, 0xC001), (2, 0xE003, 0xE001)),
    branch_encodings=((4, 0x7F, 0x63), (2, 0xE003, 0xC001), (2, 0xE003, 0xE001)),
    jump_encodings=((4, 0xFFF, 0x06F), (2, 0xE003, 0xA001)),  # JAL x0 (J), C.J
    call_encodings=((4, 0xFFF, 0x0EF),),  # JAL ra
    relative=True,
    stop_encodings=((4, 0xFFFFFFFF, 0x00100073), (4, 0xFFFFFFFF, 0xC0001073),
                    (2, 0xFFFF, 0)))
CLASSIFIERS = Classifiers(classify=classify_riscv, insn_align=2, sp_effect=sp_effect_riscv,
                          sweep=SWEEP_RISCV)

# ---------------------------------------------------------------- quirks
RESET = (
    # mstatus.FS (bits 13–14) = 0 means the FPU is off: FP instructions raise illegal-insn.
    RegFixup("mstatus", 3 << 13, "FPU off at reset (mstatus.FS = Off)"),
)

# AT_HWCAP on RISC-V: one bit per single-letter extension, bit (letter - 'a').
HWCAP = sum(1 << (ord(c) - ord("a")) for c in "imafdc")

# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# RISC-V ELF psABI (LP64D) §2.2-2.4: char is unsigned; float/double in fa0-fa7 (a float
# NaN-boxed in the low 32 bits), results in fa0; a struct of up to 2*XLEN bytes in integer
# registers, larger ones by reference; results alike (a0:a1, else memory at a hidden a0).
# Hardware floating-point calling convention: a struct whose flattened members are one or
# two floats/doubles, or one of them and one integer, goes in FP registers (and an integer
# register) while they are free, else by the integer convention.  long double is IEEE
# binary128 (__LDBL_MANT_DIG__ 113), wider than FLEN: an integer register pair (low half
# first), the result in a0:a1.
C_VALUES = CValues(char_signed=False, fp_args=tuple(f"fa{i}" for i in range(8)),
                   fp_retval="fa0", struct_in_slots=16, struct_large="ref",
                   retval_hi="a1", struct_ret_in_regs=16, struct_fp="flatten",
                   long_double="binary128", long_double_args="slots", long_double_ret="core",
                   long_double_size=16)


ISA = Isa(
    # RISC-V ELF psABI, PLT: header 32 bytes (8 insns), stubs 16 (4 insns)
    plt=Plt(header=32, entry=16),
    c_values=C_VALUES,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=RESET,
    hwcap=HWCAP,
    hwcap2=0,
    platform="riscv64",
    uname_machine="riscv64",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(
            False, "nothing to hide: sites are hooked, never patched (EBREAK traps are broken)"),
        Cap.LINUX_KERNEL: Capability(
            False, "Debian 12 ships no riscv64 kernel (riscv64 is no release architecture of "
            "bookworm: no linux-image-riscv64); virt-riscv64 boots Debian's OpenSBI and "
            "U-Boot S-mode"),
        Cap.KERNEL: Capability(True),  # isa/kernel_riscv64.py, machine/board/presets.py
        Cap.SIGNAL_HANDLERS: SIGNAL_HANDLERS,
        Cap.RUN_STATIC: Capability(True),
        Cap.RUN_DYNAMIC: Capability(True),
        Cap.TRACE_DYNAMIC: Capability(True),
        Cap.PLT_NAMES: Capability(True),
        Cap.SW_BREAKPOINT: Capability(False, BREAKPOINTS[0].reason),
        Cap.THREAD_PREEMPTION: Capability(True),
        Cap.CPU_TIMERS: Capability(True),  # ITIMER_PROF/VIRTUAL (cpu_timers.py)
        Cap.BUSYBOX: Capability(False, "Debian 12 ships no riscv64 busybox-static (not a "
                                     "release architecture)"),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(
            False, "the C extension makes instructions 2 or 4 bytes: capstone decodes "
            "every instruction swept to find the next; the encoding filter then "
            "keeps the transfers"),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.ENTRY_OUT_OF_LINE_SAVES: Capability(
            False,
            "eager entry probes take the caller from the link register; GCC's "
            "__riscv_restore_N is entered by a `j` while it still holds the save routine's "
            "return address, so entry takes it for a new call and ends the frame"),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
    },
    classifiers=CLASSIFIERS,
)
