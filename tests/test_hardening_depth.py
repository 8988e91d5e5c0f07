"""Deep recursion under int3 costs emutrace memory linear in the depth
(the trace text, O(d^2) characters of indentation, is streamed, never built whole), and the
crash report's call stack line stays short at any depth."""

from __future__ import annotations

import subprocess
import sys

from emutrace.cli.run_report import STACK_SHOWN, bounded_names

from .conftest import ENV, REPO, bin_path

MEASURE = ("import resource, sys\n"
           "from emutrace.cli.main import main\n"
           "code = main(sys.argv[1:])\n"
           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code, file=sys.stderr)\n")


def _max_rss_kib(depth: int) -> int:
    got = subprocess.run([sys.executable, "-c", MEASURE, "run", "-o", "/dev/null",
                          str(bin_path("x86_64", "calls")), "deep", str(depth)],
                         env=ENV, cwd=REPO, capture_output=True, timeout=300)
    rss, code = got.stderr.decode().split()[-2:]
    assert code == "0", got.stderr
    return int(rss)


def test_memory_linear_in_depth() -> None:
    small, large = _max_rss_kib(2000), _max_rss_kib(12000)
    # quadratic (before): ~70 MB at 2000 and ~600 MB at 12000; linear: a few MB more
    assert large - small < 60_000, (small, large)


def test_call_stack_line_is_bounded() -> None:
    names = [f"f{i}" for i in range(30_000)]
    shown = bounded_names(names)
    assert len(shown) == 2 * STACK_SHOWN + 1
    assert shown[0] == "f0" and shown[-1] == "f29999"
    assert shown[STACK_SHOWN] == f"... {30_000 - 2 * STACK_SHOWN} frames ..."
    assert bounded_names(names[:5]) == names[:5]
