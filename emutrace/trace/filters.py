"""uftrace's function filters and triggers, as its `replay` applies them (uftrace 0.13:
utils/filter.c reads the options, utils/fstack.c `fstack_entry`/`fstack_exit` apply them).

Patterns (`-F`, `-N`, `-T`, `-H`, `-C`): a pattern holding none of `.?*+-^$|()[]{}` names one
function exactly; otherwise it is a POSIX extended regular expression searched anywhere in
the name (`fi.` matches `__libc_init_first`; anchor it: `^fib$`), or with `--match glob` a
shell glob over the whole name.  Names are matched as the trace shows them (`--demangle`:
`geo::level1`); a pattern equal to a name matches it too (`--demangle=full`'s
`'geo::level2(int)'`); a name written mangled, or a dynamic program's `lib:func`, is turned
into the name shown first and matched exactly.  A spec may carry actions
after `@` (`fib@depth=2,hide`); the word `plt` there keeps the PLT entries only, matching
the pattern against an entry's name without its `@plt` (`-F strcmp@plt` is `strcmp@plt`).

Every spec is applied in command-line order to every function it matches, so for one
function a later option wins over an earlier one (`-N f -F f` shows f).  Each function's
merged trigger says: filter in (`-F`, `@filter`) or out (`-N`, `@notrace`), a depth
(`@depth=N`), hide the function alone (`-H`, `@hide`), turn tracing on or off (`@trace_on`,
`@trace_off`), a caller filter (`-C`).

Applied per task as a stack (`FilterState`), uftrace's rules in its order: calls at
`--max-stack` levels or deeper are as if not recorded; inside a filtered-out function
nothing is shown; a filtered-in function opens the filter and restarts
the depth budget at `-D` (so each nested match counts its own `-D` levels); when some `-F`
matched a function of the program, nothing outside a filtered-in function is shown; a depth
trigger sets the budget; tracing off (`--trace=off`, `@trace_off`) shows nothing until
`@trace_on`; a function is shown while the budget lasts and it is not hidden; each shown
function spends one level of the budget for what it calls.  Lines are indented by the shown
functions open around them; after tracing was turned off and on, by the true call depth of
the first function shown again (uftrace's `display_depth`)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from emutrace.errors import UsageError
from emutrace.trace.events import Entry, Record

MATCH_TYPES = ("regex", "glob")
_REGEX_CHARS = frozenset(".?*+-^$|()[]{}")
_PLT = "@plt"

IN, OUT = "in", "out"  # a trigger's filter mode


@dataclass(frozen=True)
class Trigger:
    """What the options say about one function (uftrace's `struct uftrace_trigger`)."""

    mode: str | None = None  # IN (-F), OUT (-N) or None
    depth: int | None = None  # @depth=N
    hide: bool = False  # -H, @hide: the function's own lines only
    trace: bool | None = None  # @trace_on (True) / @trace_off (False)
    caller: bool = False  # -C

    def merged(self, later: Trigger) -> Trigger:
        """This trigger with a later option's applied over it (utils/filter.c
        update_trigger: a later mode, depth or trace switch replaces an earlier one)."""
        return Trigger(mode=later.mode if later.mode is not None else self.mode,
                       depth=later.depth if later.depth is not None else self.depth,
                       hide=self.hide or later.hide,
                       trace=later.trace if later.trace is not None else self.trace,
                       caller=self.caller or later.caller)


NO_TRIGGER = Trigger()


@dataclass(frozen=True)
class Pattern:
    """One spec's function pattern (module docstring)."""

    text: str
    kind: str  # "simple", "regex" or "glob"
    plt: bool = False  # @plt: PLT entries only, matched without their "@plt"
    regex: re.Pattern[str] | None = field(default=None, compare=False)

    def matches(self, name: str) -> bool:
        if self.plt:
            if not name.endswith(_PLT):
                return False
            name = name[:-len(_PLT)]
        if name == self.text:  # (a name spelled exactly, whatever it holds)
            return True
        if self.kind == "simple":
            return False
        if self.kind == "glob":
            return fnmatch.fnmatchcase(name, self.text)
        assert self.regex is not None
        return self.regex.search(name) is not None


def compile_pattern(text: str, match: str = "regex", plt: bool = False,
                    option: str = "-F") -> Pattern:
    """`text` as uftrace reads a pattern (utils/filter.c init_filter_pattern): exact unless
    it holds a regex metacharacter, then `match`'s kind.  A full demangled `operator ...`
    name stays exact, as uftrace keeps it.  A regex that does not compile is a usage error
    (uftrace warns and matches it exactly)."""
    if not text:
        raise UsageError(f"{option}: an empty function pattern")
    if match not in MATCH_TYPES:
        raise UsageError(f"--match {match}: expected one of {', '.join(MATCH_TYPES)}")
    if not _REGEX_CHARS.intersection(text) or text.startswith("operator "):
        return Pattern(text, "simple", plt)
    if match == "glob":
        return Pattern(text, "glob", plt)
    try:
        # POSIX ERE as Python's re reads it: the same for the patterns function names need
        # (classes, alternation, anchors, repetition); no backreferences in an ERE
        return Pattern(text, "regex", plt, re.compile(text))
    except re.error as e:
        raise UsageError(f"{option} {text}: not a regular expression ({e})") from None


@dataclass(frozen=True)
class Rule:
    """One spec of the command line: a pattern and the trigger it gives what it matches."""

    option: str
    spec: str
    pattern: Pattern
    trigger: Trigger


# the actions each option takes after "@" (utils/filter.c actions[] and their compat flags)
_FILTER_ACTIONS = ("filter", "notrace", "depth", "hide")
_TRIGGER_ACTIONS = ("filter", "notrace", "depth", "hide", "trace_on", "trace_off")
OPTION_ACTIONS = {"-F": _FILTER_ACTIONS, "-N": _FILTER_ACTIONS, "-T": _TRIGGER_ACTIONS,
                  "-H": (), "-C": ()}
_BASE = {"-F": Trigger(mode=IN), "-N": Trigger(mode=OUT), "-T": NO_TRIGGER,
         "-H": Trigger(hide=True), "-C": Trigger(caller=True)}


def parse_rule(option: str, spec: str, match: str = "regex",
               demangle: Callable[[str], str] = lambda name: name) -> Rule:
    """`option spec` (`-F fib@depth=2`, `-T main@trace_on`...) as a rule; `demangle` turns
    an exact name written mangled into the name shown.  Anything uftrace would ignore or
    take for a module name emutrace cannot honour is a usage error."""
    name, at, actions = spec.partition("@")
    if option == "-T" and not actions:
        raise UsageError(f"-T {spec}: expected FUNC@ACTION[,ACTION...], e.g. fib@depth=2")
    trigger, plt = _BASE[option], False
    allowed = OPTION_ACTIONS[option]
    for action in actions.split(",") if at else ():
        word, eq, value = action.partition("=")
        word = word.lower().replace("-", "_")
        if word == "traceon":
            word = "trace_on"
        elif word == "traceoff":
            word = "trace_off"
        if word == "plt" and not eq:
            plt = True
            continue
        if word not in allowed or (word == "depth") != bool(eq):
            takes = ", ".join(a + ("=N" if a == "depth" else "") for a in allowed)
            raise UsageError(f"{option} {spec}: {action!r} is not an action {option} takes "
                             f"({takes or 'none'}; or plt)")
        if word == "depth":
            if not value.isdecimal() or not 0 < int(value) < 1024:
                raise UsageError(f"{option} {spec}: depth={value}: expected 1 to 1023")
            trigger = replace(trigger, depth=int(value))
        elif word in ("filter", "notrace"):
            trigger = replace(trigger, mode=IN if word == "filter" else OUT)
        elif word == "hide":
            trigger = replace(trigger, hide=True)
        else:
            trigger = replace(trigger, trace=word == "trace_on")
    exact = demangle(name) if name else name
    if exact != name:  # a mangled name, a dynamic program's `lib:func`: one function
        return Rule(option, spec, Pattern(exact, "simple", plt), trigger)
    return Rule(option, spec, compile_pattern(name, match, plt, option), trigger)


class Filters:
    """The rules of one command line, resolved per function name (memoised)."""

    def __init__(self, rules: Iterable[Rule] = (), depth: int | None = None,
                 trace: bool = True, names: Iterable[str] | None = None,
                 max_stack: int | None = None) -> None:
        self.rules = tuple(rules)
        self.depth = depth  # -D: the budget at the top and at each filtered-in function
        self.trace = trace  # tracing on at the start (--trace=off: False)
        # --max-stack: calls this deep or deeper are as if not recorded (uftrace's record
        # keeps max_stack levels of the call stack)
        self.max_stack = max_stack
        self._memo: dict[str, Trigger] = {}
        # uftrace's filter mode "in": some -F (or @filter) matched a function; a pattern
        # that matches nothing filters nothing (names None: not known, any -F counts)
        wanted = [r for r in self.rules if r.trigger.mode == IN]
        known = None if names is None else list(names)
        self.filter_in = bool(wanted) and (known is None or any(
            r.pattern.matches(n) for r in wanted for n in known))
        self.callers = any(r.trigger.caller for r in self.rules)

    @classmethod
    def of_names(cls, filters: Iterable[str] = (), notrace: Iterable[str] = (),
                 depth: int | None = None) -> Filters:
        """Exact names: -F names, then -N names (what a `ReplayOptions` without rules
        holds)."""
        rules = [Rule(opt, n, Pattern(n, "simple"), _BASE[opt])
                 for opt, names in (("-F", filters), ("-N", notrace)) for n in names]
        return cls(rules, depth)

    def trigger(self, name: str) -> Trigger:
        got = self._memo.get(name)
        if got is None:
            got = NO_TRIGGER
            for rule in self.rules:
                if rule.pattern.matches(name):
                    got = got.merged(rule.trigger)
            self._memo[name] = got
        return got

    @property
    def plain(self) -> bool:
        """Only what native/replaytext.c applies itself: -F and -N modes and -D, tracing on
        from the start, no per-function depth, hiding or switching, no --max-stack."""
        return self.trace and self.max_stack is None and not any(
            r.trigger.depth is not None or r.trigger.hide or r.trigger.trace is not None
            or r.trigger.caller for r in self.rules)


def no_libcall_rule() -> Rule:
    """`--no-libcall`: the PLT entries' own lines left out (uftrace's replay skips a PLT
    function's records; what the entry leads to shows in its place, as with -H)."""
    return Rule("--no-libcall", "", Pattern(_PLT, "regex", regex=re.compile(r"@plt$")),
                Trigger(hide=True))


class TraceSwitch:
    """uftrace's `fstack_enabled`: one for every task of a replay."""

    def __init__(self, on: bool = True) -> None:
        self.on = on


_FILTERED, _NOTRACE, _NORECORD = 1, 2, 4


class FilterState:
    """One task's filter stack (module docstring): `enter` and `leave` per record, each
    giving the indentation of the line to print, or None for no line."""

    __slots__ = ("filters", "switch", "flags", "saved", "budget", "in_count", "out_count",
                 "display", "display_set", "unmerge")

    def __init__(self, filters: Filters, switch: TraceSwitch | None = None) -> None:
        self.filters = filters
        self.switch = switch if switch is not None else TraceSwitch(filters.trace)
        self.flags: list[int] = []  # per open frame
        self.saved: list[int | None] = []  # the budget before each open frame
        self.budget: int | None = filters.depth  # None: no limit
        self.in_count = self.out_count = 0
        self.display = 0
        self.display_set = self.switch.on
        # the last `enter` showed no line, yet its function ends the line of a shown
        # function entered just before as `name() {`, not as the leaf `name();` (uftrace's
        # fstack_skip stops at a depth or trace trigger)
        self.unmerge = False

    def enter(self, name: str, visible: bool = True) -> int | None:
        """A function entered; `visible` False: a line emutrace holds back whatever the
        filters say (before `--start`)."""
        index = len(self.flags)  # the call depth of this frame
        self.unmerge = False
        self.saved.append(self.budget)
        flags = 0
        self.flags.append(0)
        limit = self.filters.max_stack
        if self.out_count or (limit is not None and index >= limit):
            self.flags[-1] = _NORECORD
            return None
        trigger = self.filters.trigger(name)
        if trigger.mode == IN:
            self.in_count += 1
            flags = _FILTERED
            self.budget = self.filters.depth
        elif trigger.mode == OUT:
            self.out_count += 1
            self.flags[-1] = _NOTRACE | _NORECORD
            return None
        elif self.filters.filter_in and not self.in_count:
            self.flags[-1] = _NORECORD
            return None
        self.unmerge = trigger.depth is not None or trigger.trace is not None
        if trigger.depth is not None:
            self.budget = trigger.depth
        if trigger.trace is not None:
            self.switch.on = trigger.trace
            if not trigger.trace:
                self.display_set = False
        if not self.switch.on:  # (no NORECORD: its exit shows if tracing is on again)
            self.flags[-1] = flags
            return None
        if (self.budget is not None and self.budget <= 0) or trigger.hide or not visible:
            self.flags[-1] = flags | _NORECORD
            return None
        self.flags[-1] = flags
        if self.budget is not None:
            self.budget -= 1
        if not self.display_set:
            self.display, self.display_set = index, True
        depth = self.display
        self.display += 1
        return depth

    def leave(self) -> int | None:
        """The innermost open function returned."""
        flags = self.flags.pop()
        self.budget = self.saved.pop()
        if flags & _FILTERED:
            self.in_count -= 1
        elif flags & _NOTRACE:
            self.out_count -= 1
        if not self.switch.on or flags & _NORECORD:
            return None
        if not self.display_set:
            self.display, self.display_set = len(self.flags) + 1, True
        self.display = max(self.display - 1, 0)
        return self.display


def caller_kept(records: Iterable[Record], name: Callable[[int], str],
                filters: Filters) -> Iterator[Record]:
    """`-C FUNC` (uftrace's caller filter, utils/fstack.c read_user_stack): only the
    functions matched and the calls that lead to them; what a matched function calls is
    left out unless it matches too.  A record is held while the frames around it may
    still lead to a match; a frame that returns without one is dropped with all it held."""
    held: list[Record] = []  # the records of open frames not yet known to lead to a match
    open_held: list[int] = []  # per open frame: its entry's index in `held`, or -1 (shown)
    for rec in records:
        if isinstance(rec, Entry):
            open_held.append(len(held))
            held.append(rec)
            continue
        at = open_held.pop() if open_held else -1
        if at < 0:  # its entry was shown already
            yield rec
        elif filters.trigger(name(rec.func)).caller:
            held.append(rec)
            yield from held  # the frames around it lead to a match: shown from now on
            held.clear()
            open_held[:] = [-1] * len(open_held)
        else:
            del held[at:]
