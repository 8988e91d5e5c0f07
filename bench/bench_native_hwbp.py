"""hwbp on the native engine against the Python reference and an untraced run: fib N, ratios
side by side in one run, each variant in a child process of its own, interleaved.

    python bench/bench_native_hwbp.py [--isa x86_64,mips] [--n 18] [--repeat 3] [--out PREFIX]

Variants (`Process` built untimed, `run()` timed, events kept in memory): `none` (no
backend), `python` (hwbp, --engine python), `native` (hwbp, --engine native:
backends/hwbp_native.py).  Besides the seconds, how much of the native run stayed Python's:
the hits its Python slot hooks took (unwatchable sites, every slot on arm) against all hits,
the stepped instructions of stepped spans and range slots (Python's: each a Python hook call;
C's: hotpath.c `hs_on_span`), and the function switches strict.c made.  Writes PREFIX.json
and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

from common import ROOT, machine_info, stdout_to_devnull

VARIANTS = {"none": ("none", "python"), "python": ("hwbp", "python"),
            "native": ("hwbp", "native")}


def child(isa: str, n: int, variant: str) -> None:
    from emutrace.session import Process, RunConfig

    backend, engine = VARIANTS[variant]
    with stdout_to_devnull():
        process = Process(RunConfig(str(ROOT / "testbins" / isa / "fib"), [str(n)],
                                    backend=backend, engine=engine), warn=lambda m: None)
        start = time.perf_counter()
        result = process.run()
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "stats": result.backend_stats,
                      "native": getattr(process.backend, "native_stats", {}),
                      "events": len(result.records), "exit": result.exit_code}))


def run_child(isa: str, n: int, variant: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--child", isa, str(n), variant],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,mips")
    ap.add_argument("--n", type=int, default=18)
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant (median)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-hwbp"))
    ap.add_argument("--child", nargs=3, metavar=("ISA", "N", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return 0
    command = "python bench/bench_native_hwbp.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    load = ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])  # type: ignore[union-attr]
    lines = [f"# hwbp: native engine against the Python reference, fib {args.n}", "",
             f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: {load}; "
             f"emutrace {info['emutrace_git']}; {args.repeat} interleaved repetitions "
             "(median)", "",
             "| ISA | slots | none s | python s | native s | **python/native** | "
             "python/none | native/none | hits | hits by Python hooks | stepped (Python) | "
             "stepped (C) | C switches | equal counters |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    result: dict[str, object] = {"machine": info, "isas": {}}
    for isa in args.isa.split(","):
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeat):  # interleaved: the variants see the same load
            for v in VARIANTS:
                runs[v].append(run_child(isa, args.n, v))
        s = {v: statistics.median(r["seconds"] for r in runs[v]) for v in VARIANTS}
        py, nat = runs["python"][-1], runs["native"][-1]
        from emutrace.isa import by_name

        hw = by_name(isa).debug_hardware
        hits, ns = nat["stats"]["hits"], nat["native"]
        by_py = ns.get("python_slot_hits", 0)
        lines.append(
            f"| {isa} | {hw.slots} {hw.kind} | {s['none']:.2f} | {s['python']:.2f} | "
            f"{s['native']:.2f} | **{s['python'] / s['native']:.2f}×** | "
            f"{s['python'] / s['none']:.0f}× | {s['native'] / s['none']:.0f}× | {hits:,} | "
            f"{by_py:,} ({100 * by_py / hits:.0f} %)"
            f" | {ns.get('python_stepped', 0):,} | {ns.get('c_stepped', 0):,} | "
            f"{ns.get('c_switches', 0):,} | "
            f"{'yes' if py['stats'] == nat['stats'] and py['events'] == nat['events'] else 'NO'} |")
        print(lines[-1], flush=True)
        result["isas"][isa] = runs  # type: ignore[index]
    out = args.out if os.path.isabs(args.out) else str(ROOT / args.out)
    with open(out + ".json", "w") as f:
        f.write(json.dumps(result, indent=1, default=str) + "\n")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
