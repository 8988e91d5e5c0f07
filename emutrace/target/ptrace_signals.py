"""Guest signal handlers on the native target: the backend told where a handler's frame
begins and ends, as the emulated Linux layer tells it (machine/linux/sys_sigdeliver.py:
`trap_entered(handler, SignalDelivery)` once the handler's frame is set up, before its
first instruction; `trap_returned(site)` at the system call its return reaches).

Natively the host kernel builds the frame.  The run loop (target/ptrace_run.py) passes a
guest signal on at a signal-delivery-stop; when the signal has a handler (the `SigCgt` mask
of /proc/PID/status, proc(5)) it resumes with PTRACE_SINGLESTEP instead of PTRACE_CONT: the
kernel then stops the tracee at the handler's first instruction with a SIGTRAP whose
si_code is SIGTRAP (kernel/signal.c signal_delivered → ptrace_notify), and `entered` reads
the frame there (arch/x86/include/asm/sigframe.h, the layouts of isa/sigframe.py):

* the ucontext is the handler's third argument (x86_64 rt_sigframe: %rdx = &frame->uc;
  i386 rt_sigframe_ia32: `puc`, the third stack slot) when that points into the frame;
* otherwise the frame is i386's legacy sigframe_ia32 (a handler without SA_SIGINFO):
  pretcode, sig, then the sigcontext, in the second argument's slot — and no uc_stack.

The interrupted PC and SP come from the sigcontext; the handler's stack is the sigaltstack
(uc_stack) when the handler runs on it and the interrupted code did not, else everything
below the interrupted SP, as the Linux layer reports it (shadow-stack policy 7).  A legacy
frame on another stack has no uc_stack to read: its range is the whole address space (a
handler that leaves it by siglongjmp closes only at the program's end).

The frame's return address (pretcode: glibc's __restore_rt, or the vDSO's) is code that
loads the sigreturn number and makes the system call: that system-call instruction gets a
code hook (a point: the target's own int3), which calls `trap_returned` there when the
number register holds rt_sigreturn (or i386's sigreturn) — the moment the Linux layer
reports it — and asks for the next block, the interrupted code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emutrace.isa.abi import load_abi
from emutrace.isa.sigframe import SigFrame, sigframe
from emutrace.target.ptrace import PtraceTarget
from emutrace.trace.events import SignalDelivery

SIGNAL_DELIVERED = 5  # si_code of the handler-entry stop: ptrace_notify(SIGTRAP)
RESTORER_INSNS = 4  # instructions decoded from the return address to its system call
RESTORER_BYTES = 32


def caught_signals(pid: int) -> int:
    """The mask of signals with a handler (proc(5) `SigCgt`: bit n-1 for signal n)."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"SigCgt:"):
                return int(line.split()[1], 16)
    return 0


class HandlerWatch:
    """Reports natively delivered signal handlers' frames to a trap-aware backend."""

    def __init__(self, target: PtraceTarget, entered: Callable[[int, SignalDelivery], None],
                 returned: Callable[[int], None]) -> None:
        isa = target.isa
        frame = sigframe(isa)
        assert frame is not None, isa.name
        self.target, self.frame = target, frame
        self._entered, self._returned = entered, returned
        regs = isa.registers
        self.word = target.word
        self.sp_reg = regs.sp
        # the third argument of a handler (signo, siginfo, ucontext): a register or a slot
        self.uc_reg = regs.args[2] if len(regs.args) > 2 else None
        self.uc_slot = regs.stack_args_offset + 2 * self.word
        self.legacy_sc_slot = regs.stack_args_offset + self.word  # sigframe_ia32.sc
        # uc_mcontext follows uc_stack in the ucontext (uc_flags, uc_link, uc_stack, ...)
        self.mcontext = max(o + n for o, n in zip(frame.stack, frame.stack_sizes, strict=True))
        self.pc_slot = next(s for s in frame.slots if s.reg == frame.pc)
        self.sp_slot = next(s for s in frame.slots if s.reg == regs.sp and s.restored)
        calls = load_abi(isa.name).syscalls
        self.sigreturns = {calls[n] for n in ("rt_sigreturn", "sigreturn") if n in calls}
        self.number_reg = isa.syscalls.number
        self.syscall_insn = isa.syscalls.instruction
        self.restorer_sites: dict[int, int] = {}  # return address → its system call's
        self._cs: Any = None

    def handled(self, sig: int) -> bool:
        """Has the guest a handler for `sig` (delivering it sets up a frame)?"""
        return bool(caught_signals(self.target.pid) >> (sig - 1) & 1)

    # ------------------------------------------------------------ the handler's entry
    def entered(self) -> None:
        """The tracee stands at a handler's first instruction, its frame on the stack."""
        t = self.target
        handler, sp = t.pc, t.reg_read(self.sp_reg)
        uc = t.reg_read(self.uc_reg) if self.uc_reg else t.read_word(sp + self.uc_slot)
        rt = sp < uc < sp + 0x10000  # the third argument points into the frame
        base = uc if rt else sp + self.legacy_sc_slot - self.mcontext
        resume = self._slot(base, self.pc_slot.offset, self.pc_slot.size)
        interrupted_sp = self._slot(base, self.sp_slot.offset, self.sp_slot.size)
        stack = self._handler_stack(uc, sp, interrupted_sp) if rt else (
            (0, interrupted_sp) if sp < interrupted_sp else (0, 1 << (8 * self.word)))
        self._watch_return(t.read_word(sp))
        self._entered(handler, SignalDelivery(t.isa.code_address(resume), stack))

    def _slot(self, base: int, offset: int, size: int) -> int:
        return int.from_bytes(self.target.mem_read(base + offset, size), self.target.byteorder)

    def _handler_stack(self, uc: int, sp: int, interrupted_sp: int) -> tuple[int, int]:
        """The sigaltstack (uc_stack: ss_sp, ss_size) when the frame lies on it and the
        interrupted code did not run on it (sigaltstack(2)); else below the interrupted
        SP (the stack grows down on x86)."""
        f: SigFrame = self.frame
        (sp_off, _flags_off, size_off), (sp_size, _flags_size, size_size) = \
            f.stack, f.stack_sizes
        base = self._slot(uc, sp_off, sp_size)
        size = self._slot(uc, size_off, size_size)
        if size and base <= sp < base + size and not base < interrupted_sp <= base + size:
            return base, base + size
        return 0, interrupted_sp

    # ------------------------------------------------------------ its return
    def _watch_return(self, restorer: int) -> None:
        """A code hook at the system call of the code the handler returns to."""
        if restorer in self.restorer_sites:
            return
        site = self._syscall_after(restorer)
        self.restorer_sites[restorer] = site
        if site and site not in self.target.point_hooks:
            self.target.hook_code(self._at_syscall, site, site)

    def _syscall_after(self, addr: int) -> int:
        """The first system-call instruction among the few at addr (0: none)."""
        if self._cs is None:
            from emutrace.discover.decode import engine

            engines = self.target.isa.engines
            self._cs = engine(engines.cs_arch, engines.cs_mode)
        try:
            code = bytes(self.target.mem_read(addr, RESTORER_BYTES))
        except Exception:  # noqa: BLE001 - an unreadable return address: not watched
            return 0
        for n, (at, size, _m, _o) in enumerate(self._cs.disasm_lite(code, addr)):
            if code[at - addr:at - addr + size] == self.syscall_insn:
                return at
            if n + 1 >= RESTORER_INSNS:
                break
        return 0

    def _at_syscall(self, _uc: object, addr: int, _size: int, _data: object) -> None:
        t = self.target
        if t.reg_read(self.number_reg) in self.sigreturns:
            self._returned(addr)
            t.want_blocks()  # the interrupted code is the next block
