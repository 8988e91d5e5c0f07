"""The ucontext of a signal frame in guest memory (the ISA's layout: `isa/sigframe.py`).

At delivery the interrupted registers, the mask to restore and the sigaltstack state are
written where the ISA's `struct ucontext` keeps them (kernel setup_rt_frame); at
`rt_sigreturn` the CPU context saved host-side is restored first (it also holds what the
frame does not: FP/vector registers, flags the kernel would sanitise), then every register
slot the handler changed is taken from guest memory, and the mask and sigaltstack state
always are (kernel restore_sigcontext, restore_altstack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emutrace.isa.sigframe import SigFrame
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.sigsets import sigset_bytes, sigset_from, sigset_size

K = LinuxKernel
SS_ONSTACK, SS_DISABLE = 1, 2  # include/uapi/linux/signal.h (every ISA)
STACK_FIELDS = ("ss_sp", "ss_flags", "ss_size")


@dataclass
class Frame:
    """A delivered signal's frame: what rt_sigreturn restores."""

    context: Any  # unicorn UcContext
    mask: int
    ucontext: int = 0  # its guest address (0: no SigFrame for the ISA)
    # what was written into the ucontext (slot name → value; "ss_sp"... for uc_stack): a
    # value the handler changed there is what rt_sigreturn takes back
    written: dict[str, int] = field(default_factory=dict)
    pc_bias: int = 0  # the PC saved in `context` lies this far before the resume address


def altstack_flags(k: K, sp: int) -> int:
    """sas_ss_flags(sp): SS_DISABLE without an alternate stack, SS_ONSTACK on it."""
    if k.sig_altstack is None:
        return SS_DISABLE
    base, size = k.sig_altstack
    return SS_ONSTACK if base < sp <= base + size else 0


def write_ucontext(k: K, sf: SigFrame, uc: int, resume_pc: int, mask: int) -> dict[str, int]:
    """Fill the ucontext at `uc` (zeroed first); returns what was written, by slot offset
    (str) and stack field name."""
    cpu, e = k.cpu, k.endian
    blob = bytearray(sf.ucontext_size)
    written: dict[str, int] = {}

    def put(off: int, size: int, value: int) -> int:
        value &= (1 << (8 * size)) - 1
        blob[off:off + size] = value.to_bytes(size, e)
        return value

    for slot in sf.slots:
        value = resume_pc if slot.reg == sf.pc else cpu.reg_read(slot.reg)
        written[str(slot.offset)] = put(slot.offset, slot.size, value)
    base, size = k.sig_altstack or (0, 0)
    values = (base, altstack_flags(k, cpu.reg_read(k.isa.registers.sp)), size)
    for name, off, width, value in zip(STACK_FIELDS, sf.stack, sf.stack_sizes, values,
                                       strict=True):
        written[name] = put(off, width, value)
    n = sigset_size(k)
    blob[sf.sigmask:sf.sigmask + n] = sigset_bytes(k, mask, n)
    for at, target in sf.pointers:
        put(at, k.word, uc + target)
    k.write(uc, bytes(blob))
    return written


def restore_ucontext(k: K, sf: SigFrame, frame: Frame) -> None:
    """After the saved context is back: the handler's changes to the frame, the mask."""
    cpu, e = k.cpu, k.endian
    blob = k.read(frame.ucontext, sf.ucontext_size)

    def get(off: int, size: int) -> int:
        return int.from_bytes(blob[off:off + size], e)

    bias = k.conv.pc_after_hook  # rt_sigreturn runs in the system-call hook
    for slot in sf.slots:
        value = get(slot.offset, slot.size)
        if slot.reg == sf.pc:
            if value != frame.written[str(slot.offset)] or frame.pc_bias != bias:
                if sf.thumb is not None and cpu.reg_read(sf.thumb[0]) & sf.thumb[1]:
                    value |= 1  # a Thumb resume address (Unicorn takes bit 0 as the state)
                cpu.reg_write(slot.reg, value - bias)
        elif slot.restored and value != frame.written[str(slot.offset)]:
            cpu.reg_write(slot.reg, value)
    n = sigset_size(k)
    k.sig_mask = sigset_from(k, blob[sf.sigmask:sf.sigmask + n]) & ~(
        (1 << (k.const("SIGKILL") - 1)) | (1 << (k.const("SIGSTOP") - 1)))
    stack = [get(off, size) for off, size in zip(sf.stack, sf.stack_sizes, strict=True)]
    changed = any(v != frame.written[name] for name, v in zip(STACK_FIELDS, stack,
                                                             strict=True))
    # restore_altstack is do_sigaltstack: refused (EPERM, ignored) while on the alt stack
    if changed and altstack_flags(k, cpu.reg_read(k.isa.registers.sp)) != SS_ONSTACK:
        ss_sp, ss_flags, ss_size = stack
        if ss_flags & SS_DISABLE:
            k.sig_altstack = None
        elif not ss_flags & ~SS_ONSTACK and ss_size >= k.abi.constants.get("MINSIGSTKSZ",
                                                                            2048):
            k.sig_altstack = (ss_sp, ss_size)
