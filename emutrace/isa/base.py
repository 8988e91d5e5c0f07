"""The shape of an ISA description.

Every module in ``emutrace.isa`` builds one frozen :class:`Isa` from these parts, in the same
order: identity → engines → registers → syscalls → traps → classifiers → quirks (CPU set-up) →
capabilities.  Nothing here imports an emulator: engine settings are the *names* of Unicorn,
Capstone and Keystone constants, resolved by the target layer.  Code that an ISA really needs
(a TLS system call, a reset fix-up that writes a descriptor table) is a small function written
against :class:`CpuPort`, so it is testable without Unicorn too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

RegValue = int | tuple[int, ...]
Endian = Literal["little", "big"]


class CpuPort(Protocol):
    """What ISA code may do to a CPU: registers by their short name, memory."""

    def reg_read(self, name: str) -> int: ...

    def reg_write(self, name: str, value: RegValue) -> None: ...

    def mem_read(self, addr: int, size: int) -> bytes: ...

    def mem_write(self, addr: int, data: bytes) -> None: ...

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None: ...


# ---------------------------------------------------------------- identity


@dataclass(frozen=True)
class Identity:
    name: str  # our canonical name, e.g. "s390x"
    aliases: tuple[str, ...]  # other names users type ("arm64", "ppc64el", ...)
    elf_machine: str  # pyelftools' e_machine name, e.g. "EM_S390"
    elf_class: int  # 32 or 64
    endian: Endian
    qemu: str  # qemu-user name: qemu-<qemu>-static
    debian_arch: str  # Debian architecture, for busybox-static and cross packages
    triple: str  # GNU triple of the Debian cross compiler
    # e_flags bits that must be set (mask, value) to match, e.g. ELFv2 on ppc64le
    elf_flags: tuple[int, int] = (0, 0)

    @property
    def word_size(self) -> int:
        return self.elf_class // 8


# ---------------------------------------------------------------- engines


@dataclass(frozen=True)
class Engines:
    uc_arch: str  # unicorn_const name, e.g. "UC_ARCH_S390X"
    uc_mode: tuple[str, ...]  # OR-ed unicorn_const names
    uc_reg_module: str  # unicorn.<x>_const module holding the register constants
    uc_reg_prefix: str  # prefix of register constants, e.g. "UC_S390X_REG_"
    cs_arch: str  # capstone name, e.g. "CS_ARCH_SYSZ"
    cs_mode: tuple[str, ...]
    uc_cpu_model: str | None = None  # unicorn cpu-model constant name, None = default
    uc_tlb_virtual: bool = False  # use UC_TLB_VIRTUAL (bypass the guest MMU)
    ks_arch: str | None = None  # keystone, None where keystone cannot assemble it
    ks_mode: tuple[str, ...] = ()
    # our register name → suffix of the Unicorn constant, where they differ (ppc: r3 → 3)
    uc_reg_rename: Mapping[str, str] = field(default_factory=dict)
    # registers Unicorn gives only as model-specific registers (`msr_read`), by our name:
    # i386's segment bases (fs_base, gs_base; UC_X86_REG_GS_BASE reads nothing in 32-bit
    # mode, MSR_GS_BASE gives the hidden base of %gs)
    uc_msrs: Mapping[str, int] = field(default_factory=dict)

    def uc_reg_constant(self, reg: str) -> str:
        return self.uc_reg_prefix + self.uc_reg_rename.get(reg, reg).upper()


# ---------------------------------------------------------------- registers


@dataclass(frozen=True)
class Registers:
    pc: str
    sp: str
    retval: str
    args: tuple[str, ...]  # integer argument registers of the C ABI, in order
    link: str | None = None  # return-address register; None where calls push it (x86)
    # a return goes to link + this (SPARC: CALL leaves its own address in o7, `ret` jumps
    # to o7 + 8, past the delay slot)
    link_offset: int = 0
    tls: str | None = None  # thread-pointer register the loader or a syscall sets
    # argument slots on the stack after the registers: offset of the first from sp at the
    # call, and the slot size (x86_64: 8 bytes above the return address, ...)
    stack_args_offset: int = 0
    general: tuple[str, ...] = ()  # registers the conformance suite round-trips
    # DWARF register numbers, as names (the psABI's DWARF register mapping), where a
    # compiler may pass an argument in a register the C ABI does not use for it (DWARF then
    # says so: discover.prototypes.Prototype.entry_registers); () elsewhere
    dwarf: tuple[str, ...] = ()


@dataclass(frozen=True)
class CValues:
    """How C values other than integer words travel in a call (the integer argument
    registers and stack slots are `Registers`): `char`'s signedness, floating-point
    argument and result registers, 64-bit scalars on 32-bit ISAs, structs by value.
    Read by `backends/args.py`; every field cites its ABI in the ISA module."""

    char_signed: bool  # plain `char` is signed
    fp_args: tuple[str, ...] = ()  # FP argument registers in order (a double each)
    fp_retval: str | None = None  # FP result register
    # where a `float` sits in an FP register: "low32" (the low 32 bits), "high32" (s390x:
    # the leftmost 32 bits of the 64-bit register), "double" (Power: FPRs hold floats in
    # double format)
    fp_single: str = "low32"
    # ARM VFP: floats take single registers s0-s15 (back-filled), doubles d0-d7
    fp_single_args: tuple[str, ...] = ()
    fp_shadow: bool = False  # an FP argument also uses the integer slots of its size
    fp_leading_only: bool = False  # FP registers only for FP args before any integer one
    # an FP argument that finds no FP register free goes on the stack (not in the integer
    # registers left: those take FP arguments on RISC-V, MIPS and Power)
    fp_overflow_stack: bool = False
    fp_pair: tuple[str, ...] = ()  # MIPS FR=0: the register with a double's high word
    fp_retval_high: str | None = None  # MIPS FR=0: the result's high word register
    fp_x87: bool = False  # the FP result is x87 st(0) (80-bit extended)
    long_double_x87: bool = False  # a `long double` result (only) is x87 st(0)
    # the second integer result register (in memory order: a 64-bit scalar's 2nd word on
    # 32-bit ISAs, a two-word struct's second word)
    retval_hi: str | None = None
    # structs up to this many bytes are returned in retval(/retval_hi); larger ones in
    # memory the caller provides, its address a hidden first argument (in the first
    # integer slot, or in `sret_reg`)
    struct_ret_in_regs: int = 0
    sret_reg: str | None = None
    pair_aligned: bool = False  # a 64-bit scalar starts at an even slot (register pair)
    # structs by value: up to struct_in_slots bytes travel in consecutive integer slots
    # (their bytes as the words lie in memory); larger ones: struct_large ("ref": a
    # pointer to a copy in one slot; "stack": copied onto the stack, not shown)
    struct_in_slots: int = 0
    struct_large: str = "ref"
    struct_scalar: bool = False  # s390x: 1/2/4/8-byte structs as an integer, others "ref"
    # a variadic function takes and returns floats in integer registers (ARM: the base
    # procedure call standard, not the VFP variant)
    variadic_core_only: bool = False
    # structs with floating-point members: the ABI's rule (discover/callabi.py STRUCT_RULES):
    # "core" (integer slots or memory like any struct), "eightbytes" (x86-64 SysV
    # classification), "hfa" (homogeneous FP aggregates of up to hfa_limit members in
    # consecutive FP registers), "flatten" (RISC-V: one or two FP fields in FP registers),
    # "single" (s390x: a struct of one float or double travels as it); "" not modelled
    struct_fp: str = ""
    hfa_limit: int = 0
    hfa_to_stack: bool = False  # an HFA that finds too few FP registers: on the stack, and
    # no later FP argument takes a register (AAPCS64 C.3, AAPCS-VFP C.2.cp)
    # `long double`: its format ("double", "x87" 80-bit extended, "binary128" IEEE quad,
    # "ibm128" IBM double-double: a pair of doubles, the larger first), where an argument
    # travels ("fp": one FP register, `fp_quad` its 128-bit name; "pair": two FP registers;
    # "slots": integer slots; "memory": stack words whatever registers are free; "ref": a
    # pointer to a copy) and where the result is ("fp", "pair", "x87": st(0), "core": the
    # integer result registers, "memory": at a hidden address passed first)
    long_double: str = "double"
    long_double_size: int = 8  # sizeof(long double)
    long_double_args: str = "fp"
    long_double_ret: str = "fp"
    long_double_align: int = 0  # stack alignment of a long double argument (bytes)
    fp_quad: tuple[str, ...] = ()


# ---------------------------------------------------------------- syscalls


class SyscallErrors(enum.Enum):
    NEGATIVE = "ret = -errno"  # most ISAs
    CR0_SO = "ret = errno, CR0.SO set"  # powerpc (Power ABI, sc)
    A3_FLAG = "ret = errno, a3 = 1"  # mips o32
    XCC_CARRY = "ret = errno, the carry of %xcc set"  # sparc64 (arch/sparc/kernel/syscalls.S)


@dataclass(frozen=True)
class SyscallConvention:
    instruction: bytes  # the trap instruction as stored in memory (conformance tests run it)
    # how the trap surfaces in Unicorn: ("intr", intno) via UC_HOOK_INTR, or
    # ("insn", "UC_X86_INS_SYSCALL") via UC_HOOK_INSN
    hook: str
    intno: int | None
    insn: str | None
    number: str  # register holding the syscall number
    args: tuple[str, ...]  # registers with the first len(args) arguments
    ret: str
    errors: SyscallErrors = SyscallErrors.NEGATIVE
    stack_args: int = 0  # further arguments on the user stack (mips o32: 5–8 at sp+16)
    stack_args_offset: int = 0
    pc_advance: int = 0  # bytes the hook must add to PC itself (s390x leaves PC on the svc)
    pc_in_hook: int | None = None  # PC seen in the hook minus the trap's address (None: len)
    imm_number: tuple[int, int] | None = None  # (offset from PC, size) of an immediate nr
    error_flag_reg: str | None = None  # mips: a3
    # 32-bit ISAs pass a 64-bit argument in two registers; EABI, o32 and the PPC32 ABI start
    # the pair on an even register (skipping one), i386 does not.  Word order follows endian.
    pair_aligned: bool = False
    # bytes Unicorn adds to PC after the hook returns (x86_64: UC_HOOK_INSN runs before the
    # `syscall` and RIP moves past it afterwards): a PC the hook sets must be this much less
    pc_after_hook: int = 0
    # the order of clone(2)'s arguments (kernel/fork.c, arch/Kconfig CLONE_BACKWARDS*)
    clone_args: tuple[str, ...] = ("flags", "stack", "ptid", "ctid", "tls")


# clone(2) argument orders other than the generic one (kernel/fork.c SYSCALL_DEFINE5(clone)):
# CONFIG_CLONE_BACKWARDS (arm, i386, mips, powerpc, riscv) puts tls before the child's tid
# pointer; CONFIG_CLONE_BACKWARDS2 (s390) swaps the stack and the flags
CLONE_BACKWARDS = ("flags", "stack", "ptid", "tls", "ctid")
CLONE_BACKWARDS2 = ("stack", "flags", "ptid", "ctid", "tls")


# ---------------------------------------------------------------- traps


@dataclass(frozen=True)
class Breakpoint:
    """A software breakpoint and how Unicorn 2.1.4 reports it (measured)."""

    insn: str  # mnemonic as in the ISA manual
    encoding: bytes  # bytes as stored in memory, in the ISA's byte order
    hook: str  # "intr" or "insn_invalid"
    intno: int | None
    pc_after: int  # PC seen in the hook minus the breakpoint address
    works: bool  # False: Unicorn's trap path is broken, deliver another way
    reason: str = ""
    alt_mode: bool = False  # encoded for the alternate instruction set (ARM Thumb)
    # the block hook's count of the block that traps includes the breakpoint; False where
    # Unicorn leaves it out (the backend counts the site instruction at the trap)
    counted: bool = True


@dataclass(frozen=True)
class DebugHardware:
    """The instruction-address breakpoint hardware a native debugger of this ISA can program:
    what the `hwbp` backend models, with its source."""

    slots: int  # instruction breakpoints a debugger can arm at once
    kind: str  # "address": a slot matches one instruction; "range": an address range
    registers: str  # the hardware's name for them
    source: str


HARDWARE_FACTS = "reference/unicorn-and-hardware-facts.md"  # in ../shared/


@dataclass(frozen=True)
class NativeTracing:
    """What tracing this ISA's programs natively would use, for the cost model (cost/):
    which published breakpoint-hit figure prices a trap, and per backend the native facility
    where it is missing or differs from x86's.  Texts may name the ISA as `{isa}`."""

    breakpoint_figure: str  # a key of cost/anchors.BARE_BREAKPOINT_HIT
    borrowed: str = ""  # non-empty: that figure was measured on another ISA, and why it is used
    notes: Mapping[str, str] = field(default_factory=dict)  # backend → its native facility here


def no_block_step() -> str:
    return f"{{isa}} has no block-step hardware ({HARDWARE_FACTS} §3.1, §4): hypothetical"


def no_single_step() -> str:
    return (f"Linux has no PTRACE_SINGLESTEP on {{isa}} ({HARDWARE_FACTS} §4): a debugger steps "
            "with software breakpoints, priced as hardware steps here")


def branch_records(facility: str) -> str:
    return (f"{{isa}} has no BTS; its branch facility: {facility} ({HARDWARE_FACTS} §3.2); x86 "
            "BTS price applied")


def x86_figure_borrowed() -> str:
    return "x86_64 figure applied; no published figure for {isa}"


# ---------------------------------------------------------------- classifiers


class Insn(NamedTuple):
    """One decoded instruction as function discovery hands it to an ISA's classifier (a
    named tuple: a cold run makes one per instruction it sweeps, ~10,000 for static glibc's
    start-up, and a frozen dataclass costs three times as much to build)."""

    addr: int
    size: int
    mnemonic: str  # capstone's, lower case (may carry a prefix: "notrack jmp")
    op_str: str
    raw: bytes
    thumb: bool = False  # decoded in the alternative mode (ARM Thumb)


class FlowKind(enum.Enum):
    NONE = "falls through"
    CALL = "call: enters a callee, comes back after it (and after its delay slot)"
    RETURN = "return to the caller"
    JUMP = "unconditional jump, direct or indirect"
    BRANCH = "conditional direct jump"
    EXECUTE = "executes the instruction at target (s390x EX/EXRL) and falls through"
    STOP = "never falls through (trap, undefined)"


@dataclass(frozen=True)
class Flow:
    kind: FlowKind
    target: int | None = None  # direct target (ARM: bit 0 set when the target is Thumb)
    indirect: str | None = None  # how to compute the target: a register or a memory operand
    conditional: bool = False  # a conditional call/return/jump also falls through
    # an indirect jump through an alternate link register: a return when it goes to the
    # return address of the running frame's call (backends.tails.TailRule.returns_to)
    maybe_return: bool = False
    # a call through an alternate link register (RISC-V `jal t0`): it may come before the
    # caller allocates its frame (trace.events.Call.before_frame)
    alt_link: bool = False


NO_FLOW = Flow(FlowKind.NONE)


class SweepKind(enum.IntEnum):
    """What a sweep filter says of an instruction (SweepFilter.mnemonic_kind)."""

    PLAIN = 0  # the classifier says NONE or STOP: never a site
    TARGET = 1  # JUMP or BRANCH to its last operand, a number (`#` allowed), when it is one
    CLASSIFY = 2  # the classifier must read it
    OPERANDS = 3  # CLASSIFY when the operands contain one of operand_marks, else PLAIN
    STOP = 4  # the classifier may say STOP: no site, but recursive descent ends a block there
    # a TARGET the classifier reads as a conditional BRANCH to it: recursive descent's walk
    # goes on past it and hands the target back (not on delay-slot ISAs)
    BRANCH = 5
    # a TARGET the classifier reads as an unconditional JUMP to it: recursive descent's walk
    # follows it when the target is the function's own code (not on delay-slot ISAs; by
    # encoding: `jump_encodings`)
    JUMP = 6
    # a direct CALL to its last operand (a number), which falls through: recursive descent's
    # walk goes on past it and hands it back (by encoding: `call_encodings`); any other
    # operand: CLASSIFY
    CALL = 7


@dataclass(frozen=True)
class SweepFilter:
    """Which instructions function discovery's linear sweep must classify, as data the sweep
    reads in C (emutrace/native/sweep.c `scan`; discover/decode.py `Decoder.scan` is its
    Python reference).  An instruction the filter passes over makes no site: it is one the
    classifier maps to NONE or STOP, or a JUMP/BRANCH whose direct target lies inside the
    function (discover/sites.py `site_for`: no site).  A filter must only ever say more than
    needed: tests/test_sweep_filter.py holds it to the classifier on every instruction of
    the ISA's test programs.

    Either by mnemonic (`mnemonic_kind`, asked once per distinct mnemonic, with
    `operand_marks`), or by encoding (`encodings`: (size, mask, value) of every
    instruction word the classifier may read as a transfer; the word in the ISA's byte
    order; anything else is PLAIN).  TARGET's last operand: the text after the last comma,
    a decimal or 0x number with an optional `#`; where it is none, CLASSIFY.

    Recursive descent walks straight-line code with the same filter (sweep.c `walk`), and
    must also see every STOP: the mnemonics `mnemonic_kind` calls STOP, and the words of
    `stop_encodings` (as `encodings`; for the STOPs an encoding says, or a mnemonic filter's
    ISA whose classifier reads the bytes)."""

    mnemonic_kind: Callable[[str], SweepKind] | None = None
    operand_marks: tuple[str, ...] = ()
    encodings: tuple[tuple[int, int, int], ...] = ()
    stop_encodings: tuple[tuple[int, int, int], ...] = ()
    # among `encodings`: the words of direct JUMP/BRANCHes (never calls), TARGETs
    target_encodings: tuple[tuple[int, int, int], ...] = ()
    # among those: the conditional BRANCHes (as SweepKind.BRANCH)
    branch_encodings: tuple[tuple[int, int, int], ...] = ()
    # and the unconditional JUMPs (as SweepKind.JUMP; not on delay-slot ISAs)
    jump_encodings: tuple[tuple[int, int, int], ...] = ()
    # among `encodings`: the direct calls (as SweepKind.CALL; not on delay-slot ISAs)
    call_encodings: tuple[tuple[int, int, int], ...] = ()
    # a TARGET's number is its offset from the instruction (capstone's RISC-V text)
    relative: bool = False
    # every instruction is this many bytes (and the alignment past undecodable ones), so an
    # encoding filter's sweep decodes only the words it keeps (and a function's last one)
    fixed_size: int = 0
    # a length decoder in C for a mnemonic filter's ISA ("x86_64", "i386": sweep.c via
    # native/x86len.c): the common instructions it knows never to be transfers are passed
    # over without capstone; capstone decodes the others (and tells their mnemonics)
    lengths: str = ""


VIRTUAL_LOOKBEHIND = 16  # bytes before a site `Classifiers.virtual_site` is shown


@dataclass(frozen=True)
class Classifiers:
    """How function discovery reads control flow on this ISA."""

    classify: Callable[[Insn], Flow]
    delay_slot: bool = False  # every branch, call and return has one delay slot (MIPS)
    # capstone mode names for code at odd addresses (ARM: Thumb), () where there is none
    alt_mode: tuple[str, ...] = ()
    # ELFv2 (ppc64): st_other bits 5–7 encode the local entry offset of a function
    local_entry: bool = False
    insn_align: int = 4  # bytes to skip past an undecodable spot (x86: 1, RISC-V C: 2)
    alt_insn_align: int = 2
    # address and size of PC-relative data the instruction loads (ARM literal pools), so
    # that recursive descent never takes it for code; None where the ISA has none
    literal: Callable[[Insn], tuple[int, int] | None] | None = None
    # how many following instructions an instruction makes conditional (Thumb IT), so that
    # a `bxeq lr` decoded alone is not taken for an unconditional return
    predicates: Callable[[Insn], int] | None = None
    # what a call/return/jump instruction (and a delay-slot instruction) adds to the stack
    # pointer: 0 when it does not write it, None when that is not known from the
    # instruction alone.  The native engine's C site table (hook delivery, hotpath.c
    # hs_on_block) sees a site's sp only after it and its delay slot ran: a site whose
    # effect is None keeps its Python site hook.  None here: not described
    sp_effect: Callable[[Insn], int | None] | None = None
    # Unicorn runs a code hook on this conditional site (decoded alone: the condition may
    # come from an IT block) only when its condition holds (ARM: a Thumb instruction inside
    # an IT block; seen in tests/test_native_engine.py's stripped arm cell): a site hook
    # there is no hit when the transfer falls through.  None: never
    hooked_when_taken: Callable[[Insn], bool] | None = None
    # the native engine delivers a patch site through its C site table instead of writing
    # the breakpoint (backends/hooked_sites.py `virtual_breakpoints`): measured cheaper
    # than Unicorn's trap exit here (bench/results/native-virtual.md)
    virtual_breakpoints: bool = False
    # where the breakpoint's simulation depends on state the site cannot show (ARM's
    # ITSTATE): whether a lowered site's trap is simulated whatever that state, from the
    # instruction and the code bytes before it (up to VIRTUAL_LOOKBEHIND, fewer at the start
    # of the code); None: every lowered site's is
    virtual_site: Callable[[Insn, bytes], bool] | None = None
    # which instructions a sweep must classify (None: every one)
    sweep: SweepFilter | None = None

    @property
    def delay_bytes(self) -> int:
        """How far past a transfer its delay slot reaches: one instruction (MIPS: 4 bytes,
        the ISA's fixed instruction size) where there is one, else 0."""
        return self.insn_align if self.delay_slot else 0


def transfer_sp_effect(classify: Callable[[Insn], Flow]) -> Callable[[Insn], int | None]:
    """`Classifiers.sp_effect` of an ISA whose calls, returns and jumps write no stack
    pointer (the return address goes to a link register: AArch64 BL/BLR/RET, Power
    b/bc/bclr/bcctr): 0 for every transfer, None for anything else."""
    def effect(insn: Insn) -> int | None:
        kind = classify(insn).kind
        return 0 if kind in (FlowKind.CALL, FlowKind.RETURN, FlowKind.JUMP,
                             FlowKind.BRANCH) else None
    return effect


Simulator = Callable[["CpuPort", Insn, Flow], "int | None"]


# How the native hot path tests a condition (hotpath.c cond_holds): on register `reg`
# (the flags, or the register a compare-and-branch tests), with bit numbers a, b, c
CONDITION_TESTS = (
    "always",  # no condition
    "set", "clear",  # bit a is 1 / 0
    "any", "none",  # bit a or bit b is 1 / both are 0
    "eq", "ne",  # bit a equals / differs from bit b
    "set_or_ne", "clear_and_eq",  # a is 1 or b != c / a is 0 and b == c
    "set_and_clear", "clear_or_set",  # a is 1 and b is 0 / a is 0 or b is 1
    "zero", "nonzero",  # the low a bits of reg are all 0 / not all 0
    "both",  # bits a and b are 1
    "cc_mask",  # bit (8 >> cc) of mask b, cc = the 2 bits of reg at a (s390x BRC/BCR)
    "mask_zero",  # the bits of reg in `mask` are all 0 (guards only: ARM ITSTATE)
)


@dataclass(frozen=True)
class Condition:
    """When a conditional jump is taken, as data (ISA modules derive it from the same tables
    their simulators use)."""

    test: str  # one of CONDITION_TESTS
    reg: str | None = None
    a: int = 0
    b: int = 0
    c: int = 0
    mask: int = 0  # "mask_zero": the bits tested


@dataclass(frozen=True)
class MemOperand:
    """A memory operand's address: base + index * scale + disp, registers by name (None: not
    used; a PC-relative operand is given as its absolute address in `disp`), plus the base
    of `segment` (x86 fs, gs: the register `<segment>_base`)."""

    base: str | None = None
    index: str | None = None
    scale: int = 1
    disp: int = 0
    segment: str | None = None


@dataclass(frozen=True)
class NativeOp:
    """A displaced call or return in the terms the native hot path executes (emutrace/native):
    the same effect as the ISA's simulator, as data.  CALL: jump to `target` (direct) or to
    the value of register `reg` or the word at `load`, leaving the next instruction's
    address in register `link`, or pushed as one stack word when `link` is None.  RETURN:
    jump to the value of register `reg`, or pop the target from the stack when `reg` is
    None, releasing `release` more bytes.  JUMP: to `target`, the value of `reg` or the
    word at `load` when `cond` holds, else to the next instruction.  Where bit 0 of a code
    address selects the instruction set (`Isa.thumb_bit`), `target` carries it, a target
    read from a register or the stack keeps it (interworking), and the next instruction's
    address gets it from the site's own mode."""

    kind: FlowKind  # CALL, RETURN or JUMP
    target: int | None = None
    reg: str | None = None
    link: str | None = None
    release: int = 0
    cond: Condition = Condition("always")
    clear_low: int = 0  # a register target's low bits the branch ignores (Power: 3)
    # what must hold for this form to apply at all (else the simulator's other case: Python)
    guard: Condition = Condition("always")
    # what a target read from a register or the stack must satisfy (its `reg` unused: the
    # test reads the target), else Python (ARM BXWritePC: bits 1:0 = 10 is UNPREDICTABLE)
    target_test: Condition = Condition("always")
    # RETURN popping its target: registers loaded first from the words below it, lowest
    # address first (ARM POP {..., pc}); sp moves past all of them
    pops: tuple[str, ...] = ()
    # CALL/JUMP: the target is the word read at this memory operand (x86 `call [ebx + 0x1c]`,
    # an i386 PLT stub's `jmp [ebx + 0x44]`), not `target` or `reg`.  C's trap path does
    # not read memory (fastpath.FastSites leaves such a site to Python); C's site table
    # needs no simulation (it sees the target's block), so the site is a virtual
    # breakpoint there (hooked_sites.py `virtual`)
    load: MemOperand | None = None
    # CALL/JUMP: the target is this address itself, computed from registers (s390x
    # `b 0(%r2,%r1)`, BC's D2(X2,B2): a jump table's branch); C's trap path leaves it to
    # Python as it does `load`
    effective: MemOperand | None = None


# the native form of a call/return instruction; None: the hot path leaves it to Python
Lowering = Callable[[Insn, Flow], "NativeOp | None"]


# ---------------------------------------------------------------- quirks


@dataclass(frozen=True)
class RegFixup:
    """A register value the CPU needs at reset before Linux user code can run."""

    reg: str
    value: int
    reason: str
    combine: str = "or"  # "or" into the reset value, or "set"


@dataclass(frozen=True)
class Plt:
    """Where the static linker puts a module's PLT stubs (each psABI's PLT section; BFD's
    elf*-<arch>.c templates): stub i jumps to the function of the i-th relocation of
    `.rela.plt` / `.rel.plt`.  Named `func@plt` as objdump and gdb name them."""

    header: int  # bytes of .plt before the first stub (PLT0: the lazy-binding entry)
    entry: int  # bytes per stub
    sec_entry: int = 0  # x86 IBT (-z ibtplt, CET): stubs in .plt.sec, no header; 0: none
    # where the GOT slot of a lazily bound stub points before binding, from the stub's
    # start (x86: its `push`, 6; s390x: its `basr`, 14): the stub of a relocation is found
    # through its slot, whatever the stubs' order; None: stub i is the i-th relocation's
    lazy_offset: int | None = None
    # data inside each stub, (offset, size) from its start: never decoded as code, never
    # given a breakpoint (s390x: the `.long` relocation offset its lazy path loads)
    data: tuple[int, int] = (0, 0)
    # Layouts without a .plt of stubs (discover/plt_stubs.py; header and entry 0 where
    # there is no fixed stub array):
    # ppc secure PLT: `entry`-byte stubs, in relocation order, end where the lazy branch
    # table begins (`__glink`, lazy_table bytes per entry), which is where the first
    # relocation's GOT slot points before binding; each stub's first instruction word
    # matches stub_insn (mask, value) (-fPIC stubs do not: they are left to stub_symbol)
    lazy_table: int = 0
    stub_insn: tuple[int, int] = (0, 0)
    # mips: the lazy stubs fill this section, each at the value of the undefined .dynsym
    # function it calls (the function's canonical address)
    stub_section: str = ""
    # linker call stubs named by local .symtab symbols: a regex whose group `func` is the
    # function called (ppc64 `00000019.plt_call.printf@@GLIBC_2.17`)
    stub_symbol: str = ""
    # call stubs found by their code (a stripped module has no stub symbols): every stub
    # starts with stub_prefix; stub_code(bytes from there) gives (the displacement of the
    # PLT slot it loads from the TOC base, the stub's size) or None; the TOC base is
    # toc_base's (section, offset); a stub is named only when that slot is a PLT slot
    stub_prefix: bytes = b""
    stub_code: Callable[[bytes], tuple[int, int] | None] | None = None
    toc_base: tuple[str, int] = ("", 0)


@dataclass(frozen=True)
class Capability:
    works: bool
    reason: str = ""


# Signals reach guest handlers on every ISA (sys_sigdeliver.py): zsh and
# busybox ash wait for their children in a SIGCHLD handler with sigsuspend; and every backend
# traces a handler's run as the program's own record shows it (tests/test_signal_traces.py)
SIGNAL_HANDLERS = Capability(True)
# `--target native` (x86 only): the host kernel delivers signals; the run loop steps into a
# handler and reports its frame (target/ptrace_signals.py); tests/test_native_agreement.py
NATIVE_SIGNAL_HANDLERS = Capability(True)
# the Linux-kernel column of every ISA but aarch64 (the only one tried)
LINUX_NOT_TRIED = Capability(
    False, "not tried: no Debian Linux kernel of this ISA is booted by the tests (only "
    "arm64's linux-image-cloud-arm64, which runs an initramfs command to power-off on "
    "virt-arm64)")


NO_KERNEL_BOARD = Capability(False, "no board for kernel images (isa/kernel_*.py)")


def gdb_only(not_emulated: Capability) -> dict[Cap, Capability]:
    """The capability table of an ISA only the gdb target runs: every row emulation would
    fill says `not_emulated` (its reason), no board, the gdb target yes."""
    rows = (Cap.RUN_STATIC, Cap.RUN_DYNAMIC, Cap.SW_BREAKPOINT, Cap.BUSYBOX,
            Cap.TRACE_DYNAMIC, Cap.PLT_NAMES)
    return {**{row: not_emulated for row in rows}, Cap.KERNEL: NO_KERNEL_BOARD,
            Cap.LINUX_KERNEL: LINUX_NOT_TRIED, Cap.GDB_TARGET: Capability(True)}


class Cap(enum.Enum):
    """The keys of an ISA's capability table (`Isa.capabilities`, `emutrace info`).  Typed:
    a misspelt member is an AttributeError where it is written and a mypy error; a plain
    string passed to `Isa.capability` is a KeyError (a string key once named a capability
    no ISA declared, and its strict xfail could never fire)."""

    RUN_STATIC = "run_static"  # static ELF (ET_EXEC and static-PIE) under Unicorn
    RUN_DYNAMIC = "run_dynamic"  # dynamically linked ELF with a rootfs
    SW_BREAKPOINT = "sw_breakpoint"  # the declared breakpoint instruction traps as declared
    BUSYBOX = "busybox"  # Debian ships busybox-static for this architecture
    KERNEL = "kernel"  # kernel images on a board (`run --machine`): isa/kernel_<isa>.py exists
    # Debian's Linux kernel on the ISA's board reaches "VFS: Unable to mount root fs" (no
    # root given): how far a real kernel gets (tests/test_kernel.py)
    LINUX_KERNEL = "linux_kernel"
    # a dynamic program traced across its modules (program, ld.so, libraries)
    TRACE_DYNAMIC = "trace_dynamic"
    PLT_NAMES = "plt_names"  # PLT stubs named `func@plt` from the ISA's PLT layout
    # --- ISA-specific keys (`emutrace info` lists only their gaps)
    SIGNAL_HANDLERS = "signal_handlers"  # guest signal handlers run (sys_sigdeliver.py)
    THREAD_PREEMPTION = "thread_preemption"  # the instruction count can end a stretch
    CPU_TIMERS = "cpu_timers"  # ITIMER_PROF/ITIMER_VIRTUAL expire (in guest instructions)
    HIDDEN_BREAKPOINTS = "hidden_breakpoints"  # guest loads see the original bytes
    NATIVE_TARGET = "native_target"  # `run --target native` on this host
    GDB_TARGET = "gdb_target"  # `run --target gdb`: in qemu-user's gdb stub (gdb_remote.py)
    NATIVE_BTS = "native_bts"  # native bts: a branch-trace PMU here (isa/native_pmu.py)
    NATIVE_DYNAMIC = "native_dynamic"  # dynamic programs natively (the host's ld.so, libc)
    NATIVE_DYNAMIC_STRICT = "native_dynamic_strict"  # ... under int3 --cleanup strict
    NATIVE_SIGNAL_HANDLERS = "native_signal_handlers"  # handlers traced natively
    NATIVE_SANDBOX = "native_sandbox"  # the kernel sandbox of a confined native run
    OPTIMISED_CODE = "optimised_code"  # -O2/-O3/-Os programs traced like -O0
    STRIPPED_TAIL_CALLS = "stripped_tail_calls"  # tail calls found without symbols
    COLD_PARTITIONS = "cold_partitions"  # GCC's .text.unlikely parts of a function
    ENTRY_SEES_EVERY_CALL = "entry_sees_every_call"  # the entry backend's frame rule
    ENTRY_OUT_OF_LINE_SAVES = "entry_out_of_line_saves"  # -Os register save helpers
    EXRL_RELATIVE_LONG = "exrl_relative_long"  # s390x EXRL of a relative-long instruction
    # the ISA's own ucontext system call (ppc32's swapcontext: its glibc's getcontext,
    # setcontext and swapcontext make it), declared by the ISAs whose glibc makes one
    UCONTEXT_SYSCALL = "ucontext_syscall"
    COREUTILS_DIGESTS = "coreutils_digests"  # Debian's md5sum/sha*sum run
    STEP_CLOCK = "step_clock"  # step's per-instruction clock == the block counts
    # a first run's sweep decodes only the instructions its SweepFilter keeps (fixed-size
    # words filtered by encoding); elsewhere capstone decodes every instruction swept
    SWEEP_DECODES_KEPT_ONLY = "sweep_decodes_kept_only"
    DESCENT_WALK_NATIVE = "descent_walk_native"  # descent's straight runs walked in C


# The capabilities every ISA declares, in the order `emutrace info` prints them.
CAPABILITIES = (Cap.RUN_STATIC, Cap.RUN_DYNAMIC, Cap.SW_BREAKPOINT, Cap.BUSYBOX, Cap.KERNEL,
                Cap.LINUX_KERNEL, Cap.TRACE_DYNAMIC, Cap.PLT_NAMES)


class GuestError(Exception):
    """A system call fails with this errno name; the syscall layer maps it per ISA."""

    def __init__(self, errno_name: str) -> None:
        super().__init__(errno_name)
        self.errno_name = errno_name


@dataclass(frozen=True)
class CompatSyscalls:
    """A second system-call entry a 64-bit ISA keeps for its 32-bit sibling: the trap
    (Unicorn's intno), then the sibling's numbers, argument registers, constants and
    structs (its ISA description and generated ABI table, by name).  The result goes to
    `ret`, sign-extended to the full register, as the kernel stores a long there."""

    intno: int
    isa: str  # the 32-bit sibling whose syscall ABI applies
    ret: str  # the full-width result register


SyscallHandler = Callable[[CpuPort, tuple[int, ...]], int]
CpuSetup = Callable[[CpuPort], None]


@dataclass(frozen=True)
class GdbRegisters:
    """A register layout GDB knows without a target description (its <arch>-tdep.c
    numbering): `names[n]` is register n ('' where the number is unused); the first
    `in_g` of them fill the ``g`` packet in order, one word each or `sizes[n]` bytes; the
    others, or all but the first `word_sized` where ``g`` is not as long as that, are read
    with ``p n``."""

    names: tuple[str, ...]
    in_g: int
    word_sized: int
    sizes: tuple[int, ...] = ()  # bytes per register where they differ (0: one word)
    # the register that holds the next instruction's address and its distance from the PC
    # (SPARC npc, SPARC V9 §5.1.8): a PC written sets it too
    next_pc: tuple[str, int] | None = None


@dataclass(frozen=True)
class Isa:
    identity: Identity
    engines: Engines
    registers: Registers
    syscalls: SyscallConvention
    breakpoints: tuple[Breakpoint, ...]
    debug_hardware: DebugHardware
    native_tracing: NativeTracing
    reset: tuple[RegFixup, ...]
    # Linux auxv values chosen conservatively: only features Unicorn's default CPU has
    hwcap: int
    hwcap2: int
    platform: str
    capabilities: Mapping[Cap, Capability]
    # ISA-private system calls (TLS set-up): name in the ABI table → handler
    private_syscalls: Mapping[str, SyscallHandler] = field(default_factory=dict)
    # extra set-up that is code, not a register value (descriptor tables)
    setup: CpuSetup | None = None
    # clone(CLONE_SETTLS)'s tls argument → the new thread's thread pointer, where it is
    # more than a write of `registers.tls` (i386: a user_desc; s390x: an access-register
    # pair); None: the value goes into `registers.tls`
    clone_tls: Callable[[CpuPort, int], None] | None = None
    # bit 0 of a code address selects the instruction set (ARM Thumb)
    thumb_bit: bool = False
    # the status register and bit that say the CPU runs the alternate instruction set now
    # (ARM: CPSR.T); None on ISAs with one instruction set
    alt_mode_flag: tuple[str, int] | None = None
    # system calls whose arguments are a struct of N words pointed to by the first argument
    # (i386 old_mmap); the layer unpacks them and calls the common handler
    packed_args: Mapping[str, int] = field(default_factory=dict)
    # registers that hold the entry address at process start (ELFv2: r12 at a global entry)
    entry_regs: tuple[str, ...] = ()
    # registers that hold a called function's own address at its entry, for calls the layer
    # makes (signal handlers): MIPS o32 abicalls code derives gp from t9; ELFv2 global entry
    call_target_regs: tuple[str, ...] = ()
    # the bits of a faulting address a SIGSEGV's si_addr keeps (s390x: the page only,
    # arch/s390/mm/fault.c __FAIL_ADDR_MASK)
    fault_address_mask: int = -1
    # siginfo_t: si_signo, si_errno, si_code (asm-generic/siginfo.h); MIPS swaps the last
    # two (arch/mips/include/uapi/asm/siginfo.h __ARCH_HAS_SWAPPED_SIGINFO): si_code at 4
    siginfo_code_offset: int = 8
    uname_machine: str = ""  # `uname -m` of a Linux kernel of this ISA
    # how function discovery classifies control flow (None: not described yet)
    classifiers: Classifiers | None = None
    # the effect of a call/return/jump whose bytes a breakpoint displaced (uprobes'
    # simulate-insn): sets registers and memory, returns the next PC; None: not simulated
    simulate: Simulator | None = None
    # the simulator's calls and returns as data for the native hot path (None: none there)
    lower: Lowering | None = None
    # how C values beyond integer words travel in calls (typed arguments)
    c_values: CValues = CValues(char_signed=True)
    # CPU exception number (Unicorn's intno) → the signal Linux delivers for it; anything
    # else that is not a breakpoint is SIGILL
    exception_signals: Mapping[int, str] = field(default_factory=dict)
    # the PLT layout of dynamically linked modules (None: no fixed layout, stubs unnamed)
    plt: Plt | None = None
    # a 32-bit system-call entry kept beside the native one (x86_64's int $0x80)
    compat_syscalls: CompatSyscalls | None = None
    # statfs64/fstatfs64 buffer sizes the kernel takes besides sizeof(struct statfs64)
    statfs64_size_aliases: tuple[int, ...] = ()
    # a program without PT_GNU_STACK gets an executable stack (fs/binfmt_elf.c: the arch's
    # elf_read_implies_exec(…, EXSTACK_DEFAULT) sets READ_IMPLIES_EXEC, and the stack's
    # VM_STACK_DEFAULT_FLAGS then carry VM_EXEC); PT_GNU_STACK's PF_X decides otherwise
    exec_stack_by_default: bool = False
    # GDB's own register numbering (number → name), for a stub that sends no target
    # description (the gdb target reads the layout from one where it is sent)
    gdb_registers: GdbRegisters | None = None

    @property
    def name(self) -> str:
        return self.identity.name

    @property
    def code_mask(self) -> int:
        """The bits of a branch target that address code: ARM interworking branches (BX,
        BLX; ARM ARM A2.3.2) carry the instruction set in bit 0, which is no address bit."""
        return ~1 if self.thumb_bit else ~0

    def code_address(self, target: int) -> int:
        """The address of the instruction a branch to `target` reaches."""
        return target & self.code_mask

    def mode_address(self, addr: int, alt_mode: bool) -> int:
        """addr as a branch (or Unicorn's start PC) takes it for code of that instruction
        set: ARM interworking sets bit 0 for Thumb code (ARM ARM A2.3.2); elsewhere addr."""
        return addr | 1 if alt_mode and self.thumb_bit else addr

    def entry_of(self, value: int) -> tuple[int, bool]:
        """A function symbol's value as (entry address, runs in the alternate instruction
        set): an ARM STT_FUNC symbol with bit 0 set is Thumb code (ELF for the Arm
        Architecture, 5.5.3 Symbol values)."""
        return self.code_address(value), self.thumb_bit and bool(value & 1)

    def breakpoint_for(self, alt_mode: bool) -> Breakpoint | None:
        """The working software breakpoint for code of that instruction set, if any."""
        return next((b for b in self.breakpoints if b.works and b.alt_mode == alt_mode), None)

    def __post_init__(self) -> None:
        wrong = [k for k in self.capabilities if not isinstance(k, Cap)]
        if wrong:
            raise KeyError(f"{self.identity.name}: capability keys {wrong}: isa.base.Cap members")

    def capability(self, key: Cap) -> Capability:
        """The table's entry for key (a key this ISA does not declare: not working)."""
        if not isinstance(key, Cap):
            raise KeyError(f"capability key {key!r}: an isa.base.Cap member")
        return self.capabilities.get(key, Capability(False, "not declared"))
