"""Where `emutrace run`'s text phase spends its CPU, per record: fib N traced on the native
engine into a spill file (trace/spill.py, C writing the records), then read back as
`Entry`/`Exit` records, as the formatter's rows, and formatted into lines (from the spill
file's rows, and from a list of the same records for comparison).  CPU seconds of this
process (`process_time`), several rounds; the smallest of each is the figure (load only adds).

    python bench/bench_run_text.py [--isa x86_64] [--n 22] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64")
    ap.add_argument("--n", type=int, default=22)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "run-text.md"))
    args = ap.parse_args(argv)
    from emutrace.discover.symbols import read_symbols
    from emutrace.session import Process, RunConfig
    from emutrace.trace.format import ReplayOptions, iter_replay_lines
    from emutrace.trace.spill import SpillSink

    command = "python bench/bench_run_text.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    process = Process(RunConfig(str(ROOT / "testbins" / args.isa / "fib"), [str(args.n)],
                                backend="int3", engine="native"), warn=lambda m: None)
    sink = SpillSink()
    process.sink = sink  # as cli/run.py spill_trace
    with stdout_to_devnull():
        cpu = time.process_time()
        result = process.run()
        run_cpu = time.process_time() - cpu
    name = read_symbols(result.image).namer(result.image.isa.code_mask)
    opts = ReplayOptions(word_bits=8 * result.image.isa.identity.word_size)
    records = list(sink)
    count = len(records)

    def per_record(work: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(args.rounds):
            cpu = time.process_time()
            work()
            best = min(best, time.process_time() - cpu)
        return best / count * 1e6

    phases = {
        "read back as Entry/Exit records": lambda: sum(1 for _ in sink),
        "read back as rows": lambda: sum(1 for _ in sink.rows()),
        "rows + the formatted line": lambda: sum(
            1 for _ in iter_replay_lines(sink, name, opts)),
        "a list of records formatted": lambda: sum(
            1 for _ in iter_replay_lines(records, name, opts)),
    }
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [f"# `emutrace run`'s text phase, per record: {args.isa} fib {args.n}", "",
             f"Command: `{command}`  ", f"Date: {info['date']}; load average at start: "
             + ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])  # type: ignore[attr-defined]
             + f", at the end: {load}; emutrace {info['emutrace_git']}; "
             f"{count:,} records ({sink.count:,} counted by the sink), the native run itself "
             f"{run_cpu:.2f} CPU s ({run_cpu / count * 1e6:.2f} µs per record); smallest of "
             f"{args.rounds} rounds", "", "| phase | CPU µs per record |", "|---|---|"]
    lines += [f"| {what} | {per_record(work):.2f} |" for what, work in phases.items()]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
