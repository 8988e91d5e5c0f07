"""PowerPC 32-bit big-endian, System V PowerPC ABI (SVR4 / Power Architecture 32-bit ABI)."""

from typing import Literal

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
    Lowering,
    NativeOp,
    NativeTracing,
    Plt,
    RegFixup,
    Registers,
    Simulator,
    SweepFilter,
    SyscallConvention,
    SyscallErrors,
    branch_records,
    transfer_sp_effect,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="ppc",
    aliases=("powerpc", "ppc32"),
    elf_machine="EM_PPC",
    elf_class=32,
    endian="big",
    qemu="ppc",
    debian_arch="powerpc",
    triple="powerpc-linux-gnu",
)

# ---------------------------------------------------------------- engines
# Unicorn names GPRs UC_PPC_REG_0..31; we call them r0..r31.
GPR_NAMES = {f"r{i}": str(i) for i in range(32)}

ENGINES = Engines(
    uc_arch="UC_ARCH_PPC",
    uc_mode=("UC_MODE_PPC32", "UC_MODE_BIG_ENDIAN"),
    uc_reg_module="ppc_const",
    uc_reg_prefix="UC_PPC_REG_",
    cs_arch="CS_ARCH_PPC",
    cs_mode=("CS_MODE_32", "CS_MODE_BIG_ENDIAN"),
    uc_tlb_virtual=True,  # measured faster than the emulated MMU (170 vs 94 MIPS on fib)
    ks_arch="KS_ARCH_PPC",
    ks_mode=("KS_MODE_PPC32", "KS_MODE_BIG_ENDIAN"),
    uc_reg_rename=GPR_NAMES,
)

# ---------------------------------------------------------------- registers
# SysV PPC ABI: arguments r3–r10, result r3 (r3:r4 for 64-bit), stack pointer r1, link
# register LR; the thread pointer is r2 (set by glibc itself).  Stacked arguments start at
# 8(r1) (back chain word + LR save word).
REGISTERS = Registers(
    pc="pc",
    sp="r1",
    retval="r3",
    args=("r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"),
    link="lr",
    tls="r2",
    stack_args_offset=8,
    general=("r0", "r3", "r4", "r10", "r14", "r31", "lr", "ctr"),
)

# ---------------------------------------------------------------- syscalls
# `sc`: number in r0, arguments r3–r8, result r3; on error r3 = positive errno and CR0.SO
# is set.  Unicorn: INTR 8 (POWERPC_EXCP_SYSCALL) with nip already += 4 — but Unicorn adds 4
# for *every* PPC exception and passes them all to the INTR hook, so check the number.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("44000002"),  # sc
    hook="intr",
    intno=8,
    insn=None,
    number="r0",
    args=("r3", "r4", "r5", "r6", "r7", "r8"),
    ret="r3",
    errors=SyscallErrors.CR0_SO,
    error_flag_reg="cr",  # CR0.SO lives in the CR image
    pair_aligned=True,
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# `trap` (= `tw 31,0,0`) = 0x7FE00008 (the Linux trap instruction, ppc-opcode.h PPC_RAW_TRAP):
# INTR 6 (POWERPC_EXCP_PROGRAM), PC seen = bp + 4.
BREAKPOINTS = (
    Breakpoint("trap", bytes.fromhex("7fe00008"), hook="intr", intno=6, pc_after=4,
               works=True),
)

# Hardware instruction breakpoints (what `hwbp` models):
# Power ISA v2.07 (POWER8 and later): one Completed Instruction Address
# Breakpoint Register (linux commit 1ad7d70562ee, xmon)
DEBUG_HARDWARE = DebugHardware(1, "address", "CIABR",
                               source="Power ISA v2.07: one CIABR")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "kprobe-ppc64",
    borrowed="ppc64 kprobe figure (2005 hardware) applied; no uprobe figure for POWER",
    notes={
        "btf": f"{{isa}}: MSR[BE] branch trace, PTRACE_SINGLEBLOCK=0x100 ({HARDWARE_FACTS} §3.1)",
        "bts": branch_records("BHRB, 32 entries"),
        "hwbp": f"ppc: one CIABR (POWER8+), IAC1–4 on BookE ({HARDWARE_FACTS} §3.1)",
    },
)

# ---------------------------------------------------------------- classifiers
# Power ISA v3.1 Book I §2.4, decoded from the bits (capstone's extended mnemonics are
# many): opcode 18 I-form `b`/`bl` (LK = call, AA = absolute), opcode 16 B-form `bc`/`bcl`,
# opcode 19 XL-form `bclr` (XO 16: `blr` returns, `blrl` calls through LR) and `bcctr`
# (XO 528: `bctr` jumps, `bctrl` calls through CTR).  BO with 0b1x1xx branches always.
# `bcl 20,31,$+4` (read the PC) is a call to the next instruction: discovery ignores it.
# `trap` (tw 31,0,0) never falls through.
def classify_ppc_word(addr: int, w: int) -> Flow:
    opcode, lk = w >> 26, w & 1
    if opcode == 18:
        li = w & 0x03FFFFFC
        li = li - (1 << 26) if li & (1 << 25) else li
        target = (li if w & 2 else addr + li) & 0xFFFFFFFFFFFFFFFF
        return Flow(FlowKind.CALL if lk else FlowKind.JUMP, target=target)
    bo = (w >> 21) & 31
    always = bo & 0x14 == 0x14
    if opcode == 16:
        bd = w & 0xFFFC
        bd = bd - (1 << 16) if bd & (1 << 15) else bd
        target = bd if w & 2 else addr + bd
        if lk:
            return Flow(FlowKind.CALL, target=target, conditional=not always)
        return Flow(FlowKind.JUMP if always else FlowKind.BRANCH, target=target,
                    conditional=not always)
    if opcode == 19:
        xo = (w >> 1) & 0x3FF
        if xo == 16:  # bclr
            if lk:
                return Flow(FlowKind.CALL, indirect="lr", conditional=not always)
            return Flow(FlowKind.RETURN, conditional=not always)
        if xo in (528, 560):  # bcctr, bctar
            reg = "ctr" if xo == 528 else "tar"
            kind = FlowKind.CALL if lk else FlowKind.JUMP
            return Flow(kind, indirect=reg, conditional=not always)
    if w == 0x7FE00008:  # trap
        return Flow(FlowKind.STOP)
    return NO_FLOW


# the words classify_ppc_word may read as a transfer: primary opcodes 16 (bc), 18 (b) and
# 19 (bclr, bcctr, bctar); among them `b`/`bc` without LK jump or branch to the target
# capstone prints last; `trap` (tw 31,0,0) is a STOP
SWEEP_PPC = SweepFilter(encodings=tuple((4, 0xFC000000, op << 26) for op in (16, 18, 19)),
                        target_encodings=((4, 0xFC000001, 18 << 26), (4, 0xFC000001, 16 << 26)),
                        # bc whose BO does not branch always (0b1x1xx): bit 25 or 23 clear
                        branch_encodings=((4, 0xFC000001 | 1 << 25, 16 << 26),
                                          (4, 0xFC000001 | 1 << 23, 16 << 26)),
                        jump_encodings=((4, 0xFC000001, 18 << 26),),  # b, ba
                        call_encodings=((4, 0xFC000003, 18 << 26 | 1),),  # bl
                        stop_encodings=((4, 0xFFFFFFFF, 0x7FE00008),), fixed_size=4)


def classify_ppc(insn: Insn) -> Flow:
    return classify_ppc_word(insn.addr, int.from_bytes(insn.raw, "big"))


CLASSIFIERS = Classifiers(classify=classify_ppc, sp_effect=transfer_sp_effect(classify_ppc),
                          sweep=SWEEP_PPC,
                          virtual_breakpoints=True)


# ---------------------------------------------------------------- simulation
# The effect of a displaced branch (Power ISA v3.1 Book I §2.4), decoded from the bits like
# the classifier.  BO (bits 6–10, MSB first): 0x10 ignore the CR bit, 0x08 the value it must
# have, 0x04 do not decrement CTR, 0x02 branch when CTR = 0 (else when CTR != 0).  BI names
# the CR bit counted from the MSB of the 32-bit CR image (CR0 = LT GT EQ SO in the top
# nibble).  The target is read before LK writes LR (`blrl`), and CIA + 4 goes to LR whether
# or not the branch is taken.  `bcctr` with a decrementing BO is invalid and `bctar` is not
# simulated: None (the backend runs them in place).
def ppc_simulator(byteorder: Literal["big", "little"], word: int) -> Simulator:
    mask = (1 << (8 * word)) - 1

    def simulate(cpu: CpuPort, insn: Insn, flow: Flow) -> int | None:
        if insn.size != 4:
            return None
        w = int.from_bytes(insn.raw, byteorder)
        opcode, lk, after = w >> 26, w & 1, (insn.addr + 4) & mask
        if opcode == 18:  # b, bl, ba, bla
            li = w & 0x03FFFFFC
            li = li - (1 << 26) if li & (1 << 25) else li
            target = (li if w & 2 else insn.addr + li) & mask
            if lk:
                cpu.reg_write("lr", after)
            return target
        bo, bi = (w >> 21) & 31, (w >> 16) & 31
        if opcode == 16:  # bc
            bd = w & 0xFFFC
            bd = bd - (1 << 16) if bd & (1 << 15) else bd
            target = (bd if w & 2 else insn.addr + bd) & mask
        elif opcode == 19 and (w >> 1) & 0x3FF == 16:  # bclr
            target = cpu.reg_read("lr") & mask & ~3
        elif opcode == 19 and (w >> 1) & 0x3FF == 528 and bo & 0x04:  # bcctr
            target = cpu.reg_read("ctr") & mask & ~3
        else:
            return None
        ctr_ok = True
        if not bo & 0x04:  # decrement CTR, then test it
            ctr = (cpu.reg_read("ctr") - 1) & mask
            cpu.reg_write("ctr", ctr)
            ctr_ok = (ctr != 0) != bool(bo & 0x02)
        cond_ok = bool(bo & 0x10) or (cpu.reg_read("cr") >> (31 - bi) & 1) == (bo >> 3 & 1)
        if lk:
            cpu.reg_write("lr", after)
        return target if ctr_ok and cond_ok else after

    return simulate

def ppc_lowering(byteorder: Literal["big", "little"], word: int) -> Lowering:
    """The simulator's unconditional b/bl/blr/blrl/bctr/bctrl and the bc/bclr forms that test
    one CR bit without touching CTR, as data for the native hot path; CTR-decrementing forms
    and conditional calls (LR is written even when not taken) stay with Python."""
    mask = (1 << (8 * word)) - 1

    def lower(insn: Insn, flow: Flow) -> NativeOp | None:
        if insn.size != 4:
            return None
        w = int.from_bytes(insn.raw, byteorder)
        opcode, lk = w >> 26, w & 1
        link = "lr" if lk else None
        if opcode == 18:  # b, bl, ba, bla
            li = w & 0x03FFFFFC
            li = li - (1 << 26) if li & (1 << 25) else li
            target = (li if w & 2 else insn.addr + li) & mask
            return NativeOp(FlowKind.CALL if lk else FlowKind.JUMP, target=target, link=link)
        bo, bi = (w >> 21) & 31, (w >> 16) & 31
        always = bo & 0x14 == 0x14  # BO: ignore the CR bit, do not decrement CTR
        if opcode == 19 and (w >> 1) & 0x3FF in (16, 528) and always:  # bclr, bcctr
            reg = "lr" if (w >> 1) & 0x3FF == 16 else "ctr"
            if lk:
                return NativeOp(FlowKind.CALL, reg=reg, link="lr", clear_low=3)
            kind = FlowKind.RETURN if reg == "lr" else FlowKind.JUMP
            return NativeOp(kind, reg=reg, clear_low=3)
        if opcode == 19 and (w >> 1) & 0x3FF == 16 and not lk and bo & 0x04:  # bclr on a bit
            test = "set" if bo & 0x08 else "clear"
            return NativeOp(FlowKind.RETURN, reg="lr", clear_low=3,
                            cond=Condition(test, "cr", 31 - bi))
        if opcode == 16 and not lk and bo & 0x04 and not bo & 0x10:  # bc on one CR bit
            bd = w & 0xFFFC
            bd = bd - (1 << 16) if bd & (1 << 15) else bd
            target = (bd if w & 2 else insn.addr + bd) & mask
            test = "set" if bo & 0x08 else "clear"
            return NativeOp(FlowKind.JUMP, target=target, cond=Condition(test, "cr", 31 - bi))
        return None

    return lower


# ---------------------------------------------------------------- quirks
RESET = (
    # MSR.FP (0x2000) is clear at reset: the first FP instruction raises FP-unavailable.
    RegFixup("msr", 0x2000, "FPU unavailable at reset (MSR.FP = 0)"),
)

# asm/cputable.h: PPC_FEATURE_32 | PPC_FEATURE_HAS_FPU | PPC_FEATURE_HAS_MMU
HWCAP = 0x80000000 | 0x08000000 | 0x04000000

# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# Power Architecture 32-bit ABI Supplement 1.0 (SVR4 PowerPC): char is unsigned;
# float/double in f1-f8 (floats in double format), results in f1; long long in an aligned
# register pair (r3:r4, r5:r6, ...), results in r3:r4; every struct by reference (a pointer
# to a caller's copy), struct results in memory at a hidden first argument (GCC's Linux
# default, -maix-struct-return); structs with float members alike.  long double is IBM
# double-double on Debian powerpc (GCC: __LDBL_MANT_DIG__ 106, __LONG_DOUBLE_IBM128__):
# two consecutive FPRs (f1:f2 first), the result in f1:f2.
C_VALUES = CValues(char_signed=False, fp_args=tuple(f"fpr{i}" for i in range(1, 9)),
                   fp_retval="fpr1", fp_single="double", retval_hi="r4", pair_aligned=True,
                   struct_in_slots=0, struct_large="ref", struct_ret_in_regs=0,
                   struct_fp="core", long_double="ibm128", long_double_args="pair",
                   long_double_ret="pair", long_double_size=16)


# GCC's out-of-line register saves (ppc and ppc64le alike, -Os)
ENTRY_OUT_OF_LINE_SAVES = Capability(
    False,
    "eager entry probes take the caller from the link register; GCC's "
    "_restgpr0_N is entered by a `b` while it still holds the save routine's "
    "return address, so entry takes it for a new call and ends the frame")

# Secure PLT (Power Architecture 32-bit ABI; BFD elf32-ppc.c): .plt holds slots only.  A
# non-PIC program's 16-byte stubs `lis r11,ha(slot); lwz r11,lo(slot)(r11); mtctr r11; bctr`
# end at the lazy branch table `__glink` (4-byte `b __glink_PLTresolve` per slot, where slot i
# points before binding); -fPIC/-pie stubs (`lwz r11,off(r30)`) are the linker's local
# symbols `00008000.got2.plt_pic32.strcmp@@GLIBC_2.0`
PLT = Plt(header=0, entry=16, lazy_table=4, stub_insn=(0xFFFF0000, 0x3D600000),  # lis r11,
          stub_symbol=r"\.plt_pic32\.(?P<func>[^@+]+)")

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
    reset=RESET,
    # arch/powerpc/include/asm/elf.h elf_read_implies_exec: a 32-bit task with
    # EXSTACK_DEFAULT (the 64-bit ABI's stack is never executable by default)
    exec_stack_by_default=True,
    hwcap=HWCAP,
    hwcap2=0,
    platform="ppc",
    uname_machine="ppc",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        # isa/kernel_ppc.py (SRR0/SRR1/ESR modelled, mfspr/mtspr/rfi emulated), board bamboo
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.KERNEL: Capability(True),
        Cap.SIGNAL_HANDLERS: SIGNAL_HANDLERS,
        Cap.RUN_STATIC: Capability(True),
        Cap.RUN_DYNAMIC: Capability(True),
        Cap.TRACE_DYNAMIC: Capability(True),
        Cap.PLT_NAMES: Capability(True),
        Cap.SW_BREAKPOINT: Capability(True),
        Cap.THREAD_PREEMPTION: Capability(True),
        Cap.CPU_TIMERS: Capability(True),  # ITIMER_PROF/VIRTUAL (cpu_timers.py)
        Cap.BUSYBOX: Capability(False, "Debian 12 has no 32-bit powerpc release port"),
        # glibc's getcontext, setcontext and swapcontext make the swapcontext system call
        # (nr 249): machine/linux/sys_ucontext.py serves it and tells the tracer where a
        # loaded context goes on (a makecontext'd function is entered with no branch)
        Cap.UCONTEXT_SYSCALL: Capability(True),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.ENTRY_OUT_OF_LINE_SAVES: ENTRY_OUT_OF_LINE_SAVES,
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
    },
    classifiers=CLASSIFIERS,
    simulate=ppc_simulator("big", 4),
    lower=ppc_lowering("big", 4),
)
