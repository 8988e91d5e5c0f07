"""The native hot path against the Python reference: fib untraced vs int3 (lazy) with
`--engine python` vs `--engine native`, ratios side by side in one run.

    python bench/bench_native.py [--isa x86_64,aarch64|all] [--n 24] [--repeat 3]
                                 [--out bench/results/native]

Every run is in-process: `Process(RunConfig(...))` is built untimed (guest stdout to
/dev/null), only `run()` is timed.  Per repetition the variants run interleaved (none,
python, native); medians are kept; ratios are variant / none from this one run; events/s =
records (entries + exits) / seconds.  The two engines' records must be equal (else the row
says FAIL and the script exits 1).  One extra native run per ISA under cProfile gives the
"where the time goes" table (Python functions by own time; `emu_start` is Unicorn plus C).
Writes PREFIX.json (machine information, command, every sample) and PREFIX.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shlex
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.session import Process, RunConfig

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
VARIANTS = {"none": ("none", "python"), "int3 python": ("int3", "python"),
            "int3 native": ("int3", "native")}


def build(isa: str, n: int, variant: str) -> Process:
    backend, engine = VARIANTS[variant]
    return Process(RunConfig(str(ROOT / "testbins" / isa / "fib"), [str(n)], backend=backend,
                             engine=engine), warn=lambda m: None)


def timed(isa: str, n: int, variant: str) -> tuple[float, Process]:
    with stdout_to_devnull():
        process = build(isa, n, variant)
        start = time.perf_counter()
        process.run()
        return time.perf_counter() - start, process


def profile(isa: str, n: int, top: int = 12) -> list[tuple[str, float, int]]:
    with stdout_to_devnull():
        process = build(isa, n, "int3 native")
        prof = cProfile.Profile()
        prof.runcall(process.run)
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (path, line, name), (_cc, calls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}({name})" if line else name
        rows.append((where, tottime, calls))
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native"))
    args = ap.parse_args(argv)
    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    command = "python bench/bench_native.py " + shlex.join(argv if argv is not None
                                                           else sys.argv[1:])
    info = machine_info(command)
    result: dict[str, object] = {"machine": info, "n": args.n, "isas": {}}
    lines = [f"# Native hot path: fib {args.n}, int3 lazy", "",
             f"Command: `{command}`  ", f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | none s | python s | native s | python/none | native/none | "
             "python/native | events | native events/s | traps in C | agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    profiles = []
    for isa in isas:
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        records: dict[str, object] = {}
        native_stats: dict[str, int] = {}
        traps = 0
        for _ in range(args.repeat):
            for variant in VARIANTS:
                seconds, process = timed(isa, args.n, variant)
                samples[variant].append(seconds)
                if variant != "none":
                    records[variant] = process.records
                if variant == "int3 native" and process.backend is not None:
                    native_stats = process.backend.native_stats  # type: ignore[attr-defined]
                    traps = process.backend.stats["traps"]
        med = {v: statistics.median(s) for v, s in samples.items()}
        agree = records["int3 python"] == records["int3 native"]
        failed |= not agree
        events = len(records["int3 native"])  # type: ignore[arg-type]
        in_c = 1 - native_stats.get("python_traps", 0) / traps if traps else 0.0
        lines.append(
            f"| {isa} | {med['none']:.2f} | {med['int3 python']:.2f} | {med['int3 native']:.2f} | "
            f"{med['int3 python'] / med['none']:.1f}× | {med['int3 native'] / med['none']:.1f}× | "
            f"{med['int3 python'] / med['int3 native']:.1f}× | {events} | "
            f"{events / med['int3 native']:,.0f} | {100 * in_c:.1f} % | "
            f"{'yes' if agree else 'FAIL'} |")
        result["isas"][isa] = {"samples": samples, "events": events,  # type: ignore[index]
                               "native": native_stats, "traps": traps, "agree": agree}
        profiles.append((isa, profile(isa, args.n)))
    for isa, rows in profiles:
        lines += ["", f"## Where the native run's time goes ({isa}, cProfile, own time)", "",
                  "| function | s | calls |", "|---|---|---|"]
        lines += [f"| `{where}` | {t:.2f} | {calls} |" for where, t, calls in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
