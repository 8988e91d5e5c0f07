"""Qiling's operating systems as a target: a program whose loader, memory and system
services are Qiling's (its Linux layer for an ELF, its UEFI layer for a PE application,
its DOS layer for a .COM),
traced through the target protocol.  Qiling runs on Unicorn and keeps its engine in
`ql.uc`; that `Uc` is wrapped in the ordinary `UnicornCpu`, so every backend's Unicorn port
runs unchanged (the C engines too, through its `c_port`) and Qiling's own hooks (system
calls, its interrupt dispatcher) stay installed beside ours.

Coexistence with Qiling's hooks:

* Qiling dispatches every CPU interrupt through one UC_HOOK_INTR of its own
  (`_hook_intr_cb`) and raises "not handled" for a number nobody registered; the ISA's
  breakpoint numbers (isa `breakpoints`: x86 3, ARM/AArch64 7, MIPS 18, PPC 6) are
  registered there as handled-elsewhere, and our own INTR hook (`QilingHooks.intr_hook`,
  after Qiling's in Unicorn's hook list) hands them to the backend's `on_trap`; the C
  engine replaces that hook with its own as it replaces `unicorn_run.HookSet`'s;
* x86_64's SYSCALL is Qiling's UC_HOOK_INSN; ours after it only tells a C engine that a
  system call ran (`after_insn_syscall`);
* Qiling's log goes to a logger of its own with no handler: nothing of Qiling's reaches
  the guest's stdout or stderr, which are the process's own descriptors (Qiling's
  `PersistentQlFile` over fds 0, 1, 2).

Qiling needs the program inside its root: the program is copied into an empty temporary
root (no library, no file of the host); a Linux guest sees it as `/<name>`."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import unicorn
from unicorn import unicorn_const as ucc

from emutrace.isa.base import Isa
from emutrace.target.qiling_table import HWCAP_CLEAR, MCU_BOARDS
from emutrace.target.unicorn_cpu import UnicornCpu, cpu_fault
from emutrace.target.unicorn_run import Stop, interruptible

QILING_LOGGER = "emutrace.qiling"  # Qiling's log: kept, never printed
# Qiling picks its DOS layer by the name's suffix: a program's suffix → Qiling's.  It loads
# a .COM at start_cs:0100 of its profile (segment 0 here, where a linear address is its
# offset, as x86_16 reads addresses: isa/x86_16.py), a boot sector at 0000:7C00
DOS_SUFFIXES = {".com": ".DOS_COM", ".mbr": ".DOS_MBR"}
DOS_PROFILE = {"COM": {"start_cs": "0"}}
MCU_BOARDS_UARTS = ("usart1", "usart2", "usart6")  # (an MCU board's, where created)
AT_NULL, AT_HWCAP = 0, 16  # auxv keys (include/uapi/linux/auxvec.h)
PROT_EXEC = 4  # mmap's prot bit (include/uapi/asm-generic/mman-common.h)
PAGE = 4096  # mmap2's offset unit (mm/mmap.c: pgoff << PAGE_SHIFT, 4 KiB pages here)


def missing_reason() -> str | None:
    """Why Qiling cannot run here (None: it can)."""
    if importlib.util.find_spec("qiling") is None:  # (found, not imported: info stays quick)
        return "qiling is not installed (pip install 'emutrace[qiling]')"
    return None


def repair_cortex_m_engine() -> None:
    """Let Qiling 1.4.6's MCU layer make its engine beside unicorn 2.1.4.  Its Cortex-M
    engine is `MultiTaskUnicorn(Uc)` (qiling/extensions/multitask.py), but unicorn 2's
    `Uc.__new__` returns an instance of the architecture's own subclass (`UcAArch32`), not
    of MultiTaskUnicorn, so Python runs no `__init__` and the engine has no `_uch`: the
    board's first `mem_map` raises AttributeError (qiling/loader/mcu.py load_env).  Here the
    Cortex-M architecture's `uc` makes a subclass of MultiTaskUnicorn whose `__new__` is
    object's, so MultiTaskUnicorn's and Uc's `__init__` run (in this process only; Qiling's
    files are unchanged).  Idempotent."""
    from functools import cached_property

    from qiling.arch import cortex_m
    from qiling.extensions.multitask import MultiTaskUnicorn

    arch = cortex_m.QlArchCORTEX_M
    if getattr(arch, "_emutrace_engine", False):
        return

    class CortexMEngine(MultiTaskUnicorn):
        def __new__(cls, *_args: object, **_kwargs: object) -> CortexMEngine:
            return object.__new__(cls)

    def engine(_self: object) -> CortexMEngine:
        # as qiling/arch/cortex_m.py: ARM, M-profile, Thumb; a 10 ms scheduling interval
        return CortexMEngine(ucc.UC_ARCH_ARM, ucc.UC_MODE_ARM + ucc.UC_MODE_MCLASS +
                             ucc.UC_MODE_THUMB, 10)

    prop = cached_property(engine)
    prop.__set_name__(arch, "uc")
    arch.uc = prop
    arch._emutrace_engine = True


class QilingHooks:
    """TrapHooks of a run under Qiling, with what the C engines ask of the run's hook set
    (`unicorn_run.HookSet`): `guard`, `pending`, `intr_hook`, `on_intr`,
    `after_insn_syscall`."""

    def __init__(self, ql: Any, cpu: UnicornCpu) -> None:
        self.cpu = cpu
        self.pending: BaseException | None = None
        self.on_trap: Callable[[int], bool] | None = None
        self.after_insn_syscall: Callable[[], None] | None = None
        self.trap_numbers = {b.intno for b in cpu.isa.breakpoints
                             if b.works and b.hook == "intr" and b.intno is not None}
        for intno in sorted(self.trap_numbers):  # handled by our hook (Qiling: no error)
            self._claim(ql, intno)
        self.intr_hook = int(cpu.uc.hook_add(ucc.UC_HOOK_INTR, self.on_intr))
        conv = cpu.isa.syscalls
        if conv.hook == "insn":
            const = getattr(unicorn.x86_const, conv.insn or "")
            cpu.uc.hook_add(ucc.UC_HOOK_INSN, self._after_syscall, None, 1, 0, const)

    @staticmethod
    def _claim(ql: Any, intno: int) -> None:
        """Tell Qiling's interrupt dispatcher that `intno` is handled (by our own INTR
        hook), ahead of Qiling's own hooks and ending the dispatch there: the DOS layer's
        hook takes every interrupt and raises for a number it does not serve (int 3)."""
        from qiling.const import QL_HOOK_BLOCK

        ql.hook_intno(lambda _ql, _intno, *_a: QL_HOOK_BLOCK, intno)
        hooks = ql._hook[ucc.UC_HOOK_INTR]  # (Qiling's dispatch list: ours moved first)
        hooks.insert(0, hooks.pop())

    def _after_syscall(self, _uc: unicorn.Uc, _d: object) -> None:
        if self.after_insn_syscall is not None:
            self.guard(self.after_insn_syscall)

    def on_intr(self, _uc: unicorn.Uc, intno: int, _d: object) -> None:
        """A breakpoint's trap to the backend; every other interrupt is Qiling's."""
        if intno not in self.trap_numbers:
            return

        def handle() -> None:
            if self.on_trap is None or not self.on_trap(intno):
                raise GuestTrap(intno)

        self.guard(handle)

    def guard(self, fn: Callable[[], None]) -> None:
        """Run a hook body; an exception stops emulation and is kept for `run`."""
        if self.pending is not None:
            self.cpu.uc.emu_stop()
            return
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - turned into the run's Stop
            self.pending = e
            self.cpu.uc.emu_stop()


class GuestTrap(Exception):
    """A breakpoint the guest executed itself (no backend's): its own SIGTRAP."""

    def __init__(self, intno: int) -> None:
        super().__init__(intno)
        self.intno = intno


def _silent_logger() -> logging.Logger:
    log = logging.getLogger(QILING_LOGGER)
    log.propagate = False
    log.handlers[:] = [logging.NullHandler()]
    log.setLevel(logging.CRITICAL + 1)
    return log


class QilingMachine:
    """One program loaded by Qiling (its OS chosen by Qiling from the file: ELF → Linux,
    PE application → UEFI), stopped before its first instruction, with `cpu` (a `UnicornCpu` over
    `ql.uc`) and `hooks` for a backend."""

    def __init__(self, isa: Isa, program: str, args: Sequence[str],
                 env: dict[str, str], root: str | None = None, dos: str = "",
                 board: str | None = None) -> None:
        """Qiling's root: `root` (a dynamic program's libraries; the program is copied into
        a temporary directory inside it), else an empty temporary directory.  (The guest's
        argv[0] is Qiling's host path of its copy of the program.)"""
        from qiling import Qiling
        from qiling.const import QL_INTERCEPT, QL_VERBOSE

        # the program's copy: a temporary directory (the root, or one inside the root: in
        # its /tmp where it has one that can be written, as the host's)
        inside = None
        if root is not None:
            tmp = os.path.join(root, "tmp")
            inside = tmp if os.path.isdir(tmp) and os.access(tmp, os.W_OK) else root
        self.copy_dir = tempfile.mkdtemp(prefix=".emutrace-qiling-", dir=inside)
        self.root = root if root is not None else self.copy_dir
        name = os.path.basename(program)
        if dos:  # a DOS program (`dos`: its suffix; Qiling: by its name)
            name = os.path.splitext(name)[0] + DOS_SUFFIXES[dos]
        guest = os.path.join(self.copy_dir, name)
        shutil.copy2(program, guest)
        # a file mapped executable (the Linux layer's mmap): (host path, address, offset)
        self.on_exec_map: Callable[[str, int, int], object] | None = None
        try:
            if board is not None:  # MCU firmware: Qiling's board, its peripherals
                self.ql = self._board(board, guest)
            else:
                self.ql = Qiling([guest, *args], self.root, env=dict(env),
                                 verbose=QL_VERBOSE.DISABLED, log_override=_silent_logger(),
                                 profile=DOS_PROFILE if dos else None)
            if self.os_name == "linux":
                self.ql.os.set_syscall("mmap", self._mapped(1), QL_INTERCEPT.EXIT)
                self.ql.os.set_syscall("mmap2", self._mapped(PAGE), QL_INTERCEPT.EXIT)
        except BaseException:
            self.close()
            raise
        self.cpu = UnicornCpu(isa, uc=self.ql.uc)
        self.hooks = QilingHooks(self.ql, self.cpu)
        clear = HWCAP_CLEAR.get(isa.name, 0)
        if clear and self.os_name == "linux":
            self._clear_hwcap(clear)

    @staticmethod
    def _board(board: str, guest: str) -> Any:
        """Qiling on an MCU board (qiling.extensions.mcu.<family>.<board>), its engine
        repaired, with the table's peripherals; the UART's output is written out after the
        run (`run`)."""
        import importlib

        from qiling import Qiling
        from qiling.const import QL_ARCH, QL_OS, QL_VERBOSE

        repair_cortex_m_engine()
        _isa, module, _memories, peripherals = MCU_BOARDS[board]
        family = importlib.import_module(module)
        ql = Qiling([guest], archtype=QL_ARCH.CORTEX_M, ostype=QL_OS.MCU,
                    env=getattr(family, board), verbose=QL_VERBOSE.DISABLED,
                    log_override=_silent_logger())
        for name in peripherals:
            ql.hw.create(name)
        return ql

    def _mapped(self, unit: int) -> Callable[..., None]:
        """Qiling's hook after mmap (unit 1) or mmap2 (offset in 4 KiB units): a file
        mapped with PROT_EXEC is told to `on_exec_map` (a library ld.so maps)."""
        def after(ql: Any, _addr: int, _length: int, prot: int, _flags: int, fd: int,
                  offset: int, retval: int) -> None:
            if not prot & PROT_EXEC or self.on_exec_map is None or retval & 0xFFF:
                return  # (not code, nobody asks, or an error: -errno is not page-aligned)
            fd = ql.unpacks(ql.pack(fd))  # (a signed descriptor, as Qiling reads it)
            f = ql.os.fd[fd] if 0 <= fd < len(ql.os.fd) else None
            if f is None:
                return
            name = f.name.decode() if isinstance(f.name, bytes) else str(f.name)
            self.hooks.guard(lambda: self._tell(name, retval, offset * unit))
        return after

    def _tell(self, name: str, where: int, offset: int) -> None:
        assert self.on_exec_map is not None
        self.on_exec_map(name, where, offset)

    def _clear_hwcap(self, bits: int) -> None:
        """AT_HWCAP without `bits` (qiling_table.HWCAP_CLEAR): the initial stack's auxv,
        after argc, argv[] and NULL, envp[] and NULL (the ELF ABI's process stack)."""
        cpu, word = self.cpu, self.cpu.word
        at = cpu.reg_read(cpu.isa.registers.sp)
        at += word * (cpu.read_word(at) + 2)  # argc, argv[], NULL
        while cpu.read_word(at):  # envp[]
            at += word
        at += word
        while (key := cpu.read_word(at)) != AT_NULL:
            if key == AT_HWCAP:
                cpu.mem_write(at + word, cpu.pack_word(cpu.read_word(at + word) & ~bits))
            at += 2 * word

    @property
    def os_name(self) -> str:
        return str(self.ql.os.type.name).lower()

    @property
    def load_bias(self) -> int:
        """Where Qiling loaded the program relative to its link addresses (a PIE's base,
        0 for a fixed-address program)."""
        return int(getattr(self.ql.loader, "load_address", 0) or 0)

    @property
    def entry(self) -> int:
        """The first instruction Qiling runs (ld.so's for a dynamic program; DOS: its
        loader's start, a linear address)."""
        if self.os_name == "dos":
            return int(self.ql.loader.start_address)
        if self.os_name == "mcu":  # (the reset handler; M-profile code is Thumb only)
            return self.cpu.isa.mode_address(self.cpu.pc, True)
        return int(self.ql.loader.entry_point)

    def modules(self) -> list[tuple[int, int, str]]:
        """The images Qiling's loader mapped: (start, end, host path)."""
        return [(int(i.base), int(i.end), str(i.path))
                for i in getattr(self.ql.loader, "images", [])]

    def run(self, timeout: float = 0.0, max_insns: int = 0) -> Stop:
        """Run the program to its end under Qiling (MCU firmware: `max_insns`
        instructions, then its UART's output to stdout); every end becomes a `Stop`."""
        with interruptible(self.cpu, timeout) as watch:
            try:
                if self.os_name == "mcu":
                    self.ql.run(count=max_insns)
                    self._uart_out()
                else:
                    self.ql.run()
            except unicorn.UcError as e:
                if self.hooks.pending is None:
                    fault = cpu_fault(e)
                    return Stop("signal", signal=fault.signal, pc=self.cpu.pc,
                                detail=fault.access)
            except Exception as e:  # noqa: BLE001 - Qiling's own failure: said in one line
                if self.hooks.pending is None:
                    return Stop("crash", pc=self.cpu.pc,
                                detail=f"Qiling: {type(e).__name__}: {e}")
        pending = self.hooks.pending
        if isinstance(pending, GuestTrap):
            return Stop("signal", signal="SIGTRAP", pc=self.cpu.pc)
        if pending is not None:
            raise pending
        if watch.interrupted:
            return Stop("interrupted", signal=watch.interrupted, pc=self.cpu.pc)
        if watch.timed_out:
            return Stop("timeout", pc=self.cpu.pc)
        if self.os_name == "mcu":
            return Stop("max_insns", pc=self.cpu.pc)
        return Stop("exit", status=self.exit_status(), pc=self.cpu.pc)

    def _uart_out(self) -> None:
        """What the firmware sent on the board's UARTs, to stdout."""
        for name in MCU_BOARDS_UARTS:
            uart = getattr(self.ql.hw, name, None)
            if uart is not None:
                os.write(1, bytes(uart.recv()))

    def exit_status(self) -> int:
        """Linux: the status exit_group was given.  UEFI: 0 when the application's entry
        returned EFI_SUCCESS, else the EFI_STATUS's low byte (1 where that is 0): Qiling
        stops with the entry's return value still in the return register."""
        if self.os_name == "dos":  # int 21h AH=4Ch's return code, in AL (Qiling stops)
            return self.cpu.reg_read("al")
        if self.os_name == "uefi":
            status = self.cpu.reg_read(self.cpu.isa.registers.retval)
            return 0 if status == 0 else (status & 0xFF) or 1
        return int(getattr(self.ql.os, "exit_code", 0) or 0) & 0xFF

    def close(self) -> None:
        shutil.rmtree(self.copy_dir, ignore_errors=True)
