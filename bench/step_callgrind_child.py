"""One process running `bench_native_step.py`'s timed run RUNS times (the first run of a file
in a process decodes what it reaches; later ones reuse it: memo.py), for callgrind's host
instruction counts inside Unicorn's `cpu_exec` — load-independent, unlike seconds:

    cd CHECKOUT && PYTHONPATH=$PWD valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect='cpu_exec_*' --callgrind-out-file=OUT \\
        python bench/step_callgrind_child.py ISA fib|gzip VARIANT N|KB RUNS

(`cpu_exec_*`: the emulation itself with every hook and Python callback it makes, not the
set-up around it.)  Results: bench/results/native-step-callgrind.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench_native_step import ROOT, text_file, timed


def main(argv: list[str]) -> None:
    isa, program, variant, arg, runs = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    tmp = Path(f"/tmp/step-callgrind-{isa}-{program}-{variant.replace(' ', '_')}-{ROOT.name}")
    tmp.mkdir(exist_ok=True)
    if program == "fib":
        cmd = [str(ROOT / "testbins" / isa / "fib"), str(arg)]
    else:
        cmd = [str(ROOT / ".cache" / "busybox" / isa / "busybox"), "gzip", "-c",
               str(text_file(tmp, arg))]
    for i in range(runs):
        seconds, process = timed(cmd, variant, tmp / "rec")
        print(f"{isa} {program} {variant} run {i}: {seconds:.3f} s",
              getattr(process.backend, "native_stats", None), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
