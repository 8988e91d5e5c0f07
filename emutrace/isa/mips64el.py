"""MIPS64 little-endian, n64 ABI (Debian mips64el; MIPSpro N32/N64 ABI handbook, the
SYSV MIPS64 psABI supplement).  The instruction classes are mips.py's: MIPS64 keeps
MIPS32's jumps, branches and delay slots and adds 64-bit arithmetic (daddiu, dsll, ...).
mips64.py derives the big-endian twin."""

from dataclasses import replace

from emutrace.isa import mips
from emutrace.isa.base import (
    CLONE_BACKWARDS,
    LINUX_NOT_TRIED,
    Cap,
    Capability,
    Classifiers,
    CValues,
    Identity,
    Insn,
    Isa,
    Plt,
    Registers,
    SyscallConvention,
    SyscallErrors,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="mips64el",
    aliases=("mips64le", "mipsn64el"),
    elf_machine="EM_MIPS",
    elf_class=64,
    endian="little",
    qemu="mips64el",
    debian_arch="mips64el",
    triple="mips64el-linux-gnuabi64",
)

# ---------------------------------------------------------------- engines
# n64 calls $8-$11 a4-a7 and $12-$15 t0-t3 (MIPS32's t0-t7 are $8-$15); Unicorn and
# capstone name them by number there
N64_RENAME = {"a4": "8", "a5": "9", "a6": "10", "a7": "11",
              "t0": "12", "t1": "13", "t2": "14", "t3": "15"}
ENGINES = replace(
    mips.ENGINES,
    uc_mode=("UC_MODE_MIPS64", "UC_MODE_LITTLE_ENDIAN"),
    uc_cpu_model="UC_CPU_MIPS64_MIPS64R2_GENERIC",
    cs_mode=("CS_MODE_MIPS64", "CS_MODE_LITTLE_ENDIAN"),
    ks_mode=("KS_MODE_MIPS64", "KS_MODE_LITTLE_ENDIAN"),
    uc_reg_rename=N64_RENAME,
    # Unicorn's MIPS64 CPU starts in kernel mode at error level: an access above 4 GiB
    # (n64 programs load at 0x120000000) takes a TLB or address-error exception at PC 0;
    # UC_TLB_VIRTUAL bypasses the guest MMU, as on ppc64le
    uc_tlb_virtual=True,
)

# ---------------------------------------------------------------- registers
# n64: arguments a0-a7 ($4-$11), then the stack at 0(sp) (no home area); result v0 (v1 the
# second word of a small struct); return address in ra ($31)
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="v0",
    args=("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"),
    link="ra",
    tls="cp0_userlocal",
    stack_args_offset=0,
    general=("v0", "v1", "a0", "a7", "t0", "s0", "s7", "gp", "fp", "ra"),
)

# ---------------------------------------------------------------- syscalls
# n64 `syscall` (arch/mips/kernel/scall64-n64.S): number (5000 + n) in v0, arguments
# a0-a5; result in v0, on error v0 = positive errno and a3 = 1 (a3 = 0 on success)
SYSCALLS = SyscallConvention(
    instruction=mips.SYSCALLS.instruction[::-1],
    hook="intr",
    intno=17,
    insn=None,
    number="v0",
    args=("a0", "a1", "a2", "a3", "a4", "a5"),
    ret="v0",
    errors=SyscallErrors.A3_FLAG,
    error_flag_reg="a3",
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
# BREAK 0 stored little-endian (0D 00 00 00); the MIPS64 watch registers are MIPS32's
BREAKPOINTS = tuple(replace(b, encoding=b.encoding[::-1]) for b in mips.BREAKPOINTS)

# ---------------------------------------------------------------- classifiers
# MIPS64 vol. II: the transfers are MIPS32's (mips.classify_mips); the stack pointer moves
# by DADDIU (64-bit) where o32 uses ADDIU
_STACK = ("$sp", "$29")


def sp_effect_mips64(insn: Insn) -> int | None:
    """What insn adds to $sp: `daddiu $sp, $sp, imm` (n64 prologue and epilogue) as
    mips.sp_effect_mips reads `addiu`."""
    if insn.mnemonic in ("daddiu", "daddi"):
        ops = [o.strip() for o in insn.op_str.split(",")]
        if ops[0] in _STACK and len(ops) == 3 and ops[1] in _STACK:
            return int(ops[2], 0)
    return mips.sp_effect_mips(insn)


CLASSIFIERS = Classifiers(classify=mips.classify_mips, delay_slot=True,
                          sp_effect=sp_effect_mips64, sweep=mips.SWEEP_MIPS)

# ---------------------------------------------------------------- gdb numbering
# GDB's mips-tdep.h numbering with n64's names for $8-$15
GPR_NAMES = (*mips.GPR_NAMES[:8], "a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3",
             *mips.GPR_NAMES[16:])
GDB_REGISTERS = mips.gdb_numbering(GPR_NAMES)

# ---------------------------------------------------------------- C values
# n64 (MIPSpro N32/N64 ABI handbook ch. 2): char is signed; argument i is in a0+i or, when
# it is a float or double, in $f(12+i) (its integer slot unused: "shadowed"), eight in
# registers; results in v0(/v1) and $f0; structs up to 16 bytes returned in v0:v1, larger
# ones in memory at a hidden first argument; a struct's doublewords go in the slots as in
# memory
C_VALUES = CValues(char_signed=True, fp_args=tuple(f"f{n}" for n in range(12, 20)),
                   fp_retval="f0", fp_shadow=True, retval_hi="v1", struct_ret_in_regs=16,
                   struct_in_slots=1 << 16)

# n64 lazy stubs (BFD elfxx-mips.c, 64-bit): 16 bytes each in .MIPS.stubs, `ld t9,
# -0x7ff0(gp); move t7,ra; jalr t9; daddiu t8,zero,DYNSYM_INDEX`
PLT = Plt(header=0, entry=16, stub_section=".MIPS.stubs")

# Unicorn 2.1.4's MIPS64 CPU reaches n64's addresses (above 4 GiB) only with UC_TLB_VIRTUAL
# (without it: an address error at PC 0), and a freestanding program (testbins hello_fs)
# runs to its exit under emutrace's Linux layer; but there a TLB fill at a store inside a
# translated block restarts the block from its start with the instructions before it
# already applied (seen: getrandom's `daddiu sp,sp,-48` ran twice, so glibc's stack
# check in ptmalloc_init fails).  Every capability of an emulated run is refused with this
NOT_EMULATED = Capability(
    False, "Unicorn 2.1.4's MIPS64 CPU needs UC_TLB_VIRTUAL for n64's addresses, and "
    "there restarts a block after a TLB fill with its earlier instructions already applied "
    "(Debian's static glibc fails its stack check): --target gdb runs mips64el programs")

# ---------------------------------------------------------------- capabilities
ISA: Isa = replace(
    mips.ISA,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    classifiers=CLASSIFIERS,
    c_values=C_VALUES,
    plt=PLT,
    platform="mips64",
    uname_machine="mips64",
    gdb_registers=GDB_REGISTERS,
    capabilities={
        **{key: NOT_EMULATED for key in mips.ISA.capabilities},
        Cap.GDB_TARGET: Capability(True),
        Cap.KERNEL: Capability(False, "no board for kernel images (isa/kernel_*.py)"),
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
    },
)
