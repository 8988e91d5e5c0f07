"""`emutrace run -o FILE` (the text trace) on the native engine beside `emutrace record` and
the untraced run: fib N, int3 lazy, interleaved repetitions, ratios of medians.  The text is
formatted in C (native/replaytext.c) or, for comparison in the same run, by the Python
reference alone (trace/format.py); optionally also by a baseline checkout.

    python bench/bench_native_run.py [--isa x86_64,aarch64] [--n 32] [--repeat 3]
                                     [--baseline DIR] [--out PREFIX]

    (a baseline: git archive <old commit> | tar -x -C /tmp/old
     && ln -s $PWD/.cache /tmp/old/.cache && (cd /tmp/old && python setup.py build_ext --inplace))

Each run is the whole command (`emutrace.cli.main.main`: loading, emulation, writing the
trace), timed in a child process of its own checkout (its PYTHONPATH; CPU seconds of the
child, `process_time`, beside the wall seconds: on a loaded machine the CPU time is the
steadier one); the guest's stdout goes to /dev/null.  Variants: `none` (`run --backend
none`), `record` (`record -d DIR --engine native`), `run` (`run -o FILE --engine native`),
`run-py` (the same with `write_replay` stubbed out: the reference formats every line) and,
with --baseline, `run-base` (the baseline checkout's `run -o FILE`).  Every `run` must write
the same text (compared by size and hash).  Writes PREFIX.json and PREFIX.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

RUNS = ("run", "run-py", "run-base")  # the variants that write the text


def child(program: str, n: int, variant: str) -> None:
    """One timed command; prints its numbers as JSON on the last line.  (The guest sees
    the same argv and environment from either checkout: the same program path, no
    PYTHONPATH; so every `run` prints the same text.)"""
    from emutrace.cli.main import main

    if variant == "run-py":  # the reference formats the text
        import emutrace.cli.run

        emutrace.cli.run.write_replay = lambda *a: False  # type: ignore[attr-defined]
    out = tempfile.mkdtemp(prefix="emutrace-bench-run-")
    trace = os.path.join(out, "trace.txt")
    guest = ["--unset-env", "PYTHONPATH", program, str(n)]
    argv = {"none": ["run", "--backend", "none", *guest],
            "record": ["record", "--engine", "native", "-d", os.path.join(out, "d"), *guest],
            "run": ["run", "--engine", "native", "-o", trace, *guest]}[
        variant.split("-")[0]]
    try:
        with stdout_to_devnull():
            wall, cpu = time.perf_counter(), time.process_time()
            code = main(argv)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        digest, size = "", 0
        if os.path.exists(trace):
            sha, size = hashlib.sha256(), 0
            with open(trace, "rb") as f:
                while block := f.read(1 << 20):
                    sha.update(block)
                    size += len(block)
            digest = sha.hexdigest()[:16]
        print(json.dumps({"seconds": wall, "cpu": cpu, "exit": code, "text_bytes": size,
                          "text_sha256": digest,
                          "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                          / 1024}))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_child(root: Path, isa: str, n: int, variant: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    script = Path(__file__).resolve()  # this checkout's child code, the other's emutrace
    program = str(ROOT / "testbins" / isa / "fib")
    proc = subprocess.run([sys.executable, str(script), "--child", program, str(n), variant],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", nargs=3, metavar=("PROGRAM", "N", "VARIANT"))
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "run-o-vs-record"))
    args = ap.parse_args(argv)
    if args.child:
        program, n, variant = args.child
        child(program, int(n), variant)
        return 0
    variants = ["none", "record", "run", "run-py"] + (["run-base"] if args.baseline else [])
    command = "python bench/bench_native_run.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    info = machine_info(command)
    load = ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])  # type: ignore[attr-defined]
    base_cols = " run base s | base/record |" if args.baseline else ""
    lines = [f"# `emutrace run -o FILE` against `emutrace record`: fib {args.n}, native "
             "engine, int3 lazy", "", f"Command: `{command}`  ",
             f"Date: {info['date']}; load average at start: {load}; "
             f"emutrace {info['emutrace_git']}; {args.repeat} interleaved repetitions; "
             "medians of wall seconds (CPU seconds of the child in parentheses); `run`: the "
             "text formatted in C, `run-py`: by the Python reference", "",
             "| ISA | none s | record s | run s | run-py s |" + base_cols
             + " **run/record** | run-py/record | run/run-py | text MB | peak RSS MB "
             "(record, run) | same text |",
             "|---" * (11 + 2 * bool(args.baseline)) + "|"]
    result: dict[str, object] = {"machine": info, "isas": {}}
    for isa in args.isa.split(","):
        samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for variant in variants:
                root = args.baseline if variant == "run-base" else ROOT
                samples[variant].append(run_child(root, isa, args.n, variant))

        def med(v: str, key: str = "seconds") -> float:
            return statistics.median(s[key] for s in samples[v])  # noqa: B023

        def cell(v: str) -> str:
            return f"{med(v):.2f} ({med(v, 'cpu'):.2f})"

        def ratio(a: str, b: str) -> str:
            return f"{med(a) / med(b):.2f}× ({med(a, 'cpu') / med(b, 'cpu'):.2f}×)"

        same = {(s["text_sha256"], s["text_bytes"]) for v in RUNS if v in samples
                for s in samples[v]}
        base = f" {cell('run-base')} | {ratio('run-base', 'record')} |" \
            if args.baseline else ""
        lines.append(
            f"| {isa} | {cell('none')} | {cell('record')} | {cell('run')} | {cell('run-py')} "
            f"|{base} **{ratio('run', 'record')}** | {ratio('run-py', 'record')} | "
            f"{ratio('run', 'run-py')} | {samples['run'][-1]['text_bytes'] / 1e6:.1f} | "
            f"{med('record', 'maxrss_mb'):.0f}, {med('run', 'maxrss_mb'):.0f} | "
            f"{'yes' if len(same) == 1 else 'NO'} |")
        result["isas"][isa] = samples  # type: ignore[index]
        print(lines[-1], flush=True)
        Path(args.out + ".md").write_text("\n".join(lines) + "\n")
        Path(args.out + ".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
