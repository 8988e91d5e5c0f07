"""PowerPC 64-bit little-endian, ELFv2 ABI (OpenPOWER 64-Bit ELF V2 ABI)."""

from dataclasses import replace

from emutrace.isa import ppc
from emutrace.isa.base import (
    HARDWARE_FACTS,
    LINUX_NOT_TRIED,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    CValues,
    DebugHardware,
    Engines,
    Flow,
    Identity,
    Insn,
    Isa,
    Plt,
    RegFixup,
    Registers,
    transfer_sp_effect,
)
from emutrace.isa.ppc import (
    GPR_NAMES,
    SWEEP_PPC,
    classify_ppc_word,
    ppc_lowering,
    ppc_simulator,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="ppc64le",
    aliases=("ppc64el", "powerpc64le"),
    elf_machine="EM_PPC64",
    elf_class=64,
    endian="little",
    qemu="ppc64le",
    debian_arch="ppc64el",
    triple="powerpc64le-linux-gnu",
    elf_flags=(0x3, 0x2),  # EF_PPC64_ABI = 2: ELFv2
)

# ---------------------------------------------------------------- engines
# Unicorn 2.1.4 has no ppc64le mode (UC_MODE_PPC64|LITTLE_ENDIAN → UC_ERR_MODE): run in the
# big-endian mode and switch the CPU to little-endian with MSR.LE (see RESET).  The default
# POWER10 model faults every fetch (MSR[HV] lost at reset, VRMA real mode); UC_TLB_VIRTUAL
# bypasses the guest MMU and makes it run.
ENGINES = Engines(
    uc_arch="UC_ARCH_PPC",
    uc_mode=("UC_MODE_PPC64", "UC_MODE_BIG_ENDIAN"),
    uc_reg_module="ppc_const",
    uc_reg_prefix="UC_PPC_REG_",
    cs_arch="CS_ARCH_PPC",
    cs_mode=("CS_MODE_64", "CS_MODE_LITTLE_ENDIAN"),
    uc_tlb_virtual=True,
    ks_arch="KS_ARCH_PPC",
    ks_mode=("KS_MODE_PPC64", "KS_MODE_LITTLE_ENDIAN"),
    uc_reg_rename=GPR_NAMES,
)

# ---------------------------------------------------------------- registers
# ELFv2 §2.2.2: arguments r3–r10, result r3, stack pointer r1, link register LR, thread
# pointer r13, TOC r2; the parameter save area starts at 32(r1).  Functions have a global
# entry (sets r2 from r12) and a local entry (st_other bits 5–7 give the offset).
REGISTERS = Registers(
    pc="pc",
    sp="r1",
    retval="r3",
    args=("r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"),
    link="lr",
    tls="r13",
    stack_args_offset=32 + 8 * 8,  # save area for the 8 register arguments comes first
    general=("r0", "r2", "r3", "r10", "r13", "r31", "lr", "ctr"),
)

# ---------------------------------------------------------------- syscalls
# As on ppc (`sc`, r0 = number, r3–r8 arguments, r3 result, errors via CR0.SO); the
# instruction is stored little-endian, and 64-bit arguments take one register.
SYSCALLS = replace(ppc.SYSCALLS, instruction=ppc.SYSCALLS.instruction[::-1], pair_aligned=False)

# ---------------------------------------------------------------- traps
# `trap` (= `tw 31,0,0`) = 0x7FE00008, stored little-endian.
BREAKPOINTS = (
    Breakpoint("trap", bytes.fromhex("0800e07f"), hook="intr", intno=6, pc_after=4,
               works=True),
)

# Hardware instruction breakpoints (what `hwbp` models):
# Power ISA v2.07 (POWER8 and later): one Completed Instruction Address
# Breakpoint Register (linux commit 1ad7d70562ee, xmon)
DEBUG_HARDWARE = DebugHardware(1, "address", "CIABR",
                               source="Power ISA v2.07: one CIABR")

# Native tracing facts for the cost model: ppc.py's, but the hardware breakpoint
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = replace(ppc.NATIVE_TRACING, notes={
    **ppc.NATIVE_TRACING.notes,
    "hwbp": f"ppc64le: one CIABR; perf refuses execute breakpoints ({HARDWARE_FACTS} §4)",
})

# ---------------------------------------------------------------- classifiers
# The same instructions as ppc.py (Power ISA v3.1 Book I §2.4), stored little-endian.  ELFv2
# §3.4.1: a `bl` goes to the callee's local entry (global entry + the offset in st_other
# bits 5–7); discovery maps it back to the function.
def classify_ppc64le(insn: Insn) -> Flow:
    return classify_ppc_word(insn.addr, int.from_bytes(insn.raw, "little"))


CLASSIFIERS = Classifiers(classify=classify_ppc64le, local_entry=True, sweep=SWEEP_PPC,
                          sp_effect=transfer_sp_effect(classify_ppc64le),
                          virtual_breakpoints=True)

# ---------------------------------------------------------------- simulation
# ppc.py's simulator on little-endian words, 64-bit mode (MSR.SF): LR/CTR/targets are 64-bit.
# A `bl` to a local entry is just a target; the TOC restore after a call is ordinary code.
SIMULATE = ppc_simulator("little", 8)

# ---------------------------------------------------------------- quirks
MSR_SF, MSR_VEC, MSR_VSX, MSR_FP, MSR_LE = 1 << 63, 1 << 25, 1 << 23, 1 << 13, 1 << 0
RESET = (
    RegFixup("msr", MSR_SF | MSR_VEC | MSR_VSX | MSR_FP | MSR_LE,
             "64-bit, little-endian, FP/VMX/VSX on: reset is big-endian with units off",
             combine="set"),
)

# PPC_FEATURE_32|64|FPU|MMU and HWCAP2 ARCH_2_07 (glibc's ppc64le build requires POWER8)
HWCAP = 0x80000000 | 0x40000000 | 0x08000000 | 0x04000000
HWCAP2 = 0x80000000

# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# 64-Bit ELF V2 ABI (OpenPOWER) §2.2.4: char is unsigned; float/double in f1-f13 (floats
# in double format), results in f1; every argument also owns a doubleword of the parameter
# save area, so an FP argument skips a general register; aggregates go in r3-r10 then the
# save area, their doublewords as in memory; aggregate results up to 16 bytes in r3:r4,
# larger ones in memory at a hidden first argument.  §2.2.4.1: a homogeneous aggregate of
# up to 8 floats (or doubles) goes one member per FPR (floats in double format), its save
# area doublewords skipped; when the FPRs run out, in r3-r10 and the save area.  long double
# is IBM double-double on Debian ppc64le (GCC 12: __LDBL_MANT_DIG__ 106,
# __LONG_DOUBLE_IBM128__; not IEEE128): two FPRs (and two save area doublewords), the
# result in f1:f2.
C_VALUES = CValues(char_signed=False, fp_args=tuple(f"fpr{i}" for i in range(1, 14)),
                   fp_retval="fpr1", fp_single="double", fp_shadow=True,
                   struct_in_slots=1 << 16, retval_hi="r4", struct_ret_in_regs=16,
                   struct_fp="hfa", hfa_limit=8, long_double="ibm128",
                   long_double_args="pair", long_double_ret="pair", long_double_size=16)


# ELFv2 (64-bit ELF V2 ABI §4.2.5): calls go through the linker's call stubs in .text (`std
# r2,24(r1); ld r12,off(r2); mtctr r12; bctr`, variants for far slots), which BFD marks with
# local symbols `00000019.plt_call.printf@@GLIBC_2.17`; no .plt of stubs (.plt is NOBITS)
STD_R2_24_R1, MTCTR_R12, BCTR = 0xF8410018, 0x7D8903A6, 0x4E800420
LD_R12_R2, ADDIS_R12_R2, LD_R12_R12 = 0xE9820000, 0x3D820000, 0xE98C0000  # (ds/si)(r)


def _signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


def plt_call_stub(code: bytes) -> tuple[int, int] | None:
    """A stripped module's call stub by its code (BFD elf64-ppc.c's ELFv2 plt_call stubs,
    TOC saved): `std r2,24(r1); ld r12,d(r2); mtctr r12; bctr` → (d, 16), or with `addis
    r12,r2,ha; ld r12,lo(r12)` → (ha·2^16 + lo, 20); any other code → None."""
    w = [int.from_bytes(code[i:i + 4], "little") for i in range(0, len(code) - 3, 4)][:5]
    if len(w) >= 4 and w[0] == STD_R2_24_R1 and w[1] & 0xFFFF0003 == LD_R12_R2 \
            and w[2:4] == [MTCTR_R12, BCTR]:
        return _signed16(w[1] & 0xFFFC), 16
    if len(w) == 5 and w[0] == STD_R2_24_R1 and w[1] & 0xFFFF0000 == ADDIS_R12_R2 \
            and w[2] & 0xFFFF0003 == LD_R12_R12 and w[3:5] == [MTCTR_R12, BCTR]:
        return (_signed16(w[1] & 0xFFFF) << 16) + _signed16(w[2] & 0xFFFC), 20
    return None


# ELFv2: the linker's stub symbols where there is a .symtab; else the stubs by their code,
# their slot at the TOC base .TOC. = .got + 0x8000 (ELFv2 ABI §3.3, as BFD and gold set it)
PLT = Plt(header=0, entry=0, stub_symbol=r"\.plt_(?:call|branch)\w*\.(?P<func>[^@+]+)",
          stub_prefix=STD_R2_24_R1.to_bytes(4, "little"), stub_code=plt_call_stub,
          toc_base=(".got", 0x8000))

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
    hwcap=HWCAP,
    hwcap2=HWCAP2,
    platform="power8",
    uname_machine="ppc64le",
    entry_regs=("r12",),  # ELFv2 §2.3.2.1: r12 = address of a global entry point
    call_target_regs=("r12",),
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        # isa/kernel_ppc64le.py (SRR0/SRR1 modelled, mfspr/mtspr/rfid emulated, PAPR
        # hypercalls), board pseries
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
        Cap.BUSYBOX: Capability(True),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.ENTRY_OUT_OF_LINE_SAVES: ppc.ENTRY_OUT_OF_LINE_SAVES,
        Cap.STRIPPED_TAIL_CALLS: Capability(
            False,
            "stripped code (busybox): a tail jump to a function never called before "
            "is not known as an entry (no symbols), so the frame it leaves is "
            "closed as unwound at the next call"),
    },
    classifiers=CLASSIFIERS,
    simulate=SIMULATE,
    lower=ppc_lowering("little", 8),
)
