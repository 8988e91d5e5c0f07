"""RISC-V 64-bit (RV64GC, LP64D), RISC-V ELF psABI."""

from emutrace.isa.base import (
    Breakpoint,
    Capability,
    Engines,
    Identity,
    Isa,
    RegFixup,
    Registers,
    SyscallConvention,
)

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="riscv64",
    aliases=("riscv", "rv64", "rv64gc"),
    elf_machine="EM_RISCV",
    elf_class=64,
    endian="little",
    qemu="riscv64",
    debian_arch="riscv64",
    triple="riscv64-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_RISCV",
    uc_mode=("UC_MODE_RISCV64",),
    uc_reg_module="riscv_const",
    uc_reg_prefix="UC_RISCV_REG_",
    cs_arch="CS_ARCH_RISCV",
    cs_mode=("CS_MODE_RISCV64", "CS_MODE_RISCVC"),
    ks_arch=None,  # keystone has no RISC-V: snippets come from cross `as`
)

# ---------------------------------------------------------------- registers
# psABI "Integer Calling Convention": arguments a0–a7, result a0, return address ra (x1),
# thread pointer tp (x4), stacked arguments at sp.
REGISTERS = Registers(
    pc="pc",
    sp="sp",
    retval="a0",
    args=("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"),
    link="ra",
    tls="tp",
    general=("a0", "a1", "a7", "t0", "t6", "s0", "s11", "ra", "gp", "tp"),
)

# ---------------------------------------------------------------- syscalls
# `ecall`: number in a7, arguments a0–a5, result a0 (-errno).  Unicorn: INTR 8 (reported as
# "ecall from U-mode" although the CPU runs in M-mode), PC already advanced by 4.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("73000000"),  # ecall
    hook="intr",
    intno=8,
    insn=None,
    number="a7",
    args=("a0", "a1", "a2", "a3", "a4", "a5"),
    ret="a0",
)

# ---------------------------------------------------------------- traps
# EBREAK = 0x00100073, C.EBREAK = 0x9002.  Unicorn 2.1.4 turns the breakpoint exception into
# UC_ERR_EXCEPTION: the INSN_INVALID hook fires, but emu_start returns an error even when the
# hook handles it, so every event would need a restart.
BREAKPOINTS = (
    Breakpoint("ebreak", bytes.fromhex("73001000"), hook="insn_invalid", intno=None, pc_after=0,
               works=False,
               reason="Unicorn 2.1.4 stops emulation with UC_ERR_EXCEPTION on EBREAK: use a "
                      "bounded code hook"),
    Breakpoint("c.ebreak", bytes.fromhex("0290"), hook="insn_invalid", intno=None, pc_after=0,
               works=False, reason="as ebreak"),
)

# ---------------------------------------------------------------- quirks
RESET = (
    # mstatus.FS (bits 13–14) = 0 means the FPU is off: FP instructions raise illegal-insn.
    RegFixup("mstatus", 3 << 13, "FPU off at reset (mstatus.FS = Off)"),
)

# AT_HWCAP on RISC-V: one bit per single-letter extension, bit (letter - 'a').
HWCAP = sum(1 << (ord(c) - ord("a")) for c in "imafdc")

# ---------------------------------------------------------------- capabilities
ISA = Isa(
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    reset=RESET,
    hwcap=HWCAP,
    hwcap2=0,
    platform="riscv64",
    uname_machine="riscv64",
    capabilities={
        "run_static": Capability(True),
        "run_dynamic": Capability(False, "dynamic linking is not implemented yet"),
        "sw_breakpoint": Capability(False, BREAKPOINTS[0].reason),
        "busybox": Capability(False, "Debian 12 ships no riscv64 busybox-static (not a "
                                     "release architecture)"),
    },
)
