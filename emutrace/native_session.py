"""`--target native`: a program run on this host under ptrace, traced by the same backends
through the target protocol (target/ptrace.py, target/ptrace_run.py).  The counterpart of
session.Process for the native target: no Linux layer (the host kernel runs the system
calls), the same file sandbox as emulation (`Sandbox`, --root, --allow-write) applied by a
seccomp filter and the tracer (target/seccomp_filter.py, target/ptrace_confine.py), unless
the caller asked for none (`unconfined`: `--unconfined`).

What runs natively (checked here, before anything runs; a refusal is a usage error):
a static program of an ISA whose capability table says `native_target` (this x86_64 host:
x86_64 and i386), without threads (a thread the tracer does not follow would die on the
first breakpoint it meets), with backend none, int3 (lazy or strict), hwbp, btf, entry or step."""

from __future__ import annotations

import os
import sys

from emutrace.backends import BackendOptions, create
from emutrace.discover.callabi import DEFAULT_ARGS, CallTypes
from emutrace.elf import Image
from emutrace.errors import UsageError
from emutrace.isa import all_isas
from emutrace.machine.linux.sandbox import Sandbox
from emutrace.session import RunConfig, RunResult, may_create_threads, open_image
from emutrace.target.ptrace import PtraceError, PtraceTarget, kill, spawn
from emutrace.target.ptrace_confine import Confinement
from emutrace.target.ptrace_run import NativeTrapHooks, run
from emutrace.target.seccomp_filter import packed_program
from emutrace.trace.events import Event, Record
from emutrace.trace.shadow import ShadowStack

NATIVE_CAPABILITY = "native_target"
# backends whose delivery the native target provides (int3: real 0xCC bytes; hwbp: DR0-3;
# btf: PTRACE_SINGLEBLOCK; entry: eager 0xCC; step: PTRACE_SINGLESTEP); bts is not built
NATIVE_TARGET_BACKENDS = ("int3", "hwbp", "btf", "entry", "step")
AT_ENTRY = 9  # <linux/auxvec.h>


def native_isas() -> list[str]:
    return [isa.name for isa in all_isas() if isa.capability(NATIVE_CAPABILITY).works]


def check_native(config: RunConfig, image: Image) -> None:
    """Refuse, before anything runs, what the native target cannot do (usage errors)."""
    isa = image.isa
    if not isa.capability(NATIVE_CAPABILITY).works:
        raise UsageError(f"--target native: {config.program} is a {isa.name} program; this "
                         f"host runs only {', '.join(native_isas())} programs natively")
    if image.interpreter is not None:
        raise UsageError(f"--target native: {config.program} is dynamically linked; only "
                         f"static programs run natively yet")
    if config.backend != "none" and config.backend not in NATIVE_TARGET_BACKENDS:
        raise UsageError(f"--target native: backend {config.backend} has no native delivery "
                         f"yet (native: none, {', '.join(NATIVE_TARGET_BACKENDS)})")
    slots = isa.debug_hardware.slots
    if config.backend == "hwbp" and config.hw_slots is not None and config.hw_slots > slots:
        raise UsageError(f"--target native: --hw-slots {config.hw_slots}: this CPU has "
                         f"{slots} instruction breakpoint registers")
    if config.backend != "none" and may_create_threads(image):
        raise UsageError(f"--target native: {config.program} can create threads; tracing "
                         f"them natively is not supported yet")


def load_bias(pid: int, image: Image) -> int:
    """Where the kernel loaded the program: AT_ENTRY of the tracee's auxiliary vector
    minus the file's entry (0 for ET_EXEC; a static PIE at the kernel's base)."""
    word = image.isa.identity.word_size
    with open(f"/proc/{pid}/auxv", "rb") as f:
        raw = f.read()
    for at in range(0, len(raw) - 2 * word + 1, 2 * word):
        key = int.from_bytes(raw[at:at + word], "little")
        if key == AT_ENTRY:
            return int.from_bytes(raw[at + word:at + 2 * word], "little") - image.entry
    return 0


class NativeProcess:
    """A static x86 program started on the host, stopped at its first instruction, with its
    backend armed; `run()` runs it to its end."""

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
        envp = [os.fsencode(f"{k}={v}") for k, v in env.items()]
        sys.stdout.flush()  # the child shares our stdout and stderr from here
        sys.stderr.flush()
        if sandbox is None:
            self.pid = spawn(config.program, argv, envp)
        else:  # the child starts in the guest's current directory
            self.pid = spawn(config.program, argv, envp, packed_program(),
                             os.fsdecode(sandbox.resolve(sandbox.guest_cwd)))
        self.confinement = None if sandbox is None else Confinement(sandbox, self.pid)
        try:
            self.image = image.rebased(load_bias(self.pid, image))
            self.target = PtraceTarget(self.image.isa, self.pid)
            self.hooks = NativeTrapHooks()
            self.shadow = ShadowStack()
            self.records: list[Record] = []
            self.backend = None
            if config.backend != "none":
                types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                            config.default_args)
                options = BackendOptions(config.cleanup, DEFAULT_ARGS, config.hw_slots,
                                         config.bts_buffer, types, "python")
                self.backend = create(config.backend, self.image, self.target, self.hooks,
                                      self._emit, options)
                self.backend.start(self.image.entry)
        except BaseException:
            kill(self.pid)
            raise

    def _emit(self, ev: Event) -> None:
        self.records.extend(self.shadow.feed(ev))

    def run(self) -> RunResult:
        try:
            stop = run(self.target, self.hooks, self.config.timeout, self.confinement)
        except OSError as e:  # a ptrace request refused in the middle of the run
            raise PtraceError(f"--target native: {e.strerror or e}") from None
        finally:
            kill(self.pid)
            self.target.close()
            if self.confinement is not None:
                self.confinement.children.end()
                self.confinement.close()
        frames = [f.func for f in self.shadow.frames]
        insns, stats = None, {}
        if self.backend is not None:
            insns = self.backend.finish()
            self.records.extend(self.shadow.close_all(insns))
            stats = dict(self.backend.stats)
        return RunResult(stop, self.image, records=self.records, backend_stats=stats,
                         open_frames=frames, guest_insns=insns)
