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

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.values import Value, as_value, format_auto, render


@dataclass(frozen=True)
class Token:
    kind: str  # "call", "return", "thread" (a thread's tokens follow), "exit"
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


_PART = re.compile(r"\.(?:cold(?:\.\d+)?|part\.\d+)$")


def function_of(name: str) -> str:
    """The function a GCC part belongs to: `f` for `f.cold`, `f.cold.1`, `f.part.0` (and
    `f.part.0.cold`); any other name is its own function."""
    while True:
        m = _PART.search(name)
        if m is None or m.start() == 0:
            return name
        name = name[:m.start()]


@dataclass
class _Thread:
    """One thread's tokens as they are made (`normalise`)."""

    started: bool
    tokens: list[Token] = field(default_factory=list)
    paths: list[tuple[Frame, ...]] = field(default_factory=list)
    stack: list[Frame | None] = field(default_factory=list)  # per open record frame
    shown: list[Frame] = field(default_factory=list)
    last_exit: Exit | None = None  # the thread's previous record, when it was an exit
    reopen: Frame | None = None  # the frame that exit returned from (a part may go on)


_PART_OF_OPEN = Frame("", ())  # a part frame inside its own function's frame: no tokens


def _owner(stack: list[Frame | None]) -> str | None:
    """The name of the compared frame a new record frame opens in (parts look through)."""
    for frame in reversed(stack):
        if frame is not _PART_OF_OPEN:
            return None if frame is None else frame.name
    return None


def normalise(records: Iterable[Record], symbolize: Callable[[int], str],
              keep: Callable[[str], bool], start: str | None = "main",
              exit_status: int | None = None, values: bool = True,
              bits: int = 64, returns: Mapping[str, bool] | None = None) -> Trace:
    """The compared tokens of one trace.  Nothing before the first entry of `start` counts
    (None: everything).

    * Threads compare apart: each thread's tokens (`Record.tid`: 0 the main thread, n the
      n-th created), thread after thread, each thread but the main one after a `thread`
      token; so two runs whose threads interleave differently compare equal.  A thread
      created after `start` was entered (by any thread) counts from its first record.
    * A GCC part (`f.cold`, `f.part.N`: `function_of`) is its function: entered from f's
      own frame it adds nothing (its calls are f's), entered right after f returned it
      goes on with f's frame (f's return is the part's), entered elsewhere it is a call
      of f.
    * `returns`: function name -> whether its prototype returns a value (DWARF; names not
      in it are unknown).  A function whose prototype is `void` returns no value; so does a
      function whose frame closed with the frame it tail-called (same time: the callee's
      value is in the register), unless its prototype says it returns one."""
    known = returns or {}
    threads: dict[int, _Thread] = {}
    started_any = start is None
    for rec in records:
        t = threads.get(rec.tid)
        if t is None:
            t = threads[rec.tid] = _Thread(started_any)
        if isinstance(rec, Entry):
            full = symbolize(rec.func)
            name = function_of(full)
            if not t.started and full == start:
                t.started = started_any = True
            frame: Frame | None = None
            if name != full and _owner(t.stack) == name:
                frame = _PART_OF_OPEN
            elif name != full and t.reopen is not None and t.reopen.name == name:
                frame = t.reopen  # f returned and its part goes on: take the return back
                t.tokens.pop()
                t.paths.pop()
                t.shown.append(frame)
            elif t.started and keep(name):
                args = tuple(normal(a, bits, values) for a in rec.args) if values else ()
                frame = Frame(name, args)
                t.tokens.append(Token("call", len(t.shown), name, args))
                t.shown.append(frame)
                t.paths.append(tuple(t.shown))
            t.stack.append(frame)
            t.last_exit = t.reopen = None
        elif isinstance(rec, Exit):
            previous, t.last_exit, t.reopen = t.last_exit, rec, None
            if not t.stack:
                continue
            top = t.stack.pop()
            if top is None or top is _PART_OF_OPEN:
                continue
            ret: tuple[str, ...] = ()
            tail = (previous is not None and previous.time == rec.time
                    and previous.depth == rec.depth + 1)
            has_value = known.get(top.name, None if tail else True)
            if values and rec.retval is not None and not rec.unwound and has_value:
                ret = (normal(rec.retval, bits),)
            t.paths.append(tuple(t.shown))
            t.shown.pop()
            t.tokens.append(Token("return", len(t.shown), top.name, ret))
            t.reopen = top
    tokens: list[Token] = []
    paths: list[tuple[Frame, ...]] = []
    for tid in sorted(threads):
        if tid:
            tokens.append(Token("thread", 0, f"thread {tid}", ()))
            paths.append(())
        tokens += threads[tid].tokens
        paths += threads[tid].paths
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
    if tok.kind == "thread":
        return f"{tok.name} begins"
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
