"""The hot path's speed targets for the recorded run, side by side in one run: busybox `gzip -c`
of a generated K KB text file (default 200) on every Debian ISA with busybox, recorded
(`emutrace record`: a uftrace directory) with int3 lazy, int3 strict and step, against the
untraced run.

    python bench/bench_targets.py [--isa all|a,b] [--gzip-kb 200] [--timeout 600]
                                  [--variants none,lazy,strict,step] [--out PREFIX]
                                  [--warm-up] [--repeat N]

Targets: lazy <= 2x untraced; strict <= 3x lazy; step <= 5x untraced.  Every
variant runs in a child process of its own (its peak RSS is its own); the `Process` and the
recording are built untimed, `run()` plus closing the recording is timed.  `--engine auto`
(the native engine where the backend has one, else Python); the engine a run used is shown.
A child that passes --timeout is reported as such (the target missed).  --warm-up: each
traced variant runs once untimed first, so that discovery's on-disk store
(discover/store.py: the functions found by descent) is warm, as for any second run of the
program; without it the first run of a busybox build after a change to discovery's code
pays its descents inside run().  --repeat N: each variant N times, the rounds interleaved
(none, lazy, strict, step, none, lazy, ...), each cell its median (runs of 0.3-1 s on a
shared machine spread by ±50 % singly; every time is kept in the JSON).  Writes PREFIX.json
and PREFIX.md.  fib 32 (the other
targets) is bench_native_record.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_native_step import text_file
from common import ROOT, machine_info, stdout_to_devnull

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
VARIANTS = {"none": ("none", "lazy"), "lazy": ("int3", "lazy"),
            "strict": ("int3", "strict"), "step": ("step", "lazy")}


def engine_name(backend: object) -> str:
    """The engine a backend ran on (its engine object's class: HotPathEngine, StepHotPath,
    ReferenceEngine, ...; a backend without one: its own class)."""
    if backend is None:
        return "-"
    engine = getattr(backend, "engine", None)
    return type(engine if engine is not None else backend).__name__


def child(isa: str, variant: str, argv: list[str]) -> None:
    """One timed run; prints its numbers as JSON on the last line."""
    from emutrace.session import Process, RunConfig
    from emutrace.trace.uftrace_write import sink_for_image

    backend, cleanup = VARIANTS[variant]
    out = tempfile.mkdtemp(prefix="emutrace-bench-")
    try:
        with stdout_to_devnull():
            process = Process(RunConfig(argv[0], argv[1:], backend=backend, cleanup=cleanup),
                              warn=lambda m: None)
            sink = sink_for_image(out, process.image, [Path(argv[0]).name, *argv[1:]]) \
                if backend != "none" else None
            if sink is not None:
                process.sink = sink
            start = time.perf_counter()
            result = process.run()
            if sink is not None:
                sink.close(result.exit_code)
            seconds = time.perf_counter() - start
        print(json.dumps({
            "seconds": seconds, "records": sink.count if sink is not None else 0,
            "engine": engine_name(process.backend),
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "exit": result.exit_code}))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_child(isa: str, variant: str, argv: list[str], timeout: float) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", isa, variant, *argv],
                              capture_output=True, text=True, env=env, check=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_cell(runs: list[dict[str, object]]) -> dict[str, object]:
    """The run with the median time of a variant's rounds (a timeout if any round timed
    out: the target is missed), with every round's seconds."""
    if any("seconds" not in r for r in runs):
        return next(r for r in runs if "seconds" not in r)
    ordered = sorted(runs, key=lambda r: float(r["seconds"]))  # type: ignore[arg-type]
    return dict(ordered[(len(ordered) - 1) // 2],
                all_seconds=[round(float(r["seconds"]), 3) for r in runs])  # type: ignore[arg-type]


def verdict(ratio: float | None, limit: float, ran: bool = True) -> str:
    if not ran:
        return "not run"
    if ratio is None:
        return "missed (timeout)"
    return f"{'met' if ratio <= limit else 'missed'} (≤ {limit:g}×)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="all")
    ap.add_argument("--gzip-kb", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--variants", default="none,lazy,strict,step")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "targets"))
    ap.add_argument("--warm-up", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.child[2:])
        return 0

    from emutrace.isa import by_name
    from emutrace.isa.base import Cap

    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    variants = args.variants.split(",")
    command = "python bench/bench_targets.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    tmp = Path(tempfile.mkdtemp(prefix="emutrace-targets-"))
    gzip_input = text_file(tmp, args.gzip_kb)
    rows: list[dict[str, object]] = []
    lines = [f"# The hot path's targets: busybox `gzip -c` of {args.gzip_kb} KB, recorded", "",
             f"Each cell: the median of {max(args.repeat, 1)} interleaved round(s).", "",
             f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | none s | lazy s | strict s | step s | lazy/none | strict/lazy | "
             "step/none | events (lazy) | engines (lazy, strict, step) | peak RSS max | "
             "lazy ≤ 2× | strict ≤ 3× lazy | step ≤ 5× |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    try:
        for isa in isas:
            busybox = ROOT / ".cache" / "busybox" / isa / "busybox"
            if not busybox.exists() or not by_name(isa).capability(Cap.BUSYBOX).works:
                continue
            cmd = [str(busybox), "gzip", "-c", str(gzip_input)]
            if args.warm_up:
                for v in variants:
                    if v != "none":
                        run_child(isa, v, cmd, args.timeout)
            rounds = [{v: run_child(isa, v, cmd, args.timeout) for v in variants}
                      for _ in range(max(args.repeat, 1))]
            cells = {v: median_cell([r[v] for r in rounds]) for v in variants}
            rows.append({"isa": isa, "cells": cells, "rounds": rounds})

            def sec(v: str, cells: dict[str, dict[str, object]] = cells) -> float | None:
                c = cells.get(v, {})
                return float(c["seconds"]) if "seconds" in c else None  # type: ignore[arg-type]

            def ratio(a: str, b: str) -> float | None:
                x, y = sec(a), sec(b)
                return x / y if x is not None and y else None

            def fmt(x: float | None, unit: str = "") -> str:
                return "—" if x is None else f"{x:.2f}{unit}"

            lazy, strict, step = ratio("lazy", "none"), ratio("strict", "lazy"), \
                ratio("step", "none")
            engines = ", ".join(str(cells.get(v, {}).get("engine", "—"))
                                for v in ("lazy", "strict", "step"))
            rss = max((float(c.get("maxrss_mb", 0)) for c in cells.values()), default=0.0)
            lines.append(
                f"| {isa} | {fmt(sec('none'))} | {fmt(sec('lazy'))} | {fmt(sec('strict'))} | "
                f"{fmt(sec('step'))} | {fmt(lazy, '×')} | {fmt(strict, '×')} | "
                f"{fmt(step, '×')} | {cells.get('lazy', {}).get('records', '—'):,} | "
                f"{engines} | {rss:.0f} MB | {verdict(lazy, 2, 'lazy' in cells)} | "
                f"{verdict(strict, 3, 'strict' in cells)} | "
                f"{verdict(step, 5, 'step' in cells)} |")
            Path(args.out + ".md").write_text("\n".join(lines) + "\n")
            Path(args.out + ".json").write_text(json.dumps(
                {"machine": info, "gzip_kb": args.gzip_kb, "rows": rows}, indent=1) + "\n")
            print(lines[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
