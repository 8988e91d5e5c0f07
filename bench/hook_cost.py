"""What does emutrace's fault hook cost?  Bare Unicorn (as in bench_runner.py) with and without
one ``UC_HOOK_MEM_INVALID`` hook like the one ``HookSet`` installs, interleaved.

    python bench/hook_cost.py [--isa all|a,b] [--n 30] [--repeat 3] [--out FILE]

Variants: ``bare``; ``+invalid``: plus a UC_HOOK_MEM_INVALID hook over the whole address space
(as emutrace installs it); ``+invalid@page``: the same hook bounded to one unmapped page
(0x1000-0x1fff), which Unicorn only consults for accesses in that range.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import unicorn
from unicorn import unicorn_const as ucc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runner import ROOT, parse_isas, time_bare  # noqa: E402


def _never(*_args: object) -> bool:
    return False


def whole(uc: unicorn.Uc) -> None:
    uc.hook_add(ucc.UC_HOOK_MEM_INVALID, _never)


def one_page(uc: unicorn.Uc) -> None:
    uc.hook_add(ucc.UC_HOOK_MEM_INVALID, _never, None, 0x1000, 0x1FFF)


VARIANTS: dict[str, Callable[[unicorn.Uc], None] | None] = {
    "bare": None, "+invalid": whole, "+invalid@page": one_page}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default="all")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="also write the table here (relative to the repo root)")
    args = ap.parse_args()
    lines = [f"Command: `python bench/hook_cost.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Median seconds of {args.repeat} interleaved runs of fib({args.n}).", "",
             "| ISA | bare | +invalid | ratio | +invalid@page | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for isa in parse_isas(args.isa):
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeat):
            for name, extra in VARIANTS.items():
                samples[name].append(time_bare(isa, args.n, extra).seconds)
        med = {k: statistics.median(v) for k, v in samples.items()}
        lines.append(f"| {isa} | {med['bare']:.3f} | {med['+invalid']:.3f} "
                     f"| {med['+invalid'] / med['bare']:.2f}× | {med['+invalid@page']:.3f} "
                     f"| {med['+invalid@page'] / med['bare']:.2f}× |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        (ROOT / args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
