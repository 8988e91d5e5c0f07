"""A compared trace (`trace/diff.py`'s `Trace`) as text, for baselines and the run's traces,
and packed for the trip from a worker.

The text: a header line, then one JSON array per token, `[kind, depth, name, [values...]]`::

    # emutrace compared trace 1
    ["call",0,"main",["1","ptr"]]
    ["call",1,"fib",["5"]]
    ["return",1,"fib",["5"]]
    ...
    ["exit",0,"exit",["0"]]

One token a line, so a changed baseline reads as a one-line diff; JSON, so a value holding
any character round-trips.  The call paths (`Trace.paths`) are not stored: they follow from
the tokens (a call's path is the open frames with it; a return's, the open frames before it
closes; a `thread` token starts a thread's frames afresh), as `normalise` makes them.
"""

from __future__ import annotations

import hashlib
import json
import zlib

from emutrace.trace.diff import Frame, Token, Trace

HEADER = "# emutrace compared trace 1"
KINDS = ("call", "return", "thread", "exit")
PACK_ABOVE = 1 << 16  # bytes of text sent as they are; longer: zlib-compressed


def trace_text(trace: Trace) -> str:
    lines = [HEADER]
    for tok in trace.tokens:
        lines.append(json.dumps([tok.kind, tok.depth, tok.name, list(tok.values)],
                                separators=(",", ":"), ensure_ascii=True))
    return "\n".join(lines) + "\n"


def parse_trace(text: str) -> Trace:
    """The trace of `trace_text`'s text; ValueError naming the line when it is not one."""
    lines = text.splitlines()
    if not lines or lines[0] != HEADER:
        raise ValueError(f"line 1: expected {HEADER!r}")
    tokens: list[Token] = []
    paths: list[tuple[Frame, ...]] = []
    open_frames: list[Frame] = []
    for number, line in enumerate(lines[1:], 2):
        try:
            kind, depth, name, values = json.loads(line)
        except (ValueError, TypeError):
            raise ValueError(f"line {number}: not a [kind, depth, name, values] array") \
                from None
        if kind not in KINDS or not isinstance(depth, int) or not isinstance(name, str) \
                or not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"line {number}: not a [kind, depth, name, values] array")
        tokens.append(Token(kind, depth, name, tuple(values)))
        if kind == "call":
            open_frames.append(Frame(name, tuple(values)))
            paths.append(tuple(open_frames))
        elif kind == "return":
            paths.append(tuple(open_frames))
            if open_frames:
                open_frames.pop()
        else:
            open_frames = []
            paths.append(())
    return Trace(tuple(tokens), tuple(paths))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pack(text: str) -> bytes:
    """text for transfer: b"T" + UTF-8, or b"Z" + zlib of it when long."""
    data = text.encode()
    return b"Z" + zlib.compress(data, 6) if len(data) > PACK_ABOVE else b"T" + data


def unpack(blob: bytes) -> str:
    data = zlib.decompress(blob[1:]) if blob[:1] == b"Z" else blob[1:]
    return data.decode()
