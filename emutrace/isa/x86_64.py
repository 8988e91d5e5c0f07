"""x86_64 (AMD64), System V psABI."""

from collections.abc import Callable

from emutrace.isa.base import (
    LINUX_NOT_TRIED,
    NATIVE_SIGNAL_HANDLERS,
    NO_FLOW,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    CompatSyscalls,
    Condition,
    CpuPort,
    CValues,
    DebugHardware,
    Engines,
    Flow,
    FlowKind,
    GuestError,
    Identity,
    Insn,
    Isa,
    Lowering,
    MemOperand,
    NativeOp,
    NativeTracing,
    Plt,
    RegFixup,
    Registers,
    Simulator,
    SweepFilter,
    SweepKind,
    SyscallConvention,
)
from emutrace.isa.native_pmu import native_bts_reason
from emutrace.isa.native_sandbox import native_sandbox_reason

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="x86_64",
    aliases=("amd64", "x86-64", "x64"),
    elf_machine="EM_X86_64",
    elf_class=64,
    endian="little",
    qemu="x86_64",
    debian_arch="amd64",
    triple="x86_64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_X86",
    uc_mode=("UC_MODE_64",),
    uc_reg_module="x86_const",
    uc_reg_prefix="UC_X86_REG_",
    cs_arch="CS_ARCH_X86",
    cs_mode=("CS_MODE_64",),
    ks_arch="KS_ARCH_X86",
    ks_mode=("KS_MODE_64",),
)

# ---------------------------------------------------------------- registers
# psABI §3.2.3: integer arguments in rdi, rsi, rdx, rcx, r8, r9; result in rax; the
# seventh argument and later at 8(%rsp) on entry (0(%rsp) is the return address).
REGISTERS = Registers(
    pc="rip",
    sp="rsp",
    retval="rax",
    args=("rdi", "rsi", "rdx", "rcx", "r8", "r9"),
    tls="fs_base",
    stack_args_offset=8,
    general=("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r15"),
)

# ---------------------------------------------------------------- syscalls
# psABI A.2.1: `syscall`, number in rax, arguments rdi, rsi, rdx, r10, r8, r9 (r10 for rcx,
# which the instruction clobbers), result in rax, -4095..-1 is -errno.  Unicorn does not raise
# an interrupt for `syscall`: it needs UC_HOOK_INSN with UC_X86_INS_SYSCALL.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("0f05"),  # syscall
    hook="insn",
    intno=None,
    insn="UC_X86_INS_SYSCALL",
    number="rax",
    args=("rdi", "rsi", "rdx", "r10", "r8", "r9"),
    ret="rax",
    pc_in_hook=0,  # UC_HOOK_INSN runs before the instruction; Unicorn moves RIP on after it
    pc_after_hook=2,  # ... by the syscall's length (qemu helper_syscall: next_eip_addend)
)

# `int $0x80` from 64-bit code enters the IA-32 compat path (arch/x86/entry/common.c
# do_int80_syscall_32): i386 numbers in eax, arguments in ebx ecx edx esi edi ebp, the
# result in rax (a long, so -errno is sign-extended to 64 bits); 32-bit pointers
COMPAT_SYSCALLS = CompatSyscalls(intno=0x80, isa="i386", ret="rax")

# ---------------------------------------------------------------- traps
# int3 (0xCC, Intel SDM vol. 2 "INT n/INTO/INT3"): INTR 3, PC already past the byte.
BREAKPOINTS = (Breakpoint("int3", b"\xcc", hook="intr", intno=3, pc_after=1, works=True),)

# Hardware instruction breakpoints (what `hwbp` models):
# Intel SDM vol. 3 §18.2: four debug address registers DR0-DR3,
# enabled in DR7 (linux arch/x86/include/asm/hw_breakpoint.h: HBP_NUM 4)
DEBUG_HARDWARE = DebugHardware(4, "address", "DR0-DR3",
                               source="Intel SDM vol. 3 §18.2; linux HBP_NUM 4")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
)


# ---------------------------------------------------------------- classifiers
# Intel SDM vol. 2: CALL rel32 / r/m (E8, FF /2), RET (C3, C2 iw), JMP rel / r/m (E9, EB,
# FF /4), Jcc, JrCXZ and LOOPcc (conditional).  The i386 PC thunk (`call
# __x86.get_pc_thunk.bx`) is an ordinary call.  HLT, UD2 and INT3 never fall through.
_X86_COND_JUMPS = frozenset({"jrcxz", "jecxz", "jcxz", "loop", "loope", "loopne"})
_X86_STOPS = frozenset({"hlt", "ud2", "int3", "ud1", "ud0"})


def _x86_flow(kind: FlowKind, op: str, conditional: bool = False) -> Flow:
    """A transfer to the operand: a direct target, or a register ("rax") or memory
    ("qword ptr [...]") operand the target is read from."""
    try:
        return Flow(kind, target=int(op, 0), conditional=conditional)
    except ValueError:
        return Flow(kind, indirect=op, conditional=conditional)


def classify_x86(insn: Insn) -> Flow:
    """x86 and x86_64 (capstone Intel syntax; prefixes like `notrack`/`bnd` are skipped)."""
    m = insn.mnemonic
    if " " in m:  # a prefix
        m = m.rsplit(None, 1)[-1]
    if m in ("ret", "retf"):
        return Flow(FlowKind.RETURN)
    if m == "call":
        return _x86_flow(FlowKind.CALL, insn.op_str)
    if m == "jmp":
        return _x86_flow(FlowKind.JUMP, insn.op_str)
    if m.startswith("j") or m in _X86_COND_JUMPS:
        return _x86_flow(FlowKind.BRANCH, insn.op_str, conditional=True)
    if m in _X86_STOPS:
        return Flow(FlowKind.STOP)
    return NO_FLOW


def x86_sp_effect(word: int) -> Callable[[Insn], int | None]:
    """What a transfer adds to rsp/esp (Intel SDM vol. 2): CALL pushes the return address
    (-word), RET pops it and RET imm16 also releases imm16 bytes, JMP/Jcc/LOOPcc write no
    rsp: 0.  An operand-size prefix (0x66: a 16-bit push) and anything else: None."""
    def effect(insn: Insn) -> int | None:
        m = insn.mnemonic.split()[-1] if insn.mnemonic else ""
        if insn.raw[:1] == b"\x66":
            return None
        if m == "call":
            return -word
        if m == "ret":
            ops = insn.op_str.strip()
            return word + (int(ops, 0) if ops else 0)
        return 0 if classify_x86(insn).kind in (FlowKind.JUMP, FlowKind.BRANCH) else None
    return effect


def sweep_kind_x86(mnemonic: str) -> SweepKind:
    """What classify_x86 may make of a mnemonic, by its last word as it reads it (a prefix:
    `notrack jmp`, `bnd ret`, `rep stosd`, `lock cmpxchg`): JMP to its operand, Jcc/JrCXZ/
    LOOPcc branch to it (a number, else CLASSIFY: `jmp rax`; JMP unconditionally), CALL
    calls it (the same), RET read;
    HLT/UD2/INT3/UD1/UD0 STOP; the rest NONE."""
    if " " in mnemonic:
        mnemonic = mnemonic.rsplit(None, 1)[-1]
    if mnemonic == "call":
        return SweepKind.CALL
    if mnemonic in ("ret", "retf"):
        return SweepKind.CLASSIFY
    if mnemonic == "jmp":
        return SweepKind.JUMP
    if mnemonic.startswith("j") or mnemonic in _X86_COND_JUMPS:
        return SweepKind.BRANCH
    return SweepKind.STOP if mnemonic in _X86_STOPS else SweepKind.PLAIN


SWEEP_X86 = SweepFilter(mnemonic_kind=sweep_kind_x86, lengths="x86_64")
CLASSIFIERS = Classifiers(classify=classify_x86, insn_align=1, sp_effect=x86_sp_effect(8),
                          virtual_breakpoints=True, sweep=SWEEP_X86)


# ---------------------------------------------------------------- simulation
# The effect of a displaced call/return/jump (Intel SDM vol. 2, CALL/RET/JMP/Jcc): CALL pushes
# the address of the next instruction and jumps; RET pops it (RET imm16 also releases imm16
# bytes); Jcc tests EFLAGS (CF bit 0, PF 2, ZF 6, SF 7, OF 11).
_SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8}
_CONDITIONS = {
    "jo": lambda f: f["of"], "jno": lambda f: not f["of"],
    "jb": lambda f: f["cf"], "jae": lambda f: not f["cf"],
    "je": lambda f: f["zf"], "jne": lambda f: not f["zf"],
    "jbe": lambda f: f["cf"] or f["zf"], "ja": lambda f: not (f["cf"] or f["zf"]),
    "js": lambda f: f["sf"], "jns": lambda f: not f["sf"],
    "jp": lambda f: f["pf"], "jnp": lambda f: not f["pf"],
    "jl": lambda f: f["sf"] != f["of"], "jge": lambda f: f["sf"] == f["of"],
    "jle": lambda f: f["zf"] or f["sf"] != f["of"],
    "jg": lambda f: not f["zf"] and f["sf"] == f["of"],
}


# the segments whose base a user program sets (Linux: TLS in fs on x86_64, gs on i386), read
# as the register `<segment>_base`; the others are flat (base 0) in user mode
_BASED_SEGMENTS = ("fs", "gs")


def _segment(text: str) -> str | None:
    """The segment override of a memory operand (`dword ptr gs:[0x10]` → "gs"), or None."""
    head = text[:text.index("[")]
    return head.split()[-1].rstrip(":") if ":" in head else None


def _operand(cpu: CpuPort, insn: Insn, text: str, word: int) -> int:
    """Value of a register or memory operand in capstone's Intel syntax (a segment override:
    fs or gs, whose base is added)."""
    text = text.strip()
    if "[" not in text:
        return cpu.reg_read(text)
    size = next((n for k, n in _SIZES.items() if text.startswith(k)), word)
    segment = _segment(text)
    addr = cpu.reg_read(f"{segment}_base") if segment is not None else 0
    inner = text[text.index("[") + 1:text.rindex("]")].replace(" - ", " + -")
    for term in inner.split(" + "):
        term = term.strip()
        if "*" in term:
            reg, scale = term.split("*")
            addr += cpu.reg_read(reg) * int(scale, 0)
        elif term in ("rip", "eip"):
            addr += insn.addr + insn.size
        elif term.lstrip("-")[:1].isdigit():
            addr += int(term, 0)
        else:
            addr += cpu.reg_read(term)
    addr &= (1 << (8 * word)) - 1
    return int.from_bytes(cpu.mem_read(addr, size), "little")


def x86_simulator(word: int, sp: str, flags: str) -> Simulator:
    mask = (1 << (8 * word)) - 1

    def simulate(cpu: CpuPort, insn: Insn, flow: Flow) -> int | None:
        m = insn.mnemonic.split()[-1]
        after = insn.addr + insn.size
        if m == "call" or m == "jmp":
            indirect = flow.indirect or ""
            if (flow.target is None and "[" in indirect
                    and _segment(indirect) not in (None, *_BASED_SEGMENTS)):
                return None  # (cs, ds, es, ss overrides: not simulated)
            target = flow.target if flow.target is not None else \
                _operand(cpu, insn, flow.indirect or "", word)
            if m == "call":
                top = (cpu.reg_read(sp) - word) & mask
                cpu.mem_write(top, after.to_bytes(word, "little"))
                cpu.reg_write(sp, top)
            return target
        if m == "ret":
            top = cpu.reg_read(sp)
            target = int.from_bytes(cpu.mem_read(top, word), "little")
            release = int(insn.op_str, 0) if insn.op_str else 0
            cpu.reg_write(sp, (top + word + release) & mask)
            return target
        test = _CONDITIONS.get(m)
        if test is not None and flow.target is not None:
            value = cpu.reg_read(flags)
            bits = {"cf": value & 1, "pf": value >> 2 & 1, "zf": value >> 6 & 1,
                    "sf": value >> 7 & 1, "of": value >> 11 & 1}
            return flow.target if test(bits) else after
        if m in ("jrcxz", "jecxz") and flow.target is not None:
            return flow.target if cpu.reg_read(m[1:-1]) == 0 else after
        return None  # loop/loopcc and the rest: not simulated (the backend falls back)

    return simulate


# _CONDITIONS as data for the native hot path (EFLAGS: CF 0, PF 2, ZF 6, SF 7, OF 11)
_NATIVE_CONDITIONS: dict[str, tuple[str, tuple[int, ...]]] = {
    "jo": ("set", (11,)), "jno": ("clear", (11,)), "jb": ("set", (0,)), "jae": ("clear", (0,)),
    "je": ("set", (6,)), "jne": ("clear", (6,)), "jbe": ("any", (0, 6)), "ja": ("none", (0, 6)),
    "js": ("set", (7,)), "jns": ("clear", (7,)), "jp": ("set", (2,)), "jnp": ("clear", (2,)),
    "jl": ("ne", (7, 11)), "jge": ("eq", (7, 11)), "jle": ("set_or_ne", (6, 7, 11)),
    "jg": ("clear_and_eq", (6, 7, 11)),
}


def _full_register(name: str, word: int) -> bool:
    """A general register of the address size (eax..edi on i386, rax..r15 on x86_64): what
    `_operand` adds up without wrapping; a 16-bit address (`[bx + si]`) is not described."""
    if word == 4:
        return name in ("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp")
    return name in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp") or (
        name[:1] == "r" and name[1:].isdigit())


def _memory_operand(insn: Insn, text: str, word: int) -> MemOperand | None:
    """`_operand`'s memory read as data: a word-sized operand `[base + index*scale + disp]`
    (`[rip + disp]` as its absolute address), with fs's or gs's base (i386's
    `call gs:[0x10]`, the system call through the TCB); None for anything else (another
    segment, another size)."""
    text = text.strip()
    if "[" not in text or not text.endswith("]"):
        return None
    segment = _segment(text)
    if segment is not None and segment not in _BASED_SEGMENTS:
        return None
    size = next((n for k, n in _SIZES.items() if text.startswith(k)), word)
    if size != word:
        return None
    base = index = None
    scale, disp = 1, 0
    inner = text[text.index("[") + 1:-1].replace(" - ", " + -")
    for term in inner.split(" + "):
        term = term.strip()
        if "*" in term:
            reg, factor = term.split("*")
            if index is not None or not _full_register(reg, word):
                return None
            index, scale = reg, int(factor, 0)
        elif term in ("rip", "eip"):
            disp += insn.addr + insn.size
        elif term.lstrip("-")[:1].isdigit():
            disp += int(term, 0)
        elif not _full_register(term, word):
            return None
        elif base is None:
            base = term
        elif index is None:
            index = term
        else:
            return None
    return MemOperand(base, index, scale, disp & ((1 << (8 * word)) - 1), segment)


def x86_lowering(flags: str, word: int) -> Lowering:
    def lower(insn: Insn, flow: Flow) -> NativeOp | None:
        """The simulator's CALL/JMP rel, reg or memory, RET [imm16], Jcc and JrCXZ as data
        for the native hot path (the same effects, Intel SDM vol. 2)."""
        m = insn.mnemonic.split()[-1] if insn.mnemonic else ""
        if m in ("call", "jmp"):
            kind = FlowKind.CALL if m == "call" else FlowKind.JUMP
            if flow.target is not None:
                return NativeOp(kind, target=flow.target)
            op = (flow.indirect or "").strip()
            if op and op.isalnum():  # a register ("rax", "r11", "eax")
                return NativeOp(kind, reg=op)
            load = _memory_operand(insn, op, word)
            return NativeOp(kind, load=load) if load is not None else None
        if m == "ret":
            return NativeOp(FlowKind.RETURN, release=int(insn.op_str, 0) if insn.op_str else 0)
        test = _NATIVE_CONDITIONS.get(m)
        if test is not None and flow.target is not None:
            return NativeOp(FlowKind.JUMP, target=flow.target,
                            cond=Condition(test[0], flags, *test[1]))
        if m in ("jrcxz", "jecxz") and flow.target is not None:
            reg = m[1:-1]
            return NativeOp(FlowKind.JUMP, target=flow.target,
                            cond=Condition("zero", reg, 64 if reg == "rcx" else 32))
        return None

    return lower


# ---------------------------------------------------------------- quirks
ARCH_SET_FS = 0x1002  # <asm/prctl.h>
ARCH_GET_FS = 0x1003


def arch_prctl(cpu: CpuPort, args: tuple[int, ...]) -> int:
    """arch_prctl(2): glibc sets the TLS base with ARCH_SET_FS; FS_BASE is the register."""
    code, addr = args[0], args[1]
    if code == ARCH_SET_FS:
        cpu.reg_write("fs_base", addr)
        return 0
    if code == ARCH_GET_FS:
        cpu.mem_write(addr, cpu.reg_read("fs_base").to_bytes(8, "little"))
        return 0
    raise GuestError("EINVAL")


# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# SysV AMD64 psABI 1.0 §3.2.3: char is signed (Fig. 3.1); float/double arguments in
# %xmm0-%xmm7, results in %xmm0 (low 32/64 bits); a struct of up to 16 bytes of INTEGER
# class in general registers (its eightbytes in order), larger ones MEMORY (copied to the
# stack, not shown); structs up to 16 bytes return in %rax:%rdx, larger ones in memory
# whose address is a hidden first argument (%rdi).  §3.2.3 classification: a struct of up
# to 16 bytes is classified per eightbyte, SSE (only float/double members: the next %xmm)
# or INTEGER (the next general register); when its registers are not all free it is MEMORY.
# long double: the x87 80-bit extended format (Fig. 3.1), class X87: an argument in memory
# (16-byte aligned on the stack), the result in %st0.  A float or double past %xmm7 goes on
# the stack (SSE class, no register left).
C_VALUES = CValues(char_signed=True,
                   fp_args=("xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7"),
                   fp_retval="xmm0", struct_in_slots=16, struct_large="stack",
                   retval_hi="rdx", struct_ret_in_regs=16,
                   # §3.2.3: long double is class X87, returned in %st0
                   long_double_x87=True, struct_fp="eightbytes", long_double="x87",
                   long_double_args="memory", long_double_ret="x87", long_double_align=16,
                   fp_overflow_stack=True, long_double_size=16)


# Intel SDM vol. 3 §6.3.1 vector numbers; arch/x86/kernel/traps.c signals: #DE divide
# error → SIGFPE, #MF/#XM floating point → SIGFPE, #GP and #SS → SIGSEGV, #UD → SIGILL
EXCEPTION_SIGNALS = {0: "SIGFPE", 6: "SIGILL", 12: "SIGSEGV", 13: "SIGSEGV", 16: "SIGFPE",
                     19: "SIGFPE"}

# The FPU state Linux gives a new program (execve resets it; fork and clone copy the
# caller's): arch/x86/kernel/fpu/core.c fpstate_init_fx sets the x87 control word to 0x37f
# (every exception masked, 64-bit precision, round to nearest) and MXCSR to MXCSR_DEFAULT
# 0x1f80 (arch/x86/include/asm/fpu/types.h: every SSE exception masked, round to nearest).
# Unicorn's reset leaves both 0 (precision control 00: single precision).  The same on
# i386 (fpstate_init_fx there too; fsave-only CPUs are not modelled).
X87_CONTROL_WORD = 0x37F
MXCSR_DEFAULT = 0x1F80
FPU_RESET = (
    RegFixup("fpcw", X87_CONTROL_WORD, "Linux's initial x87 control word", combine="set"),
    RegFixup("mxcsr", MXCSR_DEFAULT, "Linux's initial MXCSR", combine="set"),
)

ISA = Isa(
    # x86-64 psABI §A.2 / BFD elf_x86_64_lazy_plt: PLT0 and stubs of 16 bytes; IBT stubs in .plt.sec
    plt=Plt(header=16, entry=16, sec_entry=16, lazy_offset=6),
    c_values=C_VALUES,
    exception_signals=EXCEPTION_SIGNALS,
    compat_syscalls=COMPAT_SYSCALLS,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=FPU_RESET,  # long mode and SSE are on at Unicorn's reset; the FPU state is not
    hwcap=0,  # AT_HWCAP is CPUID.1:EDX on x86; glibc reads CPUID itself, 0 is safe
    hwcap2=0,
    platform="x86_64",
    uname_machine="x86_64",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.KERNEL: Capability(True),  # isa/kernel_x86_64.py, board pc-x86_64
        Cap.NATIVE_TARGET: Capability(True),  # runs on the x86_64 host: run --target native
        # --target native --backend bts: branch records through perf_event_open
        Cap.NATIVE_BTS: Capability(False, native_bts_reason()),
        Cap.NATIVE_SIGNAL_HANDLERS: NATIVE_SIGNAL_HANDLERS,
        # namespaces, Landlock, no capabilities (isa/native_sandbox.py, target/namespaces.py)
        Cap.NATIVE_SANDBOX: Capability(not native_sandbox_reason(), native_sandbox_reason()),
        # the host's ld.so and libc (target/native_modules.py)
        Cap.NATIVE_DYNAMIC: Capability(True),
        Cap.NATIVE_DYNAMIC_STRICT: Capability(True),
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
        # (x86 instructions are 1 to 15 bytes: native/x86len.c gives the length of the
        # common ones that are never transfers; capstone decodes the rest)
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
    },
    private_syscalls={"arch_prctl": arch_prctl},
    classifiers=CLASSIFIERS,
    simulate=x86_simulator(8, "rsp", "eflags"),
    lower=x86_lowering("eflags", 8),
)
