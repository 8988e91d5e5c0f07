"""Each engine's cost per traced call, side by side in one run: `emutrace run -o /dev/null`
with int3 (lazy) on `testbins/x86_64/fib N` (the one ISA all four engines run), on

  * Unicorn, the Python reference (`--engine python`),
  * Unicorn, the native C hot path (`--engine native`),
  * ptrace on this host (`--target native --unconfined`, the C wait loop),
  * qemu-user's gdb stub (`--target gdb --unconfined`, each trap a few RSP round trips).

    python bench/bench_engine_cost.py [--isa x86_64] [--n 14,20] [--repeat 3]
                                      [--out bench/results/engine-cost.md]

Per call (an entry and an exit), the marginal cost: each engine's command runs fib at two
sizes, traced and untraced (`--backend none`), and the cost is ((traced − untraced) at the
larger − (traced − untraced) at the smaller) / the calls of `fib` the larger adds (the
program's own arithmetic: fib(n) makes 2·F(n+1) − 1 calls), so what every command pays once
(interpreter start, discovery, arming) drops out.  CPU time of the command and the
processes under it, the median of the repeats, the engines taken in turn within a repeat."""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine_info  # noqa: E402

# engine → the options of `emutrace run` that choose it
ENGINES = {
    "Unicorn, Python reference": ("--engine", "python"),
    "Unicorn, native C": ("--engine", "native"),
    "ptrace, native C loop": ("--target", "native", "--unconfined", "--engine", "native"),
    "gdb remote (qemu-user's stub)": ("--target", "gdb", "--unconfined"),
}


def fib_calls(n: int) -> int:
    """Calls of the naive recursive fib(n): 2·F(n+1) − 1."""
    a, b = 0, 1
    for _ in range(n + 1):
        a, b = b, a + b
    return 2 * a - 1


def cpu(options: tuple[str, ...], backend: str, program: str, n: int) -> float:
    """CPU seconds (user + system) of the command and every process under it (qemu, the
    traced program): on a shared machine wall time measures the neighbours."""
    trace = ("-o", "/dev/null") if backend != "none" else ()
    command = [sys.executable, "-m", "emutrace", "run", *options, "--backend", backend,
               *trace, program, str(n)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, capture_output=True, check=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def one_repeat(program: str, small: int, large: int) -> list[float]:
    """Seconds per added call, per engine in ENGINES order."""
    out = []
    for options in ENGINES.values():
        cost = {n: cpu(options, "int3", program, n) - cpu(options, "none", program, n)
                for n in (small, large)}
        out.append((cost[large] - cost[small]) / (fib_calls(large) - fib_calls(small)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default="x86_64")
    ap.add_argument("--n", default="14,20", help="the two fib sizes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench/results/engine-cost.md"))
    args = ap.parse_args()
    program = str(ROOT / "testbins" / args.isa / "fib")
    small, large = (int(v) for v in args.n.split(","))
    runs = [one_repeat(program, small, large) for _ in range(args.repeat)]
    rows = [f"| {engine} | {statistics.median(r[i] for r in runs) * 1e6:.1f} µs |"
            for i, engine in enumerate(ENGINES)]
    info = machine_info(" ".join(sys.argv))
    text = "\n".join([
        "# Each engine's cost per traced call (int3 lazy, `run -o /dev/null`)", "",
        f"{info['date']}, {info['cpu']}, load {info['loadavg_at_start']}; "
        f"`{args.isa}/fib {small}` against `fib {large}` "
        f"({fib_calls(large) - fib_calls(small)} calls more), median of {args.repeat}", "",
        f"Command: `python bench/bench_engine_cost.py --isa {args.isa} --n {small},{large} "
        f"--repeat {args.repeat}`", "",
        "| engine | CPU per call (entry and exit) |",
        "|---|---|", *rows, ""])
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
