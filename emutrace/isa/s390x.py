"""IBM z/Architecture (s390x), ELF ABI for the zSeries / s390x ELF ABI Supplement."""

from emutrace.isa.base import (
    CLONE_BACKWARDS2,
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
    MemOperand,
    NativeOp,
    NativeTracing,
    Plt,
    RegFixup,
    Registers,
    SweepFilter,
    SweepKind,
    SyscallConvention,
    branch_records,
    x86_figure_borrowed,
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
    clone_args=CLONE_BACKWARDS2,
)

# ---------------------------------------------------------------- traps
# 0x0001 is the gdb breakpoint (asm/ptrace.h S390_BREAKPOINT): an invalid opcode that Unicorn
# reports as INTR 3 (program interrupt) with PC at the breakpoint.
BREAKPOINTS = (
    # (Unicorn's translator raises the trap of 0x0001 before the block's count includes it:
    # measured, fib 5 int3 counted 25,670 instructions against step's 26,033 before the
    # site was counted at the trap — 363 simulated traps)
    Breakpoint("0x0001", bytes.fromhex("0001"), hook="intr", intno=3, pc_after=0, works=True,
               counted=False),
)

# Hardware instruction breakpoints (what `hwbp` models):
# z/Architecture Principles of Operation ch. 4, Program-Event Recording:
# one start/end address pair (CR10-CR11) for the instruction-fetch event;
# every instruction fetched in the range is an event (arch/s390/kernel/ptrace.c)
DEBUG_HARDWARE = DebugHardware(1, "range", "PER i-fetch CR10-CR11",
                               source="z/Architecture PoP ch. 4 PER: one i-fetch range")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed=x86_figure_borrowed(),
    notes={
        "btf": ("s390x: PER successful-branching events, PTRACE_SINGLEBLOCK=12 "
                f"({HARDWARE_FACTS} §3.1)"),
        "bts": branch_records("Runtime Instrumentation"),
        "hwbp": f"s390x: one PER instruction-fetch address range ({HARDWARE_FACTS} §3.1)",
    },
)

# ---------------------------------------------------------------- classifiers
# z/Architecture Principles of Operation ch. 7: BRASL / BRAS are direct calls, BASR / BALR /
# BAS / BAL calls through a register or address (R1 gets the return address); `br %r14`
# (BCR 15,%r14) returns, B<cond>R %r14 returns conditionally; J / JG (BRC / BRCL 15) and
# BR / B jump, the other BRC / BRCL / BRCT / BRXH forms branch conditionally.  EX / EXRL
# execute one instruction elsewhere: discovery decodes that target (a call through EXRL is a
# call).  `basr %rX, 0` only reads the PC.  Returns need not go through r14: the z/Arch ELF
# ABI only makes r14 the register the caller *passes* the return address in, and code may
# reload it into another one (glibc's crti/crtn `_init`/`_fini`: `lg %r4,272(%r15);
# lmg %r6,%r15,…; br %r4`), so every other `br %rN`, and `b D(X,B)` (the same branch with
# the address computed, `b 0(%r4)` = `br %r4`), is `maybe_return`: a return when it goes to
# the running call's return address (backends.tails.TailRule.returns_to); a jump-table
# dispatch `b 0(%r1,%r2)` never goes there, so it stays a jump.
_S390_CALLS = frozenset({"brasl", "bras", "basr", "balr", "bas", "bal"})
_S390_COND_PREFIX = ("brct", "brxh", "brxl", "bct", "bxh", "bxle")


def _s390_ops(op: str) -> list[str]:
    """Operands split at the commas outside parentheses: `%r1,0(%r1,%r2)` is two."""
    out, depth, cur = [], 0, ""
    for ch in op:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if op else []


def classify_s390x(insn: Insn) -> Flow:
    m = insn.mnemonic
    if not m.startswith(("b", "j", "exrl")):  # (every transfer below is one of these)
        return Flow(FlowKind.STOP) if insn.raw[:2] == b"\x00\x00" else NO_FLOW
    ops = _s390_ops(insn.op_str)
    if m in _S390_CALLS:
        dest = ops[-1] if len(ops) >= 2 else ""
        if m in ("brasl", "bras"):
            return Flow(FlowKind.CALL, target=int(dest, 0))
        if dest in ("%r0", "0"):
            return NO_FLOW  # basr %rX, 0: no branch
        return Flow(FlowKind.CALL, indirect=dest.lstrip("%"))
    if m == "exrl":
        return Flow(FlowKind.EXECUTE, target=int(ops[-1], 0))
    if m in ("br", "b"):
        dest = ops[0]
        return Flow(FlowKind.RETURN) if dest == "%r14" else \
            Flow(FlowKind.JUMP, indirect=dest.lstrip("%"), maybe_return=True)
    if m in ("j", "jg"):
        return Flow(FlowKind.JUMP, target=int(ops[0], 0))
    if m in ("brc", "brcl", "bcr"):  # explicit mask form
        mask = int(ops[0], 0)
        if mask == 0:
            return NO_FLOW
        if m == "bcr":
            kind = FlowKind.RETURN if ops[1] == "%r14" else FlowKind.JUMP
            return Flow(kind, indirect=None if kind is FlowKind.RETURN else ops[1].lstrip("%"),
                        conditional=mask != 15)
        kind = FlowKind.JUMP if mask == 15 else FlowKind.BRANCH
        return Flow(kind, target=int(ops[1], 0), conditional=mask != 15)
    if m.startswith("j") and ops:  # je, jne, jgnl, ...: conditional relative branches
        return Flow(FlowKind.BRANCH, target=int(ops[-1], 0), conditional=True)
    if m.startswith("b") and m.endswith("r") and ops == ["%r14"]:  # ber %r14, bner %r14, ...
        return Flow(FlowKind.RETURN, conditional=True)
    if m.startswith(_S390_COND_PREFIX) and ops:
        try:
            return Flow(FlowKind.BRANCH, target=int(ops[-1], 0), conditional=True)
        except ValueError:
            return NO_FLOW
    if insn.raw[:2] == b"\x00\x00":
        return Flow(FlowKind.STOP)  # opcode 0x00 is invalid
    return NO_FLOW


def sp_effect_s390x(insn: Insn) -> int | None:
    """Branches write no register but the link (z/Architecture PoO ch. 7: BRAS/BRASL/BASR
    write R1) or a count (BRCT/BCT decrement R1): 0 for every transfer unless its first
    operand is %r15, the stack pointer (ELF s390x ABI), then None; anything else: None."""
    if classify_s390x(insn).kind in (FlowKind.NONE, FlowKind.STOP, FlowKind.EXECUTE):
        return None
    ops = _s390_ops(insn.op_str)
    return None if ops and ops[0] == "%r15" else 0


def sweep_kind_s390x(mnemonic: str) -> SweepKind:
    """What classify_s390x may make of a mnemonic: J/JG and BRC/BRCL to their last operand,
    Jcc and the count/index branches branch to it; the other B… forms (calls, BR, BCR, B<c>R)
    and EXRL read; the rest NONE but opcode 0x00, a STOP (its first two bytes zero, by
    encoding: `stop_encodings`)."""
    if mnemonic in ("j", "jg"):  # (BRC/BRCL 15)
        return SweepKind.JUMP
    if mnemonic in ("brc", "brcl"):  # (the mask says whether it is a branch)
        return SweepKind.TARGET
    if mnemonic.startswith("j") or mnemonic.startswith(_S390_COND_PREFIX):
        return SweepKind.BRANCH
    if mnemonic in ("brasl", "bras"):  # (relative: their target is a number)
        return SweepKind.CALL
    if mnemonic.startswith(("b", "exrl")):
        return SweepKind.CLASSIFY
    return SweepKind.PLAIN


CLASSIFIERS = Classifiers(classify=classify_s390x, insn_align=2, sp_effect=sp_effect_s390x,
                          sweep=SweepFilter(mnemonic_kind=sweep_kind_s390x, stop_encodings=(
                              (2, 0xFFFF, 0), (4, 0xFFFF0000, 0), (6, 0xFFFF00000000, 0)),
                              lengths="s390x"),
                          virtual_breakpoints=True)

# ---------------------------------------------------------------- simulation
# The effect of a displaced branch (z/Architecture PoO ch. 7), decoded from the bits: BRASL
# (C0x5, RIL) / BRAS (A7x5, RI) put the next address in R1 and branch relative (halfwords);
# BASR (0D, RR) reads R2 before writing R1, R2 = 0 does not branch; BCR (07) / BRC (A7x4) /
# BRCL (C0x4) branch when mask bit 8 >> CC is set, CC = PSW mask bits 18–19; BC (47, RX)
# likewise to its second operand's address D2 + X2 + B2 (register 0: none).  Only in the
# 64-bit addressing mode (PSW EA|BA); BAL/BALR/BAS/BCT* and EXRL are run in place (None).
_PSW_EA_BA = 0x180000000
_MASK64 = (1 << 64) - 1


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def simulate_s390x(cpu: CpuPort, insn: Insn, flow: Flow) -> int | None:
    raw, addr = insn.raw, insn.addr
    after = (addr + insn.size) & _MASK64
    op = raw[0]
    if op == 0x0D and insn.size == 2:  # basr
        r1, r2 = raw[1] >> 4, raw[1] & 15
        if r2 == 0:
            return None
        pswm = cpu.reg_read("pswm")
        if pswm & _PSW_EA_BA != _PSW_EA_BA:
            return None
        target = cpu.reg_read(f"r{r2}") & _MASK64
        cpu.reg_write(f"r{r1}", after)
        return target
    if op == 0x07 and insn.size == 2:  # bcr
        m1, r2 = raw[1] >> 4, raw[1] & 15
        if r2 == 0:
            return None  # bcr m,0 never branches (15,0 / 14,0 serialize)
        pswm = cpu.reg_read("pswm")
        if pswm & _PSW_EA_BA != _PSW_EA_BA:
            return None
        return cpu.reg_read(f"r{r2}") & _MASK64 if m1 & (8 >> (pswm >> 44 & 3)) else after
    if op == 0x47 and insn.size == 4:  # bc (b D2(X2,B2): a jump table's branch)
        m1, x2, b2 = raw[1] >> 4, raw[1] & 15, raw[2] >> 4
        pswm = cpu.reg_read("pswm")
        if pswm & _PSW_EA_BA != _PSW_EA_BA:
            return None
        if not m1 & (8 >> (pswm >> 44 & 3)):
            return after
        target = int.from_bytes(raw[2:4], "big") & 0xFFF
        for r in (x2, b2):
            if r:
                target += cpu.reg_read(f"r{r}")
        return target & _MASK64
    if op == 0xA7 and insn.size == 4 and raw[1] & 15 in (4, 5):  # brc, bras
        offset = 2 * _signed(int.from_bytes(raw[2:4], "big"), 16)
    elif op == 0xC0 and insn.size == 6 and raw[1] & 15 in (4, 5):  # brcl, brasl
        offset = 2 * _signed(int.from_bytes(raw[2:6], "big"), 32)
    else:
        return None
    pswm = cpu.reg_read("pswm")
    if pswm & _PSW_EA_BA != _PSW_EA_BA:
        return None
    target = (addr + offset) & _MASK64
    r1 = raw[1] >> 4
    if raw[1] & 15 == 5:  # bras / brasl
        cpu.reg_write(f"r{r1}", after)
        return target
    return target if r1 & (8 >> (pswm >> 44 & 3)) else after


# The simulator's BASR / BCR / BRC / BRCL / BRAS / BRASL as data for the native hot path,
# under the same precondition (PSW EA|BA, bits 32 and 31: 64-bit addressing); the condition
# code is PSW mask bits 44–45 (z/Architecture PoO, "Branch on Condition").
_ADDR64 = Condition("both", "pswm", 31, 32)


def lower_s390x(insn: Insn, flow: Flow) -> NativeOp | None:
    raw, addr = insn.raw, insn.addr
    op = raw[0]
    if op == 0x0D and insn.size == 2:  # basr
        r1, r2 = raw[1] >> 4, raw[1] & 15
        if r2 == 0:
            return None
        return NativeOp(FlowKind.CALL, reg=f"r{r2}", link=f"r{r1}", guard=_ADDR64)
    if op == 0x07 and insn.size == 2:  # bcr
        m1, r2 = raw[1] >> 4, raw[1] & 15
        if r2 == 0 or m1 == 0:
            return None
        kind = FlowKind.RETURN if r2 == 14 else FlowKind.JUMP  # as classify_s390x
        cond = Condition("always") if m1 == 15 else Condition("cc_mask", "pswm", 44, m1)
        return NativeOp(kind, reg=f"r{r2}", cond=cond, guard=_ADDR64)
    if op == 0x47 and insn.size == 4 and raw[1] >> 4 == 15:  # b D2(X2,B2)
        x2, b2 = raw[1] & 15, raw[2] >> 4
        address = MemOperand(base=f"r{b2}" if b2 else None, index=f"r{x2}" if x2 else None,
                             disp=int.from_bytes(raw[2:4], "big") & 0xFFF)
        return NativeOp(FlowKind.JUMP, effective=address, guard=_ADDR64)
    if op == 0xA7 and insn.size == 4 and raw[1] & 15 in (4, 5):  # brc, bras
        offset = 2 * _signed(int.from_bytes(raw[2:4], "big"), 16)
    elif op == 0xC0 and insn.size == 6 and raw[1] & 15 in (4, 5):  # brcl, brasl
        offset = 2 * _signed(int.from_bytes(raw[2:6], "big"), 32)
    else:
        return None
    target, r1 = (addr + offset) & _MASK64, raw[1] >> 4
    if raw[1] & 15 == 5:  # bras / brasl
        return NativeOp(FlowKind.CALL, target=target, link=f"r{r1}", guard=_ADDR64)
    return NativeOp(FlowKind.JUMP, target=target, guard=_ADDR64,
                    cond=Condition("always") if r1 == 15 else Condition("cc_mask", "pswm", 44, r1))


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
# ---------------------------------------------------------------- C values
# s390x ELF ABI Supplement §1.2.3 (Parameter passing): char is unsigned; float/double in
# f0, f2, f4, f6 (a float in the leftmost 32 bits), results in f0; a struct of 1, 2, 4 or 8
# bytes as an integer of that size, any other by reference; every struct result in memory
# at a hidden first argument (§1.2.4).  §1.2.3: a struct with a single float or double
# member is passed as that member (an FP register).  long double is IEEE binary128
# (__LDBL_MANT_DIG__ 113): passed by reference, returned in memory at a hidden first
# argument (r2), which is not one of the function's arguments.  A float or double past f6
# goes on the stack (§1.2.3: FP arguments never take general registers).
C_VALUES = CValues(char_signed=False, fp_args=("f0", "f2", "f4", "f6"), fp_retval="f0",
                   fp_single="high32", struct_scalar=True, struct_large="ref",
                   struct_ret_in_regs=0, struct_fp="single", long_double="binary128",
                   long_double_args="ref", long_double_ret="memory", fp_overflow_stack=True,
                   long_double_size=16)


def clone_tls(cpu: CpuPort, tls: int) -> None:
    """clone(CLONE_SETTLS) on s390x: the thread pointer is the access-register pair a0:a1,
    high word in a0 (arch/s390/kernel/process.c copy_thread)."""
    cpu.reg_write("a0", tls >> 32)
    cpu.reg_write("a1", tls & 0xFFFFFFFF)


ISA = Isa(
    # s390x ELF ABI supplement, PLT: PLT0 32 bytes, stubs 32
    # BFD elf64-s390.c elf_s390x_plt_entry: larl, lg, br, basr, lgf, jg, then `.long` the
    # .rela.plt offset (loaded by the lazy path: a breakpoint there corrupts it)
    plt=Plt(header=32, entry=32, lazy_offset=14, data=(28, 4)),
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
    platform="z900",
    uname_machine="s390x",
    # s390x `mmap` (nr 90) is old_mmap(struct mmap_arg_struct *), six 64-bit words
    # (arch/s390/kernel/syscall.c; glibc's s390 mmap_internal.h MMAP_CALL packs them)
    packed_args={"mmap": 6},
    fault_address_mask=-4096,  # si_addr of a fault: its page (__FAIL_ADDR_MASK)
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.KERNEL: Capability(True),  # isa/kernel_s390x.py, board s390-ccw-virtio
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
        # (instructions are 2, 4 or 6 bytes, the length in the opcode's first two bits:
        # native/s390len.c passes over the common ones that are never branches)
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
        Cap.ENTRY_SEES_EVERY_CALL: Capability(
            False,
            "glibc calls main through a stub no symbol names: eager entry probes "
            "see main as called directly (compared at named entries)"),
        # ISA-specific:
        Cap.EXRL_RELATIVE_LONG: Capability(
            False, "Unicorn 2.1.4 (QEMU 5.0) takes the target of a relative-long instruction "
                   "run by EXRL (e.g. BRASL) relative to the EXRL, not to the executed "
                   "instruction (fixed in QEMU 8.0): such a call goes astray"),
    },
    classifiers=CLASSIFIERS,
    simulate=simulate_s390x,
    lower=lower_s390x,
    clone_tls=clone_tls,
)
