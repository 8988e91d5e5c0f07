"""The native engine of this checkout against another one, side by side: fib N recorded with
int3 lazy (bench_native_record.py's child run), interleaved repetitions, ratio of medians.

    git archive <old commit> | tar -x -C /tmp/old && ln -s $PWD/.cache /tmp/old/.cache
    (cd /tmp/old && python setup.py build_ext --inplace)
    python bench/bench_native_ab.py --baseline /tmp/old [--isa x86_64,aarch64] [--n 27]
                                    [--repeat 5] [--out PREFIX]

On a shared, loaded machine the absolute seconds drift with the load; the two checkouts run
alternately, so the ratio new/old of their medians is what to read.  Each run is a child
process of its own checkout (its bench/bench_native_record.py --child, its PYTHONPATH).
Writes PREFIX.json and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from common import ROOT, machine_info


def run_child(root: Path, isa: str, n: int, variant: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, str(root / "bench" / "bench_native_record.py"),
                           "--child", isa, str(n), variant],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, type=Path)
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=27)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-ab"))
    args = ap.parse_args(argv)
    command = "python bench/bench_native_ab.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    lines = [f"# Native engine, this checkout against a baseline: fib {args.n} recorded, "
             "int3 lazy", "", f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}; {args.repeat} interleaved repetitions", "",
             "| ISA | events | none s | baseline s | new s | new/baseline | baseline/none | "
             "new/none | new events/s |", "|---|---|---|---|---|---|---|---|---|"]
    result: dict[str, object] = {"machine": info, "isas": {}}
    for isa in args.isa.split(","):
        samples: dict[str, list[dict[str, float]]] = {"none": [], "baseline": [], "new": []}
        for _ in range(args.repeat):
            samples["none"].append(run_child(ROOT, isa, args.n, "none"))
            samples["baseline"].append(run_child(args.baseline, isa, args.n, "native"))
            samples["new"].append(run_child(ROOT, isa, args.n, "native"))

        def med(v: str) -> float:
            return statistics.median(s["seconds"] for s in samples[v])  # noqa: B023

        events = samples["new"][-1]["records"]
        lines.append(f"| {isa} | {events:,.0f} | {med('none'):.2f} | {med('baseline'):.2f} | "
                     f"{med('new'):.2f} | {med('new') / med('baseline'):.2f}× | "
                     f"{med('baseline') / med('none'):.1f}× | {med('new') / med('none'):.1f}× | "
                     f"{events / med('new'):,.0f} |")
        result["isas"][isa] = samples  # type: ignore[index]
        print(lines[-1], flush=True)
        Path(args.out + ".md").write_text("\n".join(lines) + "\n")
        Path(args.out + ".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
