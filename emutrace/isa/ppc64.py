"""PowerPC 64-bit big-endian, ELFv1 ABI (64-bit PowerPC ELF Application Binary Interface
Supplement 1.9; Debian ppc64).  A function symbol's value is the address of its function
descriptor in `.opd` (§3.2.5: code address, TOC pointer, environment); the ELF layer reads
the code address from it (elf_tables.read_tables), so discovery sees code.  A call through
a pointer loads the code address and r2 from the descriptor and branches with `bctrl`; a
direct `bl` enters the code (one entry point: no ELFv2 local entry); returns are `blr`."""

from dataclasses import replace

from emutrace.isa import ppc, ppc64le
from emutrace.isa.base import (
    Capability,
    Classifiers,
    CValues,
    Flow,
    Identity,
    Insn,
    Isa,
    Registers,
    gdb_only,
    transfer_sp_effect,
)
from emutrace.isa.ppc import SWEEP_PPC, classify_ppc_word

# ---------------------------------------------------------------- identity
# e_flags EF_PPC64_ABI (bits 0-1): 0 unspecified or 1 ELFv1; 2 is ELFv2 (ppc64le)
IDENTITY = Identity(
    name="ppc64",
    aliases=("powerpc64", "ppc64be"),
    elf_machine="EM_PPC64",
    elf_class=64,
    endian="big",
    qemu="ppc64",
    debian_arch="ppc64",
    triple="powerpc64-linux-gnu",
    elf_flags=(0x2, 0x0),
)

# ---------------------------------------------------------------- engines
# ppc64le.py's CPU (UC_MODE_PPC64 is big-endian), decoded big-endian
ENGINES = replace(
    ppc64le.ENGINES,
    cs_mode=("CS_MODE_64", "CS_MODE_BIG_ENDIAN"),
    ks_mode=("KS_MODE_PPC64", "KS_MODE_BIG_ENDIAN"),
)

# ---------------------------------------------------------------- registers
# ELFv1 §3.2.2-3.2.3: arguments r3-r10, result r3, stack pointer r1, link register LR,
# TOC r2, thread pointer r13.  The stack frame header is 48 bytes (back chain, CR, LR,
# two reserved doublewords, TOC save), then the parameter save area, 8 doublewords for
# the register arguments before the first one passed on the stack.
REGISTERS = Registers(
    pc="pc",
    sp="r1",
    retval="r3",
    args=("r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"),
    link="lr",
    tls="r13",
    stack_args_offset=48 + 8 * 8,
    general=("r0", "r2", "r3", "r10", "r13", "r31", "lr", "ctr"),
)

# ---------------------------------------------------------------- syscalls, traps
# `sc` as on ppc (r0 = number, r3-r8, r3 result, CR0.SO on error), big-endian like ppc.py;
# a 64-bit argument takes one register
SYSCALLS = replace(ppc.SYSCALLS, pair_aligned=False)
BREAKPOINTS = ppc.BREAKPOINTS  # `trap` = 0x7FE00008, big-endian


# ---------------------------------------------------------------- classifiers
# ppc.py's decoding of the branch words (Power ISA v3.1 Book I §2.4), 64-bit addresses
def classify_ppc64(insn: Insn) -> Flow:
    return classify_ppc_word(insn.addr, int.from_bytes(insn.raw, "big"))


CLASSIFIERS = Classifiers(classify=classify_ppc64, sweep=SWEEP_PPC,
                          sp_effect=transfer_sp_effect(classify_ppc64))

# ---------------------------------------------------------------- C values
# ELFv1 §3.2.3: char is unsigned; float/double in f1-f13 (floats in double format), each
# also taking its doubleword of the parameter save area (a general register skipped);
# results in r3 or f1; every aggregate result in memory at a hidden first argument (r3);
# aggregates by value in r3-r10 then the save area, their doublewords as in memory
C_VALUES = CValues(char_signed=False, fp_args=tuple(f"fpr{i}" for i in range(1, 14)),
                   fp_retval="fpr1", fp_single="double", fp_shadow=True,
                   struct_in_slots=1 << 16, struct_ret_in_regs=0)

NOT_EMULATED = Capability(
    False, "not wired: emutrace's Linux layer starts a program at e_entry, which on ELFv1 "
    "is a function descriptor (the kernel takes the entry and r2 from it), and gives "
    "signal handlers no descriptors, though Unicorn 2.1.4's PPC64 runs the static test "
    "programs big-endian: --target gdb runs ppc64 programs")

# ---------------------------------------------------------------- capabilities
ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=ppc64le.DEBUG_HARDWARE,
    native_tracing=ppc64le.NATIVE_TRACING,
    reset=(),
    hwcap=ppc64le.HWCAP,
    hwcap2=0,
    platform="power8",
    uname_machine="ppc64",
    c_values=C_VALUES,
    classifiers=CLASSIFIERS,
    capabilities=gdb_only(NOT_EMULATED),
)
