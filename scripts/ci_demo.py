"""The full run of examples/ci/zlib/matrix.toml and its report: zlib's test programs on
fifteen ISAs under int3 (ten on Unicorn, five in qemu-user's gdb stub), first as built from
Debian's source (checked against the committed baselines), then with the programs of the
ISAs of --regress (one on Unicorn, one on the gdb target) rebuilt from a source with a
changed branch (the regression of scripts/build_ci_demo.sh), which the matrix must catch in
each of those ISAs' own cell alone.

    python scripts/ci_demo.py [--regress "riscv64 m68k"] [--workers 2]
                              [--out bench/results/ci-zlib.md] [--report-only]

Writes the report (every run's summary, each failing cell's trace diff around its first
divergence, the changed source line) and leaves the unchanged programs built again.  The
runs' outputs go to .cache/ci-demo/run-clean/ and .cache/ci-demo/run-regressed/
(--report-only: the report written again from them, nothing run).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import difflib
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "ci" / "zlib"
CACHE = REPO / ".cache" / "ci-demo"


def sh(argv: list[str]) -> None:
    subprocess.run(argv, cwd=REPO, check=True)


def ci(out: Path, workers: int) -> int:
    """`emutrace ci` of the matrix into out; its exit status (kept in out/status)."""
    argv = [sys.executable, "-m", "emutrace", "ci", str(DEMO / "matrix.toml"), "-o", str(out),
            "--workers", str(workers), "--unconfined"]
    status = subprocess.run(argv, cwd=REPO).returncode
    (out / "status").write_text(f"{status}\n")
    return status


def body(summary: Path) -> str:
    """summary.md without its title line, its headings one level down."""
    lines = summary.read_text().splitlines()[1:]
    return "\n".join("#" + line if line.startswith("#") else line for line in lines).strip()


def trace_diff(baseline: Path, traced: Path, context: int = 4, changed: int = 16) -> str:
    """The start of the unified diff of two trace files: its first hunk's context and
    first `changed` changed lines."""
    diff = difflib.unified_diff(baseline.read_text().splitlines(),
                                traced.read_text().splitlines(),
                                str(baseline.relative_to(REPO)), "this run", n=context,
                                lineterm="")
    out: list[str] = []
    shown = 0
    for line in diff:
        if line.startswith("@@") and any(o.startswith("@@") for o in out):
            break
        if line[:1] in "+-" and not line.startswith(("+++", "---")):
            shown += 1
            if shown > changed:
                out.append("… (the hunk goes on)")
                break
        out.append(line)
    return "\n".join(out)


def calls(trace: Path) -> collections.Counter[str]:
    """Calls per function of a trace file (its events: ["call", depth, name, args])."""
    return collections.Counter(line.split('"')[3] for line in trace.read_text().splitlines()
                               if line.startswith('["call"'))


def call_counts(baseline: Path, traced: Path) -> str:
    """A table of the functions called a different number of times."""
    before, after = calls(baseline), calls(traced)
    rows = [f"| `{name}` | {before[name]} | {after[name]} |"
            for name in sorted(set(before) | set(after)) if before[name] != after[name]]
    return "\n".join(["| function | calls in the baseline | calls in this run |",
                      "|---|---|---|", *rows])


def source_diff() -> str:
    done = subprocess.run(["diff", "-u", "zlib/inflate.c", "zlib-regressed/inflate.c"],
                          cwd=CACHE, capture_output=True, text=True)
    return done.stdout.strip()


def failed_cells(out: Path) -> list[Path]:
    """The traces of the cells the summary lists as failing."""
    cells = []
    for line in (out / "summary.md").read_text().splitlines():
        if line.startswith("* `") and "could not run" not in line:
            program, backend, isa = line.split("`")[1].split("/")
            cells.append(Path(program, backend, f"{isa}.trace"))
    return cells


def cell_diffs(out: Path) -> str:
    """For each failing cell of a run: its calls per function that changed and the start of
    its trace's diff from its baseline."""
    diffs = []
    for cell in failed_cells(out):
        baseline, traced = DEMO / "baselines" / cell, out / "traces" / cell
        diffs.append(f"`{cell}`: the functions called a different number of times\n\n"
                     f"{call_counts(baseline, traced)}\n\nand the start of "
                     f"`diff -u {baseline.relative_to(REPO)} <this run's trace>`:\n\n"
                     f"```diff\n{trace_diff(baseline, traced)}\n```")
    return "\n\n".join(diffs) if diffs else "(no failing cell)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--regress", default="riscv64 m68k",
                   help="the ISAs rebuilt with the change (default: riscv64, on Unicorn, "
                        "and m68k, in qemu-m68k's gdb stub)")
    p.add_argument("--workers", type=int, default=2, help="emutrace ci --workers")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ci-zlib.md")
    p.add_argument("--report-only", action="store_true",
                   help="write the report from the last runs' outputs; run nothing")
    args = p.parse_args()
    regress = args.regress.split()
    build = ["bash", "scripts/build_ci_demo.sh"]
    clean_out, regressed_out = CACHE / "run-clean", CACHE / "run-regressed"

    if args.report_only:
        clean_status, regressed_status = (int((out / "status").read_text())
                                          for out in (clean_out, regressed_out))
    else:
        sh(build)
        clean_status = ci(clean_out, args.workers)
        sh(build + ["--regress", " ".join(regress)])
        regressed_status = ci(regressed_out, args.workers)
        sh(build)

    head = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    report = f"""# `emutrace ci` on zlib's own test programs: fifteen ISAs, a regression caught

Command: `python scripts/ci_demo.py --regress "{" ".join(regress)}" --workers {args.workers}`
(from the repository root: it runs `bash scripts/build_ci_demo.sh`, then
`emutrace ci examples/ci/zlib/matrix.toml --workers {args.workers} --unconfined`, for each
build).
Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")};
{platform.machine()}, {os.cpu_count()} CPUs, load average at the end {load}; emutrace {head}

The programs: zlib 1.2.13's `test/example.c`, `test/infcover.c` and `test/minigzip.c` from
Debian's source package, built with Debian's cross compilers (gcc 12, `-O2 -g`, static) for
fifteen ISAs: ten traced on Unicorn, and mips64el, mips64, m68k, sparc64 and ppc64 traced in
qemu-user's gdb stub (`target` in examples/ci/zlib/matrix.toml: their capability tables say
why Unicorn does not run them).  Compared: names and nesting of zlib's and the programs' own
functions (DWARF), from `main` on; baselines: examples/ci/zlib/baselines (the unchanged
build's traces, equal on the fifteen ISAs).

## 1. As Debian ships the source (exit status {clean_status})

{body(clean_out / "summary.md")}

## 2. {" and ".join(regress)} rebuilt with a changed branch (exit status {regressed_status})

The change (scripts/build_ci_demo.sh, REGRESSION): `inflate()` hands a block to
`inflate_fast()` only with 4096 bytes of output space left instead of 258.  Every program's
own output is unchanged (inflate still decodes correctly, one code at a time): only the
calls tell.

```diff
{source_diff()}
```

{body(regressed_out / "summary.md")}

### The diff

{cell_diffs(regressed_out)}
"""
    args.out.write_text(report)
    print(f"ci_demo: {args.out}")
    caught = sorted(failed_cells(regressed_out)) == \
        sorted(Path("infcover", "int3", f"{isa}.trace") for isa in regress)
    return 0 if (clean_status, regressed_status) == (0, 1) and caught else 1


if __name__ == "__main__":
    sys.exit(main())
