"""`--target gdb`: a program run by qemu-user's GDB remote stub, traced by the same backends
through the target protocol (target/gdb_remote.py, target/gdb_run.py).  The counterpart of
session.Process for the gdb-remote target: QEMU's own Linux layer runs the system calls,
with the user's rights (no sandbox: the run is asked for with --unconfined).

What runs there (checked before anything runs; a refusal is a usage error): a static
program of an ISA whose capability table says `gdb_target` and whose qemu-user is
installed, without threads, with backend none or one whose recipe has a gdb port
(`runs_on(GDB_PYTHON)`: int3, hwbp)."""

from __future__ import annotations

import os
import subprocess
import sys

from emutrace.backends import BackendOptions, create
from emutrace.discover.callabi import CallTypes
from emutrace.errors import UsageError
from emutrace.isa.base import Cap
from emutrace.mechanisms import runs_on
from emutrace.mechanisms.settings import GDB_PYTHON, settings_of
from emutrace.session import RunConfig, RunResult, may_create_threads, open_image
from emutrace.target.gdb_remote import GdbRemoteTarget, start_qemu
from emutrace.target.gdb_run import GdbTrapHooks, run
from emutrace.tracer import TracedRun, Tracer

GDB_TARGET_BACKENDS = runs_on(GDB_PYTHON)
KILL_WAIT = 5.0


class GdbProcess(TracedRun):
    """A program started in qemu-user's gdb stub, stopped at its first instruction, with
    its backend armed; `run()` runs it to its end."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        image = open_image(config.program, config.arch)
        gdb = image.isa.capability(Cap.GDB_TARGET)
        if not gdb.works:
            raise UsageError(f"--target gdb: {config.program} is a {image.isa.name} program: "
                             f"{gdb.reason}")
        if image.interpreter is not None:
            raise UsageError(f"--target gdb: {config.program} is dynamically linked; the "
                             f"gdb target runs static programs only so far")
        if config.backend not in ("none", *GDB_TARGET_BACKENDS):
            raise UsageError(f"--target gdb: backend {config.backend} has no gdb-remote "
                             f"port yet (gdb: none, {', '.join(GDB_TARGET_BACKENDS)})")
        if config.backend != "none" and may_create_threads(image):
            raise UsageError(f"--target gdb: {config.program} can create threads; tracing "
                             f"them through the stub is not supported yet")
        env = config.env if config.env is not None else dict(os.environ)
        sys.stdout.flush()  # qemu shares our stdout and stderr from here
        sys.stderr.flush()
        self.qemu, conn = start_qemu(image.isa, config.program, list(config.args),
                                     config.argv0, env)
        try:
            self.target = GdbRemoteTarget(image.isa, conn)
            self.image = image.rebased(self._bias(image.kind))
            self.hooks = GdbTrapHooks()
            self.tracer = Tracer(counts_events=True)  # a stub reports no instruction count
            if config.backend != "none":
                types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                            config.default_args, dict(config.arg_formats))
                options = BackendOptions(**settings_of(config), call_types=types,
                                         engine="python")
                backend = create(config.backend, self.image, self.target, self.hooks,
                                 self.tracer.emit, options)
                self.tracer.backend = backend
                backend.start(self.target.pc)
        except BaseException:
            self.close()
            raise

    def _bias(self, kind: str) -> int:
        """Where the stub loaded a PIE (qOffsets' Text=), 0 for a fixed-address program."""
        if kind != "dyn":
            return 0
        reply = self.target.conn.request(b"qOffsets").decode()
        fields = dict(p.split("=", 1) for p in reply.split(";") if "=" in p)
        return int(fields.get("Text", "0"), 16)

    def close(self) -> None:
        if self.qemu.poll() is None:
            self.qemu.kill()
        try:
            self.qemu.wait(KILL_WAIT)
        except subprocess.TimeoutExpired:
            pass
        if hasattr(self, "target"):
            self.target.close()

    def run(self) -> RunResult:
        self.tracer.before_run()
        try:
            stop = run(self.target, self.hooks, self.config.timeout)
        finally:
            self.close()
        end = self.tracer.finish()
        return RunResult(stop, self.image, records=end.records, backend_stats=end.stats,
                         open_frames=end.open_frames, guest_insns=end.insns)
