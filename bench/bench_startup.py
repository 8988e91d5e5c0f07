"""Start-up cost: the wall time of a whole `emutrace run` (process start to exit), untraced
(`--backend none`) against traced (`--backend int3`), for small static programs.

    python bench/bench_startup.py [--tree NAME=DIR ...] [--isa x86_64,arm] [--repeat 3]
                                  [--out FILE]

The target: tracing a small static program costs at most 1.5x the untraced
run.  Each run is a fresh `python -m emutrace run ... -o /dev/null` subprocess with
PYTHONPATH set to the tree (a checkout or `git worktree add` of another revision: before
and after in one run), bytecode caching on (as an installed package has it: a private
PYTHONPYCACHEPREFIX per tree, warmed by one untimed run).  The runs are interleaved: every
repeat runs every (program, tree, backend) once in turn, and a cell is the median of its
repeats, so a ratio is never taken between moments of different machine load.

Programs: `fib 5` (static glibc: the C start-up, printf, 15 calls of fib) on every ISA, and
Debian's static busybox `echo hi` (stripped: discovery by descent) where .cache/busybox has
it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
# what a cell runs: (column label, backend, discovery store): `cold` turns the on-disk
# store of discovered functions off (EMUTRACE_CACHE=off: every run decodes, as the first
# run of a binary does), `warm` runs with it filled by an untimed run before timing
VARIANTS = (("none", "none", "cold"), ("int3 cold", "int3", "cold"),
            ("int3 warm", "int3", "warm"))


def programs(isas: list[str], busybox: list[str]) -> list[tuple[str, str, list[str]]]:
    """(isa, label, argv) of every program run."""
    out = [(isa, "fib 5", [str(ROOT / "testbins" / isa / "fib"), "5"]) for isa in isas]
    for isa in busybox:
        path = ROOT / ".cache" / "busybox" / isa / "busybox"
        if path.is_file():
            out.append((isa, "busybox echo hi", [str(path), "echo", "hi"]))
    return out


def time_run(tree: Path, scratch: Path, backend: str, store: str, argv: list[str]) -> float:
    """One `emutrace run` of `tree`; scratch holds its bytecode and discovery caches and
    the guest's working directory (apart: the store is off where the guest may write)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": "/nonexistent",
           "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(scratch / "pyc"),
           "XDG_CACHE_HOME": str(scratch / "xdg"), "EMUTRACE_CACHE": "on" if store == "warm"
           else "off"}
    (scratch / "work").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", backend,
                           "-o", "/dev/null", *argv], env=env, cwd=scratch / "work",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {backend} {argv}: exit {done.returncode}: "
                         f"{done.stderr.decode()[-300:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="a checkout to time (repeatable; default: this one as `this`)")
    ap.add_argument("--isa", default=",".join(ISAS))
    ap.add_argument("--busybox", default="x86_64,aarch64,s390x",
                    help="ISAs whose busybox runs too ('' for none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    trees = [(name, Path(d).resolve()) for name, _, d in (t.partition("=") for t in args.tree)] \
        or [("this", ROOT)]
    rows = programs([i for i in args.isa.split(",") if i],
                    [i for i in args.busybox.split(",") if i])
    scratch = {name: Path(tempfile.mkdtemp(prefix=f"bench-startup-{name}-")) for name, _ in trees}
    times: dict[tuple[str, str, str, str], list[float]] = {}
    try:
        for _isa, _label, argv in rows:  # bytecode and warm stores (not timed)
            for name, tree in trees:
                time_run(tree, scratch[name], "int3", "warm", argv)
        for rep in range(args.repeat):
            for isa, label, argv in rows:
                for name, tree in trees:
                    for column, backend, store in VARIANTS:
                        t = time_run(tree, scratch[name], backend, store, argv)
                        times.setdefault((isa, label, name, column), []).append(t)
            print(f"repeat {rep + 1}/{args.repeat} done, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr)
    finally:
        for d in scratch.values():
            shutil.rmtree(d, ignore_errors=True)
    head = "| ISA | program | " + " | ".join(
        f"{n}: none s | int3 cold s | int3 warm s | cold/none | warm/none" for n, _ in trees) + " |"
    lines = [head, "|" + "---|" * (2 + 5 * len(trees))]
    ratios: dict[tuple[str, str], list[float]] = {}
    for isa, label, _ in rows:
        cells = []
        for name, _ in trees:
            med = {c: statistics.median(times[(isa, label, name, c)]) for c, _, _ in VARIANTS}
            cold, warm = med["int3 cold"] / med["none"], med["int3 warm"] / med["none"]
            ratios.setdefault((name, "cold"), []).append(cold)
            ratios.setdefault((name, "warm"), []).append(warm)
            cells.append(f"{med['none']:.2f} | {med['int3 cold']:.2f} | {med['int3 warm']:.2f} "
                         f"| {cold:.2f}x | {warm:.2f}x")
        lines.append(f"| {isa} | {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for (name, store), r in ratios.items():
        lines.append(f"{name}, store {store}: int3/none median {statistics.median(r):.2f}x, "
                     f"max {max(r):.2f}x over {len(r)} programs")
    lines.append(f"load average at the end: {os.getloadavg()[0]:.1f} "
                 f"(2 cores shared with the other sessions)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
