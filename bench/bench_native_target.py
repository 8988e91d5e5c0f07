"""`--target native`: fib run on this host under ptrace, untraced against each
native backend, with the cost per mechanism event of the Python run loop and of the C loop
(native/ploop.c) side by side.

    python bench/bench_native_target.py [--isa x86_64,i386] [--n 20] [--repeat 3]
                                        [--engines python,native]
                                        [--out bench/results/native_target]

Every run is in-process: `NativeProcess(RunConfig(...))` (spawn, stopped at the first
instruction, backend armed) is built untimed with the guest's stdio on /dev/null; only
`run()` is timed. Variants run interleaved per repetition, medians kept. Events are what the
mechanism stopped the CPU for: int3 traps, hwbp hits + stepped fall-back instructions, btf
stops (every instruction where BTF is degraded), step steps. µs/event = (variant - none of
the same engine) / events.  Engine python: the Python loop (target/ptrace_run.py); native:
the C loop, which finishes int3's lazy and strict traps, entry's probes, hwbp's hits
(switching the debug registers itself), step's quiet steps and btf's stops that cross no
taken branch (C's share: the time inside pl_resume/pl_step/pl_block, i.e. the kernel's
stop/resume round trips plus C's work, per event; drain: Python turning C's records into
events, per event), and hands the rest to Python; resume: the C loop with the backend's
Python engine (C only resumes and waits: int3 strict and entry before C finished their
stops).  Variants int3-strict (int3 --cleanup strict) and entry are chosen with
--backends.  Writes PREFIX.json and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace import native_session
from emutrace.native_session import NativeProcess
from emutrace.session import RunConfig

BACKENDS = ("none", "int3", "hwbp", "btf", "step")
# more variants: int3 with strict cleanup, entry (`--backends int3-strict,entry`)
CLEANUP = {"int3-strict": ("int3", "strict")}
# the stops each mechanism costs: hwbp's are its slot hits plus the instructions stepped
# across a function with more sites than the 4 registers (its declared fall-back)
EVENT_KEYS = {"int3": ("traps",), "hwbp": ("hits", "stepped"), "btf": ("stops",),
              "step": ("steps",), "int3-strict": ("traps",), "entry": ("traps",)}

# native_stats' count of the events C finished, per backend (int3, step, hwbp, btf)
FINISHED_IN_C = ("c_traps", "c_steps", "c_hits", "c_stops")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def sample(isa: str, n: int, variant: str, engine: str) -> tuple[float, int, dict]:
    program = str(ROOT / "testbins" / isa / "fib")
    backend, cleanup = CLEANUP.get(variant, (variant, "lazy"))
    loop_engine = "native" if engine == "resume" else engine
    saved = native_session.C_LOOP_BACKENDS
    if engine == "resume":  # the C loop resumes and waits; the backend is the Python one
        native_session.C_LOOP_BACKENDS = ()
    try:
        with stdout_to_devnull():
            process = NativeProcess(RunConfig(program, [str(n)], backend=backend,
                                              cleanup=cleanup, engine=loop_engine))
    finally:
        native_session.C_LOOP_BACKENDS = saved
    with stdout_to_devnull():
        start, cpu, child = time.perf_counter(), time.process_time(), _children_cpu()
        result = process.run()  # (reaps the child: its CPU time joins RUSAGE_CHILDREN)
        took = time.perf_counter() - start
        cpu = time.process_time() - cpu
        child = _children_cpu() - child
    assert result.exit_code == 0, (isa, backend, result.stop)
    assert process.engine == loop_engine, "the C loop is not built"
    stats = result.backend_stats
    loop = process.target.c_loop
    profile = {"tracer_cpu": cpu, "child_cpu": child}
    if loop is not None:
        profile.update({"c_seconds": loop.c_seconds, "drain_seconds": loop.drain_seconds,
                        **getattr(process.backend, "native_stats", {})})
    return took, sum(stats.get(k, 0) for k in EVENT_KEYS.get(variant, ())), profile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default="x86_64,i386")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--engines", default="python,native")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native_target"))
    args = ap.parse_args()
    backends = args.backends.split(",")
    if "none" not in backends:
        backends.insert(0, "none")
    command = "python bench/bench_native_target.py " + shlex.join(sys.argv[1:])
    info = machine_info(command, n=args.n, repeat=args.repeat)
    engines = args.engines.split(",")
    rows = []
    for isa in args.isa.split(","):
        variants = [(b, e) for b in backends for e in engines]
        times: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
        events: dict[tuple[str, str], int] = {}
        profiles: dict[tuple[str, str], list[dict]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for v in variants:  # interleaved: the machine's load hits every variant alike
                took, count, profile = sample(isa, args.n, *v)
                times[v].append(took)
                events[v] = count
                profiles[v].append(profile)
        for backend, engine in variants:
            base = statistics.median(times[("none", engine)])
            t = statistics.median(times[(backend, engine)])
            count = events[(backend, engine)]
            per = (t - base) / count * 1e6 if count else None
            row = {"isa": isa, "backend": backend, "engine": engine, "seconds": t,
                   "events": count, "us_per_event": per, "samples": times[(backend, engine)],
                   "profiles": profiles[(backend, engine)]}
            got = profiles[(backend, engine)]
            base_cpu = statistics.median(p["tracer_cpu"] + p["child_cpu"]
                                         for p in profiles[("none", engine)])
            row["cpu_seconds"] = statistics.median(p["tracer_cpu"] + p["child_cpu"]
                                                   for p in got)
            row["cpu_us_per_event"] = ((row["cpu_seconds"] - base_cpu) / count * 1e6
                                       if count else None)
            if count and "c_seconds" in got[0]:
                row["c_us_per_event"] = statistics.median(
                    p["c_seconds"] for p in got) / count * 1e6
                row["drain_us_per_event"] = statistics.median(
                    p["drain_seconds"] for p in got) / count * 1e6
                row["c_traps"] = next((got[0][k] for k in FINISHED_IN_C if k in got[0]),
                                      None)
            rows.append(row)
            print(f"{isa:7} {backend:5} {engine:6} {t:8.3f} s  {count:8} events  "
                  f"{'' if per is None else f'{per:.1f} µs/event'}", file=sys.stderr)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    lines = [f"# Native target: fib {args.n} under ptrace (`{command}`)", "",
             f"{info['date']}, {info['cpu']}, {info['cpus']} CPUs, load average at start "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; medians of "
             f"{args.repeat}, in-process `run()` time; variants interleaved.", "",
             "| ISA | backend | loop | seconds | events | wall µs per event (over none) | "
             "CPU µs per event (tracer + child, over none) | of which the tracer in C + "
             "kernel | of which the tracer draining records | finished in C |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per = "" if r["us_per_event"] is None else f"{r['us_per_event']:.1f}"
        c = f"{r['c_us_per_event']:.1f}" if "c_us_per_event" in r else ""
        d = f"{r['drain_us_per_event']:.1f}" if "drain_us_per_event" in r else ""
        ct = "" if r.get("c_traps") is None else str(r["c_traps"])
        cpu = "" if r["cpu_us_per_event"] is None else f"{r['cpu_us_per_event']:.1f}"
        lines.append(f"| {r['isa']} | {r['backend']} | {r['engine']} | {r['seconds']:.3f} | "
                     f"{r['events']} | {per} | {cpu} | {c} | {d} | {ct} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
