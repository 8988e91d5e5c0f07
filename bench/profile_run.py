"""Where does `Process.run()` spend its wall time?  cProfile of one in-process run.

    python bench/profile_run.py [--isa x86_64] [--n 30] [--top 15] [--out FILE]

cProfile sees only the calling thread; time the main thread spends blocked (for example in
``Thread.join``) shows up as wall time of the blocking call.  The guest's stdout goes to
/dev/null.  Also times the same run() from a non-main thread (where emutrace's run() skips its
Ctrl-C watcher thread) as a control.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runner import ROOT, new_process, stdout_to_devnull  # noqa: E402


def profiled_run(isa: str, n: int, top: int) -> str:
    with stdout_to_devnull():
        p = new_process(isa, n)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        p.run()
        prof.disable()
        wall = time.perf_counter() - t0
    out = io.StringIO()
    out.write(f"# {isa} fib({n}): Process.run() wall {wall:.3f} s\n")
    for key in ("tottime", "cumulative"):
        out.write(f"\n## top {top} by {key}\n")
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(key).print_stats(top)
    return out.getvalue()


def run_elsewhere(isa: str, n: int, in_thread: bool) -> float:
    with stdout_to_devnull():
        p = new_process(isa, n)
        took: list[float] = []

        def go() -> None:
            t0 = time.perf_counter()
            p.run()
            took.append(time.perf_counter() - t0)

        if in_thread:
            th = threading.Thread(target=go)
            th.start()
            th.join()
        else:
            go()
    return took[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default="x86_64")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="also write the report here (relative to the repo root)")
    args = ap.parse_args()
    text = profiled_run(args.isa, args.n, args.top)
    lines = ["", f"## control: run() in the main thread vs in another thread (no watcher), "
                 f"{args.repeat} interleaved pairs, seconds"]
    for _ in range(args.repeat):
        main_s = run_elsewhere(args.isa, args.n, in_thread=False)
        other_s = run_elsewhere(args.isa, args.n, in_thread=True)
        lines.append(f"main thread {main_s:.3f}   other thread {other_s:.3f}   "
                     f"difference {1e3 * (main_s - other_s):.0f} ms")
    text += "\n".join(lines) + "\n"
    print(text)
    if args.out:
        (ROOT / args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
