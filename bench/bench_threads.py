"""fctrace's claim about other tasks, measured: how many traps threads take in code armed
for another thread, under lazy and under strict cleanup.

    python bench/bench_threads.py [--isa x86_64,aarch64|all] [--out bench/results/threads]

Program: testbins/<isa>/threads (three pthreads and main; they share mutex, condition
variable and libc code).  Every run is in-process and deterministic (the scheduler:
machine/linux/threads.py), so the counts are exact and the same in every rerun; the
seconds are one run's wall time.  Columns: traps (all breakpoint hits), foreign (hits in a
function armed while another thread ran: int3's "foreign_traps"), patches (breakpoint
writes, arming and disarming), switches (thread switches).  Writes PREFIX.md and
PREFIX.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.session import Process, RunConfig

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")


def measure(isa: str, cleanup: str) -> dict[str, object]:
    program = str(ROOT / "testbins" / isa / "threads")
    process = Process(RunConfig(program, backend="int3", cleanup=cleanup, env={}),
                      warn=lambda _m: None)
    with stdout_to_devnull():
        start = time.perf_counter()
        result = process.run()
        seconds = time.perf_counter() - start
    stats = result.backend_stats
    return {"isa": isa, "cleanup": cleanup, "exit": result.exit_code,
            "traps": stats["traps"], "foreign": stats.get("foreign_traps", 0),
            "patches": stats["patches"], "switches": process.kernel.threads.switches,
            "seconds": round(seconds, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="x86_64")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "threads"))
    args = parser.parse_args()
    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    rows = [measure(isa, cleanup) for isa in isas for cleanup in ("lazy", "strict")]
    command = "python bench/bench_threads.py " + shlex.join(sys.argv[1:])
    lines = [f"# Traps in code armed for another thread\n\n`{command}`\n",
             "| ISA | cleanup | traps | foreign | foreign % | patches | switches | s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        share = 100.0 * int(r["foreign"]) / max(int(r["traps"]), 1)  # type: ignore[call-overload]
        lines.append(f"| {r['isa']} | {r['cleanup']} | {r['traps']} | {r['foreign']} | "
                     f"{share:.1f} | {r['patches']} | {r['switches']} | {r['seconds']} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps(
        {"machine": machine_info(command), "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
