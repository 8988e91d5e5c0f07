"""What one cell's run returns to the coordinating process: its compared trace packed
(`tracefile.pack`) with its digest, or one line saying why there is none."""

from __future__ import annotations

from dataclasses import dataclass, replace

from emutrace.matrix.spec import Cell
from emutrace.matrix.tracefile import digest, pack, unpack


@dataclass(frozen=True)
class Outcome:
    key: str  # the cell's (Cell.key)
    trace: bytes | None  # tracefile.pack of the trace's text; None: not run, or `slim`
    digest: str = ""  # sha256 of the text: traces compare by it
    calls: int = 0  # compared calls
    exit_code: int | None = None  # the guest's
    seconds: float = 0.0  # the traced run, in the process that ran it
    error: str = ""  # why there is no trace (one line)
    where: str = ""  # host:pid of the process that ran the cell

    @property
    def ok(self) -> bool:
        """Traced (the trace itself may have been taken away: `slim`)."""
        return not self.error

    def slim(self) -> Outcome:
        """The outcome without its trace (kept once the trace is stored)."""
        return replace(self, trace=None)

    @property
    def text(self) -> str:
        assert self.trace is not None
        return unpack(self.trace)

    @classmethod
    def traced(cls, cell: Cell, text: str, calls: int, exit_code: int, seconds: float,
               where: str) -> Outcome:
        return cls(cell.key, pack(text), digest(text), calls, exit_code, seconds, "", where)

    @classmethod
    def failed(cls, cell: Cell, error: str, where: str = "") -> Outcome:
        line = " ".join(error.split()) or "failed"
        return cls(cell.key, None, error=line, where=where)
