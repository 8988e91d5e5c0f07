"""The tracer of one traced run, the part the three wirings share: the Linux user-mode run
(session.py), the native process (native_session.py) and the board (board_session.py) each
load their image and target, create the backend with `Tracer.emit`, and tell the tracer of
thread switches; the tracer owns the rest.

* one shadow stack per thread (`shadows`, by the wiring's thread id), `shadow` the running
  thread's; every event of the backend goes through it into `sink`;
* `sink`: where records go as they are made; a `ListSink` into `records` unless replaced
  before the run (`run`'s spill file, `record`'s uftrace directory: memory stays bounded and
  `records` stays empty);
* before the run, a backend that writes records itself (the native engine's record writer,
  backends/native_writer.py) is given getters of the running thread's shadow stack and of
  the sink, never the objects: both change during the run;
* a thread switch hands what a buffering backend holds to the thread that stops before the
  running shadow stack changes;
* at the end: the buffered events, then the open frames (of the main thread), then the
  backend's `finish()`, then every thread's open frames closed into the sink in thread
  order.

`TracedRun` gives a wiring the attributes its callers use (`sink`, `records`, `backend`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from emutrace.backends import Backend, TrapAware
from emutrace.errors import Unsupported
from emutrace.trace.events import Event, Record
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import ListSink, RecordSink


@dataclass
class TraceEnd:
    """What the tracer knows at the end of the run, for its `RunResult`."""

    records: list[Record]  # empty when the sink was replaced
    stats: dict[str, int]  # the backend's counters
    open_frames: list[int]  # the main thread's call stack at the end, outermost first
    insns: int | None  # guest instructions executed (None: no backend)


class Tracer:
    """Shadow stacks, the record sink and the backend of one traced run (module docstring).
    A run without a backend keeps the tracer too: it then records nothing."""

    def __init__(self, main_thread: int = 0, stack_switch: int | None = None,
                 counts_events: bool = False) -> None:
        self.main_thread = main_thread
        # a target with no instruction clock (a gdb stub reports no count, and the backends'
        # clocks count the blocks a target reports): each event's time is its ordinal in the
        # run instead, so an exit comes after its entry and a duration counts the events
        # recorded between them, the same for every backend
        self.counts_events = counts_events
        self.events = 0
        # (shadow.py policy 8: a thread's switches between stacks of its own, or None)
        self.stack_switch = stack_switch
        self.shadow = ShadowStack(stack_switch=stack_switch)  # the running thread's
        self.shadows: dict[int, ShadowStack] = {main_thread: self.shadow}
        self.records: list[Record] = []
        self.sink: RecordSink = ListSink(self.records)
        self.backend: Backend | None = None  # set by the wiring once it has created it

    def emit(self, ev: Event) -> None:
        """The backend's events: through the running thread's shadow stack into the sink."""
        if self.counts_events:
            self.events += 1
            ev = replace(ev, time=self.events)
        self.sink.write(self.shadow.feed(ev))

    @property
    def trap_aware(self) -> TrapAware | None:
        """The backend, when it reports exception and signal-handler frames (the wiring
        tells it where handlers are entered and left)."""
        return self.backend if isinstance(self.backend, TrapAware) else None

    def thread_switched(self, tid: int, number: int) -> None:
        """Thread `tid` runs from now on; `number` is what its records carry if it is new
        (the same in every rerun, where the tid is not)."""
        # what a buffering backend holds belongs to the thread that stops: onto its shadow
        # stack before the running one changes
        self.flush()
        shadow = self.shadows.get(tid)
        if shadow is None:
            shadow = self.shadows[tid] = ShadowStack(tid=number,
                                                     stack_switch=self.stack_switch)
        self.shadow = shadow
        if self.backend is None:
            return
        switch = getattr(self.backend, "switch_thread", None)
        if switch is None:
            raise Unsupported(f"backend {self.backend.name}: tracing a program with threads "
                              f"is not supported (int3, hwbp, entry, step trace threads; or "
                              f"--backend none)")
        switch(tid)

    def flush(self) -> None:
        """A backend that buffers events (the native engine) hands them over now."""
        flush = getattr(self.backend, "flush_events", None)
        if flush is not None:
            flush()

    def before_run(self) -> None:
        """Just before the run: a backend with its own record writer (the native engine's)
        takes the records it can write into the sink itself."""
        attach = getattr(self.backend, "attach_writer", None)
        if attach is not None:
            attach(lambda: self.shadow, lambda: self.sink)

    def finish(self, main_thread: int | None = None) -> TraceEnd:
        """After the run: the open frames of `main_thread` (default: the one the tracer
        started with; the running thread's if it has no shadow stack), then every thread's
        open frames closed into the sink at the backend's final time."""
        self.flush()  # before the open frames are read
        tid = self.main_thread if main_thread is None else main_thread
        frames = [f.func for f in self.shadows.get(tid, self.shadow).frames]
        if self.backend is None:
            return TraceEnd(self.records, {}, frames, None)
        insns = self.backend.finish()
        end = self.events + 1 if self.counts_events else insns
        for _tid, shadow in sorted(self.shadows.items()):  # threads still running too
            self.sink.write(shadow.close_all(end))
        return TraceEnd(self.records, dict(self.backend.stats), frames,
                        None if self.counts_events else insns)  # (no instruction count)


class TracedRun:
    """A wiring with a tracer: the attributes its callers and tests use."""

    tracer: Tracer

    @property
    def sink(self) -> RecordSink:
        """Where records go; replace before the run to stream them elsewhere."""
        return self.tracer.sink

    @sink.setter
    def sink(self, sink: RecordSink) -> None:
        self.tracer.sink = sink

    @property
    def records(self) -> list[Record]:
        return self.tracer.records

    @property
    def backend(self) -> Backend | None:
        return self.tracer.backend
