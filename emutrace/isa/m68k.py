"""Motorola 68k (68020+ with 68881 FPU, Debian m68k), System V m68k ABI as GCC and the
Linux kernel use it: every argument on the stack, the result in d0."""

from emutrace.isa.base import (
    NO_FLOW,
    Breakpoint,
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
    Registers,
    SyscallConvention,
    gdb_only,
    no_block_step,
    x86_figure_borrowed,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="m68k",
    aliases=("m68020", "68k"),
    elf_machine="EM_68K",
    elf_class=32,
    endian="big",
    qemu="m68k",
    debian_arch="m68k",
    triple="m68k-linux-gnu",
)

# ---------------------------------------------------------------- engines
# GDB's m68k-core.xml (qemu's stub sends it) names a6 "fp", a7 "sp" and the status
# register "ps"; Unicorn names them A6, A7, SR
ENGINES = Engines(
    uc_arch="UC_ARCH_M68K",
    uc_mode=("UC_MODE_BIG_ENDIAN",),
    uc_reg_module="m68k_const",
    uc_reg_prefix="UC_M68K_REG_",
    uc_cpu_model="UC_CPU_M68K_M68040",
    cs_arch="CS_ARCH_M68K",
    cs_mode=("CS_MODE_M68K_040", "CS_MODE_BIG_ENDIAN"),
    uc_reg_rename={"fp": "A6", "sp": "A7", "ps": "SR"},
)

# ---------------------------------------------------------------- registers
# SysV m68k ABI: all arguments on the stack, the first at 4(sp) on entry (0(sp) holds the
# return address JSR/BSR pushed); result in d0 (d0:d1 for 64 bits)
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="d0",
    args=(),
    stack_args_offset=4,
    general=("d0", "d1", "d2", "d7", "a0", "a1", "a5", "fp"),
)

# ---------------------------------------------------------------- syscalls
# `trap #0` (arch/m68k/kernel/entry.S): number in d0, arguments d1-d5 and a0; -errno in
# d0.  Unicorn raises exception 32 (EXCP_TRAP0) with PC still on the trap: the layer
# moves PC past it
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("4e40"),  # trap #0
    hook="intr",
    intno=32,
    insn=None,
    number="d0",
    args=("d1", "d2", "d3", "d4", "d5", "a0"),
    ret="d0",
    pc_advance=2,
    pc_in_hook=0,
)

# ---------------------------------------------------------------- traps
# `trap #15` = 0x4E4F, GDB's m68k breakpoint (Linux delivers it as SIGTRAP,
# arch/m68k/kernel/traps.c); Unicorn: exception 47 (EXCP_TRAP0 + 15), PC on the trap
BREAKPOINTS = (
    Breakpoint("trap #$f", bytes.fromhex("4e4f"), hook="intr", intno=47, pc_after=0,
               works=True),
)

# 68020-68060 have no instruction breakpoint registers (M68060 UM ch. 9: none; the
# 68040's only debug aid is trace)
DEBUG_HARDWARE = DebugHardware(0, "none", "none",
                               source="M68040/M68060 user manuals: no breakpoint registers")

NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed=x86_figure_borrowed(),
    notes={"btf": no_block_step()},
)


# ---------------------------------------------------------------- classifiers
# M68000 Family Programmer's Reference Manual ch. 4: JSR/BSR push the return address
# (calls), RTS/RTD/RTR pop it (returns), JMP/BRA jump, Bcc/DBcc/FBcc branch on a condition;
# capstone prints an absolute target as "$80006a58.l" and a relative one as "$80013de8"
_RETURNS = frozenset({"rts", "rtd", "rtr"})


def _m68k_target(op: str) -> int | None:
    """The address of a "$hex" or "$hex.l"/"$hex.w" operand, None for any other mode."""
    text = op.strip().split(",")[-1].strip()
    if not text.startswith("$"):
        return None
    text = text[1:].split(".")[0]
    try:
        return int(text, 16)
    except ValueError:
        return None


def classify_m68k(insn: Insn) -> Flow:
    m = insn.mnemonic.split(".")[0]
    op = insn.op_str.strip()
    if m in ("jsr", "bsr"):
        target = _m68k_target(op)
        return Flow(FlowKind.CALL, target=target) if target is not None else \
            Flow(FlowKind.CALL, indirect=op)
    if m in _RETURNS:
        return Flow(FlowKind.RETURN)
    if m in ("jmp", "bra"):
        target = _m68k_target(op)
        return Flow(FlowKind.JUMP, target=target) if target is not None else \
            Flow(FlowKind.JUMP, indirect=op)
    if (m.startswith("b") and m not in ("bkpt", "bchg", "bclr", "bset", "btst", "bfchg",
                                        "bfclr", "bfexts", "bfextu", "bfffo", "bfins",
                                        "bfset", "bftst")) \
            or m.startswith("db") or m.startswith("fb") or m.startswith("fdb"):
        target = _m68k_target(op)
        if target is not None:
            return Flow(FlowKind.BRANCH, target=target, conditional=True)
    if m in ("bkpt", "illegal"):
        return Flow(FlowKind.STOP)
    return NO_FLOW


CLASSIFIERS = Classifiers(classify=classify_m68k, insn_align=2)

# ---------------------------------------------------------------- C values
# SysV m68k: char is signed; every argument in 4-byte stack slots (structs by value copied
# into the slots); a 64-bit result in d0:d1
C_VALUES = CValues(char_signed=True, retval_hi="d1", struct_in_slots=1 << 16)

NOT_EMULATED = Capability(
    False, "not wired: emutrace's Linux layer has no m68k system-call table or thread "
    "pointer (get_thread_area) yet, though Unicorn 2.1.4 has an M68040: --target gdb runs "
    "m68k programs")

# ---------------------------------------------------------------- capabilities
ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=(),
    hwcap=0,
    hwcap2=0,
    platform="m68k",
    uname_machine="m68k",
    c_values=C_VALUES,
    classifiers=CLASSIFIERS,
    capabilities=gdb_only(NOT_EMULATED),
)
