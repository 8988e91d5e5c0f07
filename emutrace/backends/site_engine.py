"""What an engine adds to the site tracer (backends/int3_python.py), and how probes are
placed: the two parts composed into the one algorithm that int3, hwbp and entry run.

* **Engine** (`SiteEngine`): where the per-event work runs.  The reference engine
  (`ReferenceEngine`) is Python on the target protocol's hooks; the Unicorn hot path in C
  (int3_native.py `HotPathEngine`) and the native target's C loop (int3_ptrace.py
  `PtraceLoopEngine`) keep part of the tracer's state in C.  The tracer tells its engine
  what it changes (a site armed or disarmed, a function taken or dropped, code written)
  and brackets every Python section with `enter` (C's work onto Python's state) and
  `leave` (Python's changes to C), so that an engine never overrides the algorithm.
* **Placement** (`Placement`): when probes are set.  Lazy (fctrace: a function's sites are
  armed when it is entered, `int3_python.LazyPlacement`) or eager (every function probed at
  start-up, entry_python.py `EagerProbes`).
* **Cleanup** (cleanup.py `Cleanup`): what happens to probes when a function stops being
  current — lazy (left in place) or strict (fctrace's rule: only the current function
  armed), told by the tracer at each change of the current function.  An engine with C for
  strict cleanup adds it as an addon when the tracer's cleanup is `strict`
  (strict_native.py, strict_ptrace.py).
* **Delivery**: breakpoint bytes or site hooks (int3_python.py `SiteDelivery`), hardware
  slots (hwbp_slots.py `SlotDelivery`): the tracer's `sites`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from emutrace.backends.int3_python import Int3Backend, Pending
    from emutrace.discover import Function, Site
    from emutrace.target.protocol import TrapHooks
    from emutrace.trace.events import Event, SignalDelivery
    from emutrace.trace.shadow import ShadowStack
    from emutrace.trace.uftrace_write import RecordSink


class SiteEngine(Protocol):
    """The engine under a site tracer.  Every method but `attach` and `resolve` is a
    notification the reference engine ignores."""

    time: int  # guest instructions run (the engine's clock)
    native_stats: dict[str, int]  # how much of the run C did (bench's profile)

    def attach(self, tracer: Int3Backend, hooks: TrapHooks) -> None:
        """The end of the tracer's set-up: install the engine's hooks."""
        ...

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        """What the tracer emits through (an engine that buffers hands its own over first)."""
        ...

    def enter(self) -> None:
        """A Python section begins: what C did since it last ran, onto Python's state."""
        ...

    def leave(self) -> None:
        """A Python section ends: what Python changed, to C."""
        ...

    def pause(self) -> None:
        """The CPU stopped between instructions (a signal, a thread switch): `enter`, and a
        transfer C left pending for a site that has not run is dropped."""
        ...

    def thread_switched(self) -> None:
        """The tracer swapped in another thread's state: C gets that thread's (then
        `leave`)."""
        ...

    def block_entered(self) -> None:
        """Python's block hook is about to look at a block."""
        ...

    def site_arming(self, site: Site) -> None: ...

    def site_armed(self, site: Site, func: int) -> None: ...

    def site_disarmed(self, addr: int) -> None: ...

    def function_taken(self, func: Function) -> None: ...

    def function_dropped(self, start: int) -> None: ...

    def rearming(self, old: Function, new: Function) -> None:
        """A stale descent is armed again with its new extent (before its sites are)."""
        ...

    def stale_found(self, starts: set[int]) -> None:
        """Descent made these functions stale (before they are armed again)."""
        ...

    def code_written(self) -> None:
        """The guest stores into guarded code (before the functions it touches go)."""
        ...

    def hook_in_table(self, handle: int) -> bool:
        """Is handle a site of a table the engine's block hook looks up (no Unicorn hook,
        so neither a dropped translation nor a restarted block is needed)?"""
        ...

    def resolve(self, p: Pending, target: int, reference: Callable[[Pending, int], None]
                ) -> None:
        """Resolve a transfer: the tracer's `reference` rule, and what the engine learns."""
        ...

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None: ...

    def flush_events(self) -> None: ...

    def detach(self) -> None:
        """The tracer disarmed every site (Backend.detach): the engine's hooks go, but the
        one the run's system calls and exceptions pass through."""
        ...

    def finish(self) -> None:
        """The run ended: C's counters into the tracer's stats, C's tables freed."""
        ...


class ReferenceEngine:
    """The Python reference: the tracer's own hooks on the target protocol, nothing kept
    anywhere else."""

    def __init__(self) -> None:
        self.time = 0
        self.native_stats: dict[str, int] = {}

    def attach(self, tracer: Int3Backend, hooks: TrapHooks) -> None:
        self._block_hook = (tracer.cpu, install_python_hooks(tracer, hooks))

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        return emit

    def enter(self) -> None:
        pass

    def leave(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def thread_switched(self) -> None:
        pass

    def block_entered(self) -> None:
        pass

    def site_arming(self, site: Site) -> None:
        pass

    def site_armed(self, site: Site, func: int) -> None:
        pass

    def site_disarmed(self, addr: int) -> None:
        pass

    def function_taken(self, func: Function) -> None:
        pass

    def function_dropped(self, start: int) -> None:
        pass

    def rearming(self, old: Function, new: Function) -> None:
        pass

    def stale_found(self, starts: set[int]) -> None:
        pass

    def code_written(self) -> None:
        pass

    def hook_in_table(self, handle: int) -> bool:
        return False

    def resolve(self, p: Pending, target: int, reference: Callable[[Pending, int], None]
                ) -> None:
        reference(p, target)

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        pass

    def flush_events(self) -> None:
        pass

    def detach(self) -> None:
        cpu, handle = self._block_hook
        cpu.hook_del(handle)

    def finish(self) -> None:
        pass


def install_python_hooks(tracer: Int3Backend, hooks: TrapHooks) -> int:
    """The tracer's own hooks on the target protocol: the block hook (its handle), and the
    trap handler for patch delivery (site hooks are added as sites are armed)."""
    handle = tracer.cpu.hook_block(tracer.on_block)
    if tracer.delivery == "patch":
        hooks.on_trap = tracer.on_trap
    return handle


class Placement(Protocol):
    """When the tracer's probes are set (lazy: as functions run; eager: all at start)."""

    arms_on_entry: bool  # a function entered is armed then (lazy)

    def start(self, entry: int) -> None: ...

    def trap_entered(self, vector: int, signal: SignalDelivery | None) -> None: ...

    def block(self) -> None:
        """Before Python's block hook looks at a block."""
        ...

    def refresh_stale(self) -> None: ...

    def pending_at(self, site: Site) -> Pending:
        """The transfer a site's hit starts."""
        ...

    def resolving(self, p: Pending, target: int) -> bool:
        """Before a transfer is resolved; False: nothing more to do for it."""
        ...

    def final_stats(self, stats: dict[str, int]) -> dict[str, int]: ...
