"""The site tracer's cleanup (backends/int3_python.py): what happens to a function's probes
when it stops being the current one.  The tracer tells its cleanup each change of the
current function — the entry function started, a call entered a callee, a return went back,
a jump went into other code, a signal handler entered or left, another thread got the CPU
— and the cleanup keeps or drops probes and the call chain; the tracer arms the function
entered itself (its placement decides whether).

* `LazyCleanup`: probes stay in place; after warm-up nothing is written any more.  The
  call chain is not kept.
* `StrictCleanup` (fctrace's rule): only the current function is armed.  A call disarms
  the caller and pushes the callee on the call chain; a return pops it and arms the caller
  from the chain (descent from a return address would miss the caller's earlier code); a
  signal handler's entry disarms the interrupted function, its return restores the chain
  the handler found; each thread has its own chain, and a thread switch disarms the
  stopping thread's current function and arms the incoming one's.

`CLEANUPS` maps the `--cleanup` setting's words (mechanisms/settings.py CLEANUP; a recipe
names its cleanup) to the policy.  The native engines' C for strict cleanup
(strict_native.py, strict_ptrace.py) is an addon of the engine, told by `strict`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from emutrace.backends.int3_python import Int3Backend
    from emutrace.discover import Function

MAX_OPEN_TRAPS = 64  # handlers left by siglongjmp are forgotten beyond (sys_sigdeliver)


class Cleanup(Protocol):
    """What the site tracer does when the current function changes (module docstring)."""

    strict: bool  # only the current function armed (the engines' C addons follow it)

    def started(self, func: Function | None) -> None:
        """The function at the entry (or a handler's vector) is current; armed next."""
        ...

    def called(self, current: int | None, callee: Function) -> None:
        """A call from the function at current entered callee; callee armed next."""
        ...

    def returned(self, current: int | None, target: int, elsewhere: bool) -> None:
        """A return from the function at current went to target (`elsewhere`: not to its
        call's return address)."""
        ...

    def jumped(self, current: int, callee: Function) -> None:
        """A jump from the function at current went into callee's code; armed next."""
        ...

    def trap_entered(self) -> None:
        """An exception or signal handler is entered (before its vector is started)."""
        ...

    def trap_returned(self) -> None:
        """The innermost handler returns (its exception return runs next)."""
        ...

    def resumed(self, addr: int) -> Function | None:
        """The first block after a handler's return, at addr: the function to arm."""
        ...

    def thread_switched(self, chain: list[Function]) -> None:
        """Another thread gets the CPU; chain is its call chain (before the tracer swaps it
        in; a new thread's is empty and may be filled here)."""
        ...


class LazyCleanup:
    """Probes stay in place (module docstring)."""

    strict = False

    def __init__(self, tracer: Int3Backend) -> None:
        self.t = tracer

    def started(self, func: Function | None) -> None:
        pass

    def called(self, current: int | None, callee: Function) -> None:
        pass

    def returned(self, current: int | None, target: int, elsewhere: bool) -> None:
        if elsewhere:
            # a return not to its call's return address may land in code no call armed —
            # i386's resolver returns (`ret $0xc`) into the function it bound, an ifunc
            # variant no call ever entered: armed now, or its return is lost
            self.t.arm(self.t.function_entered(target))

    def jumped(self, current: int, callee: Function) -> None:
        pass

    def trap_entered(self) -> None:
        pass

    def trap_returned(self) -> None:
        pass

    def resumed(self, addr: int) -> Function | None:
        return self.t.function_entered(addr)

    def thread_switched(self, chain: list[Function]) -> None:
        pass


class StrictCleanup:
    """Only the current function armed (module docstring); the chain is the tracer's
    `chain` (per thread), the chains saved by open handlers its `trap_chains`."""

    strict = True

    def __init__(self, tracer: Int3Backend) -> None:
        self.t = tracer

    def started(self, func: Function | None) -> None:
        if func is not None:
            self.t.chain.append(func)

    def called(self, current: int | None, callee: Function) -> None:
        t = self.t
        if current is not None and callee.start != current:
            t.disarm(current)
        t.chain.append(callee)

    def returned(self, current: int | None, target: int, elsewhere: bool) -> None:
        """The caller (the call chain's) armed, the returning function disarmed unless it
        is the caller."""
        t = self.t
        caller = self._caller(target)
        if current is not None and (caller is None or caller.start != current):
            t.disarm(current)
        t.arm(caller)

    def _caller(self, target: int) -> Function | None:
        """The function a return goes back to: the chain's next one, or the one below that
        contains target after a non-local exit; discovery when the chain knows nothing."""
        t = self.t
        chain = t.chain
        if chain:
            chain.pop()
        code = t.image.isa.code_address(target)
        while chain and code not in chain[-1]:
            chain.pop()
        if chain:
            return chain[-1]
        func = t.function_entered(target)
        if func is not None:
            chain.append(func)
        return func

    def jumped(self, current: int, callee: Function) -> None:
        t = self.t
        if t.chain:
            t.chain[-1] = callee
        t.disarm(current)

    def trap_entered(self) -> None:
        """The interrupted function is no longer the current one (disarmed until the
        handler returns)."""
        t = self.t
        t.trap_chains.append(list(t.chain))
        del t.trap_chains[:-MAX_OPEN_TRAPS]
        if t.chain:
            t.disarm(t.chain[-1].start)

    def trap_returned(self) -> None:
        t = self.t
        saved = t.trap_chains.pop() if t.trap_chains else []
        if t.chain and not (saved and saved[-1].start == t.chain[-1].start):
            t.disarm(t.chain[-1].start)
        t.chain = saved

    def resumed(self, addr: int) -> Function | None:
        """The interrupted function (the chain's top) or whatever function the handler
        returned into."""
        t = self.t
        chain = t.chain
        code = t.image.isa.code_address(addr)
        func = chain[-1] if chain and code in chain[-1] else t.function_entered(addr)
        if chain and not t.traceable(func):
            # code that cannot be traced (natively on i386: the vDSO's __kernel_vsyscall,
            # where a system call's signal returns): as at a call into it, the chain's top
            # called it and stays the current function, armed for its return to come back
            func = chain[-1]
        if func is None:
            return None
        if chain and chain[-1].start != func.start:
            chain[-1] = func  # the handler switched to other code
        elif not chain:
            chain.append(func)
        return func

    def thread_switched(self, chain: list[Function]) -> None:
        """Strict cleanup is per thread: the code armed for the thread that stops is
        disarmed, the incoming thread's current function armed."""
        t = self.t
        leaving = t.chain[-1] if t.chain else None
        if not chain:  # a new thread: the function it stands in (glibc's clone)
            func = t.function_entered(t.cpu.pc)
            if func is not None:
                chain.append(func)
        if leaving is not None and not (chain and chain[-1].start == leaving.start):
            t.disarm(leaving.start)
        if chain:
            t.arm(chain[-1])


CLEANUPS: dict[str, type[LazyCleanup] | type[StrictCleanup]] = {
    "lazy": LazyCleanup, "strict": StrictCleanup}
