"""`--target qiling`: a program whose loader, memory and system services are Qiling's
(target/qiling_os.py), traced by the same backends through the target protocol.  The
counterpart of session.Process for Qiling's operating systems: Qiling's Linux layer serves
the system calls (with the user's rights: Qiling's root is an empty temporary directory,
but its file calls reach the host, so the run is asked for with --unconfined).

What runs there (checked before anything runs; a refusal is a usage error): a program of
an OS × ISA the Qiling table says works (target/qiling_table.py, `emutrace info`), static,
with backend none or one the table lists.  Functions are found as for any run: the ELF's
symbols and descent (discover/), at the addresses Qiling's loader chose."""

from __future__ import annotations

import os
import sys

from emutrace.backends import BackendOptions, create
from emutrace.discover.callabi import CallTypes
from emutrace.errors import Unsupported, UsageError
from emutrace.mechanisms.settings import settings_of
from emutrace.session import RunConfig, RunResult, engine_of_run, open_image
from emutrace.target.qiling_table import backend_refusal, linux_row
from emutrace.tracer import TracedRun, Tracer


class QilingProcess(TracedRun):
    """A program loaded by Qiling, stopped before its first instruction, with its backend
    armed; `run()` runs it to its end."""

    def __init__(self, config: RunConfig) -> None:
        from emutrace.target.qiling_os import QilingMachine, missing_reason

        self.config = config
        image = open_image(config.program, config.arch)
        row = linux_row(image.isa.name)
        if not row.works:
            raise UsageError(f"--target qiling: {config.program} is a Linux "
                             f"{image.isa.name} program: {row.reason}")
        if image.interpreter is not None:
            raise UsageError(f"--target qiling: {config.program} is dynamically linked; "
                             f"Qiling's loader would need the program and its libraries in "
                             f"one root (its ld.so and libc at their guest paths), which "
                             f"the qiling target does not build yet: static programs only")
        refusal = backend_refusal(config.backend)
        if refusal is not None:
            raise UsageError(f"--target qiling: backend {config.backend}: {refusal}")
        missing = missing_reason()
        if missing is not None:
            raise Unsupported(f"--target qiling: {missing}")
        env = config.env if config.env is not None else dict(os.environ)
        sys.stdout.flush()  # the guest writes to the same descriptors from here
        sys.stderr.flush()
        self.machine = QilingMachine(image.isa, config.program, list(config.args),
                                     config.argv0, env)
        try:
            self.image = image.rebased(self.machine.load_bias if image.kind == "dyn" else 0)
            self.cpu = self.machine.cpu
            self.hooks = self.machine.hooks
            self.tracer = Tracer()
            self.engine = "python"
            if config.backend != "none":
                types = CallTypes.for_image(self.image, dict(config.arg_counts),
                                            config.default_args, dict(config.arg_formats))
                self.engine = engine_of_run(config.engine, config.backend,
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

    def run(self) -> RunResult:
        self.tracer.before_run()
        try:
            stop = self.machine.run(self.config.timeout)
        finally:
            self.machine.close()
        end = self.tracer.finish()
        return RunResult(stop, self.image, records=end.records, backend_stats=end.stats,
                         open_frames=end.open_frames, guest_insns=end.insns)
