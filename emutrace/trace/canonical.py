"""The canonical call trace: the normalised text golden tests and cross-ISA comparisons use,
and the parser of the `-finstrument-functions` self-record that serves as its oracle.

Canonical form: one line per entry and per exit, indented two spaces per depth level::

    > main
      > fib
      < fib
    < main

No addresses, times, arguments or return values.  A frame that did not return by its own
return instruction ends with `<~ name` (unwound: longjmp, unwinding) or `<! name` (still
open at program exit), so a lost return cannot hide behind a plain `<`.

Normalising (`keep`): frames whose function name is not kept are dropped and their kept
descendants move up, so program → program structure survives while ISA-specific libc
internals (IFUNC variants of `memcpy`, `_IO_*`, `__libc_start_main`) disappear.  With
`keep` = the program's own functions, the same C program gives the same canonical trace on
every ISA.

The oracle (`testbins/<isa>/calls.instr`, format in testbins/README.md): lines `> 0xADDR`
and `< 0xADDR`, the function's address as C sees it.  Exits nest, except that frames skipped
by `longjmp` are never exited and frames open at `exit()` are never exited.  The parser
reconciles exactly as the shadow stack's return-address rule does: an exit of a function
deeper than the top closes the frames above it as unwound; an exit matching no open frame is
an error (the record is ours, it cannot be partial); frames still open at the end are closed
as at exit.  Times in the resulting records are line numbers.

A record may also hold `~ 0xADDR` lines (testbins `signals.instr`, src/instr_signals.c):
siglongjmp was called from code address ADDR, so the innermost open frame leaves by a
non-local jump and never writes its `<` line; the parser closes it as unwound there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable

from emutrace.trace.events import Entry, Exit, Record

Keep = Callable[[str], bool]


def _keep_fn(keep: Keep | Collection[str] | None) -> Keep:
    if keep is None:
        return lambda name: True
    if callable(keep):
        return keep
    names = frozenset(keep)
    return names.__contains__


def canonical_lines(records: Iterable[Record], symbolize: Callable[[int], str],
                    keep: Keep | Collection[str] | None = None) -> list[str]:
    """Canonical lines of properly nested records, dropping frames whose name is not kept."""
    want = _keep_fn(keep)
    kept: list[bool] = []  # per open frame: is it shown
    depth = 0
    lines: list[str] = []
    for rec in records:
        if isinstance(rec, Entry):
            name = symbolize(rec.func)
            k = want(name)
            kept.append(k)
            if k:
                lines.append(f"{'  ' * depth}> {name}")
                depth += 1
        else:
            if not kept:
                raise ValueError(f"exit without entry: {rec!r}")
            if kept.pop():
                depth -= 1
                mark = ("<!" if rec.at_exit else "<~") if rec.unwound else "<"
                lines.append(f"{'  ' * depth}{mark} {symbolize(rec.func)}")
    return lines


def canonical_text(records: Iterable[Record], symbolize: Callable[[int], str],
                   keep: Keep | Collection[str] | None = None) -> str:
    return "".join(line + "\n" for line in canonical_lines(records, symbolize, keep))


# -- the -finstrument-functions self-record ------------------------------------------------

_LINE = re.compile(r"([<>~]) 0x([0-9a-f]+)")


def parse_instr_record(text: str) -> list[tuple[str, int]]:
    """`[(">", "<" or "~", address), …]` of a calls.instr record; blank lines are skipped, any
    other line is an error (the record is the oracle: it must be read exactly)."""
    out: list[tuple[str, int]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"line {number}: not a call record line: {line!r}")
        out.append((m.group(1), int(m.group(2), 16)))
    return out


def instr_records(pairs: Iterable[tuple[str, int]]) -> list[Record]:
    """Entry/Exit records of a parsed self-record (see the module docstring)."""
    stack: list[tuple[int, int]] = []  # (func, entry time)
    out: list[Record] = []
    time = 0
    for time, (kind, addr) in enumerate(pairs):
        if kind == ">":
            out.append(Entry(time, len(stack), addr))
            stack.append((addr, time))
            continue
        if kind == "~":  # a non-local jump leaves the innermost open frame
            if not stack:
                raise ValueError(f"record {time}: a non-local jump with no frame open")
            func, t0 = stack.pop()
            out.append(Exit(time, len(stack), func, None, time - t0, unwound=True))
            continue
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == addr:
                break
        else:
            raise ValueError(f"record {time}: exit from {addr:#x}, which is not open")
        while len(stack) > i:
            func, t0 = stack.pop()
            unwound = len(stack) > i
            out.append(Exit(time, len(stack), func, None, time - t0, unwound=unwound))
    end = time + 1
    while stack:
        func, t0 = stack.pop()
        out.append(Exit(end, len(stack), func, None, end - t0, unwound=True, at_exit=True))
    return out


def canonical_from_instr(text: str, symbolize: Callable[[int], str],
                         keep: Keep | Collection[str] | None = None) -> str:
    """The canonical text of a calls.instr record."""
    return canonical_text(instr_records(parse_instr_record(text)), symbolize, keep)


BIG_TRACE = 1 << 20  # characters of canonical text kept as they are; longer: a digest


def trace_key(text: str) -> str:
    """A canonical trace as tests and golden files compare it: the text itself, or, for a
    long one, its SHA-256 and line count (the two-space indentation makes 10 000-deep
    recursion 200 MB of text)."""
    if len(text) <= BIG_TRACE:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"sha256:{digest} lines:{text.count(chr(10))}\n"
