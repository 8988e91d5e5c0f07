"""The numbers the cost model is built from, each with where it comes from.

Two kinds, never mixed up:

* ``vm``: measured on this project's machine, a KVM guest on an x86_64 host with 2 vCPU
  (reference/unicorn-and-hardware-facts.md §0, §2.1, marked [M] there).  Anything that raises
  #DB is a VM exit there, so debug-trap prices are ~70x what bare metal would pay.
* ``bare-metal``: published figures for real hardware (ibid. §2, §5), mostly from kernel
  mailing-list benchmarks and the kernel's own documentation.

An ``Anchor`` is one such number in nanoseconds.  Where a price is not a number anyone
measured but an estimate built from one (a code patch costs about one system call), the
estimate is made in :mod:`emutrace.cost.prices` and says so; the anchors here are only what
the sources state.
"""

from __future__ import annotations

from dataclasses import dataclass

REF = "reference/unicorn-and-hardware-facts.md"


@dataclass(frozen=True)
class Anchor:
    ns: float
    label: str  # "vm" or "bare-metal"
    source: str


# ---------------------------------------------------------------- this VM (x86_64, ptrace)
VM_PTRACE_INT3_STOP = Anchor(
    6400, "vm", f"ptrace int3 stop → waitpid → PTRACE_CONT, 6.4 µs/hit ({REF} §2.1 [M])")
VM_PTRACE_STEP_OVER = Anchor(
    29700, "vm", "ptrace software breakpoint, full step-over (restore byte, SINGLESTEP, "
                 f"re-insert, CONT), 29.7 µs/hit ({REF} §2.1 [M])")
VM_DR0_HIT = Anchor(
    23000, "vm", f"ptrace DR0 execute breakpoint, 23.0 µs/hit ({REF} §2.1 [M])")
VM_SINGLESTEP = Anchor(
    16800, "vm", f"PTRACE_SINGLESTEP, 16.8 µs/step ({REF} §2.1 [M])")
VM_SINGLEBLOCK = Anchor(
    31700, "vm", "PTRACE_SINGLEBLOCK, 31.7 µs/stop, and one stop per instruction: KVM drops "
                 f"DEBUGCTL.BTF ({REF} §2.1, §4 [M]; DESIGN.md §6)")
VM_UPROBE_HIT = Anchor(
    22400, "vm", f"uprobe on a function entry (perf probe -x), 22.4 µs/hit ({REF} §2.1 [M])")
VM_SYSCALL = Anchor(
    125, "vm", f"getppid system call, 0.125 µs ({REF} §2.1 [M])")
# measured by bench/bench_ptrace_prices.py (a C tracer, no Python), the least disturbed of
# 25 rounds on this shared VM under load (bench/results/ptrace-prices.md, 2026-11-23)
PRICES_BENCH = "bench/results/ptrace-prices.md"
VM_POKETEXT = Anchor(
    522, "vm", f"PTRACE_POKETEXT of one code word, 0.52 µs ({PRICES_BENCH}; 4x a getppid: "
               "the kernel maps the tracee's page and breaks copy-on-write) [M]")
VM_DR_WRITE = Anchor(
    934, "vm", f"PTRACE_POKEUSER of DR0 and of DR7, 0.93 µs together ({PRICES_BENCH}; the "
               "kernel re-registers a perf breakpoint event) [M]")

# ---------------------------------------------------------------- published, bare metal
BM_UPROBE_X86_64 = Anchor(
    300, "bare-metal", "uprobe-nop 3.03–3.38 M/s ≈ 0.30–0.33 µs/hit, x86_64 Xeon (J. Olsa, "
                       f"uprobes usdt series v6, 2025; {REF} §2 [I])")
BM_UPROBE_ARM64 = Anchor(
    1100, "bare-metal", "uprobe 0.91 M/s ≈ 1.1 µs/hit, arm64 Kunpeng916, XOL path (Liao Chang "
                        f"arm64 uprobe patches, 2024; {REF} §2 [I])")
BM_KPROBE_PPC64 = Anchor(
    770, "bare-metal", "kprobe hit k=0.77 µs, ppc64 POWER5 (linux Documentation/trace/"
                       f"kprobes.rst 'Probe Overhead', 2005 hardware; {REF} §2 [D])")
# the figures an ISA's NativeTracing.breakpoint_figure names (isa/base.py)
BARE_BREAKPOINT_HIT = {"uprobe-x86_64": BM_UPROBE_X86_64, "uprobe-arm64": BM_UPROBE_ARM64,
                       "kprobe-ppc64": BM_KPROBE_PPC64}
BM_SYSCALL = Anchor(
    90, "bare-metal", "syscall-count bench 8.9–14.5 M/s ≈ 70–110 ns per system call, x86_64 "
                      f"Xeon (J. Olsa 2025; {REF} §2 [I]); midpoint 90 ns")
BM_BTS_OVERALL = Anchor(
    0, "bare-metal", "Intel BTS: 'anywhere from 20% to 100%' overall (ASSET InterTech blog "
                     f"2013 [U]); '40x' (Wikipedia 'Branch trace' [U]); {REF} §2")
