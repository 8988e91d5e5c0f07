"""MIPS32 little-endian, o32 ABI: the same description as mips.py but the byte order."""

from dataclasses import replace

from emutrace.isa import mips
from emutrace.isa.base import Cap, Capability

# ---------------------------------------------------------------- identity
IDENTITY = replace(
    mips.IDENTITY,
    name="mipsel",
    aliases=("mipsle", "mips32el"),
    endian="little",
    qemu="mipsel",
    debian_arch="mipsel",
    triple="mipsel-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = replace(
    mips.ENGINES,
    uc_mode=("UC_MODE_MIPS32", "UC_MODE_LITTLE_ENDIAN"),
    cs_mode=("CS_MODE_MIPS32", "CS_MODE_LITTLE_ENDIAN"),
    ks_mode=("KS_MODE_MIPS32", "KS_MODE_LITTLE_ENDIAN"),
)

# ---------------------------------------------------------------- registers, syscalls, traps
# identical to mips.py (o32 is byte-order neutral); BREAK is stored as 0D 00 00 00.
BREAKPOINTS = tuple(replace(b, encoding=b.encoding[::-1]) for b in mips.BREAKPOINTS)
SYSCALLS = replace(mips.SYSCALLS, instruction=mips.SYSCALLS.instruction[::-1])

# ---------------------------------------------------------------- capabilities
ISA = replace(
    mips.ISA,
    identity=IDENTITY,
    engines=ENGINES,
    breakpoints=BREAKPOINTS,
    syscalls=SYSCALLS,
    capabilities={
        **mips.ISA.capabilities,
        Cap.BUSYBOX: Capability(True),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
        # tests/test_debian_programs.py: Debian's md5sum/sha*sum/b2sum (cksum works)
        Cap.COREUTILS_DIGESTS: Capability(
            False, "Unicorn 2.1.4 crashes translating their mipsel hash code "
            "(tcg_emit_op, host SIGSEGV); with --max-insns N (count hook) they run"),
    },
)
