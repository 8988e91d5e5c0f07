"""`--target qiling`: a program whose loader, memory and system services are Qiling's
(target/qiling_os.py), traced by the same backends through the target protocol.  The
counterpart of session.Process for Qiling's operating systems: Qiling's Linux layer serves
the system calls.  Its root is an empty temporary directory, where the guest's paths
resolve, but Qiling is no sandbox (its sockets, signals and process calls act on the host
with the user's rights), so the run is asked for with --unconfined.

What runs there (checked before anything runs; a refusal is a usage error): a program of
an OS × ISA the Qiling table says works (target/qiling_table.py, `emutrace info`) — a
Linux ELF (a dynamic one with its libraries in Qiling's root: --root, default /), a
UEFI application (PE) with the ELF it was made from as --symbols, or a DOS .COM (x86_16)
with an nm listing of its functions as --symbols, or MCU firmware (an ARM ELF inside a
board's memories, run to --max-insns) (a Windows PE is refused: the table says what is
missing) —
with backend none or one the table lists.  Functions are found as for any run: the ELF's
symbols and descent (discover/), at the addresses Qiling's loader chose."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from emutrace.backends import BackendOptions, create
from emutrace.discover.callabi import CallTypes
from emutrace.discover.debuginfo import parse_symbols_spec
from emutrace.discover.modules import ModuleMap
from emutrace.discover.symbol_map import load_symbol_file
from emutrace.elf import Image, Segment, load_image
from emutrace.errors import EXIT_NO_INPUT, EmutraceError, Unsupported, UsageError
from emutrace.isa import by_name
from emutrace.mechanisms.settings import settings_of
from emutrace.sandbox import Sandbox
from emutrace.session import (
    RunConfig,
    RunResult,
    engine_of_run,
    open_image,
    open_interpreter,
)
from emutrace.target.qiling_table import (
    MCU_REFUSED,
    PE_MACHINES,
    backend_refusal,
    mcu_board_of,
    os_row,
)
from emutrace.tracer import TracedRun, Tracer

# Qiling's DOS layer's inputs, by the file's suffix: (where it is loaded, its largest size).
# A .COM at offset 0x100 of its segment, after the PSP, in one 64 KiB segment with its
# stack (MS-DOS Programmer's Reference, "COM programs"); a boot sector (MBR) of 512 bytes
# at 0000:7C00 (the BIOS boot protocol)
DOS_INPUTS = {".com": (0x100, 0x10000 - 0x100 - 2), ".mbr": (0x7C00, 512)}
PF_X, PF_R = 1, 4  # (ELF p_flags bits, as Image's segments carry them)
PE_HEADER_AT = 0x3C  # e_lfanew: the offset of "PE\0\0" (PE/COFF specification, 2.1)


def pe_machine_of(path: str) -> int | None:
    """The COFF header's Machine of a PE image ("MZ", then "PE\0\0" at e_lfanew), None
    for any other file (an ELF's checks are `open_image`'s)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head[:2] != b"MZ" or len(head) < PE_HEADER_AT + 4:
        return None
    at = int.from_bytes(head[PE_HEADER_AT:PE_HEADER_AT + 4], "little")
    if head[at:at + 4] != b"PE\0\0":
        return None
    return int.from_bytes(head[at + 4:at + 6], "little")


# IMAGE_OPTIONAL_HEADER.Subsystem: at offset 68 of the optional header, which follows the
# 4-byte signature and the 20-byte COFF header (PE/COFF specification, 3.4; "Windows
# Subsystem": 10-13 are the EFI ones)
PE_SUBSYSTEM_AT = 4 + 20 + 68
EFI_SUBSYSTEMS = frozenset({10, 11, 12, 13})


def pe_subsystem_of(path: str) -> int:
    """The Subsystem field of a PE image (`pe_machine_of` said it is one)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    at = int.from_bytes(head[PE_HEADER_AT:PE_HEADER_AT + 4], "little") + PE_SUBSYSTEM_AT
    return int.from_bytes(head[at:at + 2], "little")


class QilingProcess(TracedRun):
    """A program loaded by Qiling, stopped before its first instruction, with its backend
    armed; `run()` runs it to its end."""

    def __init__(self, config: RunConfig) -> None:
        from emutrace.target.qiling_os import QilingMachine, missing_reason

        self.config = config
        pe_machine = pe_machine_of(config.program)
        board = None
        dos = os.path.splitext(config.program)[1].lower()  # (Qiling: by its name)
        if dos not in DOS_INPUTS:
            dos = ""
        if dos:
            image, os_name = self._dos_image(config), "dos"
        elif pe_machine is None:
            image = open_image(config.program, config.arch)
            board = mcu_board_of(image.isa.name, [(g.vaddr, g.memsz) for g in image.segments
                                                  if g.memsz])
            os_name = "mcu" if board else "linux"
            self._elf_checks(config, image, board)
        elif pe_subsystem_of(config.program) not in EFI_SUBSYSTEMS:  # a Windows program
            isa = PE_MACHINES.get(pe_machine, f"machine {pe_machine:#x}")
            raise Unsupported(f"--target qiling: {config.program} is a Windows {isa} "
                              f"program: {os_row('windows', isa).reason}")
        else:
            image, os_name = self._pe_symbols(config, pe_machine), "uefi"
        refusal = backend_refusal(config.backend)
        if os_name == "mcu":
            refusal = refusal or MCU_REFUSED.get(config.backend)
            if config.backend == "int3" and config.engine == "native":
                refusal = MCU_REFUSED["int3/native"]
        if refusal is not None:
            raise UsageError(f"--target qiling: backend {config.backend}: {refusal}")
        missing = missing_reason()
        if missing is not None:
            raise Unsupported(f"--target qiling: {missing}")
        env = config.env if config.env is not None else dict(os.environ)
        sys.stdout.flush()  # the guest writes to the same descriptors from here
        sys.stderr.flush()
        root = self._root_of(config, image) if os_name == "linux" else None
        self.machine = QilingMachine(image.isa, config.program, list(config.args), env, root,
                                     dos=dos, board=board if os_name == "mcu" else None)
        try:
            if self.machine.os_name != os_name:
                raise UsageError(f"--target qiling: Qiling takes {config.program} for a "
                                 f"{self.machine.os_name} program, not {os_name}")
            bias = self._bias(image, pe_machine is not None)
            modules = None
            if image.interpreter is not None and root is not None and \
                    config.backend != "none":
                modules = self._modules(image, bias, root)
            self.image = image.rebased(bias)
            if modules is not None:
                self.image = replace(self.image, modules=modules)
            self.cpu = self.machine.cpu
            self.hooks = self.machine.hooks
            self.tracer = Tracer()
            self.engine = "python"
            if config.backend != "none":
                types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                            config.default_args, dict(config.arg_formats))
                self.engine = "python" if os_name == "mcu" and config.backend == "int3" \
                    else engine_of_run(config.engine, config.backend,
                                       lambda m: print(m, file=sys.stderr))
                options = BackendOptions(**settings_of(config), call_types=types,
                                         engine=self.engine)
                backend = create(config.backend, self.image, self.cpu, self.hooks,
                                 self.tracer.emit, options)
                self.tracer.backend = backend
                backend.start(self.machine.entry)
        except BaseException:
            self.machine.close()
            raise

    @staticmethod
    def _dos_image(config: RunConfig) -> Image:
        """A DOS .COM or boot sector: its bytes where Qiling's DOS layer loads it (a .COM
        at 0000:0100, as QilingMachine asks; linear addresses, isa/x86_16.py), its
        functions from --symbols, an nm/System.map listing of their addresses
        (testbins/dos: from nasm's map)."""
        suffix = os.path.splitext(config.program)[1].lower()
        start, most = DOS_INPUTS[suffix]
        row = os_row("mbr" if suffix == ".mbr" else "dos", "x86_16")
        if not row.works:
            raise UsageError(f"--target qiling: {config.program} is a DOS {suffix} program: "
                             f"{row.reason}")
        if len(config.symbols) != 1:
            raise UsageError(f"--target qiling: {config.program} is a DOS {suffix} program; "
                             f"name its functions with one --symbols FILE (an nm listing)")
        path, bias = parse_symbols_spec(config.symbols[0])
        try:
            with open(config.program, "rb") as f:
                code = f.read(most + 1)
        except OSError as e:
            raise EmutraceError(f"{config.program}: {e.strerror or e}", EXIT_NO_INPUT) \
                from None
        if not code or len(code) > most:
            raise UsageError(f"{config.program}: a {suffix} holds 1 to {most} bytes")
        end = start + len(code)  # (a listing sizes its last function up to the end)
        symbols = sorted((replace(s, addr=s.addr + (bias or 0), size=s.size or
                                  max(end - s.addr - (bias or 0), 0))
                          for s in load_symbol_file(path)), key=lambda s: s.addr)
        return Image(path=config.program, isa=by_name("x86_16"), kind="exec",
                     entry=start, phoff=0, phentsize=0, phnum=0,
                     segments=[Segment(start, len(code), 0, code, PF_R | PF_X)],
                     interpreter=None, symbols=symbols, _starts=[s.addr for s in symbols])

    @staticmethod
    def _elf_checks(config: RunConfig, image: Image, board: str | None) -> None:
        """A Linux program, or firmware of an MCU board (its segments in the board's
        memories), which never exits: --max-insns N ends its run, and only its."""
        if board is not None:
            row = os_row("mcu", "cortex_m")
            if not row.works:
                raise UsageError(f"--target qiling: {config.program} is {board} firmware: "
                                 f"{row.reason}")
            if not config.max_insns:
                raise UsageError(f"--target qiling: {config.program} is {board} firmware, "
                                 f"which never exits: end its run with --max-insns N")
        else:
            row = os_row("linux", image.isa.name)
            if not row.works:
                raise UsageError(f"--target qiling: {config.program} is a Linux "
                                 f"{image.isa.name} program: {row.reason}")
            if config.max_insns:
                raise UsageError("--target qiling: --max-insns ends MCU firmware's runs; "
                                 "other programs' work(s) under emutrace's own emulation only")
        if config.symbols:
            raise UsageError("--target qiling: --symbols names the ELF of a PE image; an "
                             "ELF program's own symbols are read")

    @staticmethod
    def _root_of(config: RunConfig, image: Image) -> str | None:
        """Qiling's root: --root, or for a dynamic program `/` as for an emulated run (the
        host's ld.so and libraries: pass --root DIR for another ISA's, e.g. one made by
        `emutrace rootfs`); None: an empty one (a static program)."""
        if config.root != "/" or image.interpreter is not None:
            return os.path.realpath(config.root)
        return None

    def _modules(self, image: Image, bias: int, root: str) -> ModuleMap:
        """A dynamic program's module map: the program and ld.so where Qiling's loader
        put them, then each library as ld.so maps it (`on_exec_map`, Qiling's mmap)."""
        modules = ModuleMap(image.isa, root)
        modules.add(image, bias)
        interp = open_interpreter(image, Sandbox(root, []), root)
        loaded = self.machine.modules()
        if len(loaded) > 1:  # (Qiling's loader: the program, then its interpreter)
            modules.add(interp, loaded[1][0] - min(s.vaddr for s in interp.segments))
        self.machine.on_exec_map = modules.exec_mapped
        return modules

    def _pe_symbols(self, config: RunConfig, machine: int) -> Image:
        """A PE image (a UEFI application): its functions come from the ELF it was made
        from (gnu-efi links an ELF shared object and objcopy copies it into PE form, at
        the same relative addresses), named with --symbols ELF[@BIAS]."""
        isa = PE_MACHINES.get(machine)
        if isa is None:
            raise UsageError(f"--target qiling: {config.program}: PE machine {machine:#x} "
                             f"is not one emutrace describes")
        row = os_row("uefi", isa)
        if not row.works:
            raise UsageError(f"--target qiling: {config.program} is a UEFI {isa} "
                             f"application: {row.reason}")
        if len(config.symbols) != 1:
            raise UsageError(f"--target qiling: {config.program} is a PE image; name the "
                             f"ELF it was made from (its symbols) with one --symbols ELF")
        path, self.symbols_bias = parse_symbols_spec(config.symbols[0])
        image = load_image(path, dynamic=True)
        if image.isa.name != isa:
            raise UsageError(f"--symbols {path} is {image.isa.name}, the PE image {isa}")
        return image

    def _bias(self, image: Image, pe: bool) -> int:
        """Run-time minus link-time addresses: a PIE's or a PE's load base (Qiling's
        loader's choice), --symbols' @BIAS where given; 0 for a fixed-address program."""
        if pe:
            given = self.symbols_bias
            return given if given is not None else self.machine.modules()[0][0]
        return self.machine.load_bias if image.kind == "dyn" else 0

    def run(self) -> RunResult:
        self.tracer.before_run()
        try:
            stop = self.machine.run(self.config.timeout, self.config.max_insns)
        finally:
            self.machine.close()
        end = self.tracer.finish()
        return RunResult(stop, self.image, records=end.records, backend_stats=end.stats,
                         open_frames=end.open_frames, guest_insns=end.insns)
