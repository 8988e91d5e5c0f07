"""SPARC V9, 64-bit Linux ABI (SPARC Compliance Definition 2.4.1, 64-bit psABI; Debian
sparc64).  Calls and returns have a delay slot (SPARC V9 manual §6.3.4) and register
windows: the caller's o0-o5 are the callee's i0-i5 after its SAVE."""

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
    GdbRegisters,
    Identity,
    Insn,
    Isa,
    NativeTracing,
    Registers,
    SyscallConvention,
    SyscallErrors,
    gdb_only,
    no_block_step,
    x86_figure_borrowed,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="sparc64",
    aliases=("sparcv9",),
    elf_machine="EM_SPARCV9",
    elf_class=64,
    endian="big",
    qemu="sparc64",
    debian_arch="sparc64",
    triple="sparc64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_SPARC",
    uc_mode=("UC_MODE_SPARC64", "UC_MODE_BIG_ENDIAN"),
    uc_reg_module="sparc_const",
    uc_reg_prefix="UC_SPARC_REG_",
    cs_arch="CS_ARCH_SPARC",
    cs_mode=("CS_MODE_V9", "CS_MODE_BIG_ENDIAN"),
    uc_reg_rename={"sp": "O6", "fp": "I6"},
)

# ---------------------------------------------------------------- registers
# 64-bit psABI: arguments in o0-o5 at the call (the callee's i0-i5 after SAVE), then the
# stack at 2047 (the stack bias) + 176 from sp; result in o0; CALL leaves its own address
# in o7 and the return goes to o7 + 8
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="o0",
    args=("o0", "o1", "o2", "o3", "o4", "o5"),
    link="o7",
    link_offset=8,
    stack_args_offset=2047 + 176,
    general=("o0", "o1", "o5", "l0", "l7", "i0", "g1", "g5"),
)

# ---------------------------------------------------------------- syscalls
# `ta 0x6d` (arch/sparc/kernel/syscalls.S, linux_sparc_syscall): number in g1, arguments
# o0-o5; result in o0, an errno with the carry of %xcc set.  Unicorn: trap 0x100 + 0x6d,
# PC past it
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("91d0206d"),
    hook="intr",
    intno=0x16D,
    insn=None,
    number="g1",
    args=("o0", "o1", "o2", "o3", "o4", "o5"),
    ret="o0",
    errors=SyscallErrors.XCC_CARRY,
)

# ---------------------------------------------------------------- traps
# `ta 1`: GDB's SPARC breakpoint (Linux: SIGTRAP); Unicorn trap 0x101, PC past it
BREAKPOINTS = (
    Breakpoint("ta %icc, %g0 + 1", bytes.fromhex("91d02001"), hook="intr", intno=0x101, pc_after=4,
               works=True),
)

# UltraSPARC: no instruction breakpoint register a Linux debugger programs (ptrace has no
# hardware breakpoints on sparc64)
DEBUG_HARDWARE = DebugHardware(0, "none", "none",
                               source="Linux sparc64 ptrace: no hardware breakpoints")

NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed=x86_figure_borrowed(),
    notes={"btf": no_block_step()},
)


# ---------------------------------------------------------------- classifiers
# SPARC V9 manual ch. 6/A: CALL and JMPL writing o7 are calls; RET (jmpl %i7+8), RETL
# (jmpl %o7+8) and RETURN return (capstone 5 prints RETURN as "rett"); BA/BN, JMPL to %g0
# jump; Bicc/BPcc/BPr/FBfcc branch on a condition.  Every one has a delay slot (an
# annulled one runs it only when taken)
_RETURNS = frozenset({"ret", "retl", "rett", "return"})


def _sparc_target(op: str) -> int | None:
    text = op.split(",")[-1].strip()
    try:
        return int(text, 16) if text.startswith("0x") else None
    except ValueError:
        return None


def classify_sparc(insn: Insn) -> Flow:
    m = insn.mnemonic.split(",")[0]
    op = insn.op_str.strip()
    if m == "call":
        target = _sparc_target(op)
        return Flow(FlowKind.CALL, target=target) if target is not None else \
            Flow(FlowKind.CALL, indirect=op)
    if m in _RETURNS:
        return Flow(FlowKind.RETURN)
    if m == "jmpl" or m == "jmp":
        parts = [p.strip() for p in op.split(",")]
        if parts[0] in ("%i7+8", "%o7+8"):
            return Flow(FlowKind.RETURN)
        if len(parts) > 1 and parts[-1] == "%o7":
            return Flow(FlowKind.CALL, indirect=parts[0])
        return Flow(FlowKind.JUMP, indirect=parts[0])
    if m in ("ba", "b"):
        target = _sparc_target(op)
        if target is not None:
            return Flow(FlowKind.JUMP, target=target)
    if m.startswith(("b", "fb")) and m != "bn":
        target = _sparc_target(op)
        if target is not None:
            return Flow(FlowKind.BRANCH, target=target, conditional=True)
    return NO_FLOW


CLASSIFIERS = Classifiers(classify=classify_sparc, delay_slot=True)

# ---------------------------------------------------------------- gdb numbering
# GDB's sparc64-tdep.c numbering, which qemu's SPARC64 stub serves without a target
# description: g0-g7, o0-o7, l0-l7, i0-i7 (8 bytes), f0-f31 (4 bytes), f32-f62 (even,
# 8 bytes), pc, npc, state, fsr, fprs, y
_GPRS = tuple(f"{bank}{n}" for bank in "goli" for n in range(8))
_GDB_NAMES = (*_GPRS[:14], "sp", "o7", *_GPRS[16:30], "fp", "i7",
              *(f"f{n}" for n in range(32)), *(f"f{n}" for n in range(32, 64, 2)),
              "pc", "npc", "state", "fsr", "fprs", "y")
GDB_REGISTERS = GdbRegisters(_GDB_NAMES, in_g=len(_GDB_NAMES), word_sized=32,
                             sizes=(8,) * 32 + (4,) * 32 + (8,) * 22, next_pc=("npc", 4))

# ---------------------------------------------------------------- C values
# 64-bit psABI §3.2.2: char is signed; argument i in o0+i, a float or double in
# %f(2i)/%d(2i) instead (16 FP argument registers); results in o0 and %f0/%d0
C_VALUES = CValues(char_signed=True, fp_retval="f0", struct_in_slots=16)

NOT_EMULATED = Capability(
    False, "not wired: emutrace's Linux layer has no SPARC register-window spill/fill "
    "traps or sparc64 system-call table yet, though Unicorn 2.1.4 has a SPARC64 CPU: "
    "--target gdb runs sparc64 programs")

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
    platform="sparc64",
    uname_machine="sparc64",
    c_values=C_VALUES,
    classifiers=CLASSIFIERS,
    gdb_registers=GDB_REGISTERS,
    capabilities=gdb_only(NOT_EMULATED),
)
