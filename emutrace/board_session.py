"""A board built and run, the board's wiring of a traced run beside session.py and
native_session.py (the board's data and devices are machine/board/): the CPU with the ISA's
bare-metal reset, RAM and MMIO devices from the board's data, the image loaded the way QEMU
loads it (an ELF at its physical addresses and started at its entry, anything else as raw
firmware at the board's -bios address), the trap-entry layer of the ISA
(`isa/kernel_<isa>.py`) behind the exception hook, and a run loop that ends on power-off, on
`--until` text, on idle, or on the usual budgets."""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Protocol, runtime_checkable

from emutrace.backends import BackendOptions, TrapAware, create
from emutrace.discover.argformats import ArgFormats
from emutrace.discover.callabi import DEFAULT_ARGS, CallTypes
from emutrace.discover.symbol_map import load_symbol_file
from emutrace.elf import PF_R, PF_X, Image, Segment, load_image
from emutrace.errors import EXIT_NO_INPUT, EmutraceError, Unsupported, UsageError
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.isa.kernel import (
    INSN_INVALID,
    FirmwareCall,
    KernelSupport,
    TrapOutcome,
    kernel_support,
)
from emutrace.machine.board import devices
from emutrace.machine.board.devicetree import board_dtb
from emutrace.machine.board.exception_returns import ExceptionReturns
from emutrace.machine.board.gic import Gic
from emutrace.machine.board.kernel_elf import physical_segments
from emutrace.machine.board.linked_image import (
    LinkedImage,
    LinkedMemory,
    at_link_address,
    link_addresses,
)
from emutrace.machine.board.presets import BOARDS
from emutrace.machine.board.spec import Board
from emutrace.mechanisms import BACKENDS
from emutrace.mechanisms.settings import BackendSettings, settings_of
from emutrace.session import RunResult, engine_of_run
from emutrace.target.protocol import CpuFault, MemoryFault
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import (
    CpuException,
    HookSet,
    Stop,
    interruptible,
)
from emutrace.tracer import TracedRun, Tracer


@dataclass(frozen=True)
class BoardConfig(BackendSettings):
    """A board run; the backend's settings are inherited (mechanisms/settings.py)."""

    board: str
    image: str
    dtb: str | None = None  # a device tree blob in place of the one the board makes
    append: str | None = None  # the kernel command line: /chosen bootargs (-append)
    initrd: str | None = None  # an initrd (initramfs) at the board's initrd_at (-initrd)
    bios: str | None = None  # firmware that starts first; the image is its payload
    symbols: str | None = None  # function names for the image: System.map, nm, or an ELF
    # the image copies itself this many bytes up (U-Boot's relocation): its code and
    # function names are there too (`relocated`)
    reloc: int | None = None
    until: bytes = b""  # end the run (exit 0) once the console has printed this
    # trace from the first exception entered once the console has printed this (the
    # backend is made then; before it the board runs untraced)
    trace_after: bytes = b""
    typed: bytes = b""  # typed into the console as the guest reads it
    input_after: bytes = b""  # ... once the console has printed this
    max_insns: int = 0
    timeout: float = 0.0
    backend: str = "none"
    # "python" (the reference), "native" (the C hot path, as a Linux run's) or "auto"
    # (native where the backend has it and the library is built)
    engine: str = "auto"
    arg_counts: dict[str, int] = field(default_factory=dict)
    arg_formats: dict[str, ArgFormats] = field(default_factory=dict)  # -A/-R with formats
    default_args: int = DEFAULT_ARGS
    console_out: BinaryIO | None = None  # None: emutrace's stdout


def relocated(image: Image, offset: int) -> Image:
    """The image with a copy of its executable segments and its function symbols `offset`
    bytes up: code an image copied there itself (U-Boot's relocate_code) is decoded from
    the file's bytes and named as the original (ELF images: the names of --symbols)."""
    copies = [replace(g, vaddr=g.vaddr + offset) for g in image.segments if g.flags & PF_X]
    moved = [replace(s, addr=s.addr + offset) for s in image.symbols]
    symbols = sorted([*image.symbols, *moved], key=lambda s: s.addr)
    return replace(image, segments=[*image.segments, *copies], symbols=symbols,
                   _starts=[s.addr for s in symbols])


PROBE = 32  # bytes of code compared
HELD_STEPS = 1  # instructions run between looks at an interrupt the CPU masks (the
# window an unmask leaves may be one instruction: Linux re-masks right after its idle wfi)


def copy_of_image(image: Image, probe: bytes, addr: int) -> int | None:
    """The offset at which `probe` (memory read at addr, outside the image) is a copy of
    the image's code: found exactly once in its executable segments; None if not (a hint
    for --reloc, printed by the run)."""
    hits = []
    for seg in image.segments:
        if seg.flags & PF_X:
            at = seg.data.find(probe)
            if at >= 0 and seg.data.find(probe, at + 1) < 0:
                hits.append(seg.vaddr + at)
    return addr - hits[0] if len(hits) == 1 else None


def with_firmware(image: Image, firmware: Image) -> Image:
    """The payload image with the firmware's code and symbols added (`--bios`): one
    image to trace, so discovery and the trace cover both (the payload's debug info and
    its file name stay the image's)."""
    symbols = sorted([*image.symbols, *firmware.symbols], key=lambda s: s.addr)
    return replace(image, segments=[*firmware.segments, *image.segments], symbols=symbols,
                   _starts=[s.addr for s in symbols])


@runtime_checkable
class SiteEngine(Protocol):
    """What the board tells a site tracer's engine (backends/site_engine.py)."""

    def pause(self) -> None: ...

    def leave(self) -> None: ...


@runtime_checkable
class OnSiteEngine(Protocol):
    """A backend whose sites an engine watches (int3, hwbp: Int3Backend.engine)."""

    engine: SiteEngine


class UntilReached(Exception):
    """The console printed the --until text."""


def board_named(name: str) -> Board:
    board = BOARDS.get(name)
    if board is None:
        raise UsageError(f"unknown machine {name!r}; known: {', '.join(BOARDS)} "
                         f"(emutrace info --machines)")
    return board


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise EmutraceError(f"{what} {path}: {e.strerror or e}", EXIT_NO_INPUT) from None


FDT_MAGIC = b"\xd0\x0d\xfe\xed"  # devicetree spec v0.4 §5.2: magic, then totalsize (BE)


def trim_dtb(blob: bytes) -> bytes:
    """A flattened device tree cut to its header's totalsize (QEMU's `dumpdtb` pads it to
    1 MiB, which would cover what follows the DTB in RAM)."""
    if blob[:4] == FDT_MAGIC and len(blob) >= 8:
        return blob[:int.from_bytes(blob[4:8], "big")]
    return blob


class BoardHooks(HookSet):
    """The exception hook of a board: a backend's breakpoint first, then the ISA's trap
    entry (`trap`); what neither takes is a CpuException (the run ends with a signal)."""

    def __init__(self, cpu: UnicornCpu, trap: Callable[[int], None]) -> None:
        intno = cpu.isa.syscalls.intno or 0
        super().__init__(cpu, lambda: trap(intno))
        self.trap = trap
        cpu.hook_invalid_instruction(self._invalid)

    def _invalid(self) -> bool:
        """An instruction Unicorn cannot run: handled when the ISA's trap layer takes it."""
        if self.pending is not None:
            return False
        try:
            self.trap(INSN_INVALID)
        except CpuException:
            return False
        except BaseException as e:  # noqa: BLE001 - re-raised by run()
            self.pending = e
            self.cpu.stop()
        return True

    def _exception(self, _engine: Any, intno: int, _d: object) -> None:
        def handle() -> None:
            if self.on_trap is not None and self.on_trap(intno):
                return
            self.trap(intno)

        self.guard(handle)


class BoardMachine(TracedRun):
    """One board with an image loaded, ready to run (the kernel-image twin of
    session.Process)."""

    def __init__(self, config: BoardConfig) -> None:
        self.config = config
        self.board = board = board_named(config.board)
        isa = by_name(board.isa)
        support = kernel_support(isa)
        if support is None:
            raise Unsupported(f"{board.isa}: kernel images are not supported "
                              f"({isa.capability(Cap.KERNEL).reason})")
        self.support: KernelSupport = support
        loads: list[tuple[str, list[tuple[int, bytes]]]] = []
        image_at = board.bios_at
        if config.bios is not None:
            if board.kernel_at is None:
                raise UsageError(f"--bios: machine {board.name} has no kernel address")
            bios, physical = self._open_image(config.bios, _read_file(config.bios, "--bios"),
                                              isa.name, board.bios_at)
            loads.append((config.bios, physical))
            image_at = board.kernel_at
        blob = _read_file(config.image, "image")
        if config.bios is None and support.linux_image is not None \
                and support.linux_image(blob):
            if board.kernel_at is None:
                raise UsageError(f"{config.image}: a Linux image; machine {board.name} has "
                                 f"no kernel address")
            image_at = board.kernel_at  # as QEMU's -kernel: the boot protocol's entry
        self.image, physical = self._open_image(config.image, blob, isa.name, image_at)
        loads.append((config.image, physical))
        if config.symbols is not None:
            # addresses modulo the word: the 64-bit BFD's nm prints a 32-bit MIPS file's
            # kseg0 addresses sign-extended (0xffffffff80100000: MIPS addresses are signed)
            word = (1 << 8 * isa.identity.word_size) - 1
            funcs = [replace(f, addr=f.addr & word)
                     for f in load_symbol_file(config.symbols)]
            self.image = replace(self.image, symbols=funcs, _starts=[f.addr for f in funcs])
        # a Linux image whose symbols are its link addresses is traced there (MMU on)
        self.linked: LinkedImage | None = None
        if image_at == board.kernel_at and config.bios is None and config.symbols:
            self.image, self.linked = at_link_address(self.image, image_at,
                                                      *link_addresses(config.symbols))
        code_starts = {g.vaddr for g in self.image.segments if g.flags & PF_X}
        if config.reloc is not None:
            self.image = relocated(self.image, config.reloc)
        self.payload_entry: int | None = None
        self.entry = self.image.entry
        if config.bios is not None:
            self.payload_entry, self.entry = self.image.entry, bios.entry
            self.image = with_firmware(self.image, bios)
        self.cpu = cpu = UnicornCpu(isa, board.cpu_model)
        cpu.apply_reset()
        if support.reset is not None:
            support.reset(cpu)
        self._map_ram()
        self.console = devices.Console(
            sys.stdout.buffer if config.console_out is None else config.console_out,
            config.until, config.typed, config.input_after, self._until)
        self.hooks = BoardHooks(cpu, self._trap)
        ports: list[tuple[int, int, devices.Model]] = []
        self.timers: list[devices.Clint] = []
        # interrupt controllers: their CPU input is polled between slices of the run
        self.controllers: list[Gic] = []
        self._held = False  # an interrupt signalled while the CPU masks it
        for dev in board.devices:
            model = devices.build(dev.kind, dev.params, self.console)
            if isinstance(model, devices.Clint):
                self.timers.append(model)
            if isinstance(model, Gic):
                self._wire_timer(model, dev.params.get("timer_ppi"))
            if dev.params.get("io"):
                ports.append((dev.base, dev.size, model))
            else:
                self._map_device(dev.base, dev.size, model)
        if ports:
            self._map_ports(ports)
        for path, physical in loads:
            for addr, data in physical:
                self._load(addr, data, path)
        dtb_addr = self._load_device_tree([(a, len(d)) for _, ph in loads for a, d in ph])
        for reg, value in board.entry_regs.items():
            cpu.reg_write(reg, dtb_addr if value == "dtb" else int(value))
        self.traps: dict[str, int] = {}  # what the trap-entry layer did, by kind
        self.reloc_hint: int | None = None  # the run ended in a copy of the image (run)
        self.tracer = Tracer()  # one hart, one thread
        self.engine = "python"
        self.trap_aware: TrapAware | None = None
        self.exception_returns: ExceptionReturns | None = None
        # --trace-after: where the console's transcript is searched for its text next
        # (None: tracing from the start, or not at all)
        self._trace_from: int | None = None
        self._trace_vector: int | None = None  # the exception the trigger stopped at
        self._in_run = False  # inside emu_start (in a hook)
        # --reloc, a linked image: the hook on the first block run in the copy, at the link
        # address (`_in_copy`), and where it ran
        self._copy_hook = 0
        self._copy_entered: int | None = None
        if config.backend in BACKENDS:
            self.engine = engine_of_run(config.engine, config.backend,
                                        lambda m: print(m, file=sys.stderr))
            if config.reloc is not None and self.engine == "native":
                # the native engine traces code of the image before it copies itself,
                # which the reference (and step) leave untraced: not yet the same trace
                why = "--reloc runs on the Python reference engine (the native engine's " \
                      "trace of a relocating image is not yet the reference's)"
                if config.engine == "native":
                    raise UsageError(f"--engine native: {why}")
                print(f"emutrace: {why}", file=sys.stderr)
                self.engine = "python"
            # --trace-after: the backend is made at the first exception entered once the
            # console has printed the text (`_entered`); until then the board runs untraced
            self._trace_from = 0 if config.trace_after else None
            self._code_starts = code_starts  # (--reloc: the copies' originals)
            if self._trace_from is None:
                self._make_backend()
        elif config.backend != "none":
            raise UsageError(f"unknown backend {config.backend!r}")
        # after the backend's hooks: a firmware call that takes an exception on an
        # instruction (MIPS: a syscall in this branch's delay slot) comes after `step` has
        # seen the instruction arrive (the call into its function resolved)
        self._hook_firmware_calls()

    def _make_backend(self) -> None:
        """The tracing backend, its hooks added (at the start, or at --trace-after's
        trigger), and what it needs from the board: the entries it is started at (none for
        a linked image, entered at its link address: `_in_copy`), the exception returns."""
        config, cpu = self.config, self.cpu
        types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                    config.default_args, dict(config.arg_formats))
        options = BackendOptions(**settings_of(config), call_types=types,
                                 engine=self.engine)
        backend = create(config.backend, self.image,
                         cpu if self.linked is None else LinkedMemory(cpu, self.linked),
                         self.hooks, self.tracer.emit, options)
        self.tracer.backend = backend
        if not config.trace_after:  # (else it begins at an exception's vector)
            if self.payload_entry is not None:
                # the firmware enters its payload by an exception return (mret), no call:
                # its entry function is armed up front, as the firmware's own
                backend.start(self.payload_entry)
            if self.linked is None:
                backend.start(self.entry)
        if config.reloc is not None:
            # the first block run in the copy arms its code (it is entered by a return or
            # jump into the copy, which arms nothing); the hook then goes
            copies = [g for g in self.image.segments if g.flags & PF_X
                      and g.vaddr - config.reloc in self._code_starts]
            lo = min(g.vaddr for g in copies)
            hi = max(g.vaddr + g.memsz for g in copies)
            self._copy_hook = cpu.hook_block(self._in_copy, lo, hi - 1)
        elif self.linked is not None and not config.trace_after:
            # the head code jumps to the link address once the MMU is on (no call): the
            # first block run there is armed as an entry, as a copy's is
            self._copy_hook = cpu.hook_block(self._in_copy, self.linked.start,
                                             self.linked.end - 1)
        # exception frames need the exception returns: an ISA that does not name them
        # (KernelSupport.returns) keeps the handler's calls under the interrupted frame
        self.trap_aware = self.tracer.trap_aware if self.support.returns else None
        self.exception_returns = None if self.trap_aware is None else ExceptionReturns(
            cpu, self.support, [(r.base, r.size) for r in self.board.ram],
            self.trap_aware.trap_returned,
            None if self.linked is None else self.linked.physical)

    # ------------------------------------------------------------ loading
    def _open_image(self, path: str, blob: bytes, isa: str,
                    raw_at: int) -> tuple[Image, list[tuple[int, bytes]]]:
        """(image for symbols and discovery, [(physical address, bytes)] to load); a file
        that is not ELF is raw, loaded at raw_at."""
        if blob[:4] == b"\x7fELF":
            image = load_image(path)
            if image.isa.name != isa:
                raise UsageError(f"{path} is {image.isa.name}; machine {self.board.name} "
                                 f"is {isa}")
            # p_paddr (load_image keeps p_vaddr only), checked before anything is allocated
            physical = physical_segments(path, image.entry, self.board.ram,
                                         8 * image.isa.identity.word_size, self.board.name)
            return image, physical
        base = raw_at
        segment = Segment(base, len(blob), 0, blob, PF_R | PF_X)
        image = Image(path=path, isa=by_name(isa), kind="exec",
                      entry=base + (self.board.bios_entry if base == self.board.bios_at else 0),
                      phoff=0,
                      phentsize=0, phnum=0, segments=[segment], interpreter=None)
        return image, [(base, blob)]

    def _load_device_tree(self, loaded: list[tuple[int, int]]) -> int:
        """The device tree: --dtb FILE, else the one the board makes (with --append's
        command line and --initrd's range, the initrd loaded); its address, 0 if none.  An
        image loaded where the board's own tree would go keeps its bytes (no tree)."""
        board, config = self.board, self.config
        if board.dtb_at is None:
            for option, value in (("--dtb", config.dtb), ("--append", config.append),
                                  ("--initrd", config.initrd)):
                if value is not None:
                    raise UsageError(f"{option}: machine {board.name} takes no device tree")
            return 0
        if config.dtb is not None:
            if config.append is not None or config.initrd is not None:
                raise UsageError("--append and --initrd go into the device tree the board "
                                 "makes; with --dtb FILE, FILE's /chosen names them")
            self._load(board.dtb_at, trim_dtb(_read_file(config.dtb, "--dtb")), config.dtb)
            return board.dtb_at
        if board.tree is None:
            return 0
        initrd = None
        if config.initrd is not None:
            if board.initrd_at is None:
                raise UsageError(f"--initrd: machine {board.name} has no initrd address")
            data = _read_file(config.initrd, "--initrd")
            if board.initrd_at < board.dtb_at < board.initrd_at + len(data):
                raise UsageError(f"--initrd {config.initrd}: {len(data)} bytes at "
                                 f"{board.initrd_at:#x} reach the device tree at "
                                 f"{board.dtb_at:#x}")
            self._load(board.initrd_at, data, config.initrd)
            initrd = (board.initrd_at, board.initrd_at + len(data))
        blob = board_dtb(board, config.append, initrd)
        end = board.dtb_at + len(blob)
        if any(addr < end and board.dtb_at < addr + size for addr, size in loaded):
            return 0
        self._load(board.dtb_at, blob, "the device tree")
        return board.dtb_at

    def _load(self, addr: int, data: bytes, path: str) -> None:
        if not any(r.base <= addr and addr + len(data) <= r.base + r.size
                   for r in self.board.ram):
            raise Unsupported(f"{path}: {len(data)} bytes at {addr:#x} lie outside the "
                              f"memory of machine {self.board.name}")
        self.cpu.mem_write(addr, data)

    def _map_ram(self) -> None:
        """The board's RAM.  A region that mirrors another (spec.Region.mirror_of: MIPS
        kseg0/kseg1, where the CPU reaches physical memory at another address) shares its
        host memory, so what the host reads and writes at the CPU's addresses (code
        hooks, breakpoints, exception-return search) is what the CPU sees there."""
        ram = self.board.ram
        mirrored = {r.mirror_of for r in ram if r.mirror_of is not None}
        self._ram_buffers: dict[int, mmap.mmap] = {}  # kept alive: Unicorn points into them
        for region in ram:
            if region.mirror_of is None and region.base not in mirrored:
                self.cpu.mem_map(region.base, region.size)
                continue
            key = region.base if region.mirror_of is None else region.mirror_of
            if key not in self._ram_buffers:
                size = next(r.size for r in ram if r.base == key and r.mirror_of is None)
                self._ram_buffers[key] = mmap.mmap(-1, size)  # anonymous: zeroed
            buffer = self._ram_buffers[key]
            if region.size > len(buffer):
                raise ValueError(f"region {region.name} is larger than what it mirrors")
            address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
            self.cpu.map_host_memory(region.base, region.size, address)

    def _map_device(self, base: int, size: int, model: devices.Model) -> None:
        """Unicorn maps whole pages: a device that starts inside a page (Malta's COM1 at
        0x1800_03f8) gets its page(s), and accesses beside it read 0 and are ignored."""
        page = self.cpu.page_size
        skew = base % page
        if skew or size % page:
            model = devices.Window(model, skew, size)
            base, size = base - skew, -(-(skew + size) // page) * page
        hooks = self.hooks

        cpu = self.cpu

        def fail(e: BaseException) -> None:
            if hooks.pending is None:
                hooks.pending = e
            cpu.stop()

        def read(offset: int, size: int) -> int:
            try:
                return model.read(offset, size)
            except BaseException as e:  # noqa: BLE001 - re-raised by run()
                fail(e)
                return 0

        def write(offset: int, size: int, value: int) -> None:
            try:
                model.write(offset, size, value)
            except BaseException as e:  # noqa: BLE001 - re-raised by run()
                fail(e)

        cpu.map_device(base, size, read, write)

    def _map_ports(self, ports: list[tuple[int, int, devices.Model]]) -> None:
        """Devices in the I/O port space, through the ISA's IN/OUT instruction hooks."""
        names = self.support.port_io
        if names is None:
            raise UsageError(f"machine {self.board.name}: port I/O devices on "
                             f"{self.cpu.isa.name}, which has no port I/O")
        hooks, cpu = self.hooks, self.cpu

        def find(port: int) -> tuple[int, devices.Model] | None:
            for base, size, model in ports:
                if base <= port < base + size:
                    return port - base, model
            return None

        def port_in(port: int, size: int) -> int:
            hit = find(port)
            if hit is None:
                return (1 << (8 * size)) - 1  # nothing there: the bus floats high
            try:
                return hit[1].read(hit[0], size)
            except BaseException as e:  # noqa: BLE001 - re-raised by run()
                hooks.pending = hooks.pending or e
                cpu.stop()
                return 0

        def port_out(port: int, size: int, value: int) -> None:
            hit = find(port)
            if hit is None:
                return
            try:
                hit[1].write(hit[0], size, value)
            except BaseException as e:  # noqa: BLE001 - re-raised by run()
                hooks.pending = hooks.pending or e
                cpu.stop()

        cpu.hook_port_io(port_in, port_out, names)

    def _hook_firmware_calls(self) -> None:
        """A code hook on every firmware-call instruction of the image's code (s390x SERVC,
        which Unicorn runs as a no-op) and every instruction the ISA emulates against its
        model of registers Unicorn does not expose (Power mfspr/mtspr/rfi): the ISA's
        layer does it before it runs."""
        hooks = self.hooks

        def hook(call: FirmwareCall) -> None:
            def emulate(_engine: Any, addr: int, _size: int, _d: object) -> None:
                def run() -> None:
                    outcome = call.emulate(self.cpu, addr)
                    if (outcome is None or outcome.kind == "emulated") \
                            and self.cpu.pc != addr:
                        self._left_block()  # (a vector's entry tells the backend itself)
                    if outcome is not None:
                        self._outcome(outcome)
                hooks.guard(run)

            for seg in self.image.segments:
                if seg.flags & PF_X:
                    for offset in call.find(seg.data):
                        self.cpu.hook_code(emulate, seg.vaddr + offset, seg.vaddr + offset)
                        self._sites.append((emulate, seg.vaddr + offset))

        self._sites: list[tuple[Callable[[Any, int, int, object], None], int]] = []
        for call in (self.support.firmware_call, self.support.emulated_insns):
            if call is not None:
                hook(call)
        # (a linked image's sites are hooked at its link address already)
        self._aliased = self.support.physical is None or not self._sites \
            or self.linked is not None

    def _alias_sites(self) -> None:
        """The image runs at virtual addresses once its MMU is on (a raw Linux image: its
        link address, not where it was loaded): at the first trap taken in the image there,
        the firmware-call hooks are added at the sites' virtual addresses too (the image
        mapped linearly, as Linux maps its own text)."""
        translate = self.support.physical
        pc = self.cpu.pc
        at = None if translate is None else translate(self.cpu, pc)
        if at is None or at == pc or not any(
                g.vaddr <= at < g.vaddr + g.memsz for g in self.image.segments):
            return
        self._aliased = True
        for emulate, site in self._sites:
            self.cpu.hook_code(emulate, site + pc - at, site + pc - at)

    def _left_block(self) -> None:
        """An emulated instruction moved the PC from inside the running block: the CPU
        goes on from there in a new block, and the rest of this one never ran.  An engine
        that takes a block holding a site as the site's transfer (the native hot path's
        site table, backends/hooked_sites.py) is told that the CPU stopped between
        instructions: a transfer it left pending for a site further on is dropped."""
        backend = self.backend
        if isinstance(backend, OnSiteEngine) and isinstance(backend.engine, SiteEngine):
            backend.engine.pause()
            backend.engine.leave()

    def _wire_timer(self, gic: Gic, ppi: int | None) -> None:
        """The CPU's own timer (the ISA's timer_due) as a level line of the controller."""
        due, cpu = self.support.timer_due, self.cpu
        if ppi is not None and due is not None:
            gic.lines[ppi] = lambda: due(cpu) == 0
        self.controllers.append(gic)

    # ------------------------------------------------------------ interrupts
    def _signalling(self) -> bool:
        return any(c.signalling() for c in self.controllers)

    def _take_interrupt(self) -> bool:
        """The CPU takes the interrupt its controller signals, unless it masks it (then it
        is held, and taken at a later look once unmasked); False if none is signalled."""
        take = self.support.timer_interrupt
        if take is None or not self._signalling():
            self._held = False
            return False
        outcome = take(self.cpu)
        self._held = outcome is None
        if outcome is not None:
            self.traps[outcome.what] = self.traps.get(outcome.what, 0) + 1
            self._entered(outcome.vector)
        return True

    def _controller_woke(self) -> bool:
        """An idle CPU behind an interrupt controller: wait for its timer line (or take
        what is signalled now); the CPU wakes even with the interrupt masked (wfi)."""
        if not self._signalling():
            due = self.support.timer_due(self.cpu) if self.support.timer_due else None
            if due is None:
                return False
            if devices.wait_for_timer(self.cpu.stop_requested, due):
                return True  # stopped while waiting: run() reports the stop
        return self._take_interrupt() or self._signalling()

    # ------------------------------------------------------------ traps
    def _until(self) -> None:
        raise UntilReached()

    def _trap(self, intno: int) -> None:
        if not self._aliased:
            self._alias_sites()
        outcome = self.support.deliver(self.cpu, intno)
        if outcome is None:
            raise CpuException(intno)
        self._outcome(outcome)

    def _outcome(self, outcome: TrapOutcome) -> None:
        if outcome.kind == "idle":  # a trapped wait-for-interrupt: the run loop waits
            self.cpu.stop()
            return
        for byte in outcome.console:
            self.console.put(byte)
        self.traps[outcome.what] = self.traps.get(outcome.what, 0) + 1
        if outcome.kind == "off":
            raise devices.PowerOff(outcome.status, outcome.what)
        if outcome.kind == "vector":
            self._entered(outcome.vector)

    def _entered(self, vector: int) -> None:
        """The guest's vector runs next.  A trap-aware backend (int3, hwbp, step) pushes an
        exception frame, arms the vector and is told of the exception returns near it; the
        others arm the vector's function as at the entry (the handler's calls then nest
        under the interrupted frame)."""
        if self._trace_from is not None and self._triggered():
            self._trace_from = None
            if self._in_run:  # (hooks are added between emu_starts: `_start_once`)
                self._trace_vector = vector
                self.cpu.stop()
                return
            self._make_backend()
            self.cpu.c_port.drop_all_code()  # (as in `_start_once`)
        if self.trap_aware is not None and self.exception_returns is not None \
                and self.exception_returns.near(vector):
            self.trap_aware.trap_entered(vector)
        elif self.backend is not None:
            self.backend.start(vector)

    def _triggered(self) -> bool:
        """The console has printed --trace-after's text (searched once per byte)."""
        assert self._trace_from is not None
        text, transcript = self.config.trace_after, self.console.transcript
        if transcript.find(text, self._trace_from) >= 0:
            return True
        self._trace_from = max(0, len(transcript) - len(text) + 1)
        return False

    # ------------------------------------------------------------ running
    def _idle_at(self, pc: int) -> bool:
        """emu_start came back right after a wait-for-interrupt instruction."""
        translate = self.support.physical
        for insn in self.support.idle:
            at: int | None = pc - len(insn)
            if translate is not None and at is not None:
                at = translate(self.cpu, at)
            if at is None:
                continue
            try:
                if self.cpu.mem_read(at, len(insn)) == insn:
                    return True
            except MemoryFault:
                pass
        return False

    def _timer_woke(self) -> bool:
        """An idle hart with a timer armed: wait for it (a --timeout or Ctrl-C ends the wait)
        and take the ISA's timer interrupt; False if none is armed or the guest has it
        disabled (then nothing can wake the hart)."""
        take = self.support.timer_interrupt
        waits = [w for w in (t.seconds_to_timer() for t in self.timers) if w is not None]
        if self.support.timer_due is not None:
            due = self.support.timer_due(self.cpu)
            waits += [] if due is None else [due]
        if take is None or not waits:
            return False
        if devices.wait_for_timer(self.cpu.stop_requested, min(waits)):
            return True  # stopped while waiting: run() reports the stop
        outcome = take(self.cpu)
        if outcome is None:
            return False
        self.traps[outcome.what] = self.traps.get(outcome.what, 0) + 1
        self._entered(outcome.vector)
        return True

    def _start_once(self, pc: int, sentinel: int) -> Stop | None:
        """One emu_start; a Stop, or None when the guest went idle with input pending."""
        cpu, hooks = self.cpu, self.hooks
        count = self.config.max_insns
        # an interrupt held while the CPU masks it is taken when the CPU unmasks it, which
        # an idle loop does within a few instructions of its wfi: run a few at a time
        sliced = self._held and not count
        if sliced:
            count = HELD_STEPS
        try:
            try:
                self._in_run = True
                try:
                    cpu.run(cpu.isa.mode_address(pc, cpu.in_alt_mode()), sentinel,
                            count=count)
                finally:
                    self._in_run = False
            except CpuFault as e:
                # MIPS: `wait` ends the run with a bogus unmapped read (Unicorn's
                # UC_ERR_READ_UNMAPPED), the PC after it (measured); a fault of the
                # instruction the run started at is real
                idle = e.access == "read_unmapped" and cpu.pc != pc \
                    and self._idle_at(cpu.pc)
                if hooks.pending is None and not idle:
                    raise
            if hooks.pending is not None:
                raise hooks.pending
        except devices.PowerOff as e:
            return Stop("exit", status=e.status, pc=cpu.pc, detail=e.how)
        except UntilReached:
            return Stop("exit", status=0, pc=cpu.pc, detail="--until text printed")
        except CpuException as e:
            return Stop("signal", signal="SIGILL", pc=cpu.pc,
                        detail=f"CPU exception {e.intno} (not modelled)")
        except CpuFault as e:
            return Stop("signal", signal=e.signal, pc=cpu.pc, detail=e.detail)
        if cpu.stop_requested.is_set():
            return Stop("interrupted", pc=cpu.pc)  # refined by run()
        if self._trace_vector is not None:  # --trace-after's trigger: tracing begins at
            vector, self._trace_vector = self._trace_vector, None  # this exception's vector
            self._make_backend()
            # the code translated so far carries none of the backend's hooks (Unicorn
            # instruments a block when it translates it)
            cpu.c_port.drop_all_code()
            self.tracer.before_run()
            self._entered(vector)
            return None
        if self._copy_hook and self._copy_entered is not None and self.backend is not None:
            cpu.hook_del(self._copy_hook)
            self._copy_hook = 0
            self.backend.start(self._copy_entered)
            return None
        if self._idle_at(cpu.pc):
            woke = self._controller_woke() if self.controllers else self._timer_woke()
            if self.console.has_input() or woke:
                return None
            return Stop("exit", status=0, pc=cpu.pc, detail="idle (waiting for an "
                        "interrupt with nothing to wake it)")
        if sliced:  # a step with an interrupt held: taken if the CPU unmasked it
            self._take_interrupt()
            return None
        if self.config.max_insns:
            return Stop("max_insns", pc=cpu.pc)
        return Stop("signal", signal="SIGSEGV", pc=cpu.pc, detail="emulation left mapped code")

    def _in_copy(self, _engine: Any, addr: int, _size: int, _d: object) -> None:
        if self._copy_entered is None:
            self._copy_entered = addr
            self.cpu.stop()  # the run loop arms it and removes this hook (not from inside it)

    def _copy_at(self, pc: int) -> int | None:
        """The run ended at pc in RAM outside the image: the offset of the image's copy
        there, if it is one (the --reloc to give), else None."""
        if any(g.vaddr <= pc < g.vaddr + g.memsz for g in self.image.segments):
            return None
        region = next((r for r in self.board.ram if r.base <= pc < r.base + r.size), None)
        if region is None:
            return None
        # the code that ran last, else the code at pc (at the very start of a copy)
        for at in (pc - PROBE, pc):
            if region.base <= at and at + PROBE <= region.base + region.size:
                found = copy_of_image(self.image, self.cpu.mem_read(at, PROBE), at)
                if found is not None:
                    return found
        return None

    def run(self) -> RunResult:
        cpu = self.cpu
        sentinel = (1 << (8 * cpu.word)) - 16
        pc = self.entry
        self.tracer.before_run()
        with interruptible(cpu, self.config.timeout) as watch:
            while True:
                stop = self._start_once(pc, sentinel)
                if watch.timed_out:
                    stop = Stop("timeout", pc=cpu.pc)
                elif watch.interrupted:
                    stop = Stop("interrupted", signal=watch.interrupted, pc=cpu.pc)
                if stop is not None:
                    break
                pc = cpu.pc
        self.console.flush()
        self.reloc_hint = self._copy_at(cpu.pc)
        end = self.tracer.finish()
        return RunResult(stop, self.image, sum(self.traps.values()), dict(self.traps),
                         end.records, end.stats, end.open_frames, end.insns)
