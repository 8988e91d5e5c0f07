"""What does hiding breakpoint bytes from guest loads cost?

    python bench/bench_codeguard.py [--isa x86_64,aarch64] [--n 25] [--repeat 3] [--out FILE]

Two measurements of fib(n), interleaved, medians of ``--repeat`` runs:

* bare Unicorn (bench_runner.time_bare) with and without the guard's two hooks (a
  ``UC_HOOK_MEM_READ`` and a ``UC_HOOK_MEM_WRITE``, Python callbacks) bounded to the
  program's executable segment, as emutrace/backends/codeguard.py installs them: what their
  mere presence costs every other memory access;
* ``emutrace run --backend int3`` in this process with the guard and with it switched off
  (``CodeGuard.cover`` a no-op: no hooks installed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import unicorn
from unicorn import unicorn_const as ucc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runner import ROOT, parse_isas, program, time_bare  # noqa: E402
from common import stdout_to_devnull  # noqa: E402

from emutrace.backends.codeguard import CodeGuard  # noqa: E402
from emutrace.cli.main import main as emutrace_main  # noqa: E402
from emutrace.elf import load_image  # noqa: E402


def text_range(isa: str) -> tuple[int, int]:
    image = load_image(str(ROOT / program(isa)))
    seg = next(s for s in image.segments if s.flags & 1)  # PF_X
    return seg.vaddr, seg.vaddr + seg.memsz


def guard_hooks(lo: int, hi: int):  # type: ignore[no-untyped-def]
    def never(*_args: object) -> None:
        return None

    def add(uc: unicorn.Uc) -> None:
        uc.hook_add(ucc.UC_HOOK_MEM_READ, never, None, lo, hi - 1)
        uc.hook_add(ucc.UC_HOOK_MEM_WRITE, never, None, lo, hi - 1)
    return add


def time_int3(isa: str, n: int, guarded: bool) -> float:
    saved = CodeGuard.cover
    if not guarded:
        CodeGuard.cover = lambda self, addr: None  # type: ignore[method-assign]
    try:
        with stdout_to_devnull():
            start = time.perf_counter()
            code = emutrace_main(["run", "--backend", "int3", "-o", "/dev/null",
                                  str(ROOT / program(isa)), str(n)])
            took = time.perf_counter() - start
    finally:
        CodeGuard.cover = saved  # type: ignore[method-assign]
    assert code == 0, code
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=25)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="also write the table here (relative to the repo root)")
    args = ap.parse_args()
    lines = [f"Command: `python bench/bench_codeguard.py {' '.join(sys.argv[1:])}`".rstrip(),
             "", f"Median seconds of {args.repeat} interleaved runs of fib({args.n}).", "",
             "| ISA | bare | bare + guard hooks | ratio | int3 unguarded | int3 guarded "
             "| ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for isa in parse_isas(args.isa):
        hooks = guard_hooks(*text_range(isa))
        s: dict[str, list[float]] = {k: [] for k in ("bare", "hooked", "off", "on")}
        for _ in range(args.repeat):
            s["bare"].append(time_bare(isa, args.n).seconds)
            s["hooked"].append(time_bare(isa, args.n, hooks).seconds)
            s["off"].append(time_int3(isa, args.n, False))
            s["on"].append(time_int3(isa, args.n, True))
        m = {k: statistics.median(v) for k, v in s.items()}
        lines.append(f"| {isa} | {m['bare']:.3f} | {m['hooked']:.3f} "
                     f"| {m['hooked'] / m['bare']:.2f}× | {m['off']:.3f} | {m['on']:.3f} "
                     f"| {m['on'] / m['off']:.2f}× |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        (ROOT / args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
