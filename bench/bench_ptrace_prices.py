"""The kernel's price of each ptrace round trip on this machine, with a minimal C tracer
(bench/ptrace_prices.c, no Python in the loop), beside the cost model's `vm` prices
(emutrace/cost/anchors.py).  The source of the prices the model takes from it, and the
floor under `emutrace bench --target native`'s measured cost per stop: what the tracer's own
event loop adds is the difference.

    python bench/bench_ptrace_prices.py [--n 3000] [--rounds 9]
                                        [--out bench/results/ptrace-prices]

Compiles the C file with the host's cc (-O2) into a temporary directory, runs it --rounds
times (each run measures every price once, N events each, in turn), and writes PREFIX.json
and PREFIX.md with the minimum and the median of the rounds.  On this shared 2-core VM a
ptrace stop is two context switches, and under load each waits for a CPU: the median
includes that wait; the minimum is the least disturbed round, the closest to an idle
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, machine_info

from emutrace.cost import anchors

SOURCE = ROOT / "bench" / "ptrace_prices.c"
# the model's anchor for each measured price (None: the model has no price of its own)
MODEL = {
    "int3": anchors.VM_PTRACE_INT3_STOP,
    "int3_regs": None,
    "singlestep": anchors.VM_SINGLESTEP,
    "singleblock": anchors.VM_SINGLEBLOCK,
    "dr0_hit": anchors.VM_DR0_HIT,
    "poketext": anchors.VM_POKETEXT,
    "dr_write": anchors.VM_DR_WRITE,
    "getppid": anchors.VM_SYSCALL,
}
WHAT = {
    "int3": "int3 stop → waitpid → PTRACE_CONT",
    "int3_regs": "the same + PTRACE_GETREGS + PTRACE_SETREGS",
    "singlestep": "PTRACE_SINGLESTEP + waitpid, per instruction",
    "singleblock": "PTRACE_SINGLEBLOCK + waitpid, per stop",
    "dr0_hit": "DR0 execute breakpoint hit → waitpid → PTRACE_CONT",
    "poketext": "PTRACE_POKETEXT of one code word",
    "dr_write": "PTRACE_POKEUSER DR0 + DR7 (one slot re-programmed)",
    "getppid": "getppid system call",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ptrace-prices"))
    args = ap.parse_args()
    command = "python bench/bench_ptrace_prices.py " + shlex.join(sys.argv[1:])
    info = machine_info(command, n=args.n, rounds=args.rounds)
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ptrace-prices-") as tmp:
        exe = Path(tmp) / "ptrace_prices"
        subprocess.run(["cc", "-O2", "-o", str(exe), str(SOURCE)], check=True)
        for _ in range(args.rounds):
            out = subprocess.run([str(exe), str(args.n)], check=True, capture_output=True,
                                 text=True, timeout=600).stdout
            for line in out.splitlines():
                name, ns = line.split()
                samples.setdefault(name, []).append(float(ns))
    info["loadavg_at_end"] = os.getloadavg()
    rows = []
    for name, got in samples.items():
        model = MODEL.get(name)
        rows.append({"price": name, "what": WHAT.get(name, ""), "min_ns": min(got),
                     "median_ns": statistics.median(got), "samples_ns": got,
                     "model_ns": None if model is None else model.ns})
    Path(args.out).with_suffix(".json").write_text(
        json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    load = ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])  # type: ignore[attr-defined]
    load_end = ", ".join(f"{x:.1f}" for x in info["loadavg_at_end"])
    lines = [f"# ptrace round-trip prices on this machine (`{command}`)", "",
             f"{info['date']}, {info['cpu']}, {info['cpus']} CPUs, revision "
             f"{info['emutrace_git']}; load average at start {load}, at end {load_end}; "
             f"{args.rounds} rounds of {args.n} events per price; minimum (the least "
             "disturbed round) and median (under this load) of the rounds.  Model: the "
             "`vm` anchor in emutrace/cost/anchors.py.", "",
             "| price | what | min µs | median µs | model µs |", "|---|---|---:|---:|---:|"]
    for r in rows:
        model = "–" if r["model_ns"] is None else f"{r['model_ns'] / 1000:.3g}"
        lines.append(f"| {r['price']} | {r['what']} | {r['min_ns'] / 1000:.3g} | "
                     f"{r['median_ns'] / 1000:.3g} | {model} |")
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
