"""mipsel kernel images: isa/kernel_mips.py's model in little-endian byte order."""

from emutrace.isa.kernel_mips import support

KERNEL = support("little")
