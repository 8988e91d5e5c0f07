"""The native ptrace target (target/ptrace.py), first slice: the child starts stopped at
the ELF entry point (oracle: the ELF header's e_entry, read by pyelftools), its memory holds
the file's bytes there, a written int3 traps at that address + 1 (Intel SDM vol. 2 INT3),
and the child never outlives the tracer's kill; the run loop (target/ptrace_run.py) gives
the trap of an int3 written under a code hook to the backend."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from elftools.elf.elffile import ELFFile

from emutrace.isa import by_name
from emutrace.target.ptrace import PTRACE_CONT, PtraceTarget, kill, ptrace, spawn
from emutrace.target.ptrace_run import NativeTrapHooks, run

from .conftest import TESTBINS


@contextmanager
def stopped_at_entry(isa: str) -> Iterator[tuple[str, int, int, PtraceTarget]]:
    """(path, e_entry, pid, target) of a test program spawned stopped at its entry point
    (e_entry read by pyelftools), closed and killed on the way out."""
    path = str(TESTBINS / isa / "counts") if isa == "x86_64" else str(TESTBINS / isa / "fib")
    with open(path, "rb") as f:
        entry = ELFFile(f).header.e_entry
    pid = spawn(path, [path.encode()], [])
    target = PtraceTarget(by_name(isa), pid)
    try:
        yield path, entry, pid, target
    finally:
        target.close()
        kill(pid)


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_child_stops_at_entry_and_traps_on_int3(isa: str) -> None:
    with stopped_at_entry(isa) as (path, entry, pid, target):
        assert target.pc == entry
        with open(path, "rb") as f:
            elf = ELFFile(f)
            text = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                        and s["p_vaddr"] <= entry < s["p_vaddr"] + s["p_filesz"])
            first = text.data()[entry - text["p_vaddr"]:entry - text["p_vaddr"] + 4]
        assert target.mem_read(entry, 4) == first  # the file's bytes, read natively
        target.write_code(entry, b"\xcc")
        assert target.mem_read(entry, 1) == b"\xcc"
        target.flush()
        ptrace(PTRACE_CONT, pid, 0, 0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGTRAP
        assert target.pc == entry + 1
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_a_breakpoint_written_over_a_code_hook_traps_as_itself(isa: str) -> None:
    """The int3 backend arms a site by a code hook (a function found by descent), disarms
    it (the hook stays, idle: under ptrace its own int3 stays in memory) and later patches
    the same site with its breakpoint (the function named by a module's symbols).  The
    byte under the hook's int3 is then the backend's 0xCC: the run loop runs the hook, then
    steps that 0xCC, whose trap is the backend's (Unicorn's order: code hook, then the int3
    it hooks).  Before the fix the loop took the stepped 0xCC for the hook's own trap and
    lifted and stepped it forever (i386 calls.dyn under int3 --cleanup strict natively).
    Oracles: the ELF entry point (pyelftools) and the program's exit status 0."""
    with stopped_at_entry(isa) as (path, entry, pid, target):
        hooked: list[int] = []
        target.hook_code(lambda _uc, addr, _size, _data: hooked.append(addr), entry, entry)
        original = target.mem_read(entry, 1)  # (the hook's own int3 is hidden)
        target.write_code(entry, b"\xcc")  # the backend's breakpoint, over the hook
        assert target.points[entry] == b"\xcc"
        trapped: list[int] = []
        hooks = NativeTrapHooks()

        def on_trap(_vector: int) -> bool:  # a fall-back: the original back, run in place
            trapped.append(target.pc)
            target.write_code(entry, original)
            target.reg_write(target.isa.registers.pc, entry)
            return True
        hooks.on_trap = on_trap
        stop = run(target, hooks, timeout=20)
        assert (stop.kind, stop.status) == ("exit", 0)
        assert trapped == [entry + 1]  # the 0xCC's trap reached the backend, once
        assert hooked == [entry, entry]  # before the breakpoint, and before the original


@pytest.mark.parametrize("sent", [False, True], ids=["int3", "kill"])
@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_a_sigtrap_passed_on_says_so_when_it_kills_the_guest(isa: str, sent: bool) -> None:
    """A SIGTRAP that no hook and no backend owns is the guest's own: the run loop passes it
    on, its default action kills the guest, and the stop says which trap was passed on and
    where, so that one the loop misread shows up as such.  An int3 written at the ELF entry
    point (e_entry, pyelftools) is the guest's own int3 there; a SIGTRAP sent with kill(2)
    before the guest runs arrives with si_code SI_USER, 0 (siginfo(3type)), at the entry."""
    with stopped_at_entry(isa) as (path, entry, pid, target):
        if sent:
            os.kill(pid, signal.SIGTRAP)  # (pending: delivered, and reported, at the resume)
        else:
            target.write_code(entry, b"\xcc")  # the guest's own (no point, no backend)
        stop = run(target, NativeTrapHooks(), timeout=20)
        assert (stop.kind, stop.signal) == ("signal", "SIGTRAP")
        if sent:
            assert stop.detail.startswith(f"a SIGTRAP with si_code 0 at {entry:#x}, taken "
                                          "as its own")
        else:
            assert stop.detail == f"its own int3 at {entry:#x}"
