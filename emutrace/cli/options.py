"""Option groups and checked option types the subcommands share: uftrace's display filters,
the guest's environment, `-A` argument counts, the backend settings.  Numbers (`--timeout`,
`--max-insns`, `--max-memory`) are checked by emutrace/quantities.py, which the backend
settings use too."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from emutrace.discover.argformats import ArgFormats, parse_formats
from emutrace.discover.demangle import DEFAULT, MODES
from emutrace.errors import UsageError
from emutrace.mechanisms import backend_settings
from emutrace.quantities import count
from emutrace.trace.filters import MATCH_TYPES, Filters, no_libcall_rule, parse_rule


class _Spec(argparse.Action):
    """A filter option's value, kept both under its own name (`args.filter`...) and, with
    the option, in `args.filter_specs` in command-line order: for one function the later
    option wins (trace/filters.py)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or ()), values])
        namespace.filter_specs = [*(getattr(namespace, "filter_specs", None) or ()),
                                  (self.option_strings[0], values)]


def add_filter_options(g: argparse._ActionsContainer) -> None:
    """uftrace's filters, spelled once for every command that shows a call graph (`run`,
    `replay`): -F/--filter, -N/--notrace, -T/--trigger, -H/--hide, -C/--caller-filter,
    -D/--depth, --max-stack, --match, --trace=on|off (trace/filters.py has their
    meaning)."""
    g.add_argument("-F", "--filter", action=_Spec, default=[], metavar="FUNC",
                   help="show only FUNC and what it calls (repeatable; FUNC is a name, a "
                        "regex when it holds one of .?*+-^$|()[]{}, FUNC@plt its PLT "
                        "entry; FUNC@depth=N: N levels from it)")
    g.add_argument("-N", "--notrace", action=_Spec, default=[], metavar="FUNC",
                   help="hide FUNC and what it calls (repeatable; for one function the "
                        "later of -F and -N wins)")
    g.add_argument("-T", "--trigger", action=_Spec, default=[], metavar="FUNC@ACT[,ACT]",
                   help="actions at FUNC's entry: depth=N, trace_on, trace_off, filter, "
                        "notrace, hide (repeatable)")
    g.add_argument("-H", "--hide", action=_Spec, default=[], metavar="FUNC",
                   help="hide FUNC's own lines, not what it calls (repeatable)")
    g.add_argument("-C", "--caller-filter", action=_Spec, default=[], metavar="FUNC",
                   help="show only FUNC and the calls that lead to it (repeatable)")
    g.add_argument("-D", "--depth", type=depth_count, metavar="N",
                   help="show N levels at most (from the top, and from each -F match)")
    g.add_argument("--max-stack", type=depth_count, metavar="N",
                   help="leave out calls N or more levels deep in the call stack, as if "
                        "not recorded (uftrace's record keeps N levels; 1 to 1023)")
    g.add_argument("--no-libcall", action="store_true",
                   help="leave out the PLT entries' own lines (FUNC@plt), as uftrace's "
                        "replay leaves out library calls; what they lead to moves up")
    g.add_argument("--match", choices=MATCH_TYPES, default="regex",
                   help="how a pattern with a metacharacter matches: regex (POSIX "
                        "extended, anywhere in the name; the default) or glob (the whole "
                        "name)")
    g.add_argument("--trace", choices=("on", "off"), default="on",
                   help="tracing at the start: off shows nothing until a -T FUNC@trace_on")
    g.add_argument("--disable", dest="trace", action="store_const", const="off",
                   help="as --trace=off (uftrace 0.13's spelling)")


def depth_count(text: str) -> int:
    """-D N: 1 or more (uftrace's limit: below 1024, its depth field)."""
    n = count(text)
    if not 0 < n < 1024:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a depth of 1 to 1023")
    return n


def filter_rules(args: argparse.Namespace, shown: Callable[[str], str],
                 names: Iterable[str] | None) -> Filters:
    """The command line's filter options as rules (trace/filters.py): each pattern, in
    command-line order; `shown` turns an exact name into the name the trace shows
    (demangled; a dynamic program's `lib:func`); `names`, the functions shown, decides
    whether an -F matched any.  A spec may list several, `;` between them (uftrace's
    `-F 'fib;fact'`)."""
    rules = [parse_rule(option, one, args.match, shown)
             for option, spec in getattr(args, "filter_specs", None) or ()
             for one in spec.split(";")]  # uftrace's list separator
    if args.no_libcall:
        rules.append(no_libcall_rule())
    return Filters(rules, args.depth, args.trace == "on", names, args.max_stack)


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
    """`-A FUNC@argN`: show N arguments of FUNC (the first N, typed by its prototype).
    A spec with formats or several values is `parse_arg_formats`'s."""
    out = {}
    for spec in specs:
        func, _, arg = spec.partition("@")
        if _with_formats(arg):
            parse_formats("-A", spec)  # (checked here too: a bad one is refused at once)
            continue
        if not func or not arg.startswith("arg") or not arg[3:].isdigit():
            raise UsageError(f"-A {spec}: expected FUNC@argN, e.g. -A combine9@arg9, or "
                             f"uftrace's FUNC@arg1/i32,arg2/x64,fparg1/f64")
        out[func] = int(arg[3:])
    return out


def _with_formats(values: str) -> bool:
    return "/" in values or "," in values or values.startswith(("fparg", "retval"))


def parse_arg_formats(specs: list[str], retspecs: list[str]) -> dict[str, ArgFormats]:
    """`-A FUNC@arg1/i32,arg2/x8,fparg1/f64` and `-R FUNC@retval/f64`: uftrace's formats
    (discover/argformats.py), merged per function in command-line order."""
    out: dict[str, ArgFormats] = {}
    for option, spec in [*(("-A", s) for s in specs), *(("-R", s) for s in retspecs)]:
        if option == "-A" and not _with_formats(spec.partition("@")[2]):
            continue  # FUNC@argN: a count (parse_arg_specs)
        func, formats = parse_formats(option, spec)
        out[func] = out[func].merged(formats) if func in out else formats
    return out


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    """The backend settings parsed from the command line (their options: backend_settings),
    as keyword arguments for RunConfig or BoardConfig."""
    return {setting.name: getattr(args, setting.name) for setting, _ in backend_settings()}
