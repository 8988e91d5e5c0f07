"""Start-up in instructions: callgrind's count (Ir) of whole `emutrace run` processes,
untraced and int3 with the discovery store off (cold) and filled (warm), for each tree.

    python bench/startup_instructions.py [--tree NAME=DIR ...] PROGRAM [ARGS...]

Instruction counts do not move with the load of a shared machine, where bench_startup.py's
wall times do by ±0.3×.  Each run is `valgrind --tool=callgrind python -m emutrace run
--backend B -o /dev/null PROGRAM ARGS` in bench_startup.py's environment (bytecode cached
per tree by one untimed run first; warm: after a run that filled the store).  A run under
callgrind takes ~1 min.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def count(tree: Path, scratch: Path, backend: str, store: str, argv: list[str]) -> int:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": "/nonexistent",
           "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(scratch / "pyc"),
           "XDG_CACHE_HOME": str(scratch / "xdg"), "EMUTRACE_CACHE": "on" if store == "warm"
           else "off"}
    (scratch / "work").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           os.path.realpath(sys.executable), "-m", "emutrace", "run",
                           "--backend", backend, "-o", "/dev/null", *argv],
                          env=env, cwd=scratch / "work", capture_output=True, timeout=1800)
    found = re.search(rb"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree}: {backend} {argv}: {done.stderr.decode()[-300:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    args.program[0] = os.path.abspath(args.program[0])  # (runs start in a scratch directory)
    trees = [(name, Path(d).resolve()) for name, _, d in (t.partition("=") for t in args.tree)] \
        or [("this", ROOT)]
    print("| tree | none | int3 cold | int3 warm | cold/none | warm/none |")
    print("|---|---|---|---|---|---|")
    for name, tree in trees:
        scratch = Path(tempfile.mkdtemp(prefix=f"startup-ir-{name}-"))
        try:
            subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "int3",
                            "-o", "/dev/null", *args.program], cwd=tempfile.gettempdir(),
                           env={**{k: v for k, v in os.environ.items()
                                   if k != "PYTHONDONTWRITEBYTECODE"},
                                "PYTHONPATH": str(tree), "EMUTRACE_CACHE": "off",
                                "PYTHONPYCACHEPREFIX": str(scratch / "pyc")},
                           capture_output=True, timeout=600)  # bytecode, not counted
            none = count(tree, scratch, "none", "cold", args.program)
            cold = count(tree, scratch, "int3", "cold", args.program)
            count(tree, scratch, "int3", "warm", args.program)  # fills the store
            warm = count(tree, scratch, "int3", "warm", args.program)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"| {name} | {none / 1e6:,.0f} M | {cold / 1e6:,.0f} M | {warm / 1e6:,.0f} M "
              f"| {cold / none:.2f}x | {warm / none:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
