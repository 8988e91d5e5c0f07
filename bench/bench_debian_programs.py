"""Debian's own programs traced with the default engine: `emutrace record` and
`emutrace run -o FILE` against the untraced run (`run --backend none`), side by side.

    python bench/bench_debian_programs.py [--isa aarch64,arm,ppc64le,s390x,i386]
                                          [--programs sort,sed,...] [--repeat N]
                                          [--out bench/results/debian-programs.md]
                                          [--update]

--update keeps the rows of the result file's JSON that this run does not measure (each
row says which run measured it: its three variants always come from one run, side by side).

Each ISA's root is made by `emutrace rootfs` from Debian's packages (PACKAGES) into
.cache/bench-roots/<isa> the first time (a set-up step: the only network use, Debian's
archive through apt), with the inputs written into it: a 1 MB text (make_sort_input.py's
generator, 56,000 lines), a 5.5 MB one for the threaded sort (300,000 lines: GNU sort
splits so large an input among its threads), a small SQL script.  Every
command runs from inside the root with relative paths (as tests/test_debian_programs.py
does), as a whole `python -m emutrace` process timed from outside (start-up, loading and
writing the trace included; CPU seconds of the process and its children, and wall
seconds); the variants of one cell run interleaved (none, record, run,
none, …) and each time is the median of --repeat.  The guest's stdout of every variant is
compared with the untraced run's (a difference is marked in the table).

Discovery's on-disk store (discover/store.py, discover/module_store.py): each cell's record
and run -o variants get a store directory of their own, empty at the start
(XDG_CACHE_HOME, unset for the guest), so each variant's first run is cold (it decodes what
it reaches and writes the store) and the later ones are warm; the table gives the median
(warm with --repeat 3) and the first run's ratio ("cold").

Targets: record <= 3x untraced, run -o <= 5x.

Another checkout (a clean clone of a commit): `PYTHONPATH=CLONE python CLONE/bench/...`.
The script measures, and writes its results into, the emutrace that Python imports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, machine_info
from make_sort_input import lines

ISAS = ("aarch64", "arm", "ppc64le", "s390x", "i386")
PACKAGES = ("coreutils", "sed", "gzip", "python3-minimal", "sqlite3", "file", "dash")
ROOTS = ROOT / ".cache" / "bench-roots"
DEBS = ROOT / ".cache" / "bench-debs"
SQL = """create table t(n integer, s text);
with recursive c(x) as (select 1 union all select x + 1 from c where x < 2000)
insert into t select x, printf('row %d', x) from c;
create index t_s on t(s);
select count(*), sum(n), max(s) from t where n % 3 = 0;
"""
# name -> (argv inside the root, environment additions)
PROGRAMS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "sort": (("./usr/bin/sort", "bench-input.txt"), {}),
    "sed": (("./bin/sed", "s/a/b/g", "bench-input.txt"), {}),
    "gzip": (("./bin/gzip", "-c", "bench-input.txt"), {}),
    "python3": (("./usr/bin/python3", "-c", "print(1)"), {}),
    "sqlite3": (("./usr/bin/sqlite3", ":memory:", ".read bench.sql"), {}),
    "file": (("./usr/bin/file", "usr/bin/sort", "bin/sed", "bench-input.txt", "bench.sql"),
             {}),
    # four threads: GNU sort sorts a large input with nproc threads (nproc honours
    # OMP_NUM_THREADS)
    "sort-4-threads": (("./usr/bin/sort", "--parallel=4", "-S", "256M", "bench-big.txt"),
                       {"OMP_NUM_THREADS": "4"}),
    # fork and exec: the shell forks twice and execs sort and gzip in a pipe
    "dash-pipe": (("./bin/dash", "-c", "./usr/bin/sort bench-input.txt | ./bin/gzip -c"), {}),
}
VARIANTS = ("none", "record", "run")


def ensure_root(isa: str) -> Path:
    root = ROOTS / isa
    marker = root / ".emutrace-rootfs"
    have = marker.read_text() if marker.exists() else ""
    if not all(f"{p}:" in have for p in PACKAGES):
        subprocess.run([sys.executable, "-m", "emutrace", "rootfs", "--arch", isa,
                        "-o", str(root), "--cache", str(DEBS / isa), *PACKAGES], check=True)
    inputs = {"bench-input.txt": lines(56_000, seed=7), "bench-big.txt": lines(300_000, seed=7)}
    for name, text in inputs.items():
        path = root / name
        if not path.exists():
            path.write_text("\n".join(text) + "\n")
    (root / "bench.sql").write_text(SQL)
    return root


def command(variant: str, argv: tuple[str, ...], env: dict[str, str],
            scratch: Path) -> list[str]:
    base = [sys.executable, "-m", "emutrace"]
    envs = [f"--env={k}={v}" for k, v in env.items()] + ["--unset-env", "XDG_CACHE_HOME"]
    if variant == "none":
        return [*base, "run", "--backend", "none", "--root", ".", *envs, *argv]
    if variant == "record":
        return [*base, "record", "-d", str(scratch / "rec.d"), "--root", ".", *envs, *argv]
    return [*base, "run", "-o", str(scratch / "trace.txt"), "--root", ".", *envs, *argv]


def timed(cmd: list[str], cwd: Path, store: Path) -> tuple[float, float, int, bytes]:
    """(wall seconds, CPU seconds (user + system of the process and its children), exit
    status, stdout); store: discovery's store directory (XDG_CACHE_HOME)."""
    env = {k: v for k, v in os.environ.items() if k != "EMUTRACE_CACHE"}
    env["XDG_CACHE_HOME"] = str(store)
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, proc.returncode, out.read()


def trace_bytes(scratch: Path) -> int:
    return sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())


def measure(isa: str, name: str, repeat: int) -> dict[str, object]:
    root = ensure_root(isa)
    argv, env = PROGRAMS[name]
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    same, codes, sizes, threads = True, {}, {}, 0
    reference: bytes | None = None
    stores = Path(tempfile.mkdtemp(prefix="emutrace-bench-store-"))  # one per variant
    for _ in range(repeat):
        for variant in VARIANTS:
            scratch = Path(tempfile.mkdtemp(prefix="emutrace-bench-"))
            try:
                wall, cpu, code, out = timed(command(variant, argv, env, scratch), root,
                                             stores / variant)
                sizes[variant] = trace_bytes(scratch)
                tasks = scratch / "rec.d" / "task.txt"
                if tasks.exists():  # the threads the recording holds
                    threads = tasks.read_text().count("TASK ")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            times[variant].append(cpu)
            walls[variant].append(wall)
            codes[variant] = code
            if reference is None:
                reference = out
            same = same and out == reference
    shutil.rmtree(stores, ignore_errors=True)
    med = {v: statistics.median(t) for v, t in times.items()}
    return {"isa": isa, "program": name, "seconds": med, "times": times, "walls": walls,
            "record_x": med["record"] / med["none"], "run_x": med["run"] / med["none"],
            "record_cold_x": times["record"][0] / med["none"],
            "run_cold_x": times["run"][0] / med["none"], "store": "fresh per variant",
            "codes": codes, "same_stdout": same, "trace_bytes": sizes, "threads": threads}


def _run_line(info: dict[str, object]) -> str:
    return (f"Date: {info['date']}; load at start {info['loadavg_at_start']}; "
            f"emutrace {info['emutrace_git']}; unicorn {info['unicorn']}.")


def _runs(rows: list[dict[str, object]]) -> list[str]:
    """The header lines naming the run(s) the rows come from."""
    runs: dict[str, tuple[dict[str, object], list[str]]] = {}
    for r in rows:
        info = r["run"]
        assert isinstance(info, dict)
        key = f"{info['date']} {info['command']}"
        runs.setdefault(key, (info, []))[1].append(f"{r['isa']} {r['program']}")
    if len(runs) == 1:
        (info, _names), = runs.values()
        return [f"Command: `{info['command']}`  ", _run_line(info)]
    out = ["Rows from more than one run (each row's variants side by side in one run):", ""]
    for info, names in runs.values():
        out.append(f"* `{info['command']}`: {', '.join(names)}.  {_run_line(info)}")
    return out


def markdown(rows: list[dict[str, object]]) -> str:
    out = ["# Debian programs: record and run -o against the untraced run", "",
           *_runs(rows), "",
           "Targets: record <= 3x untraced, run -o <= 5x.  Times are medians of whole "
           "processes' CPU seconds (user + system, the process and its children: the "
           "machine is shared, and CPU time moves less with its load than wall time; the "
           "wall times are in the JSON).", "",
           "Discovery store: rows with a \"cold\" ratio ran each traced variant with a store "
           "of its own, empty at the start: the first run is cold (its ratio: \"cold\"), the "
           "later ones warm, so the median of 3 is a warm run; rows without one (\"–\") were "
           "measured when a dynamic program's modules had no store (every run cold).  The "
           "targets column reads the medians.", "",
           "| ISA | program | threads | untraced CPU s | record CPU s | run -o CPU s | record × "
           "| run -o × | record × cold | run -o × cold | trace MB (run -o) | exit "
           "| stdout same | targets |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sec = r["seconds"]
        assert isinstance(sec, dict)
        rec_x, run_x = float(r["record_x"]), float(r["run_x"])  # type: ignore[arg-type]
        sizes = r["trace_bytes"]
        assert isinstance(sizes, dict)
        codes = r["codes"]
        assert isinstance(codes, dict)
        ok = rec_x <= 3 and run_x <= 5 and r["same_stdout"] and len(set(codes.values())) == 1
        cold = [f"{float(r[k]):.2f}" if k in r else "–"  # type: ignore[arg-type]
                for k in ("record_cold_x", "run_cold_x")]
        out.append(f"| {r['isa']} | {r['program']} | {r['threads']} | {sec['none']:.2f} "
                   f"| {sec['record']:.2f} "
                   f"| {sec['run']:.2f} | {rec_x:.2f} | {run_x:.2f} | {cold[0]} | {cold[1]} "
                   f"| {sizes['run'] / 1e6:.0f} | {codes['none']} "
                   f"| {'yes' if r['same_stdout'] else 'NO'} | {'met' if ok else 'MISSED'} |")
    worst_rec = max(float(r["record_x"]) for r in rows)  # type: ignore[arg-type]
    worst_run = max(float(r["run_x"]) for r in rows)  # type: ignore[arg-type]
    out += ["", f"Worst: record {worst_rec:.2f}×, run -o {worst_run:.2f}×.", ""]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isa", default=",".join(ISAS))
    p.add_argument("--programs", default=",".join(PROGRAMS))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "debian-programs.md"))
    p.add_argument("--update", action="store_true",
                   help="keep the rows of --out's JSON this run does not measure")
    args = p.parse_args()
    info = machine_info("python bench/bench_debian_programs.py " + " ".join(sys.argv[1:]))
    kept: list[dict[str, object]] = []
    saved = Path(args.out).with_suffix(".json")
    if args.update and saved.exists():
        old = json.loads(saved.read_text())
        kept = [{**r, "run": r.get("run", old["machine"])} for r in old["rows"]]
    rows: list[dict[str, object]] = []
    order = {(isa, name): i for i, (isa, name) in
             enumerate((isa, name) for isa in ISAS for name in PROGRAMS)}
    for isa in args.isa.split(","):
        for name in args.programs.split(","):
            row = {**measure(isa, name, args.repeat), "run": info}
            rows.append(row)
            print(f"{isa} {name}: record {row['record_x']:.2f}x, run -o {row['run_x']:.2f}x",
                  flush=True)
            # after every row: a run cut short keeps the rows it measured
            done = {(r["isa"], r["program"]) for r in rows}
            table = sorted([r for r in kept if (r["isa"], r["program"]) not in done] + rows,
                           key=lambda r: order.get((str(r["isa"]), str(r["program"])), 0))
            Path(args.out).write_text(markdown(table))
            saved.write_text(json.dumps({"machine": info, "rows": table}, indent=1,
                                        default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
