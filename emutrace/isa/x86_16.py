"""x86_16: the 8086's real mode (Intel SDM vol. 3 §20.1), as DOS programs and boot sectors
run it; no Linux ABI.

Addresses are linear (segment × 16 + offset, SDM vol. 3 §20.1.1): Unicorn's hooks and
`emu_start` speak linear addresses, and emutrace reads the PC from `ip`, a return address
from the stack at `sp`, as offsets.  The two agree where CS = SS = DS = 0, the one
segment model this description serves: the code and stack of a run live in the first
64 KiB, where a linear address is its offset (Qiling's DOS layer is asked to load a .COM at
0000:0100: target/qiling_os.py).  A far call (`call far`, `retf`) is classified as a call
or return, but its target's segment is not followed."""

from emutrace.isa.base import (
    LINUX_NOT_TRIED,
    NO_KERNEL_BOARD,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
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
)
from emutrace.isa.x86_64 import classify_x86, x86_lowering, x86_simulator, x86_sp_effect

# ---------------------------------------------------------------- identity
# No ELF is ever an 8086 program: EM_386 with a class of 16 matches no file (from_elf).
IDENTITY = Identity(
    name="x86_16",
    aliases=("8086", "i8086", "real-mode"),
    elf_machine="EM_386",
    elf_class=16,
    endian="little",
    qemu="i386",
    debian_arch="i386",
    triple="i686-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_X86",
    uc_mode=("UC_MODE_16",),
    uc_reg_module="x86_const",
    uc_reg_prefix="UC_X86_REG_",
    cs_arch="CS_ARCH_X86",
    cs_mode=("CS_MODE_16",),
    ks_arch="KS_ARCH_X86",
    ks_mode=("KS_MODE_16",),
)

# ---------------------------------------------------------------- registers
# No C ABI: a DOS program passes what it likes (the testbins' in ax, bx); a function's
# result is read from ax (the convention of Borland's and Microsoft's 16-bit C compilers);
# `call` pushes a 2-byte return offset (SDM vol. 2 CALL, operand size 16).
REGISTERS = Registers(
    pc="ip",
    sp="sp",
    retval="ax",
    args=(),
    stack_args_offset=2,
    general=("ax", "bx", "cx", "dx", "si", "di", "bp"),
)

# ---------------------------------------------------------------- system calls
# DOS: `int 21h`, the function in AH (the number read is all of AX), its operands in
# DX, BX, CX, SI, DI by function (Ralf Brown's interrupt list, INT 21).  The OS is Qiling's.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("cd21"),  # int 0x21
    hook="intr",
    intno=0x21,
    insn=None,
    number="ax",
    args=("dx", "bx", "cx", "si", "di"),
    ret="ax",
)

# ---------------------------------------------------------------- traps
BREAKPOINTS = (Breakpoint("int3", b"\xcc", hook="intr", intno=3, pc_after=1, works=True),)

# The 8086 has no debug registers (they came with the 80386: SDM vol. 3 §18.2)
DEBUG_HARDWARE = DebugHardware(0, "none", "none",
                               source="Intel SDM vol. 3 §18.2: DR0-DR3 from the 80386 on")

NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed="x86_64 figure applied to 16-bit code (never run natively: a price only)",
)

# ---------------------------------------------------------------- classifiers
# The same instructions as x86_64 (SDM vol. 2), decoded with 16-bit operand and address
# size: `call rel16`, `ret`, `retf`, `iret`, `int n`.
def classify_x86_16(insn: Insn) -> Flow:
    """x86's transfers, and `iret` (an interrupt handler's return: it pops IP, CS and
    FLAGS, SDM vol. 2 IRET) a return.  `int n` is the OS's service, as a system call."""
    if insn.mnemonic == "iret":
        return Flow(FlowKind.RETURN)
    return classify_x86(insn)


CLASSIFIERS = Classifiers(classify=classify_x86_16, insn_align=1, sp_effect=x86_sp_effect(2))

# ---------------------------------------------------------------- capabilities
NO_LINUX = Capability(False, "real-mode code has no Linux ABI: x86_16 runs under Qiling's "
                             "DOS layer only (run --target qiling)")

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
    platform="i86",
    uname_machine="",
    classifiers=CLASSIFIERS,
    simulate=x86_simulator(2, "sp", "flags"),
    lower=x86_lowering("flags", 2),
    capabilities={
        Cap.RUN_STATIC: NO_LINUX,
        Cap.RUN_DYNAMIC: NO_LINUX,
        Cap.TRACE_DYNAMIC: NO_LINUX,
        Cap.PLT_NAMES: NO_LINUX,
        Cap.BUSYBOX: NO_LINUX,
        Cap.SW_BREAKPOINT: Capability(True),
        Cap.KERNEL: NO_KERNEL_BOARD,
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.GDB_TARGET: Capability(False, "qemu-user runs no real-mode code"),
        Cap.NATIVE_TARGET: Capability(False, "real-mode code does not run on this host"),
    },
)
