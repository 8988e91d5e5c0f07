"""The `entry` backend on the Unicorn hot path against its Python reference: untraced vs
`--backend entry --engine python` vs `--engine native`, ratios side by side in one run.

    python bench/bench_native_entry.py [--isa x86_64,aarch64] [--n 22] [--repeat 3]
                                       [--out bench/results/native-entry]

`testbins/<isa>/fib N` (every call an entry probe stepped over and a return probe).  Every
run is in-process: `Process(RunConfig(...))` is built untimed (guest stdout to /dev/null),
only `run()` is timed; per repetition the variants run interleaved; medians are kept; ratios
are variant / none from this one run.  The two engines' records and counters must be equal
(else the row says FAIL and the script exits 1).  Writes PREFIX.json (machine information,
command, every sample) and PREFIX.md.
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

from emutrace.session import Process, RunConfig

VARIANTS = {"none": ("none", "python"), "entry python": ("entry", "python"),
            "entry native": ("entry", "native")}


def timed(argv: list[str], variant: str) -> tuple[float, Process, tuple]:
    backend, engine = VARIANTS[variant]
    with stdout_to_devnull():
        process = Process(RunConfig(argv[0], argv[1:], backend=backend, engine=engine),
                          warn=lambda m: None)
        start = time.perf_counter()
        r = process.run()
        took = time.perf_counter() - start
    return took, process, (r.records, r.backend_stats, r.guest_insns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=22)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-entry"))
    args = ap.parse_args(argv)
    command = "python bench/bench_native_entry.py " + shlex.join(argv if argv is not None
                                                                 else sys.argv[1:])
    info = machine_info(command)
    result: dict[str, object] = {"machine": info, "n": args.n, "rows": {}}
    lines = [f"# Native hot path: `entry`, fib {args.n}", "",
             f"Command: `{command}`  ", f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | insns | events | probe traps | none s | python s | native s | "
             "python/none | native/none | python/native | probe traps in C | agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    for isa in args.isa.split(","):
        argv_run = [str(ROOT / "testbins" / isa / "fib"), str(args.n)]
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        outputs: dict[str, tuple] = {}
        native_stats: dict[str, int] = {}
        for _ in range(args.repeat):
            for variant in VARIANTS:
                took, process, out = timed(argv_run, variant)
                samples[variant].append(took)
                outputs[variant] = out
                if variant == "entry native":
                    native_stats = dict(process.backend.native_stats)  # type: ignore[union-attr]
        med = {v: statistics.median(s) for v, s in samples.items()}
        agree = outputs["entry python"] == outputs["entry native"]
        failed |= not agree
        records, stats, insns = outputs["entry python"]
        # probe traps C finished: entry probes (c_entries) and the returns C simulated
        in_c = stats["traps"] - native_stats.get("python_traps", 0)
        lines.append(
            f"| {isa} | {insns:,} | {len(records):,} | {stats['traps']:,} | {med['none']:.2f} "
            f"| {med['entry python']:.2f} | {med['entry native']:.2f} "
            f"| {med['entry python'] / med['none']:.1f}× "
            f"| {med['entry native'] / med['none']:.1f}× "
            f"| {med['entry python'] / med['entry native']:.1f}× "
            f"| {100 * in_c / max(1, stats['traps']):.1f} % | {'yes' if agree else 'FAIL'} |")
        result["rows"][isa] = {"samples": samples, "stats": stats,  # type: ignore[index]
                               "native_stats": native_stats, "agree": agree}
        print(lines[-1], flush=True)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
