"""MMIO device models for boards: the console UARTs (PL011, NS16550), the power-off
device (sifive_test), a timer (CLINT), fw_cfg and constant regions (probed devices that
are absent).

A model is pure: `read(offset, size) -> int` and `write(offset, size, value)`, with the
console and the power-off request handed in (`Console`, `PowerOff`); the board's run
(emutrace/board_session.py) maps it with Unicorn's mmio_map."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import BinaryIO, Protocol

from emutrace.machine.board.gic import Gic


class Console:
    """The board's console: what the guest printed (to `out` and kept for --until), and
    the text typed into it (--input), offered once the console has shown `input_after`.
    `until` is looked for in what was printed after the last typed character was read
    (like `expect`: with input, the answer to it, not an earlier prompt)."""

    def __init__(self, out: BinaryIO | None, until: bytes = b"", typed: bytes = b"",
                 input_after: bytes = b"", on_until: Callable[[], None] | None = None) -> None:
        self.out = out
        self.until = until
        self.pending = bytearray(typed)
        self.input_after = input_after
        self.on_until = on_until
        self.transcript = bytearray()
        self.reads = 0  # characters the guest took
        self.answer_from = 0  # where --until is looked for: after the last typed character

    def put(self, byte: int) -> None:
        self.transcript.append(byte)
        if self.out is not None:
            self.out.write(bytes((byte,)))
            if byte == 0x0A:
                self.out.flush()
        if self.until and not self.pending and self.transcript.endswith(self.until) \
                and len(self.transcript) - len(self.until) >= self.answer_from \
                and self.on_until is not None:
            self.on_until()

    def has_input(self) -> bool:
        return bool(self.pending) and (not self.input_after or
                                       self.input_after in self.transcript)

    def get(self) -> int:
        if not self.has_input():
            return 0
        self.reads += 1
        byte = self.pending.pop(0)
        if not self.pending:
            self.answer_from = len(self.transcript)
        return byte

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()


class PowerOff(Exception):
    """The guest powered the machine off (sifive_test, PSCI SYSTEM_OFF): the run ends with
    `status`."""

    def __init__(self, status: int, how: str) -> None:
        super().__init__(how)
        self.status = status
        self.how = how


class Model(Protocol):
    def read(self, offset: int, size: int) -> int: ...

    def write(self, offset: int, size: int, value: int) -> None: ...


class Latch:
    """Registers that read back what was written (control registers we do not model)."""

    def __init__(self) -> None:
        self.regs: dict[int, int] = {}

    def read(self, offset: int, size: int) -> int:
        return self.regs.get(offset, 0)

    def write(self, offset: int, size: int, value: int) -> None:
        self.regs[offset] = value


class Pl011(Latch):
    """ARM PrimeCell UART PL011 (TRM DDI 0183): DR at 0x00 (write: transmit; read: the next
    typed character), FR at 0x18 (TXFE bit 7 always, RXFE bit 4 while nothing is typed);
    the transmitter is never busy.  Other registers latch; the PrimeCell ID registers at
    0xFE0–0xFFC read as a PL011's (3.3.14–3.3.17)."""

    DR, FR = 0x00, 0x18
    FR_TXFE, FR_RXFE = 1 << 7, 1 << 4
    IDS = dict(zip(range(0xFE0, 0x1000, 4), (0x11, 0x10, 0x14, 0x00, 0x0D, 0xF0, 0x05, 0xB1),
                   strict=True))

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def read(self, offset: int, size: int) -> int:
        if offset == self.DR:
            return self.console.get()
        if offset == self.FR:
            return self.FR_TXFE | (0 if self.console.has_input() else self.FR_RXFE)
        if offset in self.IDS:
            return self.IDS[offset]
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == self.DR:
            self.console.put(value & 0xFF)
        else:
            super().write(offset, size, value)


class Ns16550(Latch):
    """NS16550A UART (National PC16550D data sheet): registers `reg << reg_shift` apart;
    RBR/THR at 0 (while LCR.DLAB = 0), IIR 2 reads "no interrupt" (0x01), LSR 5 reads
    THRE | TEMT (0x60), plus DR (bit 0) while something is typed.  Divisor latch and the
    other registers latch."""

    RBR, IIR, LCR, LSR = 0, 2, 3, 5
    LSR_DR, LSR_THRE_TEMT, IIR_NONE, DLAB = 0x01, 0x60, 0x01, 0x80

    def __init__(self, console: Console, reg_shift: int = 0) -> None:
        super().__init__()
        self.console = console
        self.shift = reg_shift

    def read(self, offset: int, size: int) -> int:
        reg = offset >> self.shift
        dlab = self.regs.get(self.LCR << self.shift, 0) & self.DLAB
        if reg == self.RBR and not dlab:
            return self.console.get()
        if reg == self.LSR:
            return self.LSR_THRE_TEMT | (self.LSR_DR if self.console.has_input() else 0)
        if reg == self.IIR:
            return self.IIR_NONE
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        reg = offset >> self.shift
        dlab = self.regs.get(self.LCR << self.shift, 0) & self.DLAB
        if reg == self.RBR and not dlab:
            self.console.put(value & 0xFF)
        else:
            super().write(offset, size, value)


class SifiveTest:
    """QEMU's sifive_test finisher (hw/misc/sifive_test.c): a 32-bit write at 0 of
    0x5555 (pass), 0x3333 | code << 16 (fail with code) or 0x7777 (reset) powers off."""

    PASS, FAIL, RESET = 0x5555, 0x3333, 0x7777

    def read(self, offset: int, size: int) -> int:
        return 0

    def write(self, offset: int, size: int, value: int) -> None:
        if offset != 0:
            return
        kind, code = value & 0xFFFF, value >> 16 & 0xFFFF
        if kind == self.PASS:
            raise PowerOff(0, "sifive_test pass")
        if kind == self.FAIL:
            raise PowerOff(code, f"sifive_test fail {code}")
        if kind == self.RESET:
            raise PowerOff(0, "sifive_test reset (not modelled: ends the run)")


class DebugExit:
    """QEMU's isa-debug-exit (hw/misc/debugexit.c): writing v ends QEMU with the status
    (v << 1) | 1, so the run ends with that status too."""

    def read(self, offset: int, size: int) -> int:
        return 0

    def write(self, offset: int, size: int, value: int) -> None:
        raise PowerOff(((value << 1) | 1) & 0xFF, f"isa-debug-exit {value:#x}")


# one wait of an idle CPU for its timer, at most (threading's waits refuse longer ones)
LONGEST_WAIT = 86_400.0


def wait_for_timer(stop: threading.Event, seconds: float) -> bool:
    """Wait until a timer `seconds` ahead fires; True if the run was stopped first.  A
    compare far in the future (a 64-bit mtimecmp or CVAL near 2^64: centuries of ticks) is
    waited for a day at a time, so the idle CPU waits for --timeout or a stop signal as
    QEMU's does, instead of a wait too long for the host's clock."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stop.wait(min(left, LONGEST_WAIT)):
            return True
    return stop.is_set()


class Clint(Latch):
    """The SiFive CLINT as QEMU's virt has it (hw/intc/riscv_aclint.c): msip at +0,
    hart 0's mtimecmp at +0x4000, mtime at +0xBFF8 counting at `freq` Hz (QEMU's virt:
    10 MHz) from the host's monotonic clock, so delays and timeouts that poll it pass as on
    QEMU (not reproducible to the tick).  A written mtimecmp is a timer the machine may
    wake an idle hart for (`seconds_to_timer`)."""

    MTIME, MTIMECMP = 0xBFF8, 0x4000

    def __init__(self, freq: int = 10_000_000) -> None:
        super().__init__()
        self.freq = freq
        self.origin = time.monotonic_ns()
        self.cmp = bytearray(b"\xff" * 8)  # reset: never
        self.armed = False

    def write(self, offset: int, size: int, value: int) -> None:
        if self.MTIMECMP <= offset < self.MTIMECMP + 8:
            at = offset - self.MTIMECMP
            self.cmp[at:at + size] = value.to_bytes(size, "little")[:8 - at]
            self.armed = True
        else:
            super().write(offset, size, value)

    def seconds_to_timer(self) -> float | None:
        """Seconds until mtime reaches mtimecmp (0 if it has), None without a timer."""
        if not self.armed:
            return None
        ticks = int.from_bytes(self.cmp, "little") - self.mtime()
        return max(ticks, 0) / self.freq

    def mtime(self) -> int:
        return (time.monotonic_ns() - self.origin) * self.freq // 1_000_000_000

    def read(self, offset: int, size: int) -> int:
        if self.MTIME <= offset < self.MTIME + 8:
            shift = 8 * (offset - self.MTIME)
            return (self.mtime() >> shift) & ((1 << (8 * size)) - 1)
        if self.MTIMECMP <= offset < self.MTIMECMP + 8:
            at = offset - self.MTIMECMP
            return int.from_bytes(self.cmp[at:at + size], "little")
        return super().read(offset, size)


class FwCfg:
    """QEMU's fw_cfg, MMIO flavour (QEMU docs/specs/fw_cfg.rst): selector at +8 (16-bit,
    big-endian), data at +0 (1–8 bytes per read, string-preserving: bytes in memory order).
    What a machine with no -kernel, -initrd or files offers: the signature "QEMU" (key 0),
    the interface id 1 (key 1: traditional interface, no DMA), every other key reads as
    zeros (kernel size 0, an empty file directory)."""

    DATA, SELECTOR = 0x00, 0x08
    SIGNATURE, ID = 0x00, 0x01

    def __init__(self, byteorder: str = "little") -> None:
        self.order = byteorder
        self.items = {self.SIGNATURE: b"QEMU", self.ID: (1).to_bytes(4, "little")}
        self.key, self.offset = 0, 0

    def read(self, offset: int, size: int) -> int:
        if offset != self.DATA:
            return 0
        item = self.items.get(self.key, b"")
        chunk = item[self.offset:self.offset + size].ljust(size, b"\0")
        self.offset += size
        return int.from_bytes(chunk, self.order)  # type: ignore[arg-type]

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == self.SELECTOR and size == 2:
            raw = value.to_bytes(2, self.order)  # type: ignore[arg-type]
            self.key, self.offset = int.from_bytes(raw, "big"), 0


class SoftReset:
    """A reset register (QEMU hw/mips/malta.c, the FPGA's SOFTRES at +0x500: writing
    0x42 resets the board; QEMU -no-reboot then exits with 0): writing `value` at 0
    powers off."""

    def __init__(self, value: int) -> None:
        self.value = value

    def read(self, offset: int, size: int) -> int:
        return 0

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == 0 and value == self.value:
            raise PowerOff(0, f"soft reset {value:#x} (-no-reboot: power-off)")


class Window:
    """A model mapped `skew` bytes into a larger range (its page): accesses beside its
    `size` bytes read 0 and are ignored."""

    def __init__(self, model: Model, skew: int, size: int) -> None:
        self.model, self.skew, self.size = model, skew, size

    def read(self, offset: int, size: int) -> int:
        at = offset - self.skew
        return self.model.read(at, size) if 0 <= at < self.size else 0

    def write(self, offset: int, size: int, value: int) -> None:
        at = offset - self.skew
        if 0 <= at < self.size:
            self.model.write(at, size, value)


class Const:
    """A device that is absent: every read gives `value` (0, or all ones: PCI's "no
    device"), writes are ignored."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def read(self, offset: int, size: int) -> int:
        return self.value & ((1 << (8 * size)) - 1)

    def write(self, offset: int, size: int, value: int) -> None:
        pass


def build(kind: str, params: Mapping[str, int], console: Console) -> Model:
    """The model of a board's device entry (spec.Device.kind)."""
    if kind == "pl011":
        return Pl011(console)
    if kind == "ns16550":
        return Ns16550(console, params.get("reg_shift", 0))
    if kind == "sifive_test":
        return SifiveTest()
    if kind == "debug_exit":
        return DebugExit()
    if kind == "clint":
        return Clint(params.get("freq", 10_000_000))
    if kind == "fw_cfg":
        return FwCfg()
    if kind == "const":
        return Const(params.get("value", 0))
    if kind == "soft_reset":
        return SoftReset(params["value"])
    if kind == "gicv2":
        return Gic()
    raise ValueError(f"unknown device kind {kind!r}")
