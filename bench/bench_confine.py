"""What confinement costs a native run: `--target native` unconfined
against confined (seccomp filter + the tracer's `Sandbox` check at each checked call),
backend none, ratios side by side in one run.

    python bench/bench_confine.py [--files 400] [--n 24] [--repeat 3]
                                  [--out bench/results/confine]

Programs: `testbins/x86_64/fib N` (no checked call after start-up: what the filter costs
every system call), busybox `ls -lR` of a generated tree of F files (one lstat per file,
each a checked call: the price per check) and `calls fileio` (x86_64 and i386: a few).
Every run is in-process: `NativeProcess(RunConfig(...))` is built untimed with the guest's
stdout on /dev/null; only `run()` is timed; variants interleaved per repetition, medians
kept.  µs per check = (confined - unconfined) / checked calls.  Writes PREFIX.json and
PREFIX.md."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.native_session import NativeProcess
from emutrace.session import RunConfig


def sample(program: str, args: list[str], unconfined: bool, cwd: str) -> tuple[float, int]:
    here = os.getcwd()
    os.chdir(cwd)  # the default writable directory is the current one
    try:
        with stdout_to_devnull():
            process = NativeProcess(RunConfig(program, args), unconfined=unconfined)
            start = time.perf_counter()
            result = process.run()
            took = time.perf_counter() - start
    finally:
        os.chdir(here)
    assert result.exit_code == 0, (program, args, result.stop)
    stops = 0 if process.confinement is None else process.confinement.stops
    return took, stops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "confine"))
    args = ap.parse_args()
    command = "python bench/bench_confine.py " + shlex.join(sys.argv[1:])
    info = machine_info(command, files=args.files, n=args.n, repeat=args.repeat)
    busybox = str(ROOT / ".cache" / "busybox" / "x86_64" / "busybox")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work) / "tree"
        for i in range(args.files):
            sub = tree / f"d{i % 20}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{i}").write_text("x")
        cases = [
            ("fib", str(ROOT / "testbins" / "x86_64" / "fib"), [str(args.n)]),
            ("ls -lR", busybox, ["ls", "-lR", str(tree)]),
            ("calls fileio x86_64", str(ROOT / "testbins" / "x86_64" / "calls"), ["fileio"]),
            ("calls fileio i386", str(ROOT / "testbins" / "i386" / "calls"), ["fileio"]),
        ]
        for name, program, pargs in cases:
            times: dict[bool, list[float]] = {True: [], False: []}
            stops = 0
            for _ in range(args.repeat):
                for unconfined in (True, False):
                    took, count = sample(program, pargs, unconfined, work)
                    times[unconfined].append(took)
                    stops = max(stops, count)
            free, confined = statistics.median(times[True]), statistics.median(times[False])
            per = (confined - free) / stops * 1e6 if stops else None
            rows.append({"program": name, "unconfined": free, "confined": confined,
                         "ratio": confined / free, "checked_calls": stops,
                         "us_per_check": per, "samples": {"unconfined": times[True],
                                                          "confined": times[False]}})
            print(f"{name:20} {free:7.3f} s  {confined:7.3f} s  x{confined / free:5.2f}  "
                  f"{stops:6} checks", file=sys.stderr)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    lines = [f"# Confinement of native runs (`{command}`)", "",
             f"{info['date']}, {info['cpu']}, {info['cpus']} CPUs, load average at start "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; medians of "
             f"{args.repeat}, in-process `run()` time, backend none.", "",
             "| program | unconfined s | confined s | confined / unconfined | checked calls "
             "| µs per check |", "|---|---|---|---|---|---|"]
    for r in rows:
        per = "" if r["us_per_check"] is None else f"{r['us_per_check']:.0f}"
        lines.append(f"| {r['program']} | {r['unconfined']:.3f} | {r['confined']:.3f} | "
                     f"{r['ratio']:.2f} | {r['checked_calls']} | {per} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
