"""The cost of a short traced run inside one process: what the test suite and `emutrace
bench` pay per run, where discovery's per-file memo is warm and the run is mostly start-up
(the C library's start, the first call of every function: discovery and arming in Python).

    python bench/bench_short_runs.py [--tree NAME=DIR ...] [--isa x86_64,aarch64]
                                     [--backends int3,step,entry,hwbp] [--repeat 5]
                                     [--out FILE]

A cell is one backend on one ISA: `calls` run with eight scenarios one after another (one
Process each, after one untimed run), CPU seconds of the child process per run
(`process_time`: the load of a shared machine inflates it far less than wall time).  Each
tree (a checkout, or `git worktree add` of another revision: before and after) runs in a
child process of its own with PYTHONPATH set to it; the trees alternate within every repeat
and a cell is the median of its repeats, so a ratio between trees is taken side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "tail", "float")

CHILD = """
import json, sys, time
from emutrace.session import Process, RunConfig
isa, backend, scenarios = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
program = sys.argv[4]
def run(arg):
    config = RunConfig(program, [arg], backend=backend)
    Process(config, warn=lambda m: None).run()
run(scenarios[0])
start = time.process_time()
for arg in scenarios:
    run(arg)
print(json.dumps((time.process_time() - start) / len(scenarios)))
"""


def cell(tree: Path, isa: str, backend: str) -> float:
    program = ROOT / "testbins" / isa / "calls"
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", CHILD, isa, backend, ",".join(SCENARIOS),
                           str(program)], env=env, cwd=tree, capture_output=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {isa} {backend}: exit {done.returncode}: "
                         f"{done.stderr.decode()[-400:]}")
    return float(json.loads(done.stdout.decode().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--backends", default="int3,step,entry,hwbp")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    trees = [(name, Path(d).resolve()) for name, d in (t.split("=", 1) for t in args.tree)] \
        or [("this", ROOT)]
    isas, backends = args.isa.split(","), args.backends.split(",")
    seconds: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.repeat):
        for isa in isas:
            for backend in backends:
                for name, tree in trees:
                    seconds.setdefault((name, isa, backend), []).append(
                        cell(tree, isa, backend))
    header = "| ISA | backend | " + " | ".join(f"{n}: CPU ms a run" for n, _ in trees)
    if len(trees) > 1:
        header += " | " + " | ".join(f"{n}/{trees[0][0]}" for n, _ in trees[1:])
    lines = [header + " |", "|" + "---|" * (header.count("|") - 1)]
    for isa in isas:
        for backend in backends:
            med = [statistics.median(seconds[(n, isa, backend)]) for n, _ in trees]
            row = f"| {isa} | {backend} | " + " | ".join(f"{m * 1e3:.1f}" for m in med)
            if len(trees) > 1:
                row += " | " + " | ".join(f"{m / med[0]:.2f}" for m in med[1:])
            lines.append(row + " |")
    load = os.getloadavg()[0]
    lines.append("")
    lines.append(f"{args.repeat} repeats, medians; load average at the end {load:.1f}; "
                 f"{time.strftime('%Y-%m-%d %H:%M')}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
