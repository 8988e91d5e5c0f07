"""`emutrace graph -d DIR [FUNC]`: a recording's calls merged by call path, under FUNC or the
whole program, in uftrace's `graph` layout (times in guest instructions); every task's calls
(or those of `--tid`) in one graph, as uftrace's."""

from __future__ import annotations

import argparse

from emutrace.cli.viewing import add_data_option, add_task_option, open_data
from emutrace.discover.demangle import demangled
from emutrace.trace.callgraph import call_graph, graph_lines


class GraphCommand:
    name = "graph"
    help = "a recording's calls merged by call path, under FUNC or the whole program"

    def configure(self, p: argparse.ArgumentParser) -> None:
        add_data_option(p)
        add_task_option(p)
        p.add_argument("func", nargs="?", metavar="FUNC",
                       help="the function whose calls are merged (default: the program)")

    def __call__(self, args: argparse.Namespace) -> int:
        records, symbolize, program, *_rest = open_data(args.data, args.tid, args.demangle)
        func = demangled(args.func, args.demangle) if args.func else None  # as -F names it
        graph = call_graph(records, symbolize, func, program)
        for line in graph_lines(graph, func):
            print(line)
        return 0
