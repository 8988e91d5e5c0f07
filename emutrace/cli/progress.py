"""A progress line on stderr while `emutrace record` writes a long recording, only when
stderr is a terminal (rich's Live display, erased when the recording ends); a pipe or a
file gets nothing.  rich is imported only then (~35 ms of a `record`'s start-up)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

from emutrace.trace.events import Record
from emutrace.trace.uftrace_write import UftraceDirSink

if TYPE_CHECKING:
    from rich.live import Live

INTERVAL = 0.5  # seconds between updates
FIRST = 1.0  # nothing for recordings shorter than this


class ProgressSink:
    """Forwards records to `sink` and redraws one status line now and then."""

    def __init__(self, sink: UftraceDirSink, stream: IO[str]) -> None:
        self.sink = sink
        self.start = time.monotonic()
        self.next = self.start + FIRST
        from rich.console import Console
        from rich.live import Live

        self.live: Live = Live(console=Console(file=stream), auto_refresh=False,
                               transient=True)
        self.shown = False

    def write(self, records: Iterable[Record]) -> None:
        self.sink.write(records)
        now = time.monotonic()
        if now >= self.next:
            self.next = now + INTERVAL
            if not self.shown:
                self.live.start()
                self.shown = True
            self.live.update(self._text(now), refresh=True)

    def _text(self, now: int | float) -> str:
        s = self.sink
        seconds = now - self.start
        return (f"recording {s.path}: {s.count:,} records, {s.size / 1e6:.1f} MB, "
                f"{s.count / max(seconds, 1e-9):,.0f} records/s, {seconds:.0f} s")

    def close(self, exit_status: int = 0) -> None:
        if self.shown:
            self.live.stop()
            self.shown = False
        self.sink.close(exit_status)


def with_progress(sink: UftraceDirSink, stream: IO[str]) -> UftraceDirSink | ProgressSink:
    return ProgressSink(sink, stream) if stream.isatty() else sink
