"""A guest signal's action and the guest's signal sets as the kernel lays them out: what
`rt_sigaction` and `rt_sigprocmask` (sys_signal.py), signal delivery (sys_sigdeliver.py)
and the signal frame (sys_sigframe.py) share."""

from __future__ import annotations

from dataclasses import dataclass

from emutrace.machine.linux.kernel import LinuxKernel

K = LinuxKernel
SIG_DFL, SIG_IGN = 0, 1  # include/uapi/asm-generic/signal-defs.h (the same on MIPS)


def sigset_size(k: K) -> int:
    layout = k.abi.structs.get("sigaction")
    if layout is None or "sa_mask" not in layout.fields:
        return 8
    return layout.fields["sa_mask"][1]


def sigset_from(k: K, blob: bytes) -> int:
    """A sigset_t: an array of unsigned longs, signal n at bit (n-1) % bits of word
    (n-1) // bits, each word in the ISA's byte order (asm-generic/signal.h)."""
    return sum(w << (8 * k.word * i) for i, w in enumerate(k.unpack_words(blob)))


def sigset_bytes(k: K, value: int, size: int) -> bytes:
    bits = 8 * k.word
    return k.pack_words(*((value >> (bits * i)) & k.mask for i in range(size // k.word)))


@dataclass
class SigAction:
    handler: int = SIG_DFL
    flags: int = 0
    mask: int = 0
    restorer: int = 0
