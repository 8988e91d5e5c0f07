"""Bad input: one clear line on stderr, a distinct documented exit code, never a traceback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emutrace import errors
from emutrace.elf import load_image
from emutrace.errors import EmutraceError
from emutrace.isa.abi import load_abi
from emutrace.session import Process, RunConfig

from .conftest import ENV, ISAS, bin_path, run_emutrace, wait_until_emulated

CALLS = bin_path("x86_64", "calls")


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0]
    assert lines[0].startswith("emutrace: ")
    return lines[0]


def test_exit_codes_are_distinct() -> None:
    codes = [errors.EXIT_USAGE, errors.EXIT_BAD_ELF, errors.EXIT_NO_INPUT,
             errors.EXIT_UNSUPPORTED, errors.EXIT_INTERNAL, errors.EXIT_TIMEOUT,
             errors.EXIT_MAX_INSNS]
    assert len(set(codes)) == len(codes)
    assert all(0 < c < 128 for c in codes)  # never mistaken for 128 + signal


def test_missing_file(tmp_path: Path) -> None:
    one_line_error(run_emutrace("run", tmp_path / "nope"), errors.EXIT_NO_INPUT,
                   "no such file")


def test_directory(tmp_path: Path) -> None:
    one_line_error(run_emutrace("run", tmp_path), errors.EXIT_NO_INPUT, "is a directory")


def test_not_an_elf(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"  # no #! line (a `#!` script runs: test_program_lookup)
    script.write_text("echo hi\n")
    one_line_error(run_emutrace("run", script), errors.EXIT_BAD_ELF, "not an ELF file")


@pytest.mark.parametrize("keep", [4, 20, 63, 200, 5000, 100_000])
def test_truncated_elf(tmp_path: Path, keep: int) -> None:
    cut = tmp_path / "cut"
    cut.write_bytes(CALLS.read_bytes()[:keep])
    one_line_error(run_emutrace("run", cut), errors.EXIT_BAD_ELF, "ELF")


def test_unsupported_machine(tmp_path: Path) -> None:
    blob = bytearray(CALLS.read_bytes())
    blob[18:20] = (2).to_bytes(2, "little")  # e_machine = EM_SPARC
    sparc = tmp_path / "sparc"
    sparc.write_bytes(bytes(blob))
    one_line_error(run_emutrace("run", sparc), errors.EXIT_UNSUPPORTED, "EM_SPARC", "supported")


def test_dynamic_binary_without_its_interpreter(tmp_path: Path) -> None:
    true = shutil.which("true")
    assert true is not None  # an empty root holds no ld.so: one line naming it, and --root
    one_line_error(run_emutrace("run", "--root", tmp_path, true), errors.EXIT_UNSUPPORTED,
                   "dynamically linked", "interpreter", "--root")


def test_arch_disagreeing_with_header() -> None:
    one_line_error(run_emutrace("run", "--arch", "s390x", CALLS), errors.EXIT_USAGE,
                   "--arch s390x disagrees", "x86_64")


def test_arch_alias_agreeing_is_fine() -> None:
    got = run_emutrace("run", "--arch", "amd64", CALLS, "recursion")
    assert got.returncode == 0 and b"fact(10)" in got.stdout


def test_unknown_arch() -> None:
    line = one_line_error(run_emutrace("run", "--arch", "vax", CALLS), errors.EXIT_USAGE, "vax")
    assert "s390x" in line  # lists the known ones


def test_max_insns_budget() -> None:
    one_line_error(run_emutrace("run", "--max-insns", "20000", CALLS, "all"),
                   errors.EXIT_MAX_INSNS, "--max-insns", "pc 0x")


def test_timeout() -> None:
    start = time.monotonic()
    got = run_emutrace("run", "--timeout", "0.5", bin_path("x86_64", "fib"), "60")
    one_line_error(got, errors.EXIT_TIMEOUT, "--timeout", "fib")
    assert time.monotonic() - start < 30


def interrupt(*extra: str) -> tuple[int, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", *extra,
                             str(bin_path("x86_64", "fib")), "60"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # main and some fib calls have run (traced, C writes ~10^6 records per CPU second,
    # whose text takes several more: a fraction of one is plenty)
    wait_until_emulated(proc, cpu=0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode().splitlines()


def test_ctrl_c_stops_cleanly() -> None:
    code, lines = interrupt("--backend", "none")
    assert code == 128 + signal.SIGINT
    assert len(lines) == 1 and lines[0].startswith("emutrace: interrupted at pc 0x"), lines


def test_ctrl_c_keeps_the_trace(tmp_path: Path) -> None:
    """A trace being written is never lost: Ctrl-C flushes what was recorded, the open
    frames closed "at exit", and the report names the shadow call stack."""
    out = tmp_path / "trace.txt"
    code, lines = interrupt("--backend", "int3", "-o", str(out))
    assert code == 128 + signal.SIGINT
    assert lines[0].startswith("emutrace: interrupted at pc 0x")
    assert lines[1].startswith("emutrace: call stack: ") and "main > fib > fib" in lines[1]
    text = out.read_text()
    assert text.startswith("# DURATION") and "fib(60" in text and "(at exit)" in text


@pytest.mark.parametrize("isa", ISAS)
def test_unknown_syscall_warns_once_and_returns_enosys(isa: str) -> None:
    warnings: list[str] = []
    proc = Process(RunConfig(str(bin_path(isa, "hello_fs"))), warn=warnings.append)
    abi = load_abi(isa)
    nr = abi.syscalls["io_setup"]
    assert proc.kernel.call(nr, (0,) * 6) == -abi.errno["ENOSYS"]
    assert proc.kernel.call(nr, (0,) * 6) == -abi.errno["ENOSYS"]
    assert warnings == [f"emutrace: unsupported syscall io_setup (nr {nr}): returning ENOSYS"]
    bogus = 0xFFFF  # no ISA uses this number
    assert proc.kernel.call(bogus, (0,) * 6) == -abi.errno["ENOSYS"]
    assert len(warnings) == 2 and "#65535" in warnings[1]
    proc.kernel.close_all()


SMALL = bin_path("x86_64", "hello_fs").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, min(len(SMALL), 4096) - 1), st.integers(0, 255)),
                min_size=1, max_size=8))
def test_mutated_elf_never_crashes_the_loader(tmp_path_factory: pytest.TempPathFactory,
                                             edits: list[tuple[int, int]]) -> None:
    blob = bytearray(SMALL)
    for where, value in edits:
        blob[where] = value
    path = tmp_path_factory.mktemp("m") / "mutant"
    path.write_bytes(bytes(blob))
    try:
        load_image(str(path))
    except EmutraceError as e:
        assert "\n" not in e.message and e.exit_code in (errors.EXIT_BAD_ELF,
                                                         errors.EXIT_UNSUPPORTED)
    os.unlink(path)


def test_i386_old_mmap_takes_a_struct() -> None:
    """i386 syscall 90 reads its six arguments from memory (old_mmap)."""
    proc = Process(RunConfig(str(bin_path("i386", "hello_fs"))), warn=lambda m: None)
    abi = load_abi("i386")
    k = proc.kernel
    c = abi.constants
    block = proc.space.find_free(0x1000)
    assert block is not None
    proc.space.map(block, 0x1000, 3)
    args = [0, 0x2000, c["PROT_READ"] | c["PROT_WRITE"], c["MAP_PRIVATE"] | c["MAP_ANONYMOUS"],
            0xFFFFFFFF, 0]
    k.write(block, k.pack_words(*args))
    addr = k.call(abi.syscalls["mmap"], (block, 0, 0, 0, 0, 0))
    assert addr > 0 and addr % 0x1000 == 0
    k.write(addr + 0x1FFF, b"x")  # both pages are mapped and writable
    assert k.read(addr + 0x1FFF, 1) == b"x"
    k.close_all()


WILD_LOADS = {  # a load from the address in a register, per ISA (keystone syntax)
    "x86_64": ("mov eax, dword ptr [rbx]", "rbx"),
    "s390x": ("l %r2, 0(%r3)", "r3"),
    "ppc64le": ("lwz 3, 0(4)", "r4"),
    "aarch64": ("ldr w0, [x1]", "x1"),
}


@pytest.mark.parametrize("isa", sorted(WILD_LOADS))
def test_fault_address_is_reported_anywhere(isa: str) -> None:
    """The fault hook covers only the NULL region (cost); a fault elsewhere is replayed once
    with a full hook, so the report still names the address."""
    import keystone

    from emutrace.isa import by_name
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet, run

    desc = by_name(isa)
    asm, reg = WILD_LOADS[isa]
    eng = desc.engines
    ks = keystone.Ks(getattr(keystone, eng.ks_arch or ""),
                     sum(getattr(keystone, m) for m in eng.ks_mode))
    code = bytes(ks.asm(asm, 0x10000)[0])
    cpu = UnicornCpu(desc)
    cpu.apply_reset()
    cpu.mem_map(0x10000, 0x1000)
    cpu.mem_write(0x10000, code)
    cpu.reg_write(reg, 0x12345678)
    stop = run(cpu, HookSet(cpu, lambda: None), 0x10000)
    assert (stop.kind, stop.signal, stop.fault_addr) == ("signal", "SIGSEGV", 0x12345678)
    assert stop.pc == 0x10000
