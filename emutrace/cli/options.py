"""Option groups and checked option types the subcommands share: uftrace's display filters,
the guest's environment, `-A` argument counts, the backend settings.  Numbers (`--timeout`,
`--max-insns`, `--max-memory`) are checked by emutrace/quantities.py, which the backend
settings use too."""

from __future__ import annotations

import argparse
from typing import Any

from emutrace.discover.demangle import DEFAULT, MODES
from emutrace.errors import UsageError
from emutrace.mechanisms import backend_settings
from emutrace.quantities import count


def add_filter_options(g: argparse._ActionsContainer) -> None:
    """uftrace's display filters, spelled once for every command that shows a call graph
    (`run`, `replay`): -F/--filter, -N/--notrace, -D/--depth."""
    g.add_argument("-F", "--filter", action="append", default=[], metavar="FUNC",
                   help="show only FUNC and what it calls (repeatable)")
    g.add_argument("-N", "--notrace", action="append", default=[], metavar="FUNC",
                   help="hide FUNC and what it calls (repeatable)")
    g.add_argument("-D", "--depth", type=count, metavar="N", help="show N levels at most")


def add_demangle_option(g: argparse._ActionsContainer) -> None:
    """uftrace's `--demangle`, for every command that shows function names
    (discover/demangle.py)."""
    g.add_argument("--demangle", choices=MODES, default=DEFAULT,
                   help="how C++ names are shown and matched by -F/-N/-A/--start: simple "
                        "(the qualified name alone: geo::Shape::area; the default), full "
                        "(c++filt's: geo::Shape::area() const) or no (as mangled)")


def env_assignment(text: str) -> str:
    """`--env NAME=VALUE`: a non-empty NAME without `=` or NUL (execve's rule for envp)."""
    name, eq, value = text.partition("=")
    if not eq or not name or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return text


def env_name(text: str) -> str:
    if not text or "=" in text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a variable name")
    return text


def parse_arg_specs(specs: list[str]) -> dict[str, int]:
    """`-A FUNC@argN`: show N arguments of FUNC (uftrace's spelling of an argument)."""
    out = {}
    for spec in specs:
        func, _, arg = spec.partition("@")
        if not func or not arg.startswith("arg") or not arg[3:].isdigit():
            raise UsageError(f"-A {spec}: expected FUNC@argN, e.g. -A combine9@arg9")
        out[func] = int(arg[3:])
    return out


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    """The backend settings parsed from the command line (their options: backend_settings),
    as keyword arguments for RunConfig or BoardConfig."""
    return {setting.name: getattr(args, setting.name) for setting, _ in backend_settings()}
