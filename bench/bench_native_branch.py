"""`bts` and `btf` on the native hot path against their Python reference: untraced vs each
backend under `--engine python` and `--engine native`, ratios side by side in one run.

    python bench/bench_native_branch.py [--isa x86_64,aarch64,mips|all] [--n 18]
                                        [--gzip-kb 8] [--scenario qsort] [--repeat 3]
                                        [--out bench/results/native-branch]

Programs: `testbins/<isa>/fib N` (call-heavy: nearly every taken branch is a call or a
return, so most of the cost is decoding events, the same Python on both engines),
`testbins/<isa>/calls SCENARIO` (libc's qsort by default: loops between calls) and
Debian's busybox `gzip -c` of a generated text file of K KB (loop-heavy: most taken branches
are jumps inside a function, which the native engine keeps in C; skipped with --gzip-kb 0
or where the ISA has no busybox).  Every run is in-process: `Process(RunConfig(...))` is
built untimed (guest stdout to /dev/null), only `run()` is timed; per repetition the variants run
interleaved; medians are kept; ratios are variant / none from this one run.  The two
engines' records and counters must be equal (else the row says FAIL and the script exits
1).  Writes PREFIX.json (machine information, command, every sample) and PREFIX.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_native_step import text_file
from common import ROOT, machine_info, stdout_to_devnull

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
BACKENDS = ("bts", "btf")
VARIANTS = [("none", "python")] + [(b, e) for b in BACKENDS for e in ("python", "native")]


def timed(argv: list[str], backend: str, engine: str) -> tuple[float, tuple]:
    with stdout_to_devnull():
        process = Process(RunConfig(argv[0], argv[1:], backend=backend, engine=engine),
                          warn=lambda m: None)
        start = time.perf_counter()
        r = process.run()
        return time.perf_counter() - start, (r.records, r.backend_stats, r.guest_insns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default="x86_64,aarch64,mips")
    ap.add_argument("--n", type=int, default=18)
    ap.add_argument("--gzip-kb", type=int, default=8)
    ap.add_argument("--scenario", default="qsort", help="a `calls` scenario ('' for none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-branch"))
    args = ap.parse_args(argv)
    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    command = "python bench/bench_native_branch.py " + shlex.join(argv if argv is not None
                                                                  else sys.argv[1:])
    info = machine_info(command)
    result: dict[str, object] = {"machine": info, "n": args.n, "rows": {}}
    lines = ["# Native hot path: `bts` and `btf`", "",
             f"Command: `{command}`  ", f"Date: {info['date']}; load average at start: "
             f"{', '.join(f'{x:.1f}' for x in info['loadavg_at_start'])}; "  # type: ignore[union-attr]
             f"emutrace {info['emutrace_git']}", "",
             "| ISA | program | backend | taken branches | events | none s | python s "
             "| native s | python/none | native/none | python/native | agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    tmp = Path(tempfile.mkdtemp(prefix="bench-branch-"))
    gzip_input = text_file(tmp, args.gzip_kb) if args.gzip_kb else None
    cells = []
    for isa in isas:
        cells.append((isa, f"fib {args.n}", [str(ROOT / "testbins" / isa / "fib"), str(args.n)]))
        if args.scenario:
            cells.append((isa, f"calls {args.scenario}",
                          [str(ROOT / "testbins" / isa / "calls"), args.scenario]))
        busybox = ROOT / ".cache" / "busybox" / isa / "busybox"
        if gzip_input and busybox.exists() and by_name(isa).capability(Cap.BUSYBOX).works:
            cells.append((isa, f"gzip {args.gzip_kb} KB",
                          [str(busybox), "gzip", "-c", str(gzip_input)]))
    lines[0] += ": " + ", ".join(dict.fromkeys(program for _isa, program, _cmd in cells))
    for isa, program, cmd in cells:
        samples: dict[str, list[float]] = {f"{b} {e}": [] for b, e in VARIANTS}
        outputs: dict[str, tuple] = {}
        for _ in range(args.repeat):
            for backend, engine in VARIANTS:
                seconds, out = timed(cmd, backend, engine)
                samples[f"{backend} {engine}"].append(seconds)
                outputs[f"{backend} {engine}"] = out
        med = {k: statistics.median(v) for k, v in samples.items()}
        none = med["none python"]
        for backend in BACKENDS:
            py, nat = outputs[f"{backend} python"], outputs[f"{backend} native"]
            agree = py == nat
            failed |= not agree
            stats = py[1]
            taken = stats.get("records", stats.get("traps", 0))
            p, n = med[f"{backend} python"], med[f"{backend} native"]
            lines.append(f"| {isa} | {program} | {backend} | {taken} | {len(py[0])} "
                         f"| {none:.2f} | {p:.2f} | {n:.2f} | {p / none:.1f}x "
                         f"| {n / none:.1f}x | {p / n:.1f}x | {'yes' if agree else 'FAIL'} |")
        result["rows"][f"{isa} {program}"] = {"samples": samples}  # type: ignore[index]
        print(lines[-2], lines[-1], sep="\n", flush=True)
    lines += ["", "Medians of the interleaved repetitions; `agree`: records, counters and "
              "instruction counts of the two engines equal."]
    for path in tmp.iterdir():
        path.unlink()
    tmp.rmdir()
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
