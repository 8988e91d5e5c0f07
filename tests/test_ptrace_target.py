"""The native ptrace target (target/ptrace.py), first slice: the child starts stopped at
the ELF entry point (oracle: the ELF header's e_entry, read by pyelftools), its memory holds
the file's bytes there, a written int3 traps at that address + 1 (Intel SDM vol. 2 INT3),
and the child never outlives the tracer's kill."""

from __future__ import annotations

import os
import signal

import pytest
from elftools.elf.elffile import ELFFile

from emutrace.isa import by_name
from emutrace.target.ptrace import PTRACE_CONT, PtraceTarget, kill, ptrace, spawn

from .conftest import TESTBINS


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_child_stops_at_entry_and_traps_on_int3(isa: str) -> None:
    path = str(TESTBINS / isa / "counts") if isa == "x86_64" else str(TESTBINS / isa / "fib")
    with open(path, "rb") as f:
        entry = ELFFile(f).header.e_entry
    pid = spawn(path, [path.encode()], [])
    target = PtraceTarget(by_name(isa), pid)
    try:
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
    finally:
        target.close()
        kill(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
