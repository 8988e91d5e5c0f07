"""The emulated Linux program's wiring: image → CPU → address space → Linux kernel → backend
→ run, the backend's events through the tracer (tracer.py: shadow stacks, sink, the end)
that the native process and the boards wire the same way.  The CLI's `run` and `record`
and the tests use this."""

from __future__ import annotations

import os
import signal as host_signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from emutrace import native
from emutrace.backends import NATIVE_BACKENDS, BackendOptions, create
from emutrace.discover.argformats import ArgFormats
from emutrace.discover.callabi import DEFAULT_ARGS, CallTypes
from emutrace.discover.debuginfo import debug_file_of, listed_symbols, parse_symbols_spec
from emutrace.discover.modules import ModuleMap
from emutrace.discover.store import guest_writable
from emutrace.elf import Image, load_image
from emutrace.environment import user_environment
from emutrace.errors import (
    EXIT_EMULATOR_CRASH,
    EXIT_MAX_INSNS,
    EXIT_TIMEOUT,
    EmutraceError,
    Unsupported,
    UsageError,
)
from emutrace.isa import UnknownIsa, by_name
from emutrace.isa.abi import load_abi
from emutrace.isa.base import Cap
from emutrace.machine.linux import handlers  # noqa: F401 (registers every system call)
from emutrace.machine.linux.child_wait import end_children, outlive
from emutrace.machine.linux.cpu_timers import CpuTimers
from emutrace.machine.linux.kernel import FileDesc, GuestExec, GuestExit, LinuxKernel
from emutrace.machine.linux.loader import build_stack, interpreter_bias, load_segments
from emutrace.machine.linux.memory import DEFAULT_MAX_MEMORY, AddressSpace, Layout
from emutrace.machine.linux.procfs import note_arguments, note_image
from emutrace.machine.linux.sys_proc import GuestKilled
from emutrace.machine.linux.sys_sigdeliver import adopt_cpu_timers
from emutrace.machine.linux.threads import Deadlock
from emutrace.mechanisms import BACKENDS
from emutrace.mechanisms.settings import BackendSettings, settings_of
from emutrace.native import crashguard
from emutrace.native.crashguard import EmulatorCrash
from emutrace.sandbox import Sandbox, SandboxError
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import STOP_SIGNALS, HookSet, Stop, run
from emutrace.trace.events import Record
from emutrace.trace.shadow import STACK_SWITCH
from emutrace.tracer import TracedRun, Tracer


@dataclass(frozen=True)
class RunConfig(BackendSettings):
    """One run; the backend's settings (cleanup, hw_slots, ...) are inherited keyword-only
    fields, spelled once in mechanisms/settings.py."""

    program: str
    args: Sequence[str] = ()
    arch: str | None = None
    root: str = "/"
    allow_write: Sequence[str] = ()
    max_insns: int = 0
    timeout: float = 0.0
    env: dict[str, str] | None = None  # None: the user's environment (environment.py)
    backend: str = "none"  # "none" (just run) or a tracing backend (backends.BACKENDS)
    arg_counts: dict[str, int] = field(default_factory=dict)  # -A FUNC@argN
    # -A/-R with uftrace's formats (FUNC@arg1/i32,fparg1/64; FUNC@retval/f64)
    arg_formats: dict[str, ArgFormats] = field(default_factory=dict)
    default_args: int = DEFAULT_ARGS  # integer words read for a function without prototype
    max_memory: int = DEFAULT_MAX_MEMORY  # guest mappings beyond this are ENOMEM
    # "python" (reference), "native" (C hot path; int3, step) or "auto": native where the
    # backend has a native path and the library is built, else python
    engine: str = "auto"
    symbols: Sequence[str] = ()  # --symbols FILE[@BIAS]: an ELF's .symtab or an nm listing
    # a guest fork forks this host process (the CLI: its child ends in os._exit); False in
    # embedded runs, where fork is EAGAIN (kernel.host_fork)
    host_fork: bool = False
    # the images the program execve()s are traced as it is (False: they run untraced, as
    # `record` runs them: its directory holds the first image's records)
    trace_execs: bool = True
    # after an execve: the guest's own argv[0], environment entries, /proc/self/exe (an
    # absolute guest path) and AT_EXECFN (the path execve was given) (None: PROGRAM, `env`,
    # PROGRAM's guest path, PROGRAM)
    argv0: str | None = None
    raw_env: Sequence[bytes] | None = None
    guest_path: str | None = None
    execfn: str | None = None


@dataclass
class Inherited:
    """What a process keeps across execve (execve(2)): its sandbox view (working
    directory), the descriptors not marked close-on-exec, its children and parent, ignored
    signals (handlers are reset), the signal mask, the CPU-time interval timers and the
    resource limits it set."""

    sandbox: Sandbox
    fds: dict[int, FileDesc]
    children: set[int]
    guest_parent: int | None
    sig_ignored: set[int]
    sig_mask: int
    cpu_timers: CpuTimers | None = None
    rlimits: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)


@dataclass
class RunResult:
    stop: Stop
    image: Image
    syscalls: int = 0
    syscall_counts: dict[str, int] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)  # the call trace (tracing backends)
    backend_stats: dict[str, int] = field(default_factory=dict)
    open_frames: list[int] = field(default_factory=list)  # shadow call stack at the end
    guest_insns: int | None = None  # instructions executed (tracing backends count them)
    next_process: Process | None = None  # after an execve: the new image, ready to run
    guest_parent: int | None = None  # a forked child's parent (a guest process too)

    @property
    def exit_code(self) -> int:
        """What a shell would see: the status, or 128 + signal for a killed process."""
        if self.stop.kind == "exit":
            return self.stop.status
        if self.stop.kind in ("timeout", "deadlock"):  # a deadlock: a hang found early
            return EXIT_TIMEOUT
        if self.stop.kind == "max_insns":
            return EXIT_MAX_INSNS
        if self.stop.kind == "crash":  # the emulator's own crash, not the guest's
            return EXIT_EMULATOR_CRASH
        sig = getattr(host_signal, self.stop.signal, host_signal.SIGKILL)
        return 128 + int(sig)


# functions through which a program creates threads (glibc, C11); the native engine traces
# one thread of control only
THREAD_CREATORS = frozenset({"pthread_create", "thrd_create"})


def may_create_threads(image: Image) -> bool:
    """A program that can create threads: a dynamic one (its libc can), or a static one
    that links a thread-creating function."""
    return image.interpreter is not None or any(s.name in THREAD_CREATORS
                                                for s in image.symbols)


def chosen_engine(engine: str, backend: str) -> str:
    """The engine a run uses: `auto` is the native hot path where the backend has one
    (NATIVE_BACKENDS: every one) and the library is built — for every program: static or
    dynamic, with threads, forks and execs (traces are byte-identical either way:
    tests/test_native_engine.py, tests/test_native_threads.py) — else the Python
    reference."""
    if engine != "auto":
        return engine
    return "native" if backend in NATIVE_BACKENDS and native.available(backend) else "python"


def engine_of_run(engine: str, backend: str, warn: Callable[[str], None]) -> str:
    """The engine a traced run (a Linux program or a board) uses: `chosen_engine`, with
    `--engine native` for a backend without a native path a usage error, and `auto`
    falling back to the reference said in one line (never a silent slow run)."""
    if engine == "native" and backend not in NATIVE_BACKENDS:
        raise UsageError(f"--engine native: backend {backend} has no native path yet "
                         f"(native: {', '.join(NATIVE_BACKENDS)}); use --engine python")
    chosen = chosen_engine(engine, backend)
    if engine == "auto" and chosen == "python":
        warn(f"emutrace: tracing on the Python reference engine (tens of times slower): "
             f"{native.unavailable_reason(backend)}")
    return chosen


def open_image(program: str, arch: str | None) -> Image:
    image = load_image(program, dynamic=True)
    if arch is not None:
        try:
            wanted = by_name(arch)
        except UnknownIsa as e:
            raise UsageError(str(e)) from None
        if wanted.name != image.isa.name:
            raise UsageError(f"--arch {arch} disagrees with {program}, which is "
                             f"{image.isa.name} (ELF header)")
    return image


def guest_path_of(sandbox: Sandbox, program: str) -> str:
    try:
        from pathlib import Path

        return sandbox.to_guest(Path(os.path.realpath(program)))
    except ValueError:  # outside the root: never a host path, nor a relative one (glibc's
        # _dl_get_origin asserts an absolute path); the guest sees it at the root's top
        return "/" + os.path.basename(os.path.normpath(program))


def open_interpreter(image: Image, sandbox: Sandbox, root: str) -> Image:
    """The program's PT_INTERP looked up inside the root (qemu-user's -L rule: ROOT + the
    PT_INTERP path, symlinks followed inside the root); same ISA as the program."""
    assert image.interpreter is not None
    try:
        host = sandbox.resolve(image.interpreter)
        interp = load_image(str(host))
    except (SandboxError, EmutraceError):
        raise Unsupported(f"{image.path}: dynamically linked; its interpreter "
                          f"{image.interpreter} is not under {root}; pass "
                          f"--root with a sysroot of {image.isa.name}") from None
    if interp.isa.name != image.isa.name:
        raise Unsupported(f"{image.path}: interpreter {host} is {interp.isa.name}, not "
                          f"{image.isa.name}; pass --root with a sysroot of {image.isa.name}")
    return interp


class Process(TracedRun):
    """A program loaded into a fresh emulated CPU with its Linux layer, ready to run."""

    def __init__(self, config: RunConfig, warn: Callable[[str], None] | None = None,
                 inherit: Inherited | None = None) -> None:
        self.config = config
        self.warn = warn
        self.image = open_image(config.program, config.arch)
        isa = self.image.isa
        emulated = isa.capability(Cap.RUN_STATIC)
        if not emulated.works:  # (an ISA only another engine runs: `emutrace info`)
            raise UsageError(f"{config.program} is a {isa.name} program: {emulated.reason}")
        self.cpu = UnicornCpu(isa)
        self.cpu.apply_reset()
        self.space = AddressSpace(self.cpu, Layout.for_word_size(isa.identity.word_size),
                                  config.max_memory)
        if inherit is not None:
            self.sandbox = inherit.sandbox
        else:
            try:  # no --allow-write: the current directory if it lies in the root, else none
                self.sandbox = Sandbox(config.root, list(config.allow_write))
            except ValueError as e:
                raise UsageError(str(e)) from None
        guest_writable([str(d) for d in self.sandbox.writable])  # discover.store: not there
        self.bias = load_segments(self.image, self.space)
        self.interp: Image | None = None
        interp_bias = 0
        if self.image.interpreter is not None:
            self.interp = open_interpreter(self.image, self.sandbox, config.root)
            interp_bias = load_segments(self.interp, self.space,
                                        interpreter_bias(self.interp, self.space), brk=False)
        exe = config.guest_path or guest_path_of(self.sandbox, config.program)
        abi = load_abi(isa.name)
        self.kernel = LinuxKernel(self.cpu, isa, abi, self.space, self.sandbox,
                                  exe, warn or (lambda m: print(m, file=sys.stderr)))
        self.kernel.host_fork = config.host_fork
        note_image(self.kernel, self.image, self.bias, exe)  # /proc/self/maps names them
        if self.interp is not None and self.image.interpreter is not None:
            note_image(self.kernel, self.interp, interp_bias, self.image.interpreter)
        if inherit is not None:
            self._inherit(inherit)
        self.kernel.exec_hook = self._exec_image
        env = user_environment() if config.env is None else config.env
        argv = [os.fsencode(config.argv0 if config.argv0 is not None else config.program),
                *(os.fsencode(a) for a in config.args)]
        envp = list(config.raw_env) if config.raw_env is not None else [
            os.fsencode(f"{k}={v}") for k, v in env.items()]
        sp = build_stack(self.image, self.space, self.bias, argv, envp,
                         config.execfn or config.program,
                         self.kernel.random_bytes(16), abi.constants, interp_bias)
        note_arguments(self.kernel, sp, argv, envp)  # /proc/self/cmdline, environ
        regs = isa.registers
        modules = self._modules(interp_bias) if config.backend != "none" else None
        self.image = self.image.rebased(self.bias)  # from here on, run-time addresses
        if modules is not None:
            self.image = replace(self.image, modules=modules)
        self.entry = self.image.entry
        if self.interp is not None:  # execution starts in ld.so, which jumps to AT_ENTRY
            self.entry = self.interp.entry + interp_bias
        self.cpu.reg_write(regs.sp, sp)
        for reg in isa.entry_regs:
            self.cpu.reg_write(reg, self.entry)
        compat = None
        if isa.compat_syscalls is not None:  # x86_64's int $0x80 runs i386 system calls
            compat = self.kernel.compat_entry(by_name(isa.compat_syscalls.isa)).on_syscall
        self.hooks = HookSet(self.cpu, self.kernel.on_syscall, compat)
        # shadow stacks per guest thread, by tid; a new thread's records carry its number
        # (threads.py: the n-th thread created, tid = pid + n; the main thread is 0), the
        # same in every rerun, where the pid is not
        # swapcontext and coroutines switch stacks within a thread (shadow.py policy 8)
        self.tracer = Tracer(self.kernel.threads.tid, stack_switch=STACK_SWITCH)
        self.engine = "python"
        threads = self.kernel.threads
        threads.on_switch.append(
            lambda tid: self.tracer.thread_switched(tid, tid - threads.main_tid))

        if config.backend in BACKENDS:
            # values per function: its prototype (DWARF, else the libc table), -A, else
            # DEFAULT_ARGS integer words
            types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                        config.default_args, dict(config.arg_formats))
            self.engine = engine_of_run(config.engine, config.backend, self.kernel.warn)
            options = BackendOptions(**settings_of(config), call_types=types,
                                     engine=self.engine)
            backend = create(config.backend, self.image, self.cpu, self.hooks,
                             self.tracer.emit, options)
            self.tracer.backend = backend
            backend.start(self.entry)
            aware = self.tracer.trap_aware
            if aware is not None:  # signal handlers as trap frames
                self.kernel.on_handler_entered = aware.trap_entered
                self.kernel.on_handler_returned = aware.trap_returned
            # a context loaded inside a system call (ppc32's swapcontext): int3's placement
            self.kernel.on_context_loaded = getattr(backend, "context_loaded", None)
        elif config.backend != "none":
            known = ", ".join(["none", *BACKENDS])
            raise UsageError(f"unknown backend {config.backend!r}; known: {known}")

    def _modules(self, interp_bias: int) -> ModuleMap | None:
        """A traced run's module map: for a dynamic program (every module's symbols and
        code, the libraries as ld.so maps them), or when symbols come from elsewhere
        (--symbols, a separate debug file of a stripped program); None otherwise (a static
        program's own .symtab, read as always)."""
        config = self.config
        listed = []
        for spec in config.symbols:
            path, bias = parse_symbols_spec(spec)
            found = listed_symbols(path, self.image.isa, self.bias if bias is None else bias)
            if not found:  # a stripped file keeping a .symtab of sections and files only
                raise UsageError(f"--symbols {path}: its .symtab holds no function symbols "
                                 f"(stripped?): it adds no names")
            listed += found
        if self.interp is None and not listed and (
                self.image.symbols or debug_file_of(self.image.path, config.root) is None):
            return None
        modules = ModuleMap(self.image.isa, config.root)
        modules.add(self.image, self.bias)
        modules.add_listed(listed)
        if self.interp is not None:
            modules.add(self.interp, interp_bias)
            self.kernel.on_exec_map = modules.exec_mapped
        return modules

    def _inherit(self, inherit: Inherited) -> None:
        k = self.kernel
        k.close_all()  # the fresh 0, 1, 2: the inherited table replaces them
        k.fds = inherit.fds
        k.children, k.guest_parent = inherit.children, inherit.guest_parent
        k.sig_ignored, k.sig_mask = inherit.sig_ignored, inherit.sig_mask
        k.rlimits = dict(inherit.rlimits)
        if inherit.cpu_timers is not None:
            adopt_cpu_timers(k, inherit.cpu_timers)

    def _exec_image(self, host: str, argv: list[bytes], envp: list[bytes],
                    guest: str, execfn: str) -> Process:
        """execve's new image (the kernel's exec hook): loaded now, so that a failure is
        the guest's errno and the old image goes on; it runs when this one has ended."""
        k = self.kernel
        config = replace(self.config, program=host,
                         args=[os.fsdecode(a) for a in argv[1:]], arch=None,
                         argv0=os.fsdecode(argv[0]) if argv else "", raw_env=envp,
                         guest_path=guest, execfn=execfn,
                         backend=self.config.backend if self.config.trace_execs else "none")
        kept = {n: d for n, d in k.fds.items() if not d.cloexec}
        return Process(config, self.warn, Inherited(
            self.sandbox, kept, k.children, k.guest_parent, set(k.sig_ignored), k.sig_mask,
            k.threads.cpu_timers, dict(k.rlimits)))

    def run(self) -> RunResult:
        next_process: Process | None = None

        def on_exit(e: BaseException) -> Stop:
            nonlocal next_process
            if isinstance(e, GuestExit):
                return Stop("exit", status=e.status, pc=self.cpu.pc)
            if isinstance(e, GuestExec):
                assert isinstance(e.image, Process)
                next_process = e.image
                for n in next_process.kernel.fds:  # handed over: not closed with this image
                    self.kernel.fds.pop(n, None)
                return Stop("exec", pc=self.cpu.pc)
            if isinstance(e, Deadlock):
                return Stop("deadlock", pc=self.cpu.pc, detail=e.detail)
            assert isinstance(e, GuestKilled)
            return Stop("signal", signal=e.signal_name, pc=self.cpu.pc, detail="raised by guest")

        self.tracer.before_run()
        stop: Stop | None = None
        timeout = self.config.timeout
        deadline = time.monotonic() + timeout if timeout else None
        crashguard.install()  # a crash inside Unicorn ends the run as a Stop("crash")
        try:
            entry = self.entry
            while True:
                try:
                    stop = run(self.cpu, self.hooks, entry, max_insns=self.config.max_insns,
                               timeout=self.config.timeout,
                               exits=(GuestExit, GuestKilled, GuestExec, Deadlock),
                               on_exit=on_exit, threads=self.kernel.threads)
                except EmulatorCrash as crash:  # the trace so far is finished and written
                    stop = Stop("crash", signal=crash.signal, detail=crash.message)
                    break
                # a CPU fault the guest handles (a SIGSEGV handler that siglongjmps):
                # emulation goes on in its handler
                fault = self.kernel.fault_hook
                resume = fault(stop.signal, stop.fault_addr) if fault is not None \
                    and stop.kind == "signal" and stop.detail != "raised by guest" else None
                if resume is None:
                    break
                entry = resume
        finally:
            if stop is None or stop.kind in ("interrupted", "timeout"):
                # no guest process outlives a stopped run (nor one a bug of ours ended)
                named = stop.signal if stop is not None and stop.signal else "SIGTERM"
                end_children(self.kernel, getattr(host_signal, named, host_signal.SIGTERM))
            elif stop.kind in ("exit", "signal") and self.kernel.children:
                # its children run on to their own ends (a forked child's own run has no
                # deadline: the first process's stop reaches it as a signal)
                ended = outlive(self.kernel, None if self.kernel.guest_parent else deadline,
                                STOP_SIGNALS)
                if ended is not None:
                    stop = Stop("timeout", pc=stop.pc) if ended == "timeout" else \
                        Stop("interrupted", signal=ended, pc=stop.pc)
            self.kernel.close_all()
        end = self.tracer.finish(self.kernel.threads.main_tid)
        return RunResult(stop, self.image, self.kernel.stats.count,
                         dict(self.kernel.stats.by_name), end.records, end.stats,
                         end.open_frames, end.insns, next_process, self.kernel.guest_parent)
