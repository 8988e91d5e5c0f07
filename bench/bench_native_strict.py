"""int3 strict cleanup against lazy on the native engine (target: strict ≤ 3× lazy):
fib N, ratios side by side in one run, each variant in a child process of its own.

    python bench/bench_native_strict.py [--isa x86_64,aarch64] [--n 24] [--python-n 18]
                                        [--repeat 1] [--out PREFIX]

Variants (`Process` built untimed, `run()` plus closing the recording timed): `none` (no
backend); `lazy`/`strict` recorded to a uftrace directory (`record`: C writes the records
itself; under strict it also switches the armed function, at traps on the lowered ISAs and
at site hooks on mips, mipsel, riscv64, and Python replays the switches on its state);
`lazy-mem`/`strict-mem` with the events kept in memory (both drain every event to Python:
the cleanup's own cost); the Python engine's strict and lazy at the smaller PYTHON_N for
reference.  Also: how many switches C made, how many traps went to Python.  Writes
PREFIX.json and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, machine_info, stdout_to_devnull

VARIANTS = {  # name: (backend, engine, cleanup, recorded to a directory)
    "none": ("none", "python", "lazy", False),
    "lazy": ("int3", "native", "lazy", True),
    "strict": ("int3", "native", "strict", True),
    "lazy-mem": ("int3", "native", "lazy", False),
    "strict-mem": ("int3", "native", "strict", False),
    "py-lazy": ("int3", "python", "lazy", False),
    "py-strict": ("int3", "python", "strict", False),
}


def child(isa: str, n: int, variant: str) -> None:
    from emutrace.session import Process, RunConfig
    from emutrace.trace.uftrace_write import sink_for_image

    backend, engine, cleanup, recorded = VARIANTS[variant]
    out = tempfile.mkdtemp(prefix="emutrace-bench-")
    try:
        with stdout_to_devnull():
            process = Process(RunConfig(str(ROOT / "testbins" / isa / "fib"), [str(n)],
                                        backend=backend, engine=engine, cleanup=cleanup),
                              warn=lambda m: None)
            sink = sink_for_image(out, process.image, ["fib", str(n)]) if recorded else None
            if sink is not None:
                process.sink = sink
            start = time.perf_counter()
            result = process.run()
            if sink is not None:
                sink.close(result.exit_code)
            seconds = time.perf_counter() - start
        stats = getattr(process.backend, "native_stats", {})
        print(json.dumps({"seconds": seconds, "stats": result.backend_stats,
                          "native": stats, "exit": result.exit_code}))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_child(isa: str, n: int, variant: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--child", isa, str(n), variant],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--python-n", type=int, default=18)
    ap.add_argument("--repeat", type=int, default=1, help="runs per variant (median)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-strict"))
    ap.add_argument("--child", nargs=3, metavar=("ISA", "N", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return 0
    command = "python bench/bench_native_strict.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    load = ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])  # type: ignore[union-attr]
    lines = [f"# int3 strict against lazy cleanup on the native engine: fib {args.n}", "",
             f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: {load}; "
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | none s | lazy s | strict s | **strict/lazy** | lazy-mem s | strict-mem s "
             "| strict-mem/lazy-mem | traps | C switches | traps to Python | python n | "
             "py strict/py lazy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    result: dict[str, object] = {"machine": info, "isas": {}}
    for isa in args.isa.split(","):
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeat):  # interleaved: the variants see the same load
            for v in VARIANTS:
                runs[v].append(run_child(isa, args.python_n if v.startswith("py-") else args.n,
                                         v))
        got = {v: runs[v][-1] for v in VARIANTS}
        s = {v: statistics.median(r["seconds"] for r in runs[v]) for v in VARIANTS}
        strict = got["strict"]
        lines.append(
            f"| {isa} | {s['none']:.2f} | {s['lazy']:.2f} | {s['strict']:.2f} | "
            f"**{s['strict'] / s['lazy']:.1f}×** | {s['lazy-mem']:.2f} | {s['strict-mem']:.2f} | "
            f"{s['strict-mem'] / s['lazy-mem']:.1f}× | {strict['stats']['traps']:,} | "
            f"{strict['native'].get('c_switches', 0):,} | "
            f"{strict['native'].get('python_traps', 0):,} | {args.python_n} | "
            f"{s['py-strict'] / s['py-lazy']:.1f}× |")
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
