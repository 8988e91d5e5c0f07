"""`emutrace report -d DIR`: per function of a recording, calls and the guest instructions
spent in it (total and self), over every task (or those of `--tid`), as uftrace's
`report`."""

from __future__ import annotations

import argparse

from emutrace.cli.viewing import add_data_option, add_task_option, open_data
from emutrace.errors import UsageError
from emutrace.trace.report import SORT_KEYS, function_stats, report_lines, sort_stats


class ReportCommand:
    name = "report"
    help = "per function of a recording: calls, total and self time (guest instructions)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        add_data_option(p)
        p.add_argument("-s", "--sort", metavar="KEY[,KEY...]",
                       help=f"sort by these keys, first one first ({', '.join(SORT_KEYS)}; "
                            "default total, or total_avg/self_avg with --avg-total/--avg-self)")
        add_task_option(p)
        avg = p.add_mutually_exclusive_group()
        avg.add_argument("--avg-total", action="store_true",
                         help="show average, min and max total time per call")
        avg.add_argument("--avg-self", action="store_true",
                         help="show average, min and max self time per call")

    def __call__(self, args: argparse.Namespace) -> int:
        avg = "total" if args.avg_total else "self" if args.avg_self else None
        default = f"{avg}_avg" if avg else "total"
        keys = [k for k in (args.sort or default).split(",") if k]
        bad = [k for k in keys if k not in SORT_KEYS]
        if bad or not keys:
            raise UsageError(f"-s {args.sort}: sort keys are {', '.join(SORT_KEYS)}")
        records, symbolize, *_rest = open_data(args.data, args.tid, args.demangle)
        stats = function_stats(records, symbolize)
        for line in report_lines(sort_stats(stats, keys), avg):
            print(line)
        return 0
