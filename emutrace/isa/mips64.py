"""MIPS64 big-endian, n64 ABI: the same description as mips64el.py but the byte order."""

from dataclasses import replace

from emutrace.isa import mips, mips64el
from emutrace.isa.base import Cap, Capability

# ---------------------------------------------------------------- identity
IDENTITY = replace(
    mips64el.IDENTITY,
    name="mips64",
    aliases=("mips64be", "mipsn64"),
    endian="big",
    qemu="mips64",
    debian_arch="mips64",
    triple="mips64-linux-gnuabi64",
)

# ---------------------------------------------------------------- engines
ENGINES = replace(
    mips64el.ENGINES,
    uc_mode=("UC_MODE_MIPS64", "UC_MODE_BIG_ENDIAN"),
    cs_mode=("CS_MODE_MIPS64", "CS_MODE_BIG_ENDIAN"),
    ks_mode=("KS_MODE_MIPS64", "KS_MODE_BIG_ENDIAN"),
)

# ---------------------------------------------------------------- registers, syscalls, traps
# mips64el.py's (n64 is byte-order neutral); SYSCALL and BREAK stored big-endian
SYSCALLS = replace(mips64el.SYSCALLS, instruction=mips.SYSCALLS.instruction)
BREAKPOINTS = mips.BREAKPOINTS

NOT_EMULATED = Capability(
    False, mips64el.NOT_EMULATED.reason.replace("mips64el programs", "mips64 programs"))

# ---------------------------------------------------------------- capabilities
ISA = replace(
    mips64el.ISA,
    identity=IDENTITY,
    engines=ENGINES,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    capabilities={
        **{key: NOT_EMULATED for key in mips64el.ISA.capabilities},
        Cap.GDB_TARGET: Capability(True),
        Cap.KERNEL: mips64el.ISA.capabilities[Cap.KERNEL],
        Cap.LINUX_KERNEL: mips64el.ISA.capabilities[Cap.LINUX_KERNEL],
    },
)
