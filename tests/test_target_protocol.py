"""The target protocol's services on Unicorn against a plain model (what was mapped, written
and run), and the native target's declared gaps: every service it lacks is named in its
`capabilities` with a reason, and asking for it raises that reason as one line."""

from __future__ import annotations

import ctypes
import mmap

import pytest

from emutrace.errors import Unsupported
from emutrace.isa import by_name
from emutrace.target.protocol import EVENT_SOURCES, SERVICES, CpuFault, MemoryFault
from emutrace.target.ptrace import PtraceTarget
from emutrace.target.unicorn_cpu import UnicornCpu

CODE = 0x10000
RET = bytes.fromhex("c3")  # x86 RET
NOP = bytes.fromhex("90")
UD2 = bytes.fromhex("0f0b")  # x86 UD2: an invalid opcode by definition (SDM vol. 2B)


def _cpu() -> UnicornCpu:
    cpu = UnicornCpu(by_name("x86_64"))
    cpu.mem_map(CODE, 0x1000)
    return cpu


def test_memory_regions_and_faults() -> None:
    cpu = _cpu()
    cpu.mem_map(0x40000, 0x2000, 3)  # read + write
    assert cpu.memory_regions() == [(CODE, CODE + 0xFFF, 7), (0x40000, 0x41FFF, 3)]
    with pytest.raises(MemoryFault):
        cpu.mem_read(0x90000, 4)
    with pytest.raises(MemoryFault):
        cpu.mem_write(0x90000, b"x")


def test_context_save_restore() -> None:
    cpu = _cpu()
    cpu.reg_write("rax", 41)
    saved = cpu.context_save()
    cpu.reg_write("rax", 7)
    cpu.context_restore(saved)
    assert cpu.reg_read("rax") == 41


def test_run_counts_and_faults() -> None:
    cpu = _cpu()
    cpu.mem_write(CODE, NOP * 3 + bytes.fromhex("ff2425") + (0x90000).to_bytes(4, "little"))
    cpu.run(CODE, CODE + 0x100, count=2)
    assert cpu.pc == CODE + 2  # two instructions
    with pytest.raises(CpuFault) as fault:  # jmp [0x90000]: a read of unmapped memory
        cpu.run(CODE + 2, CODE + 0x100)
    assert (fault.value.access, fault.value.signal) == ("read_unmapped", "SIGSEGV")


def test_invalid_instruction_hook() -> None:
    cpu = _cpu()
    cpu.mem_write(CODE, UD2 + NOP + RET)
    seen = []

    def skip() -> bool:
        seen.append(cpu.pc)
        cpu.reg_write("rip", cpu.pc + 2)
        return True

    cpu.hook_invalid_instruction(skip)
    cpu.run(CODE, CODE + 3)
    assert seen == [CODE] and cpu.pc == CODE + 3


def test_devices_and_host_memory() -> None:
    cpu = _cpu()
    page = cpu.page_size
    assert page == 0x1000
    log: list[tuple[str, int, int, int]] = []
    cpu.map_device(0x50000, page, lambda off, size: log.append(("r", off, size, 0)) or 0x55,
                   lambda off, size, value: log.append(("w", off, size, value)))
    buffer = mmap.mmap(-1, page)
    cpu.map_host_memory(0x60000, page, ctypes.addressof(ctypes.c_char.from_buffer(buffer)))
    cpu.map_host_memory(0x70000, page, ctypes.addressof(ctypes.c_char.from_buffer(buffer)))
    # mov byte [0x50008], 0x11 ; mov al, [0x50004] ; mov [0x60010], al
    code = bytes.fromhex("c60425") + (0x50008).to_bytes(4, "little") + b"\x11" \
        + bytes.fromhex("8a0425") + (0x50004).to_bytes(4, "little") \
        + bytes.fromhex("880425") + (0x60010).to_bytes(4, "little")
    cpu.mem_write(CODE, code)
    cpu.run(CODE, CODE + len(code))
    assert log == [("w", 8, 1, 0x11), ("r", 4, 1, 0)]
    assert buffer[0x10] == 0x55  # the device's value, through the host buffer
    assert cpu.mem_read(0x70010, 1) == b"\x55"  # the second view of the same memory


def test_unicorn_has_every_capability() -> None:
    cpu = _cpu()
    assert all(cpu.capabilities.has(name) for name in (*EVENT_SOURCES, *SERVICES))
    with pytest.raises(KeyError):
        cpu.capabilities.has("teleport")


def test_native_target_names_what_it_lacks() -> None:
    caps = PtraceTarget.capabilities
    lacking = [n for n in (*EVENT_SOURCES, *SERVICES) if not caps.has(n)]
    assert set(lacking) == {"memory_watch", "invalid_instruction", "port_io", "context",
                            "host_memory", "devices", "run", "c_port"}
    assert all(caps.why_not(n) for n in lacking)
    target = PtraceTarget.__new__(PtraceTarget)  # (no tracee needed to be refused)
    for call, name in ((lambda: target.context_save(), "context"),
                       (lambda: target.run(0, 0), "run"),
                       (lambda: target.map_device(0, 0x1000, lambda o, s: 0,
                                                  lambda o, s, v: None), "devices"),
                       (lambda: target.hook_invalid_instruction(lambda: True),
                        "invalid_instruction")):
        with pytest.raises(Unsupported) as refused:
            call()
        assert str(refused.value) == f"native target: {caps.why_not(name)}"
