"""What each test of the suite costs in CPU seconds, to find where `make test`'s time goes.

CPU time, not wall time: the machine is shared, and a test's wall time moves with the load
while its CPU time moves much less.  A test's CPU is its pytest process's own, its reaped
subprocesses' (qemu-user, `python -m emutrace`) and the commands the warm start ran for it
(tests/conftest.py `WarmStart.cpu_seconds`: those processes are the server's children).

Measure (a pytest plugin; each pytest process appends its tests to DIR/<pid>.tsv):

    SUITE_COST_DIR=/tmp/cost python -m pytest -n auto -p tools.suite_cost

Report (the files, then the tests, dearest first):

    python tools/suite_cost.py /tmp/cost [--top N]
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import sys
from pathlib import Path
from typing import Any

FIELDS = ("test", "cpu_seconds", "wall_seconds")


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    conftest = sys.modules.get("tests.conftest")
    warm = getattr(getattr(conftest, "WarmStart", None), "cpu_seconds", 0.0)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + warm


try:
    import time

    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        where = os.environ.get("SUITE_COST_DIR")
        cpu, wall = _cpu_now(), time.monotonic()
        yield
        if where:
            Path(where).mkdir(parents=True, exist_ok=True)
            with open(Path(where) / f"{os.getpid()}.tsv", "a") as out:
                out.write(f"{item.nodeid}\t{_cpu_now() - cpu:.3f}\t"
                          f"{time.monotonic() - wall:.3f}\n")
except ImportError:  # the report needs no pytest
    pass


def read(where: Path) -> dict[str, float]:
    costs: dict[str, float] = {}
    for path in sorted(where.glob("*.tsv")):
        for line in path.read_text().splitlines():
            test, cpu, _wall = line.split("\t")
            costs[test] = costs.get(test, 0.0) + float(cpu)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the suite's CPU seconds per file and test")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    costs = read(args.dir)
    if not costs:
        print(f"no measurements in {args.dir}", file=sys.stderr)
        return 66
    files: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for test, cpu in costs.items():
        files[test.split("::")[0]] += cpu
        counts[test.split("::")[0]] += 1
    total = sum(costs.values())
    print(f"{len(costs)} tests, {total:.0f} CPU s ({total / 60:.1f} min)\n")
    print("CPU s   share  tests  file")
    for name, cpu in files.most_common(args.top):
        print(f"{cpu:7.1f} {100 * cpu / total:5.1f}% {counts[name]:6d}  {name}")
    print("\nCPU s  test")
    for test, cpu in sorted(costs.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{cpu:6.2f}  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
