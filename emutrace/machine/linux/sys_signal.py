"""Signal dispositions and masks, as far as one process without delivery needs them:
`rt_sigaction` records which signals the guest ignores (a signal raised while SIG_IGN is its
disposition is discarded, kernel/signal.c sig_ignored), `rt_sigprocmask` keeps the mask.
Both check `sigsetsize` as Linux does (EINVAL unless it is the kernel's sizeof(sigset_t):
_NSIG / 8, 16 bytes on MIPS, 8 elsewhere — read from the ABI's struct sigaction sa_mask).
Handlers are recorded but not run: delivery belongs to the signals work (issue 11)."""

from __future__ import annotations

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall

K = LinuxKernel
SIG_DFL, SIG_IGN = 0, 1  # include/uapi/asm-generic/signal-defs.h (the same on MIPS)


def sigset_size(k: K) -> int:
    layout = k.abi.structs.get("sigaction")
    if layout is None or "sa_mask" not in layout.fields:
        return 8
    return layout.fields["sa_mask"][1]


def _check_size(k: K, size: int) -> None:
    if size != sigset_size(k):
        raise GuestError("EINVAL")


@syscall("rt_sigaction")
def sys_rt_sigaction(k: K, a: tuple[int, ...]) -> int:
    sig, act, oact = k.int32(a[0]), a[1], a[2]
    _check_size(k, a[3])
    if not 1 <= sig <= 8 * sigset_size(k) or (act and sig == k.const("SIGKILL")):
        raise GuestError("EINVAL")
    layout = k.abi.structs.get("sigaction")  # i386's table lacks it: the handler comes first
    off, size = layout.fields["sa_handler"] if layout else (0, k.word)
    if oact:
        old = SIG_IGN if sig in k.sig_ignored else SIG_DFL
        blank = bytearray(layout.size if layout else 4 * k.word + 8)
        blank[off:off + size] = old.to_bytes(size, k.endian)
        k.write(oact, bytes(blank))
    if act:
        handler = int.from_bytes(k.read(act + off, size), k.endian)
        if handler == SIG_IGN:
            k.sig_ignored.add(sig)
        else:
            k.sig_ignored.discard(sig)
        if k.guest_parent is not None:  # a child process: the host process follows
            from emutrace.machine.linux.sys_process import mirror_disposition
            mirror_disposition(k, sig)
    return 0


@syscall("rt_sigprocmask")
def sys_rt_sigprocmask(k: K, a: tuple[int, ...]) -> int:
    how, new, old = k.int32(a[0]), a[1], a[2]
    _check_size(k, a[3])
    size = sigset_size(k)
    if old:
        k.write(old, k.sig_mask.to_bytes(size, k.endian))
    if new:
        value = int.from_bytes(k.read(new, size), k.endian)
        if how == k.const("SIG_BLOCK"):
            k.sig_mask |= value
        elif how == k.const("SIG_UNBLOCK"):
            k.sig_mask &= ~value
        elif how == k.const("SIG_SETMASK"):
            k.sig_mask = value
        else:
            raise GuestError("EINVAL")
    return 0
