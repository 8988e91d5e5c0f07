"""Cost of tracing: int3 (lazy, strict) and step against `--backend none`, per ISA x program.

    python bench/bench_trace.py [--isa all|a,b] [--programs fib,qsort,sort,md5sum]
                                [--fib-n 14] [--repeat 3] [--step-repeat 1]
                                [--timeout 60] [--out bench/results/trace]

Every run is in-process: `Process(RunConfig(...))` is built untimed (stdout to /dev/null),
only `run()` is timed.  Per repetition the backends run interleaved (none, int3-lazy,
int3-strict, step); step runs only in the first `--step-repeat` repetitions.  Medians are
kept; ratios are backend / none from this one run; events/s = calls traced / seconds.
Writes PREFIX.csv, PREFIX.json (machine information, command, every sample, counters) and
PREFIX.md, rewritten after every cell so that a partial run still leaves results.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import ROOT, machine_info, stdout_to_devnull

from emutrace.session import Process, RunConfig

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
BUSYBOX_ISAS = ("x86_64", "i386", "aarch64", "arm", "mipsel", "ppc64le", "s390x")
PROGRAMS = ("fib", "qsort", "sort", "md5sum")
BACKENDS = ("none", "int3-lazy", "int3-strict", "step")
TRACED = ("int3-lazy", "int3-strict", "step")
INPUT = Path("/tmp/emutrace-bench-trace/sort-input.txt")




def make_input() -> None:
    """200 lines of 12 random lowercase letters (fixed seed) for sort and md5sum."""
    INPUT.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    lines = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
             for _ in range(200)]
    INPUT.write_text("\n".join(lines) + "\n")


def command(isa: str, prog: str, fib_n: int) -> tuple[str, list[str]] | None:
    """(program path relative to the repository root, args), or None if not available."""
    if prog == "fib":
        return f"testbins/{isa}/fib", [str(fib_n)]
    if prog == "qsort":
        return f"testbins/{isa}/calls", ["qsort"]
    path = f".cache/busybox/{isa}/busybox"
    if isa not in BUSYBOX_ISAS or not (ROOT / path).exists():
        return None
    return path, [prog, str(INPUT)]


def config(path: str, args: list[str], backend: str, timeout: float) -> RunConfig:
    if backend == "none":
        return RunConfig(program=path, args=args, backend="none", timeout=timeout)
    if backend == "step":
        return RunConfig(program=path, args=args, backend="step", timeout=timeout)
    cleanup = backend.split("-", 1)[1]
    return RunConfig(program=path, args=args, backend="int3", cleanup=cleanup,
                     timeout=timeout)


@dataclass
class Sample:
    seconds: float
    exit_code: int
    stop: str
    calls: int
    stats: dict[str, int]


def run_once(path: str, args: list[str], backend: str, timeout: float) -> Sample:
    gc.collect()
    with stdout_to_devnull():
        p = Process(config(path, args, backend, timeout), warn=lambda _m: None)
        t0 = time.perf_counter()
        r = p.run()
        elapsed = time.perf_counter() - t0
    return Sample(elapsed, r.exit_code, r.stop.kind, len(r.records) // 2,
                  dict(r.backend_stats))


@dataclass
class Cell:
    isa: str
    prog: str
    path: str
    args: list[str]
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def median(self, backend: str) -> float | None:
        s = self.samples.get(backend)
        return statistics.median(x.seconds for x in s) if s else None

    def ratio(self, backend: str) -> float | None:
        base, t = self.median("none"), self.median(backend)
        return t / base if base and t is not None else None

    def calls(self, backend: str) -> int | None:
        s = self.samples.get(backend)
        return s[0].calls if s else None

    def stat(self, backend: str, key: str) -> int | None:
        s = self.samples.get(backend)
        return s[0].stats.get(key) if s else None

    def problems(self) -> list[str]:
        out: list[str] = []
        for b, ss in self.samples.items():
            bad = {(x.stop, x.exit_code) for x in ss if x.exit_code != 0}
            out += [f"{b}: {stop} exit {code}" for stop, code in sorted(bad)]
            if len({x.calls for x in ss}) > 1:
                out.append(f"{b}: calls vary {sorted({x.calls for x in ss})}")
        counts = {b: self.calls(b) for b in TRACED if b in self.samples}
        if len(set(counts.values())) > 1:
            out.append("calls differ: " + ", ".join(f"{b}={c}" for b, c in counts.items()))
        return out

    def summary(self) -> dict[str, object]:
        row: dict[str, object] = {"isa": self.isa, "program": self.prog,
                                  "command": " ".join([self.path, *self.args])}
        for b in BACKENDS:
            m = self.median(b)
            row[f"{b}_s"] = round(m, 4) if m is not None else None
            row[f"{b}_n"] = len(self.samples.get(b, []))
        for b in TRACED:
            r = self.ratio(b)
            row[f"{b}_x"] = round(r, 2) if r is not None else None
            row[f"{b}_calls"] = self.calls(b)
        lazy_s, lazy_calls = self.median("int3-lazy"), self.calls("int3-lazy")
        row["events_per_s_lazy"] = (round(lazy_calls / lazy_s) if lazy_s and lazy_calls
                                    is not None else None)
        step_s, step_calls = self.median("step"), self.calls("step")
        row["events_per_s_step"] = (round(step_calls / step_s) if step_s and step_calls
                                    is not None else None)
        for b in ("int3-lazy", "int3-strict"):
            for key in ("traps", "patches", "fallbacks", "simulated", "hooks_added"):
                row[f"{b}_{key}"] = self.stat(b, key)
        row["problems"] = "; ".join(self.problems())
        return row


def bench_cell(cell: Cell, repeat: int, step_repeat: int, timeout: float,
               log: Callable[[str], None]) -> None:
    for rep in range(repeat):
        for b in BACKENDS:
            if b == "step" and rep >= step_repeat:
                continue
            s = run_once(cell.path, cell.args, b, timeout)
            cell.samples.setdefault(b, []).append(s)
            log(f"  {cell.isa} {cell.prog} rep {rep} {b}: {s.seconds:.3f}s calls={s.calls} "
                f"exit={s.exit_code} {s.stats}")


# ---------------------------------------------------------------- machine and output


def fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def markdown(cells: list[Cell], info: dict[str, object], repeat: int,
             step_repeat: int) -> str:
    load = info["loadavg_at_start"]
    assert isinstance(load, tuple | list)
    lines = [
        f"Command: `{info['command']}`",
        "",
        f"{info['date']}, {info['cpu']} ({info['cpus']} CPUs, shared; load average at start "
        f"{', '.join(f'{x:.1f}' for x in load)}), Python "
        f"{info['python']}, Unicorn {info['unicorn']}, emutrace {info['emutrace_git']}.",
        f"Median wall seconds of `run()` over {repeat} interleaved repetitions "
        f"(step: {step_repeat}); × = backend / none of this run; events/s = calls / seconds "
        "(int3-lazy). traps/patches/fallbacks: int3-lazy / int3-strict.",
        "",
        "| ISA | program | none s | int3-lazy × | int3-strict × | step × | calls | "
        "events/s lazy | traps | patches | fallbacks | problems |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in cells:
        def pair(key: str, c: Cell = c) -> str:
            a, b = c.stat("int3-lazy", key), c.stat("int3-strict", key)
            return f"{fmt(a, 'd')} / {fmt(b, 'd')}"
        lazy_s, calls = c.median("int3-lazy"), c.calls("int3-lazy")
        eps = calls / lazy_s if lazy_s and calls is not None else None
        lines.append(
            f"| {c.isa} | {c.prog} | {fmt(c.median('none'), '.3f')} | "
            f"{fmt(c.ratio('int3-lazy'), '.1f', '×')} | "
            f"{fmt(c.ratio('int3-strict'), '.1f', '×')} | "
            f"{fmt(c.ratio('step'), '.0f', '×')} | {fmt(calls, 'd')} | {fmt(eps, ',.0f')} | "
            f"{pair('traps')} | {pair('patches')} | {pair('fallbacks')} | "
            f"{'; '.join(c.problems()) or 'ok'} |")
    return "\n".join(lines) + "\n"


def write_outputs(prefix: Path, cells: list[Cell], info: dict[str, object], repeat: int,
                  step_repeat: int) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rows = [c.summary() for c in cells]
    if rows:
        with prefix.with_suffix(".csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    data = {
        "machine": info,
        "repeat": repeat,
        "step_repeat": step_repeat,
        "cells": [
            {"summary": c.summary(),
             "samples": {b: [vars(s) for s in ss] for b, ss in c.samples.items()}}
            for c in cells
        ],
    }
    prefix.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    prefix.with_suffix(".md").write_text(markdown(cells, info, repeat, step_repeat))


def parse_list(text: str, allowed: tuple[str, ...]) -> list[str]:
    if text == "all":
        return list(allowed)
    items = [x.strip() for x in text.split(",") if x.strip()]
    for x in items:
        if x not in allowed:
            raise SystemExit(f"unknown {x!r}; one of {', '.join(allowed)}")
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default="all")
    ap.add_argument("--programs", default="all")
    ap.add_argument("--fib-n", type=int, default=14)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--step-repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0, help="per run (guest timeout)")
    ap.add_argument("--out", default="bench/results/trace")
    ns = ap.parse_args(argv)
    isas, progs = parse_list(ns.isa, ISAS), parse_list(ns.programs, PROGRAMS)
    os.chdir(ROOT)
    make_input()
    cmd = shlex.join(["python", "bench/bench_trace.py",
                      *(argv if argv is not None else sys.argv[1:])])
    info = machine_info(cmd)
    prefix = Path(ns.out)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cells: list[Cell] = []
    for prog in progs:
        for isa in isas:
            found = command(isa, prog, ns.fib_n)
            if found is None:
                continue
            cell = Cell(isa, prog, found[0], found[1])
            log(f"{isa} {prog}: {' '.join([cell.path, *cell.args])}")
            bench_cell(cell, ns.repeat, ns.step_repeat, ns.timeout, log)
            cells.append(cell)
            write_outputs(prefix, cells, info, ns.repeat, ns.step_repeat)
    print(markdown(cells, info, ns.repeat, ns.step_repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
