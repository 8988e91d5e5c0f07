"""32-bit powerpc's `swapcontext(old, new, size)` system call (arch/powerpc/kernel/
signal_32.c sys_swapcontext), which ppc32 glibc's getcontext (new NULL), setcontext (old
NULL) and swapcontext make.

The ucontext is the signal frame's (`isa/sigframe.py`, "ppc": `uc_sigmask` at 52, `uc_regs`
at 48 pointing to `uc_mcontext` at 192, whose `mc_gregs` are the PT_* slots).  Saving
writes the registers as they are at the `sc` (NIP: the instruction after it), the FP
registers after them (`mc_fregs`: f0..f31, then FPSCR in a double's slot), the blocked
mask and `uc_regs`; nothing else of the old ucontext is touched (its `uc_link`,
`uc_stack` stay the caller's).  Loading follows the new ucontext's `uc_regs`, takes every
restored slot, the FP registers and the mask (SIGKILL/SIGSTOP dropped), and writes no
result: the loaded r3 and CR are the context's (the kernel's TIF_RESTOREALL).

The size argument is checked as the kernel does: below glibc's sizeof(ucontext_t), the
kernel's UCONTEXTSIZEWITHOUTVSX (1184), EINVAL; a ucontext the guest cannot reach, EFAULT.
The 64-bit variant (signal_64.c: no `uc_regs` indirection) is not served: ppc64's glibc
saves and loads contexts in user space."""

from __future__ import annotations

from emutrace.isa.base import GuestError
from emutrace.isa.sigframe import SigFrame, sigframe
from emutrace.machine.linux.kernel import CR0_SO, LinuxKernel
from emutrace.machine.linux.sigsets import sigset_bytes, sigset_from, sigset_size
from emutrace.machine.linux.table import syscall

K = LinuxKernel
ELF_NGREG = 48  # mc_gregs' length in words (arch/powerpc/include/uapi/asm/elf.h)
FPRS = [f"fpr{i}" for i in range(32)]  # mc_fregs: ELF_NFPREG 33 doubles, FPSCR last
FP_WIDTH = 8


def _frame(k: K) -> tuple[SigFrame, int]:
    """The ppc32 frame and the offset of uc_mcontext within the ucontext."""
    sf = sigframe(k.isa)
    if sf is None or k.word != 4 or not sf.pointers:
        raise GuestError("ENOSYS")
    return sf, sf.pointers[0][1]


def _save(k: K, sf: SigFrame, uc: int, mcontext_at: int) -> None:
    """save_user_regs into the mcontext (16-aligned, as the kernel places it), the mask
    (put_sigset_t) and uc_regs."""
    cpu, e = k.cpu, k.endian
    mctx = (uc + mcontext_at) & ~0xF
    size = ELF_NGREG * k.word + (len(FPRS) + 1) * FP_WIDTH
    blob = bytearray(k.read(mctx, size))
    for slot in sf.slots:
        value = cpu.pc if slot.reg == sf.pc else cpu.reg_read(slot.reg)
        if slot.reg == "cr":
            value &= ~CR0_SO  # the system call entry clears CR0.SO: a resumed getcontext
        at = slot.offset - mcontext_at  # ... sees success (glibc's `bso` after the sc)
        blob[at:at + slot.size] = (value & ((1 << 8 * slot.size) - 1)).to_bytes(slot.size, e)
    fp = ELF_NGREG * k.word
    for i, reg in enumerate([*FPRS, "fpscr"]):
        blob[fp + i * FP_WIDTH:fp + (i + 1) * FP_WIDTH] = cpu.reg_read(reg).to_bytes(
            FP_WIDTH, e)
    k.write(mctx, bytes(blob))
    n = sigset_size(k)
    k.write(uc + sf.sigmask, sigset_bytes(k, k.sig_mask, n))
    k.write(uc + sf.pointers[0][0], mctx.to_bytes(k.word, e))


def _load(k: K, sf: SigFrame, uc: int, mcontext_at: int) -> None:
    """do_setcontext: the mask, then restore_user_regs from where uc_regs points; a
    tracer told where control goes on (`on_context_loaded`)."""
    cpu, e = k.cpu, k.endian
    site = cpu.pc - len(k.conv.instruction)  # the sc (PC is past it in the hook)
    n = sigset_size(k)
    mask = sigset_from(k, k.read(uc + sf.sigmask, n))
    mctx = int.from_bytes(k.read(uc + sf.pointers[0][0], k.word), e)
    fp = ELF_NGREG * k.word
    blob = k.read(mctx, fp + (len(FPRS) + 1) * FP_WIDTH)  # read whole first: EFAULT
    for slot in sf.slots:  # ... leaves the registers as they were
        if slot.restored:
            at = slot.offset - mcontext_at
            cpu.reg_write(slot.reg, int.from_bytes(blob[at:at + slot.size], e))
    for i, reg in enumerate(FPRS):
        cpu.reg_write(reg, int.from_bytes(blob[fp + i * FP_WIDTH:fp + (i + 1) * FP_WIDTH], e))
    fpscr = int.from_bytes(blob[fp + 32 * FP_WIDTH:fp + 33 * FP_WIDTH], e)
    cpu.reg_write("fpscr", fpscr & 0xFFFFFFFF)  # the low word (mc_fregs[32])
    k.sig_mask = mask & ~((1 << (k.const("SIGKILL") - 1)) | (1 << (k.const("SIGSTOP") - 1)))
    k.registers_loaded = True
    if k.on_context_loaded is not None:
        k.on_context_loaded(site, cpu.pc)


@syscall("swapcontext")
def sys_swapcontext(k: K, a: tuple[int, ...]) -> int:
    old, new, size = a[0], a[1], k.signed(a[2])
    sf, mcontext_at = _frame(k)
    if size < sf.ucontext_size:
        raise GuestError("EINVAL")
    if old:
        _save(k, sf, old, mcontext_at)
    if new:
        _load(k, sf, new, mcontext_at)
    return 0
