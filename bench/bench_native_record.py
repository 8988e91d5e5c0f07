"""`emutrace record` on the native engine (C shadow stack and record writer) against the
untraced run and the Python reference: fib N recorded with int3 lazy, ratios side by side in
one run, events/s, peak memory.

    python bench/bench_native_record.py [--isa x86_64,aarch64|all] [--n 32] [--python-n 22]
                                        [--slow-n 24] [--repeat 1] [--out PREFIX]

Every variant runs in a child process of its own (so its peak RSS, `ru_maxrss` of the child,
is its own): the `Process` is built untimed, only `run()` plus closing the recording is
timed.  Variants: `none` (no backend), `native` (record, --engine native) at N, and the
`python` reference at the smaller PYTHON_N (it makes ~30 µs of Python per event: N = 32 would
take hours) with its own untraced baseline at PYTHON_N.  ISAs where C would finish no trap
(none today; arm was one until its lowering) record at SLOW_N.  Events =
records written (entries + exits).  Writes PREFIX.json and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, machine_info, stdout_to_devnull

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")


def c_finishes(isa: str) -> bool:
    """C finishes traps here: the ISA lowers its sites, or C watches its site hooks."""
    from emutrace.backends import hooked_sites
    from emutrace.isa import by_name

    isa_ = by_name(isa)
    return isa_.lower is not None or (hooked_sites.wanted(isa_)
                                      and hooked_sites.every_site_hooked(isa_))


def child(isa: str, n: int, variant: str) -> None:
    """One timed run; prints its numbers as JSON on the last line."""
    from emutrace.session import Process, RunConfig
    from emutrace.trace.uftrace_write import sink_for_image

    backend, engine = ("none", "python") if variant == "none" else ("int3", variant)
    out = tempfile.mkdtemp(prefix="emutrace-bench-")
    try:
        with stdout_to_devnull():
            process = Process(RunConfig(str(ROOT / "testbins" / isa / "fib"), [str(n)],
                                        backend=backend, engine=engine), warn=lambda m: None)
            sink = sink_for_image(out, process.image, ["fib", str(n)]) if backend != "none" \
                else None
            if sink is not None:
                process.sink = sink
            start = time.perf_counter()
            result = process.run()
            if sink is not None:
                sink.close(result.exit_code)
            seconds = time.perf_counter() - start
        stats = getattr(process.backend, "native_stats", {})
        print(json.dumps({
            "seconds": seconds, "records": sink.count if sink is not None else 0,
            "bytes": sink.size if sink is not None else 0,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "c_records": stats.get("c_records", 0), "lowered": c_finishes(isa),
            "exit": result.exit_code}))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_child(isa: str, n: int, variant: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--child", isa, str(n), variant],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--python-n", type=int, default=22)
    ap.add_argument("--slow-n", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-record"))
    ap.add_argument("--child", nargs=3, metavar=("ISA", "N", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return 0

    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    command = "python bench/bench_native_record.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    result: dict[str, object] = {"machine": info, "isas": {}}
    lines = [f"# `emutrace record` on the native engine: fib {args.n}, int3 lazy", "",
             f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | n | none s | native s | native/none | events | native events/s | "
             "written by C | peak RSS native | python n | python/none | python events/s | "
             "peak RSS python |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for isa in isas:
        n = args.n if c_finishes(isa) else args.slow_n
        samples: dict[str, list[dict[str, float]]] = {
            v: [] for v in ("none", "native", "none-py", "python")}
        for _ in range(args.repeat):  # interleaved: the variants see the same load
            samples["none"].append(run_child(isa, n, "none"))
            samples["native"].append(run_child(isa, n, "native"))
            samples["none-py"].append(run_child(isa, args.python_n, "none"))
            samples["python"].append(run_child(isa, args.python_n, "python"))

        def med(v: str, key: str = "seconds") -> float:
            return statistics.median(s[key] for s in samples[v])  # noqa: B023

        nat, py = samples["native"][-1], samples["python"][-1]
        lines.append(
            f"| {isa} | {n} | {med('none'):.2f} | {med('native'):.2f} | "
            f"{med('native') / med('none'):.1f}× | {nat['records']:,.0f} | "
            f"{nat['records'] / med('native'):,.0f} | "
            f"{100 * nat['c_records'] / max(nat['records'], 1):.1f} % | "
            f"{med('native', 'maxrss_mb'):.0f} MB | {args.python_n} | "
            f"{med('python') / med('none-py'):.1f}× | {py['records'] / med('python'):,.0f} | "
            f"{med('python', 'maxrss_mb'):.0f} MB |")
        result["isas"][isa] = {"n": n, "samples": samples}  # type: ignore[index]
        print(lines[-1], flush=True)
    out = ROOT / args.out if not os.path.isabs(args.out) else args.out
    prefix = str(out)
    with open(prefix + ".json", "w") as f:
        f.write(json.dumps(result, indent=1, default=str) + "\n")
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
