"""What this host's native mechanisms really do (`emutrace info --native`), each found by
trying it on a short-lived traced child (`/bin/true`), never assumed:

* ptrace: the child can be started under PTRACE_TRACEME (else the reason: Yama, seccomp,
  being traced ourselves);
* debug registers: DR0 set to the program's entry (AT_ENTRY) as an execute breakpoint
  stops the child there with si_code TRAP_HWBKPT;
* branch traps: the first stops of PTRACE_SINGLEBLOCK and of PTRACE_SINGLESTEP from the
  same start are compared: identical addresses mean every instruction trapped, i.e.
  DEBUGCTL.BTF was dropped (KVM does that) and `btf` costs as much as `step`;
* branch records for `bts`: the perf PMUs the kernel lists in
  /sys/bus/event_source/devices (intel_bts, or the core PMU's LBR; isa/native_pmu.py, also
  the x86 ISAs' `native_bts` capability): absent in most VMs."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from emutrace.isa import by_name
from emutrace.isa.native_pmu import branch_record_pmus, native_bts_reason
from emutrace.target.ptrace import (
    PTRACE_CONT,
    PTRACE_SINGLEBLOCK,
    PTRACE_SINGLESTEP,
    PtraceError,
    PtraceTarget,
    kill,
    ptrace,
    spawn,
)

PROBE_PROGRAM = "/bin/true"
PROBE_STOPS = 64  # stops compared between SINGLEBLOCK and SINGLESTEP
AT_ENTRY = 9
TRAP_HWBKPT = 4
PTRACE_GETSIGINFO = 0x4202


@dataclass
class NativeFacts:
    ptrace: str  # "works" or the reason it does not
    debug_registers: str
    singleblock: str
    branch_records: str


def _child() -> tuple[int, PtraceTarget]:
    pid = spawn(PROBE_PROGRAM, [PROBE_PROGRAM.encode()], [])
    return pid, PtraceTarget(by_name("x86_64"), pid)


def _stop_pcs(request: int) -> list[int]:
    pid, target = _child()
    pcs = []
    try:
        for _ in range(PROBE_STOPS):
            ptrace(request, pid, 0, 0)
            _, status = os.waitpid(pid, 0)
            if not os.WIFSTOPPED(status):
                break
            target.flush()
            pcs.append(target.pc)
    finally:
        target.close()
        kill(pid)
    return pcs


def _entry_of(pid: int) -> int:
    with open(f"/proc/{pid}/auxv", "rb") as f:
        raw = f.read()
    for at in range(0, len(raw) - 15, 16):
        if int.from_bytes(raw[at:at + 8], "little") == AT_ENTRY:
            return int.from_bytes(raw[at + 8:at + 16], "little")
    raise OSError("no AT_ENTRY")


def _debug_registers() -> str:
    pid, target = _child()
    try:
        entry = _entry_of(pid)
        target.set_debugreg(0, entry)
        target.set_debugreg(7, 1)
        ptrace(PTRACE_CONT, pid, 0, 0)
        _, status = os.waitpid(pid, 0)
        info = ctypes.create_string_buffer(128)
        if os.WIFSTOPPED(status):
            ptrace(PTRACE_GETSIGINFO, pid, 0, ctypes.c_void_p(ctypes.addressof(info)))
        code = int.from_bytes(info.raw[8:12], "little")
        if os.WIFSTOPPED(status) and code == TRAP_HWBKPT and target.pc == entry:
            return "works (DR0-DR3 execute breakpoints through PTRACE_POKEUSER)"
        return f"no: DR0 at the entry did not stop there (status {status:#x})"
    finally:
        target.close()
        kill(pid)


def _singleblock() -> str:
    blocks, steps = _stop_pcs(PTRACE_SINGLEBLOCK), _stop_pcs(PTRACE_SINGLESTEP)
    if blocks == steps:
        return (f"degraded: PTRACE_SINGLEBLOCK stops after every instruction (its first "
                f"{len(blocks)} stops = PTRACE_SINGLESTEP's): DEBUGCTL.BTF is dropped "
                f"(KVM); btf costs what step costs here")
    return "works (PTRACE_SINGLEBLOCK stops only after taken branches)"


def _branch_records() -> str:
    pmus = branch_record_pmus()
    if not pmus:
        return f"no: {native_bts_reason()}"
    return f"{pmus[0]} PMU present (not used: {native_bts_reason()})"


def probe() -> NativeFacts:
    try:
        pid, target = _child()
        target.close()
        kill(pid)
    except (PtraceError, OSError) as e:
        reason = f"no: {e}"
        return NativeFacts(reason, reason, reason, _branch_records())
    return NativeFacts("works", _debug_registers(), _singleblock(), _branch_records())


def render() -> str:
    facts = probe()
    return "\n".join([
        "native target (run --target native; probed on this host with /bin/true):",
        f"  ptrace             {facts.ptrace}",
        f"  debug registers    {facts.debug_registers}",
        f"  branch traps       {facts.singleblock}",
        f"  branch records     {facts.branch_records}",
    ])
