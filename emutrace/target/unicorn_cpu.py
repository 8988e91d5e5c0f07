"""The Unicorn engine behind :class:`~emutrace.isa.base.CpuPort`.

Creates a Uc for an ISA from the names in its description, applies the reset fix-ups, and
gives register access by our short names (constants resolved once and cached).
"""

from __future__ import annotations

import ctypes
import importlib
import threading
from collections.abc import Callable
from functools import reduce
from typing import Any

import unicorn
from unicorn import unicorn_const as ucc
from unicorn.unicorn_py3.unicorn import uclib

from emutrace.isa.base import Endian, Isa, RegValue
from emutrace.target.protocol import (
    BlockHook,
    Capabilities,
    CodeHook,
    CpuFault,
    DeviceRead,
    DeviceWrite,
    MemHook,
    MemoryFault,
    PortIn,
    PortOut,
)
from emutrace.target.pulled import WordMemory

PERM_R, PERM_W, PERM_X = ucc.UC_PROT_READ, ucc.UC_PROT_WRITE, ucc.UC_PROT_EXEC
# uc_ctl's request word for uc_ctl_remove_cache (unicorn.h UC_CTL_WRITE: the op in bits 30-31,
# the argument count in bits 26-29), made once: the binding's `ctl_remove_cache` encodes it
# and wraps its two bounds again at every call (~3 µs), and arming a function drops the
# translation under each of its sites
_REMOVE_CACHE = (ucc.UC_CTL_IO_WRITE << 30) | (2 << 26) | ucc.UC_CTL_TB_REMOVE_CACHE
_FLUSH_TB = (ucc.UC_CTL_IO_WRITE << 30) | ucc.UC_CTL_TB_FLUSH  # (no arguments)


def _checked(status: int) -> None:
    """A libunicorn call's status, as the binding raises it."""
    if status != ucc.UC_ERR_OK:
        raise unicorn.UcError(status)


class UnicornMemoryFault(unicorn.UcError, MemoryFault):
    """A refused read or write of guest memory: the protocol's MemoryFault, and the
    binding's UcError (with its errno) for the callers that read the error code."""


# Unicorn's error codes → (the protocol's name of the fault, the signal Linux delivers)
FAULTS = {
    ucc.UC_ERR_READ_UNMAPPED: ("read_unmapped", "SIGSEGV"),
    ucc.UC_ERR_WRITE_UNMAPPED: ("write_unmapped", "SIGSEGV"),
    ucc.UC_ERR_FETCH_UNMAPPED: ("fetch_unmapped", "SIGSEGV"),
    ucc.UC_ERR_READ_PROT: ("read_prot", "SIGSEGV"),
    ucc.UC_ERR_WRITE_PROT: ("write_prot", "SIGSEGV"),
    ucc.UC_ERR_FETCH_PROT: ("fetch_prot", "SIGSEGV"),
    ucc.UC_ERR_READ_UNALIGNED: ("read_unaligned", "SIGBUS"),
    ucc.UC_ERR_WRITE_UNALIGNED: ("write_unaligned", "SIGBUS"),
    ucc.UC_ERR_FETCH_UNALIGNED: ("fetch_unaligned", "SIGBUS"),
    ucc.UC_ERR_INSN_INVALID: ("insn_invalid", "SIGILL"),
    ucc.UC_ERR_EXCEPTION: ("exception", "SIGILL"),
}


def cpu_fault(e: unicorn.UcError) -> CpuFault:
    """The protocol's CpuFault for an error emu_start returned."""
    access, signal = FAULTS.get(e.errno, ("error", "SIGILL"))
    return CpuFault(access, signal, str(e))


def _const(module: object, name: str) -> int:
    try:
        return int(getattr(module, name))
    except AttributeError:
        raise KeyError(f"{getattr(module, '__name__', module)} has no constant {name}") from None


_C_HOOK_KINDS = {"intr": ucc.UC_HOOK_INTR, "block": ucc.UC_HOOK_BLOCK, "code": ucc.UC_HOOK_CODE}


class UnicornCPort:
    """The target protocol's `CPort` on Unicorn: the uc_engine handle, the entry points of
    the libunicorn the Python binding loaded (one Unicorn instance, whatever the C library
    was linked with), and hooks with C callbacks added through that library."""

    def __init__(self, uc: unicorn.Uc) -> None:
        self.engine = uc
        uch = uc._uch  # (the binding keeps it as a c_void_p)
        self.handle = int(uch.value or 0) if uch is not None else 0

    def function(self, name: str) -> int:
        return int(ctypes.cast(getattr(uclib, f"uc_{name}"), ctypes.c_void_p).value or 0)

    def add_hook(self, kind: str, fn: int, data: int, begin: int = 1, end: int = 0) -> int:
        handle = ctypes.c_size_t()
        err = uclib.uc_hook_add(self.engine._uch, ctypes.byref(handle), _C_HOOK_KINDS[kind],
                                ctypes.c_void_p(fn), ctypes.c_void_p(data),
                                ctypes.c_uint64(begin), ctypes.c_uint64(end))
        if err != ucc.UC_ERR_OK:
            raise unicorn.UcError(err)
        return int(handle.value)

    def del_hook(self, handle: int) -> None:
        uclib.uc_hook_del(self.engine._uch, ctypes.c_size_t(handle))

    def drop_all_code(self) -> None:
        """uc_ctl_flush_tb.  uc_hook_del invalidates each translated region the hook was
        applied to (uc.c hook_invalidate_region): the block hook of a run of Debian i386
        `python3 -c` took 1.2 s to delete, 0.02 s flush + 0.14 s after one flush."""
        _checked(uclib.uc_ctl(self.engine._uch, _FLUSH_TB))

    def stop(self) -> None:
        self.engine.emu_stop()


class UnicornCpu(WordMemory):
    """One emulated CPU with its memory; implements CpuPort and the target protocol
    (target/protocol.py)."""

    kind = "unicorn"
    translates_code = True  # patched code: drop its translation, restart its block
    watches_memory = True  # bounded UC_HOOK_MEM_READ / UC_HOOK_MEM_WRITE
    # every event source and service of target/protocol.py (port I/O: x86's IN/OUT only,
    # `hook_port_io` is asked with the ISA's instruction names)
    capabilities = Capabilities()

    def __init__(self, isa: Isa, cpu_model: str | None = None,
                 uc: unicorn.Uc | None = None) -> None:
        """A new Uc for isa, or `uc`: one made and set up by another layer (Qiling's
        `ql.uc`, target/qiling_os.py), taken as it is."""
        self.isa = isa
        # set by target/unicorn_run's watcher (Ctrl-C, SIGTERM, SIGHUP, --timeout): a system
        # call that waits (nanosleep) ends early when it is set
        self.stop_requested = threading.Event()
        eng = isa.engines
        if uc is not None:
            self.uc = uc
        else:
            mode = reduce(lambda a, m: a | _const(ucc, m), eng.uc_mode, 0)
            self.uc = unicorn.Uc(_const(ucc, eng.uc_arch), mode)
            model = cpu_model or eng.uc_cpu_model  # a board's CPU (UC_CPU_ARM64_A57) first
            if model:
                regs = importlib.import_module(f"unicorn.{eng.uc_reg_module}")
                self.uc.ctl_set_cpu_model(_const(regs if hasattr(regs, model) else ucc, model))
            if eng.uc_tlb_virtual:
                self.uc.ctl_set_tlb_mode(ucc.UC_TLB_VIRTUAL)  # type: ignore[attr-defined]
        self._regmod = importlib.import_module(f"unicorn.{eng.uc_reg_module}")
        self._reg_ids: dict[str, int] = {}
        # registers the binding reads as a plain 64-bit word (its default class), by name:
        # read here with one uc_reg_read (the binding looks the class up at every read)
        self._words: dict[str, int] = {}
        self._uch = self.uc._uch
        self.byteorder: Endian = isa.identity.endian
        self.word = isa.identity.word_size
        flag = isa.alt_mode_flag
        self._alt_mode = (self.reg_id(flag[0]), flag[1]) if flag is not None else None
        # hook_code_stores' hooks waiting for their range to become writable
        self._store_watches: list[tuple[MemHook, int, int]] = []

    @property
    def c_port(self) -> UnicornCPort:
        """What a C engine needs of this CPU (target/protocol.py `CPort`)."""
        port = self.__dict__.get("_c_port")
        if port is None or port.engine is not self.uc:
            port = self.__dict__["_c_port"] = UnicornCPort(self.uc)
        return port

    # ------------------------------------------------------------ registers
    def reg_id(self, name: str) -> int:
        rid = self._reg_ids.get(name)
        if rid is None:
            rid = _const(self._regmod, self.isa.engines.uc_reg_constant(name))
            self._reg_ids[name] = rid
        return rid

    def reg_read(self, name: str) -> int:
        rid = self._words.get(name)
        if rid is not None:
            word = ctypes.c_uint64()
            _checked(uclib.uc_reg_read(self._uch, rid, ctypes.byref(word)))
            return word.value
        msr = self.isa.engines.uc_msrs.get(name)
        if msr is not None:  # (i386's segment bases: model-specific registers only)
            return int(self.uc.msr_read(msr))
        rid = self.reg_id(name)
        value = self.uc.reg_read(rid)
        assert isinstance(value, int)
        select = getattr(type(self.uc), "_select_reg_class", None)  # (unicorn 2.1's)
        if select is not None and select(rid) is ctypes.c_uint64:
            self._words[name] = rid
        return value

    def reg_write(self, name: str, value: RegValue) -> None:
        self.uc.reg_write(self.reg_id(name), value)  # type: ignore[arg-type]

    def raw_reg(self, name: str) -> Any:
        """The register as Unicorn returns it (x87 FPn: (mantissa, exponent); XMMn: int)."""
        return self.uc.reg_read(self.reg_id(name))

    def in_alt_mode(self) -> bool:
        """The CPU runs its alternate instruction set now (ARM: Thumb); register id resolved
        once, since block hooks ask at every block."""
        if self._alt_mode is None:
            return False
        reg, bit = self._alt_mode
        return bool(self.uc.reg_read(reg) & bit)  # type: ignore[operator]

    @property
    def pc(self) -> int:
        return self.reg_read(self.isa.registers.pc)

    # ------------------------------------------------------------ memory
    def mem_read(self, addr: int, size: int) -> bytes:
        """(uc_mem_read straight into a buffer made here: the binding's mem_read copies
        it into a bytearray first, which is copied again into bytes)"""
        data = ctypes.create_string_buffer(size)
        status = uclib.uc_mem_read(self._uch, addr, data, size)
        if status != ucc.UC_ERR_OK:
            raise UnicornMemoryFault(status)
        return data.raw

    def mem_write(self, addr: int, data: bytes) -> None:
        try:
            self.uc.mem_write(addr, data)
        except unicorn.UcError as e:
            raise UnicornMemoryFault(e.errno) from None

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None:
        self.uc.mem_map(addr, size, perms)
        self._writable_now(addr, addr + size, perms)

    def mem_unmap(self, addr: int, size: int) -> None:
        self.uc.mem_unmap(addr, size)

    def mem_protect(self, addr: int, size: int, perms: int) -> None:
        self.uc.mem_protect(addr, size, perms)
        self._writable_now(addr, addr + size, perms)

    def memory_regions(self) -> list[tuple[int, int, int]]:
        return [(int(b), int(e), int(p)) for b, e, p in self.uc.mem_regions()]

    def map_host_memory(self, addr: int, size: int, host_address: int,
                        perms: int = 7) -> None:
        """uc_mem_map_ptr: Unicorn reads and writes the caller's buffer."""
        self.uc.mem_map_ptr(addr, size, perms, host_address)
        self._writable_now(addr, addr + size, perms)

    @property
    def page_size(self) -> int:
        return int(self.uc.ctl_get_page_size())

    def map_device(self, base: int, size: int, read: DeviceRead, write: DeviceWrite) -> None:
        """uc_mmio_map (whole pages): each load or store there calls read or write."""
        def on_read(_uc: unicorn.Uc, offset: int, width: int, _d: object) -> int:
            return read(offset, width)

        def on_write(_uc: unicorn.Uc, offset: int, width: int, value: int, _d: object) -> None:
            write(offset, width, value)

        self.uc.mmio_map(base, size, on_read, None, on_write, None)


    # ------------------------------------------------------------ code and hooks
    def write_code(self, addr: int, data: bytes) -> None:
        self.uc.mem_write(addr, data)

    def drop_code_cache(self, begin: int, end: int) -> bool:
        """Unicorn does not notice host writes nor hooks added after translation: drop the
        translated blocks of the range (uc_ctl_remove_cache)."""
        _checked(uclib.uc_ctl(self._uch, _REMOVE_CACHE, ctypes.c_uint64(begin),
                              ctypes.c_uint64(end)))
        return True

    def want_blocks(self) -> None:
        """Nothing to do: the block hook sees every block."""

    def hook_code(self, fn: CodeHook, begin: int = 1, end: int = 0, data: Any = None) -> int:
        return int(self.uc.hook_add(ucc.UC_HOOK_CODE, fn, data, begin, end))

    def hook_hw(self, fn: CodeHook, begin: int, end: int, data: Any = None) -> int:
        """A hardware slot is modelled by a bounded code hook."""
        return self.hook_code(fn, begin, end, data)

    def hook_block(self, fn: BlockHook, begin: int = 1, end: int = 0) -> int:
        return int(self.uc.hook_add(ucc.UC_HOOK_BLOCK, fn, None, begin, end))

    def hook_invalid_instruction(self, fn: Callable[[], bool]) -> int:
        """UC_HOOK_INSN_INVALID: fn's True lets the run go on at the PC it left."""
        return int(self.uc.hook_add(ucc.UC_HOOK_INSN_INVALID, lambda _uc, _d: fn()))

    def hook_port_io(self, port_in: PortIn, port_out: PortOut,
                     instructions: tuple[str, str]) -> None:
        """UC_HOOK_INSN on the ISA's IN and OUT (their constants in its engine's register
        module, e.g. UC_X86_INS_IN / UC_X86_INS_OUT)."""
        consts = importlib.import_module(f"unicorn.{self.isa.engines.uc_reg_module}")

        def on_in(_uc: unicorn.Uc, port: int, size: int, _d: object) -> int:
            return port_in(port, size)

        def on_out(_uc: unicorn.Uc, port: int, size: int, value: int, _d: object) -> None:
            port_out(port, size, value)

        self.uc.hook_add(ucc.UC_HOOK_INSN, on_in, None, 1, 0, _const(consts, instructions[0]))
        self.uc.hook_add(ucc.UC_HOOK_INSN, on_out, None, 1, 0, _const(consts, instructions[1]))

    def hook_mem_read(self, fn: MemHook, begin: int, end: int) -> int:
        return int(self.uc.hook_add(ucc.UC_HOOK_MEM_READ, fn, None, begin, end))

    def hook_mem_write(self, fn: MemHook, begin: int, end: int) -> int:
        return int(self.uc.hook_add(ucc.UC_HOOK_MEM_WRITE, fn, None, begin, end))

    def hook_code_stores(self, fn: MemHook, begin: int, end: int) -> None:
        """fn before every store into [begin, end], a range of code: a write hook installed
        once some page of the range is writable (now, or when mem_protect or mem_map make
        one so).  Until then a guest store there faults before any hook would run, and
        Unicorn sends every load or store of the run down its slow path while a memory
        hook of that kind is installed, bounded or not (a static program's read-only text:
        busybox gzip ran ~2x slower untraced with one that never fired)."""
        if any(b <= end and begin <= e and perms & ucc.UC_PROT_WRITE
               for b, e, perms in self.uc.mem_regions()):
            self.hook_mem_write(fn, begin, end)
        else:
            self._store_watches.append((fn, begin, end))

    def _writable_now(self, lo: int, hi: int, perms: int) -> None:
        """[lo, hi) was mapped or protected with perms: the store watches over it whose
        range became writable are installed."""
        if not perms & ucc.UC_PROT_WRITE or not self._store_watches:
            return
        waiting = []
        for fn, begin, end in self._store_watches:
            if begin < hi and lo <= end:
                self.hook_mem_write(fn, begin, end)
            else:
                waiting.append((fn, begin, end))
        self._store_watches = waiting

    def hook_del(self, handle: int) -> None:
        self.uc.hook_del(handle)

    def stop(self) -> None:
        self.uc.emu_stop()

    # ------------------------------------------------------------ context and running
    def context_save(self) -> Any:
        return self.uc.context_save()

    def context_restore(self, context: Any) -> None:
        self.uc.context_restore(context)

    def run(self, begin: int, until: int, count: int = 0) -> None:
        """emu_start; an error it returns is a CpuFault (Unicorn's own timeout is not
        used: target/unicorn_run.py `interruptible`)."""
        try:
            self.uc.emu_start(begin, until, count=count)
        except unicorn.UcError as e:
            raise cpu_fault(e) from None

    # ------------------------------------------------------------ reset
    def apply_reset(self) -> None:
        """Reset fix-ups from the ISA description, then its set-up code."""
        for fix in self.isa.reset:
            value = fix.value if fix.combine == "set" else self.reg_read(fix.reg) | fix.value
            self.reg_write(fix.reg, value)
        if self.isa.setup is not None:
            self.isa.setup(self)

    def sysreg_read(self, name: str, key: tuple[int, ...]) -> int:
        """A system register named by a tuple key (Unicorn's CP_REG: see isa/kernel.py)."""
        value = self.uc.reg_read(self.reg_id(name), key)  # type: ignore[arg-type]
        assert isinstance(value, int)
        return value

    def table_reg(self, name: str) -> tuple[int, int]:
        """(base, limit) of a descriptor-table register (x86 IDTR, GDTR)."""
        _selector, base, limit, _flags = self.uc.reg_read(self.reg_id(name))  # type: ignore[misc]
        return int(base), int(limit)
