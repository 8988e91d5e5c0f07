"""Signal dispositions and masks: `rt_sigaction` records each signal's action (SIG_IGN: a
signal raised then is discarded, kernel/signal.c sig_ignored; a handler: sys_sigdeliver.py
runs it), `rt_sigprocmask` keeps the mask.  Both check `sigsetsize` as Linux does (EINVAL
unless it is the kernel's sizeof(sigset_t): _NSIG / 8, 16 bytes on MIPS, 8 elsewhere —
read from the ABI's struct sigaction sa_mask)."""

from __future__ import annotations

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.sigsets import (
    SIG_DFL,
    SIG_IGN,
    SigAction,
    sigset_bytes,
    sigset_from,
    sigset_size,
)
from emutrace.machine.linux.sys_sigdeliver import action_changed
from emutrace.machine.linux.table import syscall

K = LinuxKernel


def _check_size(k: K, size: int) -> None:
    if size != sigset_size(k):
        raise GuestError("EINVAL")


def _layout(k: K) -> dict[str, tuple[int, int]]:
    """Offsets and sizes of the kernel's struct sigaction: the ABI table's, else (i386)
    the generic order handler, flags, restorer, mask (arch/x86/include/asm/signal.h)."""
    layout = k.abi.structs.get("sigaction")
    if layout is not None:
        return dict(layout.fields)
    w = k.word
    return {"sa_handler": (0, w), "sa_flags": (w, w), "sa_restorer": (2 * w, w),
            "sa_mask": (3 * w, 8)}


def _action_size(k: K) -> int:
    layout = k.abi.structs.get("sigaction")
    return layout.size if layout is not None else 3 * k.word + 8


@syscall("rt_sigaction")
def sys_rt_sigaction(k: K, a: tuple[int, ...]) -> int:
    sig, act, oact = k.int32(a[0]), a[1], a[2]
    _check_size(k, a[3])
    if not 1 <= sig <= 8 * sigset_size(k) or (act and sig in (k.const("SIGKILL"),
                                                              k.const("SIGSTOP"))):
        raise GuestError("EINVAL")
    fields = _layout(k)
    old = k.sig_actions.get(sig, SigAction(SIG_IGN if sig in k.sig_ignored else SIG_DFL))
    new = None
    if act:
        blob = k.read(act, _action_size(k))
        values = {name: int.from_bytes(blob[off:off + size], k.endian)
                  for name, (off, size) in fields.items()}
        off, size = fields["sa_mask"]
        values["sa_mask"] = sigset_from(k, blob[off:off + size])
        new = SigAction(values["sa_handler"], values.get("sa_flags", 0),
                        values.get("sa_mask", 0), values.get("sa_restorer", 0))
    if oact:
        out = bytearray(_action_size(k))
        for name, value in (("sa_handler", old.handler), ("sa_flags", old.flags),
                            ("sa_mask", old.mask), ("sa_restorer", old.restorer)):
            if name in fields:
                off, size = fields[name]
                out[off:off + size] = sigset_bytes(k, value, size) if name == "sa_mask" \
                    else value.to_bytes(size, k.endian)
        k.write(oact, bytes(out))
    if new is not None:
        k.sig_actions[sig] = new
        if new.handler == SIG_IGN:
            k.sig_ignored.add(sig)
        else:
            k.sig_ignored.discard(sig)
        action_changed(k, sig)
    return 0


@syscall("sigprocmask")
def sys_sigprocmask(k: K, a: tuple[int, ...]) -> int:
    """The old sigprocmask(how, set, oldset) of the 32-bit ABIs (i386 glibc's getcontext
    and swapcontext use it): an `old_sigset_t`, one word, is the first word of the mask;
    SIG_SETMASK replaces that word only (kernel/signal.c sys_sigprocmask)."""
    how, new, old = k.int32(a[0]), a[1], a[2]
    low = (1 << 8 * k.word) - 1
    if old:
        k.write(old, k.pack_words(k.sig_mask & low))
    if new:
        value = k.unpack_words(k.read(new, k.word))[0]
        if how == k.const("SIG_BLOCK"):
            k.sig_mask |= value
        elif how == k.const("SIG_UNBLOCK"):
            k.sig_mask &= ~value
        elif how == k.const("SIG_SETMASK"):
            k.sig_mask = (k.sig_mask & ~low) | value
        else:
            raise GuestError("EINVAL")
        k.sig_mask &= ~(1 << (k.const("SIGKILL") - 1) | 1 << (k.const("SIGSTOP") - 1))
    return 0


@syscall("rt_sigprocmask")
def sys_rt_sigprocmask(k: K, a: tuple[int, ...]) -> int:
    how, new, old = k.int32(a[0]), a[1], a[2]
    _check_size(k, a[3])
    size = sigset_size(k)
    if old:
        k.write(old, sigset_bytes(k, k.sig_mask, size))
    if new:
        value = sigset_from(k, k.read(new, size))
        if how == k.const("SIG_BLOCK"):
            k.sig_mask |= value
        elif how == k.const("SIG_UNBLOCK"):
            k.sig_mask &= ~value
        elif how == k.const("SIG_SETMASK"):
            k.sig_mask = value
        else:
            raise GuestError("EINVAL")
        # SIGKILL and SIGSTOP cannot be blocked: the kernel drops them from every new mask
        # (kernel/signal.c sigprocmask: sigdelsetmask(SIGKILL|SIGSTOP))
        k.sig_mask &= ~(1 << (k.const("SIGKILL") - 1) | 1 << (k.const("SIGSTOP") - 1))
    return 0
