"""`--target native` (issue 13): fib run on this host under ptrace, untraced against each
native backend, with the cost per mechanism event of today's Python event loop.

    python bench/bench_native_target.py [--isa x86_64,i386] [--n 20] [--repeat 3]
                                        [--out bench/results/native_target]

Every run is in-process: `NativeProcess(RunConfig(...))` (spawn, stopped at the first
instruction, backend armed) is built untimed with the guest's stdio on /dev/null; only
`run()` is timed. Variants run interleaved per repetition, medians kept. Events are what the
mechanism stopped the CPU for: int3 traps, hwbp hits + stepped fall-back instructions, btf
stops (every instruction where BTF is degraded), step steps. µs/event = (variant - none) /
events. Writes PREFIX.json and PREFIX.md. This measures the Python loop (issue 13 item 2
moves it to C), not the bare mechanism.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.native_session import NativeProcess
from emutrace.session import RunConfig

BACKENDS = ("none", "int3", "hwbp", "btf", "step")
# the stops each mechanism costs: hwbp's are its slot hits plus the instructions stepped
# across a function with more sites than the 4 registers (its declared fall-back)
EVENT_KEYS = {"int3": ("traps",), "hwbp": ("hits", "stepped"), "btf": ("stops",),
              "step": ("steps",)}


def sample(isa: str, n: int, backend: str) -> tuple[float, int]:
    program = str(ROOT / "testbins" / isa / "fib")
    with stdout_to_devnull():
        process = NativeProcess(RunConfig(program, [str(n)], backend=backend))
        start = time.perf_counter()
        result = process.run()
        took = time.perf_counter() - start
    assert result.exit_code == 0, (isa, backend, result.stop)
    stats = result.backend_stats
    return took, sum(stats.get(k, 0) for k in EVENT_KEYS.get(backend, ()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default="x86_64,i386")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native_target"))
    args = ap.parse_args()
    backends = args.backends.split(",")
    if "none" not in backends:
        backends.insert(0, "none")
    command = "python bench/bench_native_target.py " + shlex.join(sys.argv[1:])
    info = machine_info(command, n=args.n, repeat=args.repeat)
    rows = []
    for isa in args.isa.split(","):
        times: dict[str, list[float]] = {b: [] for b in backends}
        events: dict[str, int] = {}
        for _ in range(args.repeat):
            for backend in backends:
                took, count = sample(isa, args.n, backend)
                times[backend].append(took)
                events[backend] = count
        base = statistics.median(times["none"])
        for backend in backends:
            t = statistics.median(times[backend])
            count = events[backend]
            per = (t - base) / count * 1e6 if count else None
            rows.append({"isa": isa, "backend": backend, "seconds": t, "events": count,
                         "us_per_event": per, "samples": times[backend]})
            print(f"{isa:7} {backend:5} {t:8.3f} s  {count:8} events  "
                  f"{'' if per is None else f'{per:.1f} µs/event'}", file=sys.stderr)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    lines = [f"# Native target: fib {args.n} under ptrace (`{command}`)", "",
             f"{info['date']}, {info['cpu']}, {info['cpus']} CPUs, load average at start "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; medians of "
             f"{args.repeat}, in-process `run()` time.", "",
             "| ISA | backend | seconds | events | µs per event (over none) |",
             "|---|---|---|---|---|"]
    for r in rows:
        per = "" if r["us_per_event"] is None else f"{r['us_per_event']:.1f}"
        lines.append(f"| {r['isa']} | {r['backend']} | {r['seconds']:.3f} | {r['events']} | "
                     f"{per} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
