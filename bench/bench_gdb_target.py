"""The gdb-remote target's per-event cost: int3 (lazy) on `testbins/{isa}/fib N` in
qemu-user's gdb stub (`--target gdb`) beside the untraced qemu-user run and the Unicorn
engine's Python reference, per trap.

    python bench/bench_gdb_target.py [--isa x86_64,aarch64] [--n 20] [--repeat 3]
                                     [--out bench/results/gdb-target.md]

Per trap: (traced wall time - the untraced qemu-user run's) / traps, the median of the
repeats; the stub's packets per trap are the RSP requests emutrace sent (each a TCP round
trip to qemu).  The Unicorn column is the same mechanism's Python port (`--engine python`)
on the same program, its wall time per trap (its untraced run not subtracted: emulation is
the run)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine_info  # noqa: E402
from emutrace.gdb_session import GdbProcess  # noqa: E402
from emutrace.isa import by_name  # noqa: E402
from emutrace.session import Process, RunConfig  # noqa: E402
from emutrace.target.gdb_remote import qemu_user  # noqa: E402


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", default="x86_64,aarch64")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench/results/gdb-target.md"))
    args = ap.parse_args()
    rows = []
    for isa in args.isa.split(","):
        program = str(ROOT / "testbins" / isa / "fib")
        qemu = qemu_user(by_name(isa))
        assert qemu is not None
        config = RunConfig(program, [str(args.n)], backend="int3", engine="python")
        plain, gdb, emu = [], [], []
        traps = packets = 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([qemu, program, str(args.n)], capture_output=True, check=True)
            plain.append(time.perf_counter() - start)
            with open(os.devnull, "wb") as null:
                saved = os.dup(1)
                os.dup2(null.fileno(), 1)
                try:
                    process = GdbProcess(config)
                    wall, result = timed(process.run)
                finally:
                    os.dup2(saved, 1)
                    os.close(saved)
            gdb.append(wall)
            traps, packets = result.backend_stats["traps"], process.target.conn.packets
            emulated = Process(config, warn=lambda m: None)
            wall, eresult = timed(emulated.run)
            emu.append(wall / max(1, eresult.backend_stats["traps"]))
        per_trap = (statistics.median(gdb) - statistics.median(plain)) / max(1, traps)
        rows.append(f"| {isa} | fib {args.n} | {traps} | {per_trap * 1e6:.0f} µs | "
                    f"{packets / max(1, traps):.1f} | {statistics.median(emu) * 1e6:.0f} µs |")
    info = machine_info(" ".join(sys.argv))
    text = "\n".join([
        "# The gdb-remote target's cost per event (int3 lazy)", "",
        f"{info['date']}, {info['cpu']}, load {info['loadavg_at_start']}", "",
        "| ISA | program | traps | per trap (gdb stub) | packets per trap "
        "| per trap (Unicorn, Python) |",
        "|---|---|---|---|---|---|", *rows, ""])
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
