"""Wall time of emutrace vs a bare Unicorn run vs qemu-user, side by side, on every ISA.

    python bench/bench_runner.py [--isa all|a,b] [--n 30] [--repeat 3] [--out PREFIX]

For each ISA the variants run interleaved (A B C D, A B C D, ...) so that the noise of a
shared machine falls on all of them alike; each variant's median (and min) is kept and the
ratios are taken between medians of the same run.  See bench/README.md for what each variant
is and why the bare-Unicorn variant is defined the way it is.

Writes PREFIX.csv, PREFIX.json (with machine information) and PREFIX.md (a table to paste
into the README, with the command that made it).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import unicorn
from common import ROOT, machine_info, stdout_to_devnull
from unicorn import unicorn_const as ucc
from unicorn import x86_const

from emutrace.isa import by_name
from emutrace.machine.linux.kernel import GuestExit
from emutrace.session import Process, RunConfig, RunResult

ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le",
        "s390x")
TARGET = 1.3  # emutrace run() / bare Unicorn
VARIANTS = ("run", "run_thread", "bare", "cli", "qemu")


# ---------------------------------------------------------------- helpers


def program(isa: str) -> str:
    """The test program, relative to the repository root (the commands are run from there)."""
    return f"testbins/{isa}/fib"


def qemu_binary(isa: str) -> str:
    return f"qemu-{by_name(isa).identity.qemu}-static"


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a




def new_process(isa: str, n: int) -> Process:
    return Process(RunConfig(program=program(isa), args=[str(n)]))


# ---------------------------------------------------------------- the variants


def time_run(isa: str, n: int, in_thread: bool = False) -> float:
    """emutrace in-process: Process() is built untimed, then only run() is timed.  (The
    Linux layer dups fd 1 when the Process is built, hence the redirect around both.)

    in_thread: call run() from a second thread, where emutrace's run() skips its Ctrl-C
    watcher thread (a diagnostic variant: it isolates the cost of that watcher)."""
    results: list[RunResult] = []

    def go() -> None:
        results.append(p.run())

    with stdout_to_devnull():
        p = new_process(isa, n)
        t0 = time.perf_counter()
        if in_thread:
            th = threading.Thread(target=go)
            th.start()
            th.join()
        else:
            go()
        elapsed = time.perf_counter() - t0
    result = results[0]
    if result.stop.kind != "exit" or result.exit_code != 0:
        raise RuntimeError(f"{isa}: emutrace run ended with {result.stop}")
    return elapsed


@dataclass
class BareResult:
    seconds: float
    syscall_seconds: float  # of which inside the Linux layer's syscall handlers
    syscalls: int
    exit_status: int | None


def time_bare(isa: str, n: int,
              extra_hooks: Callable[[unicorn.Uc], None] | None = None) -> BareResult:
    """Bare Unicorn: the same loaded Process (memory image, stack, registers, Uc), with all of
    emutrace's hooks deleted and ONE minimal syscall hook written here, then a plain
    ``uc.emu_start(entry, sentinel)``: no fault hook, no exception guard, no run() wrapper
    (Ctrl-C watcher, Stop mapping).  The hook hands each syscall to the Linux layer's handler
    body (``kernel.on_syscall``): a static glibc program cannot start without real answers to
    brk and the TLS calls (arch_prctl, set_thread_area, ARM_set_tls), and the time spent there
    is measured so it can be told apart (it is the "only syscalls should cost extra" part).

    extra_hooks: called with the Uc after the minimal hook is installed (bench/hook_cost.py
    uses it to measure what one more hook costs)."""
    with stdout_to_devnull():
        p = new_process(isa, n)
    uc = p.cpu.uc
    for handle in list(uc._callbacks):  # every hook HookSet installed
        uc.hook_del(handle)
    conv = p.cpu.isa.syscalls
    state: dict[str, float | int | None] = {"exit": None, "sys_s": 0.0, "count": 0, "intr": None}

    def on_syscall() -> None:
        t = time.perf_counter()
        state["count"] = int(state["count"] or 0) + 1
        try:
            p.kernel.on_syscall()
        except GuestExit as e:
            state["exit"] = e.status
            uc.emu_stop()
        state["sys_s"] = float(state["sys_s"] or 0.0) + time.perf_counter() - t

    def on_intr(_uc: unicorn.Uc, intno: int, _d: object) -> None:
        if intno == conv.intno:
            on_syscall()
        else:
            state["intr"] = intno
            uc.emu_stop()

    if conv.hook == "insn":
        uc.hook_add(ucc.UC_HOOK_INSN, lambda _uc, _d: on_syscall(), None, 1, 0,
                    getattr(x86_const, conv.insn or ""))
        uc.hook_add(ucc.UC_HOOK_INTR, on_intr)
    else:
        uc.hook_add(ucc.UC_HOOK_INTR, on_intr)
    if extra_hooks is not None:
        extra_hooks(uc)
    sentinel = (1 << (8 * p.cpu.word)) - 16  # as emutrace's run(): outside mapped memory
    error: unicorn.UcError | None = None
    with stdout_to_devnull():
        t0 = time.perf_counter()
        try:
            uc.emu_start(p.entry, sentinel)
        except unicorn.UcError as e:
            error = e  # MIPS runs on briefly after emu_stop and may fault: fine after exit
        elapsed = time.perf_counter() - t0
    p.kernel.close_all()
    status = state["exit"]
    if status != 0:
        raise RuntimeError(f"{isa}: bare run did not reach exit_group(0): exit={status} "
                           f"intr={state['intr']} error={error}")
    return BareResult(elapsed, float(state["sys_s"] or 0.0), int(state["count"] or 0),
                      int(status))


def cli_command(isa: str, n: int) -> list[str]:
    return [sys.executable, "-m", "emutrace", "run", "--backend", "none", program(isa), str(n)]


def qemu_command(isa: str, n: int) -> list[str]:
    return [qemu_binary(isa), program(isa), str(n)]


def time_subprocess(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def check_output(isa: str, n: int) -> tuple[bool, str]:
    """Outside the timed loop: emutrace's stdout must equal qemu's (and be fib(n))."""
    ours = subprocess.run(cli_command(isa, n), cwd=ROOT, capture_output=True, check=False)
    theirs = subprocess.run(qemu_command(isa, n), cwd=ROOT, capture_output=True, check=False)
    expected = f"fib({n}) = {fib(n)}\n".encode()
    ok = (ours.stdout == theirs.stdout == expected
          and ours.returncode == theirs.returncode == 0)
    return ok, ours.stdout.decode(errors="replace").strip()


# ---------------------------------------------------------------- one ISA


@dataclass
class IsaResult:
    isa: str
    n: int
    output_ok: bool
    output: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    bare_syscall_s: list[float] = field(default_factory=list)
    syscalls: int = 0

    def median(self, v: str) -> float:
        return statistics.median(self.samples[v])

    def minimum(self, v: str) -> float:
        return min(self.samples[v])

    def ratios(self) -> dict[str, float]:
        return {
            "run_over_bare": self.median("run") / self.median("bare"),
            "run_thread_over_bare": self.median("run_thread") / self.median("bare"),
            "cli_over_qemu": self.median("cli") / self.median("qemu"),
            "bare_over_qemu": self.median("bare") / self.median("qemu"),
        }

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {"isa": self.isa, "n": self.n, "output_ok": self.output_ok,
                                  "output": self.output, "syscalls": self.syscalls}
        for v in VARIANTS:
            out[f"{v}_median_s"] = round(self.median(v), 4)
            out[f"{v}_min_s"] = round(self.minimum(v), 4)
        out["bare_syscall_median_ms"] = round(statistics.median(self.bare_syscall_s) * 1e3, 2)
        out["run_minus_bare_ms"] = round((self.median("run") - self.median("bare")) * 1e3, 1)
        out["cli_minus_run_ms"] = round((self.median("cli") - self.median("run")) * 1e3, 1)
        out.update({k: round(v, 3) for k, v in self.ratios().items()})
        out["run_over_bare_of_mins"] = round(self.minimum("run") / self.minimum("bare"), 3)
        out["target_ok"] = self.ratios()["run_over_bare"] <= TARGET
        return out


def bench_isa(isa: str, n: int, repeat: int, log: Callable[[str], None]) -> IsaResult:
    ok, output = check_output(isa, n)
    res = IsaResult(isa, n, ok, output, {v: [] for v in VARIANTS})
    for i in range(repeat):
        gc.collect()
        res.samples["run"].append(time_run(isa, n))
        gc.collect()
        res.samples["run_thread"].append(time_run(isa, n, in_thread=True))
        gc.collect()
        bare = time_bare(isa, n)
        res.samples["bare"].append(bare.seconds)
        res.bare_syscall_s.append(bare.syscall_seconds)
        res.syscalls = bare.syscalls
        gc.collect()
        res.samples["cli"].append(time_subprocess(cli_command(isa, n)))
        res.samples["qemu"].append(time_subprocess(qemu_command(isa, n)))
        log(f"  {isa} rep {i + 1}/{repeat}: "
            + "  ".join(f"{v}={res.samples[v][-1]:.3f}s" for v in VARIANTS))
    return res


# ---------------------------------------------------------------- machine and output






def qemu_version() -> str:
    try:
        out = subprocess.run([qemu_binary("x86_64"), "--version"], capture_output=True,
                             text=True, check=False).stdout
    except OSError:
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


def write_csv(path: Path, results: list[IsaResult]) -> None:
    rows = [r.summary() for r in results]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def markdown(results: list[IsaResult], info: dict[str, object], repeat: int) -> str:
    lines = [
        f"Command: `{info['command']}`",
        "",
        f"{info['date']}, {info['cpu']} ({info['cpus']} CPUs, shared), Python {info['python']},"
        f" Unicorn {info['unicorn']}, {info['qemu']}, emutrace {info['emutrace_git']}.",
        f"Median of {repeat} interleaved repetitions, seconds of wall time; ratios are of "
        "medians from this one run.",
        "",
        "| ISA | N | emutrace run() | bare Unicorn | **run/bare** | (of mins) | ≤1.3× "
        "| run() off main thread ÷ bare | emutrace CLI | qemu-user | CLI/qemu | bare/qemu "
        "| stdout = qemu's |",
        "|---|---:|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|:-:|",
    ]
    for r in results:
        s = r.summary()
        lines.append(
            f"| {r.isa} | {r.n} | {s['run_median_s']:.3f} | {s['bare_median_s']:.3f} "
            f"| **{s['run_over_bare']:.2f}×** | {s['run_over_bare_of_mins']:.2f}× "
            f"| {'yes' if s['target_ok'] else 'NO'} | {s['run_thread_over_bare']:.2f}× "
            f"| {s['cli_median_s']:.3f} | {s['qemu_median_s']:.3f} | {s['cli_over_qemu']:.1f}× "
            f"| {s['bare_over_qemu']:.1f}× | {'yes' if r.output_ok else 'NO'} |")
    sys_ms = [statistics.median(r.bare_syscall_s) * 1e3 for r in results]
    lines += ["", f"Time inside the Linux layer's syscall handlers during the bare run "
              f"(14–16 syscalls): {min(sys_ms):.1f}–{max(sys_ms):.1f} ms per run.", ""]
    return "\n".join(lines)


def parse_isas(text: str) -> list[str]:
    if text == "all":
        return list(ISAS)
    isas = [s.strip() for s in text.split(",") if s.strip()]
    for isa in isas:
        by_name(isa)  # raises on an unknown name
    return isas


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--isa", default="all", help="all, or a comma-separated list")
    ap.add_argument("--n", type=int, default=32, help="fib argument (default 32)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repetitions")
    ap.add_argument("--out", default="bench/results/runner",
                    help="output prefix, relative to the repository root")
    args = ap.parse_args(argv)
    os.chdir(ROOT)  # the timed commands name testbins/<isa>/fib relative to the repository
    isas = parse_isas(args.isa)
    command = shlex.join(["python", "bench/bench_runner.py",
                          *(sys.argv[1:] if argv is None else argv)])
    info = machine_info(command, qemu=qemu_version())

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"{command}\n{info['cpu']}, load {info['loadavg_at_start']}")
    started = time.perf_counter()
    results = []
    for isa in isas:
        res = bench_isa(isa, args.n, args.repeat, log)
        s = res.summary()
        log(f"{isa}: run/bare {s['run_over_bare']}  CLI/qemu {s['cli_over_qemu']}  "
            f"bare/qemu {s['bare_over_qemu']}  output {'ok' if res.output_ok else 'DIFFERS'}")
        results.append(res)
    info["bench_seconds"] = round(time.perf_counter() - started, 1)
    info["loadavg_at_end"] = os.getloadavg()

    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), results)
    out.with_suffix(".json").write_text(json.dumps({
        "machine": info,
        "target_run_over_bare": TARGET,
        "results": [r.summary() for r in results],
        "samples": [{"isa": r.isa, **asdict(r)["samples"],
                     "bare_syscall_s": r.bare_syscall_s} for r in results],
    }, indent=2) + "\n")
    table = markdown(results, info, args.repeat)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0 if all(r.output_ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
