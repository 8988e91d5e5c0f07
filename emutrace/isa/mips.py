"""MIPS32 big-endian, o32 ABI (SYSV MIPS psABI).  mipsel.py derives the little-endian twin."""

from emutrace.isa.base import (
    CLONE_BACKWARDS,
    HARDWARE_FACTS,
    LINUX_NOT_TRIED,
    NO_FLOW,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    CpuPort,
    CValues,
    DebugHardware,
    Engines,
    Flow,
    FlowKind,
    GdbRegisters,
    Identity,
    Insn,
    Isa,
    NativeTracing,
    Plt,
    Registers,
    SweepFilter,
    SyscallConvention,
    SyscallErrors,
    branch_records,
    no_block_step,
    no_single_step,
    x86_figure_borrowed,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="mips",
    aliases=("mipsbe", "mips32", "mipseb"),
    elf_machine="EM_MIPS",
    elf_class=32,
    endian="big",
    qemu="mips",
    debian_arch="mips",
    triple="mips-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_MIPS",
    uc_mode=("UC_MODE_MIPS32", "UC_MODE_BIG_ENDIAN"),
    uc_reg_module="mips_const",
    uc_reg_prefix="UC_MIPS_REG_",
    cs_arch="CS_ARCH_MIPS",
    cs_mode=("CS_MODE_MIPS32", "CS_MODE_BIG_ENDIAN"),
    ks_arch="KS_ARCH_MIPS",
    ks_mode=("KS_MODE_MIPS32", "KS_MODE_BIG_ENDIAN"),
)

# ---------------------------------------------------------------- registers
# o32 (psABI ch. 3): arguments a0–a3, then the stack at 16(sp) (a 16-byte home area for
# a0–a3 precedes them); result v0 (v1 for the high half); return address in ra ($31).
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="v0",
    args=("a0", "a1", "a2", "a3"),
    link="ra",
    tls="cp0_userlocal",
    stack_args_offset=16,
    general=("v0", "v1", "a0", "a3", "t0", "s0", "s7", "gp", "fp", "ra"),
)

# ---------------------------------------------------------------- syscalls
# o32 `syscall`: number (4000 + n) in v0, arguments a0–a3 and 16/20/24/28(sp); result in v0,
# on error v0 = positive errno and a3 = 1 (a3 = 0 on success).  Unicorn: INTR 17
# (EXCP_SYSCALL), PC already on the next instruction.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("0000000c"),  # syscall
    hook="intr",
    intno=17,
    insn=None,
    number="v0",
    args=("a0", "a1", "a2", "a3"),
    ret="v0",
    errors=SyscallErrors.A3_FLAG,
    stack_args=4,
    stack_args_offset=16,
    error_flag_reg="a3",
    pair_aligned=True,
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# BREAK 0 = 0x0000000D.  Unicorn 2.1.4 raises INTR 18 (EXCP_BREAK) but sets PC to a stale
# `next_pc` (0 when measured), so emulation cannot resume at the breakpoint.
BREAKPOINTS = (
    Breakpoint("break", bytes.fromhex("0000000d"), hook="intr", intno=18, pc_after=0,
               works=False,
               reason="Unicorn 2.1.4 reports BREAK with a stale PC (next_pc is only set for "
                      "syscall): use a bounded code hook"),
)

# Hardware instruction breakpoints (what `hwbp` models):
# MIPS32 PRA: 0-8 WatchLo/WatchHi pairs, the I bit matches fetches
# (4 on the 4KEc and 74K; Linux PTRACE_SET_WATCH_REGS)
DEBUG_HARDWARE = DebugHardware(4, "address", "WatchLo/WatchHi",
                               source="MIPS32 PRA WatchLo/WatchHi (I bit); 4 on 4KEc/74K")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed=x86_figure_borrowed(),
    notes={
        "btf": no_block_step(),
        "step": no_single_step(),
        "bts": branch_records("PDtrace"),
        "hwbp": f"{{isa}}: exec watch registers (WatchLo/Hi I bit) ({HARDWARE_FACTS} §3.1)",
    },
)


# ---------------------------------------------------------------- classifiers
# MIPS32 ISA vol. II: JAL / BAL (= BGEZAL $zero) / JALR are calls (ra = PC + 8), BGEZAL /
# BLTZAL conditional calls; JR $ra returns; J / B (= BEQ $zero,$zero) / JR rs jump; the
# other branches are conditional.  Every one of them has a delay slot: the next instruction
# runs before the target.  BREAK and TEQ-style traps are not treated as stops (TEQ may not
# trap); BREAK is.
_MIPS_COND = frozenset(
    {"beq", "bne", "beqz", "bnez", "bgez", "bgtz", "blez", "bltz", "bc1t", "bc1f", "beql",
     "bnel", "bgezl", "bltzl", "blezl", "bgtzl", "bc1tl", "bc1fl"})


def _mips_imm(op: str) -> int:
    return int(op.split(",")[-1].strip(), 0)


def classify_mips(insn: Insn) -> Flow:
    m, op = insn.mnemonic, insn.op_str.strip()
    if m in ("jal", "bal"):
        return Flow(FlowKind.CALL, target=_mips_imm(op))
    if m in ("bgezal", "bltzal"):
        return Flow(FlowKind.CALL, target=_mips_imm(op), conditional=True)
    if m == "jalr":
        return Flow(FlowKind.CALL, indirect=op.split(",")[-1].strip())
    if m == "jr":
        return Flow(FlowKind.RETURN) if op == "$ra" else Flow(FlowKind.JUMP, indirect=op)
    if m in ("j", "b"):
        return Flow(FlowKind.JUMP, target=_mips_imm(op))
    if m in _MIPS_COND:
        return Flow(FlowKind.BRANCH, target=_mips_imm(op), conditional=True)
    if m == "break":
        return Flow(FlowKind.STOP)
    return NO_FLOW


# stores name the register they read first (MIPS32 vol. II: SB/SH/SW/SWL/SWR/SC, the
# coprocessor stores); every other instruction with operands names the register it writes
# first, or writes none but ra/hi/lo (branches, jumps, traps, MTHI/MTLO, MULT/DIV, MTCz)
_MIPS_STORES = frozenset({"sb", "sh", "sw", "swl", "swr", "sc", "swc1", "sdc1", "swc2",
                          "sdc2", "swxc1", "sdxc1", "suxc1"})
_MIPS_LIKELY = frozenset({"beql", "bnel", "bgezl", "bltzl", "blezl", "bgtzl", "bc1tl", "bc1fl",
                          "bgezall", "bltzall"})


def sp_effect_mips(insn: Insn) -> int | None:
    """What insn adds to $sp: the immediate of `addiu $sp, $sp, imm` (the o32 epilogue's
    delay slot), 0 when $sp is not the register it writes; None otherwise, and for a
    branch-likely, whose delay slot runs only when it is taken."""
    if insn.mnemonic in _MIPS_LIKELY:
        return None
    ops = [o.strip() for o in insn.op_str.split(",")]
    if ops[0] not in ("$sp", "$29") or insn.mnemonic in _MIPS_STORES:
        return 0
    if insn.mnemonic in ("addiu", "addi") and len(ops) == 3 and ops[1] in ("$sp", "$29"):
        return _mips_imm(insn.op_str)
    return None


# The words classify_mips may read as a transfer (MIPS32 vol. II opcode table): SPECIAL
# JR/JALR (funct 8, 9), REGIMM (opcode 1: BLTZ…BGEZALL, and its traps), J/JAL (2, 3),
# BEQ/BNE/BLEZ/BGTZ (4-7) and their -likely forms (20-23), COP1 BC1F/BC1T (17, rs 8).  Among
# them the ones that jump or branch to the target capstone prints last, never calls: J, the
# opcodes 4-7 and 20-23, REGIMM BLTZ/BGEZ(L) (rt 0-3), BC1.  BREAK (funct 13) is a STOP.
SWEEP_MIPS = SweepFilter(
    encodings=((4, 0xFC00003F, 0x08), (4, 0xFC00003F, 0x09), (4, 0xFC000000, 0x04000000),
               (4, 0xF8000000, 0x08000000), (4, 0xF0000000, 0x10000000),
               (4, 0xF0000000, 0x50000000), (4, 0xFFE00000, 0x45000000)),
    target_encodings=((4, 0xFC000000, 0x08000000), (4, 0xF0000000, 0x10000000),
                      (4, 0xF0000000, 0x50000000), (4, 0xFC1C0000, 0x04000000),
                      (4, 0xFFE00000, 0x45000000)),
    stop_encodings=((4, 0xFC00003F, 0x0D),), fixed_size=4)
CLASSIFIERS = Classifiers(classify=classify_mips, delay_slot=True, sp_effect=sp_effect_mips,
                          sweep=SWEEP_MIPS)

# ---------------------------------------------------------------- gdb numbering
# GDB's mips-tdep.h numbering, which qemu's MIPS stub (target/mips/gdbstub.c) serves
# without a target description: $0-$31, then sr (CP0 Status), lo, hi, badvaddr, cause,
# pc (37), f0-f31 (38-69), fcsr (70), fir (71) and Linux's restart slot (72); each a word
# of the ELF class (an FPR is 8 bytes under Status.FR=1, where g is longer)
GPR_NAMES = ("zero", "at", "v0", "v1", "a0", "a1", "a2", "a3",
             "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
             "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
             "t8", "t9", "k0", "k1", "gp", "sp", "fp", "ra")


def gdb_numbering(gprs: tuple[str, ...]) -> GdbRegisters:
    names = (*gprs, "sr", "lo", "hi", "badvaddr", "cause", "pc",
             *(f"f{n}" for n in range(32)), "fcsr", "fir", "restart")
    return GdbRegisters(names, in_g=len(names), word_sized=38)


GDB_REGISTERS = gdb_numbering(GPR_NAMES)


# ---------------------------------------------------------------- quirks
def set_thread_area(cpu: CpuPort, args: tuple[int, ...]) -> int:
    """set_thread_area(tp): the kernel stores tp in CP0 UserLocal, read by `rdhwr $3,$29`."""
    cpu.reg_write("cp0_userlocal", args[0])
    return 0


# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# SysV MIPS psABI (o32) ch. 3, hard-float (Debian mips/mipsel): char is signed; every
# argument owns 4-byte slots of the argument area (a0-a3, then the stack); only leading
# float/double arguments travel in $f12 and $f14 (their slots stay unused), later ones in
# the integer slots; with FR=0 a double fills an even/odd pair ($f12 low word, $f13 high
# word); results in $f0(/$f1) and v0:v1; 64-bit scalars start at an even slot; a struct's
# words go in the slots as in memory; a struct result in memory at a hidden first argument.
# Structs with float members too go in the integer slots (doubleword-aligned ones from an
# even slot); long double is double (GCC: __LDBL_MANT_DIG__ 53).
C_VALUES = CValues(char_signed=True, fp_args=("f12", "f14"), fp_pair=("f13", "f15"),
                   fp_retval="f0", fp_retval_high="f1", fp_shadow=True,
                   fp_leading_only=True, retval_hi="v1", pair_aligned=True, struct_ret_in_regs=0,
                   struct_in_slots=1 << 16, struct_fp="core")


# o32 lazy stubs (SYSV MIPS psABI, Global Offset Table; BFD elfxx-mips.c): 16 bytes each in
# .MIPS.stubs, `lw t9,-0x7ff0(gp); move t7,ra; jalr t9; li t8,DYNSYM_INDEX`; an undefined
# .dynsym function's nonzero st_value is its stub.  PIC code calls through the GOT slot,
# which holds the stub until ld.so binds it, then the function itself
PLT = Plt(header=0, entry=16, stub_section=".MIPS.stubs")

ISA = Isa(
    plt=PLT,
    c_values=C_VALUES,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=(),  # Unicorn's default model (24Kf) has an FPU and rdhwr in kernel mode
    # arch/mips/kernel/elf.c mips_elf_read_implies_exec: exstack != EXSTACK_DISABLE_X → 1
    exec_stack_by_default=True,
    hwcap=0,
    hwcap2=0,
    platform="mips",
    uname_machine="mips",
    # SYSV MIPS psABI 3-38: position-independent code is entered with its address in $25
    call_target_regs=("t9",),
    siginfo_code_offset=4,  # __ARCH_HAS_SWAPPED_SIGINFO: si_signo, si_code, si_errno
    gdb_registers=GDB_REGISTERS,
    capabilities={
        # qemu-user's MIPS stub sends no target description: GDB's numbering instead
        Cap.GDB_TARGET: Capability(True),
        Cap.HIDDEN_BREAKPOINTS: Capability(
            False, "nothing to hide: sites are hooked, never patched (BREAK traps are broken)"),
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.KERNEL: Capability(True),
        Cap.SIGNAL_HANDLERS: SIGNAL_HANDLERS,
        Cap.RUN_STATIC: Capability(True),
        Cap.RUN_DYNAMIC: Capability(True),
        Cap.TRACE_DYNAMIC: Capability(True),
        Cap.PLT_NAMES: Capability(True),
        Cap.SW_BREAKPOINT: Capability(False, BREAKPOINTS[0].reason),
        Cap.THREAD_PREEMPTION: Capability(
            False,
            "Unicorn 2.1.4 ends an emu_start whose instruction count runs out with a "
            "bogus UC_ERR_READ_UNMAPPED on MIPS (--max-insns meets it too): threads "
            "switch only at blocking calls, a thread that spins never yields"),
        # ITIMER_PROF/VIRTUAL counted by a block hook here (threads.count_cpu_time)
        Cap.CPU_TIMERS: Capability(True),
        Cap.BUSYBOX: Capability(False, "Debian 12 has no big-endian mips port"),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
    },
    private_syscalls={"set_thread_area": set_thread_area},
    classifiers=CLASSIFIERS,
)
