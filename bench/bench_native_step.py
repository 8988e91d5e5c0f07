"""The `step` backend on the native hot path against its Python reference: untraced vs
`--backend step --engine python` vs `--engine native`, ratios side by side in one run.

    python bench/bench_native_step.py [--isa x86_64,aarch64,riscv64|all] [--n 22]
                                      [--gzip-kb 32] [--repeat 3]
                                      [--out bench/results/native-step]

Two programs per ISA: `testbins/<isa>/fib N` (a call-heavy trace) and Debian's busybox
`gzip -c` of a generated text file of K KB (instruction-heavy: few calls per instruction;
skipped with --gzip-kb 0 or where the ISA has no busybox).  Every run is in-process:
`Process(RunConfig(...))` is built untimed (guest stdout to /dev/null), only `run()` is
timed; per repetition the variants run interleaved; medians are kept; ratios are variant /
none from this one run.  The two engines' records must be equal (else the row says FAIL and
the script exits 1).

"C+Unicorn" is the native run's time inside `emu_start` minus the Python it called back
(cProfile's own time of `emu_start`, from one extra profiled run): what the mechanism costs
without the Python that turns records into the trace.  The profile's top functions say where
the rest goes.  Writes PREFIX.json (machine information, command, every sample) and PREFIX.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
VARIANTS = {"none": ("none", "python"), "step python": ("step", "python"),
            "step native": ("step", "native")}


def build(argv: list[str], variant: str) -> Process:
    backend, engine = VARIANTS[variant]
    return Process(RunConfig(argv[0], argv[1:], backend=backend, engine=engine),
                   warn=lambda m: None)


def timed(argv: list[str], variant: str) -> tuple[float, Process]:
    with stdout_to_devnull():
        process = build(argv, variant)
        start = time.perf_counter()
        process.run()
        return time.perf_counter() - start, process


def profile(argv: list[str], top: int = 8) -> tuple[float, list[tuple[str, float, int]]]:
    """(own time of emu_start, the top Python functions by own time) of a native run."""
    with stdout_to_devnull():
        process = build(argv, "step native")
        prof = cProfile.Profile()
        prof.runcall(process.run)
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows, in_emu = [], 0.0
    for (path, line, name), (_cc, calls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}({name})" if line else name
        if name == "emu_start":
            in_emu += tottime
        rows.append((where, tottime, calls))
    rows.sort(key=lambda r: -r[1])
    return in_emu, rows[:top]


def text_file(directory: Path, kb: int) -> Path:
    """K KB of deterministic text (words from a fixed seed): compressible like prose."""
    rng = random.Random(0)
    words = ["".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(2, 9)))
             for _ in range(800)]
    out, size = [], 0
    while size < kb * 1024:
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        out.append(line)
        size += len(line)
    path = directory / "input.txt"
    path.write_text("".join(out)[:kb * 1024])
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isa", default="x86_64,aarch64,riscv64")
    ap.add_argument("--n", type=int, default=22)
    ap.add_argument("--gzip-kb", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-step"))
    args = ap.parse_args(argv)
    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    command = "python bench/bench_native_step.py " + shlex.join(argv if argv is not None
                                                                else sys.argv[1:])
    info = machine_info(command)
    result: dict[str, object] = {"machine": info, "n": args.n, "gzip_kb": args.gzip_kb,
                                 "rows": {}}
    lines = [f"# Native hot path: `step`, fib {args.n} and busybox gzip -c of "
             f"{args.gzip_kb} KB", "",
             f"Command: `{command}`  ", f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | program | insns | events | none s | python s | native s | python/none "
             "| native/none | python/native | C+Unicorn/none | transfers in C | agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    profiles = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-step-"))
    gzip_input = text_file(tmp, args.gzip_kb) if args.gzip_kb else None
    for isa in isas:
        programs = {"fib": [str(ROOT / "testbins" / isa / "fib"), str(args.n)]}
        busybox = ROOT / ".cache" / "busybox" / isa / "busybox"
        if gzip_input and busybox.exists() and by_name(isa).capability(Cap.BUSYBOX).works:
            programs["gzip"] = [str(busybox), "gzip", "-c", str(gzip_input)]
        for program, cmd in programs.items():
            samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
            records: dict[str, object] = {}
            stats: dict[str, int] = {}
            insns = 0
            for _ in range(args.repeat):
                for variant in VARIANTS:
                    seconds, process = timed(cmd, variant)
                    samples[variant].append(seconds)
                    if variant != "none":
                        records[variant] = process.records
                    if variant == "step native" and process.backend is not None:
                        stats = process.backend.native_stats  # type: ignore[attr-defined]
                        insns = process.backend.stats["steps"]
            med = {v: statistics.median(s) for v, s in samples.items()}
            agree = records["step python"] == records["step native"]
            failed |= not agree
            events = len(records["step native"])  # type: ignore[arg-type]
            in_emu, top = profile(cmd)
            total = stats.get("c_transfers", 0) + stats.get("python_transfers", 0)
            in_c = stats.get("c_transfers", 0) / total if total else 0.0
            lines.append(
                f"| {isa} | {program} | {insns:,} | {events:,} | {med['none']:.2f} | "
                f"{med['step python']:.2f} | {med['step native']:.2f} | "
                f"{med['step python'] / med['none']:.1f}× | "
                f"{med['step native'] / med['none']:.1f}× | "
                f"{med['step python'] / med['step native']:.1f}× | "
                f"{in_emu / med['none']:.1f}× | {100 * in_c:.1f} % | "
                f"{'yes' if agree else 'FAIL'} |")
            result["rows"][f"{isa} {program}"] = {  # type: ignore[index]
                "command": cmd, "samples": samples, "events": events, "insns": insns,
                "native": stats, "emu_start_own_s": in_emu, "agree": agree}
            profiles.append((isa, program, top))
    for isa, program, rows in profiles:
        lines += ["", f"## Where the native run's time goes ({isa} {program}, cProfile, "
                  "own time)", "", "| function | s | calls |", "|---|---|---|"]
        lines += [f"| `{where}` | {t:.2f} | {calls} |" for where, t, calls in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
