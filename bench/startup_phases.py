"""Where a small run's start-up goes: CPU time of the phases of one `emutrace run`.

    python bench/startup_phases.py [--backend int3] PROGRAM [ARGS...]

Runs `emutrace run --backend B -o /dev/null PROGRAM ARGS` in this process with a timer
around each phase below (process CPU time, which the load of a shared machine disturbs far
less than wall time; a wrapper costs ~1 µs a call, so phases called thousands of times
read a little high).  Nested phases are included in their callers.  Use it beside
bench_startup.py (wall time, interleaved) to see *what* a ratio there is made of; run it
twice for a warm discovery store (or set EMUTRACE_CACHE=off for a binary's first run).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

# (label, module, attribute path): what is timed, in the order printed
PHASES = (
    ("import the run command", "", ""),
    ("open and load the image", "emutrace.session", "open_image"),
    ("  DWARF/libc prototypes", "emutrace.session", "CallTypes.for_image"),
    ("  backend set-up (discovery, store, C tables)", "emutrace.session", "create"),
    ("Process set-up (all of it)", "emutrace.session", "Process.__init__"),
    ("  trap path (Python)", "emutrace.backends.int3_python", "Int3Backend.on_trap"),
    ("    arming sites", "emutrace.backends.int3_python", "Int3Backend.arm_site"),
    ("    finding functions", "emutrace.backends.int3_python", "Int3Backend.function_entered"),
    ("    reading arguments", "emutrace.backends.args", "ArgReader.read"),
    ("  block counts (Python)", "emutrace.backends.int3_python", "Int3Backend.block_count"),
    ("run (emulation and all hooks)", "emutrace.session", "Process.run"),
    ("trace writing", "emutrace.cli.run", "RunCommand.finish"),
)


def timed(owner: Any, name: str, spent: dict[str, float], label: str) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - start

    setattr(owner, name, wrapper)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="int3")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    spent: dict[str, float] = {}
    begin = time.process_time()
    from emutrace.cli import main as cli

    cli.command("run")  # the subcommand's imports, as `emutrace run` pays them
    spent[PHASES[0][0]] = time.process_time() - begin
    for label, module, attr in PHASES[1:]:
        owner: Any = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        timed(owner, name, spent, label)
    code = cli.main(["run", "--backend", args.backend, "-o", "/dev/null", *args.program])
    total = time.process_time() - begin
    for label, _, _ in PHASES:
        if label in spent:
            print(f"{spent[label] * 1000:8.1f} ms  {label}", file=sys.stderr)
    print(f"{total * 1000:8.1f} ms  total CPU in this process (interpreter start-up not "
          f"included)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
