"""`emutrace ci`'s throughput: cells per minute in this process and on Dask local clusters of
1, 2 and 4 worker processes, and the scheduler's own cost per task, side by side in one run.

    python bench/bench_ci_matrix.py [--isa all] [--n 15] [--repeat 2] [--tasks 200]
                                    [--out bench/results/ci-matrix.md]

The matrix: `testbins/{isa}/fib N` under int3 on every ISA given (one cell per ISA; `all`:
the ISAs Unicorn runs).  Each repeat runs, in turn: every cell in this process (`--workers 0`:
no Dask, no cell process), then the same cells on the 1-, 2- and 4-worker clusters (each
cell in the worker thread's cell process, as `emutrace ci` runs them).  The clusters are
started once, before timing (their start-up is reported apart), so a repeat's variants see
the same machine load.  Every variant's traces are checked equal to the in-process ones (a
difference is an error).

The scheduler's cost per task: `--tasks` tasks that return at once, on the 2-worker cluster
(submit, run, `as_completed`, result, release), the wall time divided by their number.  The
peak of Python allocations in this process while the 2-worker run collects its cells is
taken with tracemalloc in one extra run (not timed).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine_info  # noqa: E402
from emutrace.isa import all_isas  # noqa: E402
from emutrace.isa.base import Cap  # noqa: E402
from emutrace.matrix.cell import trace_cell  # noqa: E402
from emutrace.matrix.engine import run_here, run_on_dask  # noqa: E402
from emutrace.matrix.isolated import run_isolated  # noqa: E402
from emutrace.matrix.outcome import Outcome  # noqa: E402
from emutrace.matrix.spec import Cell, read_matrix  # noqa: E402

WORKERS = (1, 2, 4)


def noop(cell: Cell) -> Outcome:
    """A task that does nothing: what is left of its time is the scheduler's."""
    return Outcome.failed(cell, "not run")


def timed(run: object, cells: list[Cell], *args: object) -> tuple[float, dict[str, str]]:
    """Wall seconds of one run of every cell, and each cell's trace digest (or error)."""
    digests: dict[str, str] = {}

    def on_done(cell: Cell, outcome: Outcome) -> None:
        digests[cell.key] = outcome.digest if outcome.ok else f"error: {outcome.error}"

    start = time.perf_counter()
    run(cells, *args, on_done)  # type: ignore[operator]
    return time.perf_counter() - start, digests


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--isa", default="all")
    p.add_argument("--n", type=int, default=15, help="fib's argument")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "ci-matrix.md"))
    args = p.parse_args()
    from distributed import LocalCluster

    # all: the ISAs Unicorn runs (a gdb-only ISA's cell costs the stub's round trips, not
    # what this measures)
    isas = [i.name for i in all_isas() if i.capability(Cap.RUN_STATIC).works] \
        if args.isa == "all" else args.isa.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ci-"))
    (tmp / "m.toml").write_text(
        f"[matrix]\nisas = {isas!r}\nbackends = ['int3']\n\n[[program]]\nname = 'fib'\n"
        f"command = '{ROOT}/testbins/{{isa}}/fib {args.n}'\n")
    cells = read_matrix(tmp / "m.toml").cells(dict(os.environ))
    info = machine_info(" ".join(["python", *sys.argv]))
    clusters, startup = {}, {}
    for w in WORKERS:
        start = time.perf_counter()
        clusters[w] = LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.ERROR)
        startup[w] = time.perf_counter() - start
    seconds: dict[str, list[float]] = {"in this process": [], **{f"{w} workers": []
                                                                 for w in WORKERS}}
    problems = []
    try:
        for _ in range(args.repeat):
            here, want = timed(lambda c, d: run_here(c, trace_cell, d), cells)
            seconds["in this process"].append(here)
            problems += [f"{k}: {v}" for k, v in want.items() if v.startswith("error")]
            for w in WORKERS:
                wall, got = timed(lambda c, d, w=w: run_on_dask(
                    c, run_isolated, d, w, clusters[w].scheduler_address), cells)
                seconds[f"{w} workers"].append(wall)
                problems += [f"{w} workers: {k} differs" for k in want if got.get(k) != want[k]]
        noops = [Cell(f"noop{i}", "x86_64", "int3", ("x",), str(tmp), cells[0].options)
                 for i in range(args.tasks)]
        overhead, _ = timed(lambda c, d: run_on_dask(c, noop, d, 2,
                                                     clusters[2].scheduler_address), noops)
        tracemalloc.start()
        timed(lambda c, d: run_on_dask(c, run_isolated, d, 2, clusters[2].scheduler_address),
              cells)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        for cluster in clusters.values():
            cluster.close()
    here = statistics.median(seconds["in this process"])
    lines = [
        "# `emutrace ci`: cells per minute, in this process and on Dask local clusters", "",
        f"Command: `{info['command']}` (from the repository root)  ",
        f"Date: {info['date']}; {info['cpu']}, {info['cpus']} CPUs; load average at start "
        f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[attr-defined]
        f"emutrace {info['emutrace_git']}", "",
        f"Matrix: `testbins/{{isa}}/fib {args.n}` under int3 on {len(cells)} ISAs "
        f"({len(cells)} cells); median of {args.repeat} interleaved repeats.", "",
        "| where the cells run | seconds | cells per minute | per cell over in-process |",
        "|---|---|---|---|"]
    for label, values in seconds.items():
        med = statistics.median(values)
        extra = f"{(med - here) / len(cells):+.2f} s" if label != "in this process" else "—"
        lines.append(f"| {label} | {med:.1f} | {60 * len(cells) / med:.1f} | {extra} |")
    lines += [
        "",
        f"Scheduler's cost per task (2 workers, {args.tasks} tasks returning at once): "
        f"{1000 * overhead / args.tasks:.1f} ms.  ",
        "Cluster start-up (not in the times above): " +
        ", ".join(f"{w} workers {startup[w]:.1f} s" for w in WORKERS) + ".  ",
        f"Peak Python allocations of this process while the 2-worker run collects its "
        f"cells (tracemalloc): {peak / 1024:.0f} KiB.", "",
        "The per-cell difference against in-process is what Dask and the cell processes (an "
        "interpreter and emutrace's imports per worker, the pipes) add, less what parallel "
        "workers win back.  The in-process runs share this process with the three clusters' "
        "schedulers (their event loops take the GIL now and then); on a shared, loaded "
        "machine more worker processes also take a larger share of its CPUs.",
        "", "Problems: " + ("; ".join(problems) if problems else "none (every variant's "
                                                                  "traces equal)"), ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
