"""Run a program under emutrace in this (separate) Python process and write the canonical
trace of the program's own functions to a file: `python -m tests.signal_trace_run OUT
BACKEND CLEANUP PROGRAM FUNC,FUNC... [ENGINE]`.  A program that forks needs a process of its own
(RunConfig.host_fork: a forked guest child must end in os._exit, never return into
pytest); the children end as the CLI's do (cli/run.py end_child) and write nothing."""

from __future__ import annotations

import sys
from pathlib import Path

from emutrace.cli.run import end_child
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_text


def main(out: str, backend: str, cleanup: str, program: str, funcs: str,
         engine: str = "python") -> int:
    config = RunConfig(program, backend=backend, cleanup=cleanup, env={}, host_fork=True,
                       engine=engine)
    result = Process(config, warn=lambda _m: None).run()
    if result.guest_parent is not None:
        end_child(result)
    image = result.image

    def name(addr: int) -> str:
        return image.symbolize(image.isa.code_address(addr)).split("+")[0]

    text = canonical_text(result.records, name, set(funcs.split(",")))
    Path(out).write_text(f"exit {result.exit_code}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
