"""Function patterns of the command line (`-F`, `-N`, `-T`, `-H`, `-C`, `-A`, `--start`)
that name no function: a typo would show a trace filtered by nothing, or nothing at all,
without a word, so each one is a warning line (the run or the replay goes on)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from emutrace.discover.demangle import demangled, shown_by
from emutrace.trace.filters import OPTION_ACTIONS, parse_rule


def unmatched(patterns: Iterable[tuple[str, str]], names: Iterable[str], mode: str,
              where: str, resolve: Callable[[str], str] = lambda spec: spec,
              match: str = "regex") -> list[str]:
    """A warning for each (option, pattern) naming none of `names` (symbol names, as
    spelled in the symbol table).  A filter option's pattern (trace/filters.py) is matched
    as the filters match it, against the names the trace shows (`--demangle`'s mode);
    `-A` and `--start` name one function, shown or as spelled; `resolve` first turns a
    dynamic program's `lib:func` into the name shown."""
    show = shown_by(mode)
    spelled = set(names)
    known = spelled | {show(name) for name in spelled}
    shown = {show(name) for name in spelled}
    out = []
    for option, spec in patterns:
        if option in OPTION_ACTIONS:
            each = [parse_rule(option, one, match,
                               lambda n: demangled(resolve(n), mode)).pattern
                    for one in spec.split(";")]
            if all(any(p.matches(name) for name in shown) for p in each):
                continue
        else:
            name = resolve(spec)
            if name in known or demangled(name, mode) in known:
                continue
        tail = ("the trace starts at the program's entry point" if option == "--start" else
                "it matches nothing")
        bare = "" if spelled else " (it has no symbols)"
        out.append(f"{option} {spec}: no function of that name in {where}{bare}; {tail}")
    return out
