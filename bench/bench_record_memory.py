#!/usr/bin/env python3
"""Peak memory of `emutrace record`, `replay` and `run -o` over a long recording (the target:
"recording a run of ~10^6 calls keeps peak RSS under a fixed bound").

The test suite checks the bound on 3×10^5 records (tests/test_record_cli.py); this benchmark
takes it to ~10^6 calls, which is too slow for CI today.  Each command runs in its own process
and its peak is the kernel's VmHWM (/proc/PID/status), polled until it exits.

usage: python bench/bench_record_memory.py [--insns N] [--engine native|python] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIB = REPO / "testbins" / "x86_64" / "fib"
RECORD_BYTES = 32  # an entry or exit record with its value (trace/uftrace_write.py)


def measured(argv: list[str], cwd: str) -> tuple[int, int, float]:
    """(VmHWM in KiB, exit status, wall seconds) of `python -m emutrace ARGV`, measured as
    the test suite measures it (tests/test_record_cli.py)."""
    sys.path.insert(0, str(REPO))
    from tests.test_record_cli import peak_rss_kib

    start = time.monotonic()
    peak, code = peak_rss_kib(argv, Path(cwd))
    return peak, code, time.monotonic() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--insns", type=int, default=30_000_000, help="--max-insns of the run")
    p.add_argument("--engine", default="native", choices=("native", "python"))
    p.add_argument("--out", help="write the Markdown result here too")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rec_kib, rec_code, rec_s = measured(
            ["record", "--engine", args.engine, "-d", "big", "--max-insns", str(args.insns),
             str(FIB), "30"], tmp)
        records = (Path(tmp) / "big" / "1.dat").stat().st_size // RECORD_BYTES
        rep_kib, rep_code, rep_s = measured(["replay", "-d", "big"], tmp)
        run_kib, run_code, run_s = measured(
            ["run", "--engine", args.engine, "-o", "trace.txt", "--max-insns", str(args.insns),
             str(FIB), "30"], tmp)
    lines = [
        "# Peak memory of a long recording (`bench/bench_record_memory.py`)",
        "",
        f"`emutrace record --engine {args.engine} --max-insns {args.insns} "
        f"testbins/x86_64/fib 30`, then `emutrace replay` of it, and `emutrace run -o FILE` "
        "of the same run (its records kept in a temporary file until printed: "
        "trace/spill.py); peak RSS is VmHWM.",
        "",
        "| command | records | calls | peak RSS | exit | wall |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| record | {records:,} | {records // 2:,} | {rec_kib / 1024:.1f} MiB | {rec_code} "
        f"| {rec_s:.0f} s |",
        f"| replay | {records:,} | {records // 2:,} | {rep_kib / 1024:.1f} MiB | {rep_code} "
        f"| {rep_s:.0f} s |",
        f"| run -o | {records:,} | {records // 2:,} | {run_kib / 1024:.1f} MiB | {run_code} "
        f"| {run_s:.0f} s |",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
