"""Stop signals arriving while emutrace writes its output wait until the output is complete:
a Ctrl-C (or SIGTERM, SIGHUP) while the trace is formatted must neither print a
KeyboardInterrupt traceback nor lose the trace.  The signal is blocked for the duration,
then taken from the pending set with sigtimedwait, and the command exits 128 + N as if it
had been killed by it — after the output is written."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from emutrace.target.unicorn_run import STOP_SIGNALS


@dataclass
class Deferred:
    signal: str = ""  # the first stop signal that arrived while deferred

    @property
    def exit_code(self) -> int:
        return 128 + int(signal.Signals[self.signal]) if self.signal else 0


@contextmanager
def stop_signals_deferred() -> Iterator[Deferred]:
    deferred = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield deferred
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield deferred
    finally:
        while (info := signal.sigtimedwait(STOP_SIGNALS, 0)) is not None:
            deferred.signal = deferred.signal or signal.Signals(info.si_signo).name
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
