"""`--target native`: a program run on this host under ptrace, traced by the same backends
through the target protocol (target/ptrace.py, target/ptrace_run.py).  The counterpart of
session.Process for the native target: no Linux layer (the host kernel runs the system
calls), the same file sandbox as emulation (`Sandbox`, --root, --allow-write) applied by a
seccomp filter and the tracer (target/seccomp_filter.py, target/ptrace_confine.py), unless
the caller asked for none (`unconfined`: `--unconfined`).

What runs natively (checked here, before anything runs; a refusal is a usage error):
a program of an ISA whose capability table says `native_target` (this x86_64 host: x86_64
and i386), static or dynamic with its interpreter on this host (its libraries are learnt as
ld.so maps them: target/native_modules.py), without threads (a thread the tracer does not
follow would die on the first breakpoint it meets), with backend none, int3 (lazy or
strict), hwbp, btf, entry or step (bts: the capability `native_bts` says why not)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from elftools.elf.elffile import ELFFile

from emutrace.backends import BackendOptions, create
from emutrace.discover.callabi import CallTypes
from emutrace.discover.modules import ModuleMap
from emutrace.elf import Image, load_image
from emutrace.errors import Unsupported, UsageError
from emutrace.isa import all_isas
from emutrace.isa.base import Cap
from emutrace.mechanisms import runs_on
from emutrace.mechanisms.settings import PTRACE_C, PTRACE_PYTHON, settings_of
from emutrace.native import ploop
from emutrace.native.ploop import PtraceLoop
from emutrace.sandbox import Sandbox
from emutrace.session import (
    THREAD_CREATORS,
    RunConfig,
    RunResult,
    may_create_threads,
    open_image,
)
from emutrace.target.namespaces import sandbox_layers
from emutrace.target.native_interp import Launch, launch_of, missing_interpreter_reason, root_for
from emutrace.target.native_modules import ModuleWatch
from emutrace.target.ptrace import PtraceError, PtraceTarget, kill, spawn
from emutrace.target.ptrace_confine import Confinement
from emutrace.target.ptrace_run import NativeTrapHooks, run
from emutrace.target.ptrace_signals import HandlerWatch
from emutrace.target.seccomp_filter import packed_program
from emutrace.tracer import TracedRun, Tracer

NATIVE_CAPABILITY = Cap.NATIVE_TARGET
NATIVE_BTS_CAPABILITY = Cap.NATIVE_BTS  # isa/native_pmu.py: read from this host's PMUs
# backends whose delivery the native target provides (their recipes' ptrace ports: int3 real
# 0xCC bytes; hwbp DR0-3; btf PTRACE_SINGLEBLOCK; entry eager 0xCC; step
# PTRACE_SINGLESTEP); bts: the capability `native_bts` says why not
NATIVE_TARGET_BACKENDS = runs_on(PTRACE_PYTHON)
AT_BASE, AT_ENTRY = 7, 9  # <linux/auxvec.h>
# backends with work finished in the C loop (native/ploop.c; their recipes' ptrace/native
# port): int3's lazy traps, step's quiet instructions, int3 strict's arming and
# disarming, entry's probes, hwbp's debug-register hits, btf's stops that cross no taken
# branch; the rest reaches Python
C_LOOP_BACKENDS = runs_on(PTRACE_C)


def native_isas() -> list[str]:
    return [isa.name for isa in all_isas() if isa.capability(NATIVE_CAPABILITY).works]


def check_native(config: RunConfig, image: Image) -> None:
    """Refuse, before anything runs, what the native target cannot do (usage errors)."""
    isa = image.isa
    if not isa.capability(NATIVE_CAPABILITY).works:
        raise UsageError(f"--target native: {config.program} is a {isa.name} program; this "
                         f"host runs only {', '.join(native_isas())} programs natively")
    if image.interpreter is not None and not os.path.exists(image.interpreter) and \
            root_for(image, config.root) is None:
        raise UsageError(f"--target native: {config.program} is dynamically linked and "
                         f"{missing_interpreter_reason(image)}")
    bts = isa.capability(NATIVE_BTS_CAPABILITY)
    if config.backend == "bts" and not bts.works:
        raise UsageError(f"--target native: backend bts: {bts.reason}")
    if config.backend != "none" and config.backend not in NATIVE_TARGET_BACKENDS:
        raise UsageError(f"--target native: backend {config.backend} has no native delivery "
                         f"yet (native: none, {', '.join(NATIVE_TARGET_BACKENDS)})")
    slots = isa.debug_hardware.slots
    if config.backend == "hwbp" and config.hw_slots is not None and config.hw_slots > slots:
        raise UsageError(f"--target native: --hw-slots {config.hw_slots}: this CPU has "
                         f"{slots} instruction breakpoint registers")
    if config.backend != "none" and creates_threads(image):
        raise UsageError(f"--target native: {config.program} can create threads; tracing "
                         f"them natively is not supported yet")


def loop_engine(engine: str) -> str:
    """The run loop natively: "native" (C, native/ploop.c: the default, auto, where the
    library is built) or "python" (the reference, target/ptrace_run.py alone).  The int3
    backend finishes traps in C with it; every backend's PTRACE_CONT and wait go through it."""
    if engine == "python":
        return "python"
    if ploop.available():
        return "native"
    if engine == "native":
        ploop.load()  # Unsupported (exit 69): what to do
        raise Unsupported("--engine native: the native ptrace loop is not available")
    return "python"


def creates_threads(image: Image) -> bool:
    """A static program linking a thread-creating function, or a dynamic one importing
    one (its dynamic symbol table's undefined functions: a library that creates threads
    on its own is not seen; its first thread dies of the first breakpoint it meets)."""
    if image.interpreter is None:
        return may_create_threads(image)
    return bool(THREAD_CREATORS & imported_functions(image.path))


def imported_functions(path: str) -> set[str]:
    with open(path, "rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        if dynsym is None or not hasattr(dynsym, "iter_symbols"):
            return set()
        return {s.name for s in dynsym.iter_symbols() if s["st_shndx"] == "SHN_UNDEF"}


def auxv(pid: int, word: int) -> dict[int, int]:
    """The tracee's auxiliary vector (/proc/PID/auxv: key, value words)."""
    with open(f"/proc/{pid}/auxv", "rb") as f:
        raw = f.read()
    pairs = [int.from_bytes(raw[at:at + word], "little") for at in range(0, len(raw), word)]
    return dict(zip(pairs[0::2], pairs[1::2], strict=False))


def load_bias(pid: int, image: Image) -> int:
    """Where the kernel loaded the program: AT_ENTRY of the tracee's auxiliary vector
    minus the file's entry (0 for ET_EXEC; a PIE at the kernel's base)."""
    entry = auxv(pid, image.isa.identity.word_size).get(AT_ENTRY)
    return entry - image.entry if entry is not None else 0


def program_for_ld_so(config: RunConfig, sandbox: Sandbox | None) -> str:
    """The program's path as an explicitly run ld.so opens it in a confined run with
    --root: its guest path (it must lie in the root, ld.so opens it as the guest)."""
    assert sandbox is not None
    try:
        return sandbox.to_guest(Path(os.path.realpath(config.program)))
    except ValueError:
        raise UsageError(f"--target native: {config.program} lies outside --root "
                         f"{config.root}, where the root's ld.so cannot open it") from None


def interpreter_bias(pid: int, image: Image) -> int:
    """Where the kernel loaded ld.so: AT_BASE (ld.so is linked at 0)."""
    return auxv(pid, image.isa.identity.word_size).get(AT_BASE, 0)


def native_modules(pid: int, image: Image, bias: int, launch: Launch) -> ModuleMap:
    """A dynamic program's module map as the kernel left it (the program and ld.so);
    the libraries are added as ld.so maps them (target/native_modules.py).  ld.so run
    explicitly (target/native_interp.py): the kernel loaded ld.so alone, as the main
    program (its bias from AT_ENTRY); the program comes later, mapped by ld.so."""
    assert launch.interpreter is not None
    modules = ModuleMap(image.isa, "/")
    interp = load_image(launch.interpreter, dynamic=True)
    if launch.explicit:
        modules.add(interp, load_bias(pid, interp))
    else:
        modules.add(image, bias)
        modules.add(interp, interpreter_bias(pid, image))
    return modules


class NativeProcess(TracedRun):
    """An x86 program started on the host, stopped at its first instruction (ld.so's, for a
    dynamic program), with its backend armed; `run()` runs it to its end."""

    def __init__(self, config: RunConfig, unconfined: bool = False) -> None:
        self.config = config
        image = open_image(config.program, config.arch)
        check_native(config, image)
        sandbox = None
        if not unconfined:
            try:  # as session.Process: no --allow-write is the current directory, or none
                sandbox = Sandbox(config.root, list(config.allow_write))
            except ValueError as e:
                raise UsageError(str(e)) from None
        env = config.env if config.env is not None else dict(os.environ)
        argv = [os.fsencode(config.argv0 if config.argv0 is not None else config.program),
                *(os.fsencode(a) for a in config.args)]
        in_guest = sandbox is not None and config.root != "/"
        explicit = image.interpreter is not None and not os.path.exists(image.interpreter)
        # a PIE that the root's ld.so maps: its run-time addresses come once ld.so has
        # mapped it (`_program_mapped`), not at the start
        self.addresses_known = not (explicit and image.kind == "dyn")
        launch = launch_of(image, config.root, argv, program_for_ld_so(
            config, sandbox) if in_guest and explicit else config.program, in_guest)
        envp = [os.fsencode(f"{k}={v}") for k, v in env.items()]
        sys.stdout.flush()  # the child shares our stdout and stderr from here
        sys.stderr.flush()
        if sandbox is None:
            self.pid = spawn(launch.path, launch.argv, envp)
        else:  # the child starts in the guest's current directory
            self.pid = spawn(launch.path, launch.argv, envp, packed_program(),
                             os.fsdecode(sandbox.resolve(sandbox.guest_cwd)),
                             sandbox_layers(sandbox, launch.path))
        self.confinement = None if sandbox is None else Confinement(sandbox, self.pid)
        try:
            bias = 0 if launch.explicit else load_bias(self.pid, image)
            self.image = image.rebased(bias)
            self.target = PtraceTarget(self.image.isa, self.pid)
            self.watch: ModuleWatch | None = None
            if image.interpreter is not None and config.backend != "none":
                modules = native_modules(self.pid, image, bias, launch)
                self.image = replace(self.image, modules=modules)
                self.watch = ModuleWatch(self.target, modules)
                self.watch.install()
                if launch.explicit:  # the program's bias: when ld.so has mapped it
                    self.target.syscall_hooks.append(self._program_mapped)
            self.engine = loop_engine(config.engine)
            if self.engine == "native":
                self.target.c_loop = PtraceLoop(self.image.isa, self.target.reg_id,
                                                self.target.mem_fd)
            self.hooks = NativeTrapHooks()
            self.tracer = Tracer()  # one thread: the tracee's threads are refused
            self.types: CallTypes | None = None
            if config.backend != "none":
                types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                            config.default_args, dict(config.arg_formats))
                engine = "native" if config.backend in C_LOOP_BACKENDS and \
                    self.engine == "native" else "python"
                options = BackendOptions(**settings_of(config), call_types=types,
                                         engine=engine)
                self.types = types
                backend = create(config.backend, self.image, self.target, self.hooks,
                                 self.tracer.emit, options)
                self.tracer.backend = backend
                backend.start(self.target.pc)  # the program's entry, or ld.so's
                aware = self.tracer.trap_aware
                if aware is not None:  # signal handlers as trap frames
                    self.hooks.signals = HandlerWatch(self.target, aware.trap_entered,
                                                      aware.trap_returned)
        except BaseException:
            kill(self.pid)
            raise

    def _program_mapped(self) -> None:
        """ld.so run explicitly: once the watch has found the program's module, the
        image and the DWARF prototypes speak its run-time addresses (a PIE's bias)."""
        modules = self.image.modules
        assert modules is not None
        module = next((m for m in modules.modules if m.path == self.image.path), None)
        if module is None:
            return
        self.target.syscall_hooks.remove(self._program_mapped)
        self.image = replace(self.image.rebased(module.bias), modules=modules)
        if self.types is not None:
            self.types.bias = module.bias

    def close(self) -> None:
        """The tracee killed (when it still runs) and the tracer's resources released: after
        the run, or instead of it."""
        kill(self.pid)
        self.target.close()
        if self.confinement is not None:
            self.confinement.children.end()
            self.confinement.close()
        if self.target.c_loop is not None:
            self.target.c_loop.close()

    def run(self) -> RunResult:
        self.tracer.before_run()
        try:
            stop = run(self.target, self.hooks, self.config.timeout, self.confinement)
        except OSError as e:  # a ptrace request refused in the middle of the run
            raise PtraceError(f"--target native: {e.strerror or e}") from None
        finally:
            self.close()
        end = self.tracer.finish()
        return RunResult(stop, self.image, records=end.records, backend_stats=end.stats,
                         open_frames=end.open_frames, guest_insns=end.insns)
