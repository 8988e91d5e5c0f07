"""The `step` backend on the native hot path against its Python reference: untraced vs
`--backend step --engine python` vs `--engine native` (`run`: every record drained to a
Python list) vs `step record` (`emutrace record`'s uftrace directory, written by C:
native/ufwrite.c), ratios side by side in one run.

    python bench/bench_native_step.py [--isa x86_64,aarch64,riscv64|all] [--n 22]
                                      [--gzip-kb 32] [--repeat 3]
                                      [--variants none,step python,step native,step record]
                                      [--out bench/results/native-step]

Two programs per ISA: `testbins/<isa>/fib N` (a call-heavy trace) and Debian's busybox
`gzip -c` of a generated text file of K KB (instruction-heavy: few calls per instruction;
skipped with --gzip-kb 0 or where the ISA has no busybox).  Every run is in-process:
`Process(RunConfig(...))` is built untimed (guest stdout to /dev/null), only `run()` is
timed (for `step record`: the run and closing the directory); per repetition the variants
run interleaved; medians are kept; ratios are variant / none from this one run.  The two
engines' records must be equal, and the directory `step record` wrote, read back, must hold
the native run's records (kind, time, depth, function) (else the row says FAIL and the script
exits 1; with one traced variant there is nothing to compare: —).  Peak RSS: VmHWM of
`python -m emutrace run --backend none` and of `python -m emutrace record --backend step
--engine native`, each its own process (as bench_record_memory.py).

"first run" is the first traced variant's first sample over none's first: the first run of a file
in the process, which decodes every instruction it reaches (later runs reuse what it
decoded: memo.py; the medians are mostly such runs).  "C+Unicorn" is the native run's time
inside `emu_start` minus the Python it called back
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
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.events import Entry, Exit
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.uftrace_write import sink_for_image

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
VARIANTS = {"none": ("none", "python"), "step python": ("step", "python"),
            "step native": ("step", "native"), "step record": ("step", "native")}


def build(argv: list[str], variant: str) -> Process:
    backend, engine = VARIANTS[variant]
    return Process(RunConfig(argv[0], argv[1:], backend=backend, engine=engine),
                   warn=lambda m: None)


def timed(argv: list[str], variant: str, directory: Path) -> tuple[float, Process]:
    """(seconds, process) of one run; `step record` writes its records into directory."""
    with stdout_to_devnull():
        process = build(argv, variant)
        sink = None
        if variant == "step record":
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            sink = process.sink = sink_for_image(str(directory), process.image, argv)
        start = time.perf_counter()
        status = process.run().exit_code
        if sink is not None:
            sink.close(status)
        return time.perf_counter() - start, process


def shape(records: Iterable[object]) -> list[tuple[str, int, int, int]]:
    """What a record says of the call tree: (kind, time, depth, function)."""
    return [(type(r).__name__, r.time, r.depth, r.func) for r in records  # type: ignore[attr-defined]
            if isinstance(r, (Entry, Exit))]


def peak_rss_mib(argv: list[str], cwd: Path) -> float:
    """VmHWM of `python -m emutrace ARGV` in its own process, as the test suite measures
    it (tests/test_record_cli.py)."""
    sys.path.insert(0, str(ROOT))
    from tests.test_record_cli import peak_rss_kib

    return peak_rss_kib(argv, cwd)[0] / 1024


def profile(argv: list[str], variant: str, directory: Path,
            top: int = 8) -> tuple[float, list[tuple[str, float, int]]]:
    """(own time of emu_start, the top Python functions by own time) of a native run of
    variant."""
    prof = cProfile.Profile()
    prof.runcall(timed, argv, variant, directory)
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
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="which of: " + ", ".join(VARIANTS) + " (none is always run)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "native-step"))
    args = ap.parse_args(argv)
    isas = ISAS if args.isa == "all" else tuple(args.isa.split(","))
    variants = ["none", *(v for v in VARIANTS if v != "none"
                          and v in args.variants.split(","))]
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
             "| ISA | program | insns | events | "
             + " | ".join(f"{v} s" for v in variants) + " | "
             + " | ".join(f"{v}/none" for v in variants[1:])
             + " | first run/none | C+Unicorn/none | transfers in C | records by C | "
             "peak RSS none | "
             "peak RSS record | agree |",
             "|---" * (len(variants) * 2 + 9) + "|"]
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
            samples: dict[str, list[float]] = {v: [] for v in variants}
            records: dict[str, list[tuple[str, int, int, int]]] = {}
            stats: dict[str, int] = {}
            written = 0
            insns = 0
            directory = tmp / "rec"
            for _ in range(args.repeat):
                for variant in variants:
                    seconds, process = timed(cmd, variant, directory)
                    samples[variant].append(seconds)
                    if variant == "step record":
                        loaded, _symbolize, _isa = load_recording(str(directory))
                        records[variant] = shape(loaded)
                        written = process.backend.native_stats["c_records"]  # type: ignore[union-attr]
                    elif variant != "none":
                        records[variant] = shape(process.records)
                    if variant in ("step native", "step record") \
                            and process.backend is not None:
                        stats = process.backend.native_stats  # type: ignore[attr-defined]
                        insns = process.backend.stats["steps"]
                    del process
            med = {v: statistics.median(s) for v, s in samples.items()}
            first_traced = variants[min(1, len(variants) - 1)]
            kept = list(records.values())
            agree = all(r == kept[0] for r in kept) if len(kept) > 1 else None
            failed |= agree is False
            events = len(kept[0]) if kept else 0
            profiled = "step record" if "step record" in variants else "step native"
            in_emu, top = profile(cmd, profiled, directory)
            total = stats.get("c_transfers", 0) + stats.get("python_transfers", 0)
            in_c = stats.get("c_transfers", 0) / total if total else 0.0
            rss_none = peak_rss_mib(["run", "--backend", "none", *cmd], tmp)
            rss_record = peak_rss_mib(["record", "--backend", "step", "--engine", "native",
                                       "-d", str(tmp / "rss"), *cmd], tmp)
            shutil.rmtree(tmp / "rss", ignore_errors=True)
            lines.append(
                f"| {isa} | {program} | {insns:,} | {events:,} | "
                + " | ".join(f"{med[v]:.2f}" for v in variants) + " | "
                + " | ".join(f"{med[v] / med['none']:.1f}×" for v in variants[1:])
                + f" | {samples[first_traced][0] / samples['none'][0]:.1f}×"
                + f" | {in_emu / med['none']:.1f}× | {100 * in_c:.1f} % | "
                f"{100 * written / max(events, 1):.1f} % | {rss_none:.0f} MiB | "
                f"{rss_record:.0f} MiB | "
                f"{'—' if agree is None else 'yes' if agree else 'FAIL'} |")
            result["rows"][f"{isa} {program}"] = {  # type: ignore[index]
                "command": cmd, "samples": samples, "events": events, "insns": insns,
                "native": stats, "records_by_c": written, "emu_start_own_s": in_emu,
                "peak_rss_mib": {"none": rss_none, "step record": rss_record},
                "agree": agree}
            profiles.append((isa, program, top))
    shutil.rmtree(tmp, ignore_errors=True)
    for isa, program, rows in profiles:
        lines += ["", f"## Where the native run's time goes ({isa} {program}, {profiled}, "
                  "cProfile, own time)", "", "| function | s | calls |", "|---|---|---|"]
        lines += [f"| `{where}` | {t:.2f} | {calls} |" for where, t, calls in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
