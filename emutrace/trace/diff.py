"""Comparing call traces across ISAs (pure: records in, verdict out) for `emutrace diff`.

A trace becomes a sequence of *tokens* in event order — `call` (depth, name, arguments)
and `return` (depth, name, value), then one `exit` token with the program's exit status —
over the *compared* functions only (`keep(name)`); depth counts compared ancestors, so
dropped frames (libc internals, PLT stubs, thunks) vanish without changing the nesting of
the rest.  Values are normalised so that what legitimately differs between ISAs does not
count (`normal`): integers by value (not width), pointers as `ptr` (addresses differ),
untyped words (`auto`) outside ±100000 as `?` (they are likely addresses), a non-const
`char *` (`buf`: maybe a buffer not yet filled) as a pointer.  Strings,
characters, enums, floats, booleans and structs compare as rendered.

Two traces are equal when their token sequences are; the first index where they differ is
the *first divergence*, shown with the call path (the open compared frames with their
arguments) on each side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.values import Value, as_value, format_auto, render


@dataclass(frozen=True)
class Token:
    kind: str  # "call", "return", "exit"
    depth: int
    name: str
    values: tuple[str, ...]  # call: the arguments; return: () or (value,); exit: (status,)


@dataclass(frozen=True)
class Frame:
    name: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Trace:
    tokens: tuple[Token, ...]
    paths: tuple[tuple[Frame, ...], ...]  # per token: the compared frames open at it


def normal(value: Value | int, bits: int = 64, values: bool = True) -> str:
    """A value as `diff` compares it (see the module docstring)."""
    if not values:
        return ""
    v = as_value(value, bits)
    if v.kind == "ptr":
        return "NULL" if v.raw == 0 else "ptr"
    if v.kind == "auto":
        text = format_auto(v.raw, v.bits)
        return "?" if text.startswith("0x") else text
    if v.kind == "buf" or (v.kind == "str" and v.text is None):
        return "NULL" if v.raw == 0 else "ptr"
    return render(v)


def normalise(records: Iterable[Record], symbolize: Callable[[int], str],
              keep: Callable[[str], bool], start: str | None = "main",
              exit_status: int | None = None, values: bool = True,
              bits: int = 64) -> Trace:
    """The compared tokens of one trace.  Nothing before the first entry of `start` counts
    (None: everything)."""
    tokens: list[Token] = []
    paths: list[tuple[Frame, ...]] = []
    stack: list[Frame | None] = []  # per open record frame: its compared Frame, or None
    shown: list[Frame] = []
    started = start is None
    for rec in records:
        if isinstance(rec, Entry):
            name = symbolize(rec.func)
            if not started and name == start:
                started = True
            if started and keep(name):
                args = tuple(normal(a, bits, values) for a in rec.args) if values else ()
                frame = Frame(name, args)
                tokens.append(Token("call", len(shown), name, args))
                shown.append(frame)
                paths.append(tuple(shown))
                stack.append(frame)
            else:
                stack.append(None)
        elif isinstance(rec, Exit):
            if not stack:
                continue
            top = stack.pop()
            if top is None:
                continue
            frame = top
            ret: tuple[str, ...] = ()
            if values and rec.retval is not None and not rec.unwound:
                ret = (normal(rec.retval, bits),)
            paths.append(tuple(shown))
            shown.pop()
            tokens.append(Token("return", len(shown), frame.name, ret))
    if exit_status is not None:
        tokens.append(Token("exit", 0, "exit", (str(exit_status),)))
        paths.append(())
    return Trace(tuple(tokens), tuple(paths))


def first_divergence(a: Trace, b: Trace) -> int | None:
    """The first token index where a and b differ (None: equal)."""
    for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)):
        if x != y:
            return i
    if len(a.tokens) != len(b.tokens):
        return min(len(a.tokens), len(b.tokens))
    return None


def classes(traces: dict[str, Trace]) -> list[list[str]]:
    """The ISAs grouped by equal traces, in the order first met."""
    out: list[tuple[Trace, list[str]]] = []
    for name, trace in traces.items():
        for rep, members in out:
            if rep.tokens == trace.tokens:
                members.append(name)
                break
        else:
            out.append((trace, [name]))
    return [members for _, members in out]


def describe(trace: Trace, index: int) -> str:
    """The token at index with its call path: `main() > classify(-56) > char_is_signed(-56)`,
    `... > long_size() = 64` for a return, `(trace ends)` past the end."""
    if index >= len(trace.tokens):
        return "(trace ends)"
    tok = trace.tokens[index]
    if tok.kind == "exit":
        return f"exit {tok.values[0]}"
    path = trace.paths[index]
    frames = [f"{f.name}({', '.join(f.args)})" for f in path]
    if tok.kind == "call":
        return " > ".join(frames)
    value = f" = {tok.values[0]}" if tok.values else ""
    return " > ".join([*frames[:-1], f"{frames[-1]} returns{value}"]) if frames else \
        f"{tok.name} returns{value}"


def matrix(names: list[str], groups: list[list[str]]) -> list[str]:
    """An ISA x ISA table: `=` same trace, `x` different."""
    group_of = {n: i for i, g in enumerate(groups) for n in g}
    width = max(len(n) for n in names)
    head = " " * width + " " + " ".join(f"{n:>{max(len(n), 1)}}" for n in names)
    lines = [head]
    for row in names:
        cells = " ".join(f"{'=' if group_of[row] == group_of[col] else 'x':>{len(col)}}"
                         for col in names)
        lines.append(f"{row:<{width}} {cells}")
    return lines
