"""The gdb-remote target (target/gdb_remote.py, target/gdb_run.py): the RSP codec against
packets made by hand from the GDB manual's rules; int3 traced through qemu-user's gdb stub
equal to the program's own `-finstrument-functions` record and to the Unicorn engine's
trace; the program's output equal to qemu-user's; the refusals."""

from __future__ import annotations

import signal

import pytest

from emutrace.gdb_session import GdbProcess
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.target import rsp
from emutrace.trace.canonical import canonical_text, trace_key

from .conftest import bin_path, isa_params, run_emutrace, run_qemu
from .test_trace_oracle import namer, own_record

# ------------------------------------------------------------------ the packet codec
# (GDB manual, "Overview": $packet-data#checksum, the sum of the data's bytes mod 256)


def test_frame_checksum_by_hand() -> None:
    # 'O' 0x4f + 'K' 0x4b = 0x9a; 'g' = 0x67; "m0,4": 0x6d+0x30+0x2c+0x34 = 0xfd
    assert rsp.frame(b"OK") == b"$OK#9a"
    assert rsp.frame(b"g") == b"$g#67"
    assert rsp.frame(b"m0,4") == b"$m0,4#fd"
    assert rsp.frame(b"") == b"$#00"


def test_escape_round_trip_by_hand() -> None:
    # "Binary Data": '#' 0x23, '$' 0x24, '}' 0x7d, '*' 0x2a go as '}' then byte ^ 0x20
    assert rsp.escape(b"a#b$c}d*") == b"a}\x03b}\x04c}]d}\x0a"
    assert rsp.unescape(b"a}\x03b}\x04c}]d}\x0a") == b"a#b$c}d*"
    every = bytes(range(256))
    assert rsp.unescape(rsp.escape(every)) == every
    with pytest.raises(rsp.RspError):
        rsp.unescape(b"ab}")


def test_run_length_by_hand() -> None:
    # the manual's example: "0* " is "0000" (' ' is 32: 32 - 29 = 3 more)
    assert rsp.expand_rle(b"0* ") == b"0000"
    assert rsp.expand_rle(b"x*\"y") == b"xxxxxxy"  # '"' 34: 5 more
    assert rsp.expand_rle(b"}*ab") == b"}*ab"  # an escaped '\n' is not a run
    with pytest.raises(rsp.RspError):
        rsp.expand_rle(b"*!")


def test_reader_splits_checks_and_expands() -> None:
    reader = rsp.PacketReader()
    reader.feed(b"+$OK#9a$0* #")  # an ack, a packet, half of another
    assert reader.acks == [b"+"] and reader.packets == [b"OK"]
    # the checksum covers the bytes as sent: 0x30 + 0x2a + 0x20 = 0x7a; 7e is wrong
    reader.feed(b"7e")
    assert reader.bad == 1 and reader.packets == [b"OK"]
    reader.feed(b"$0* #7a")
    assert reader.packets == [b"OK", b"0000"]


def test_stop_replies_by_hand() -> None:
    t = rsp.parse_stop(b"T05thread:p01.01;10:0010400000000000;swbreak:;")
    assert (t.kind, t.signal) == ("signal", 5)
    assert rsp.hex_value(t.registers[0x10], "little") == 0x401000
    assert t.info["thread"] == "p01.01"
    assert rsp.parse_stop(b"S0b").signal == 11
    assert (rsp.parse_stop(b"W2a").kind, rsp.parse_stop(b"W2a").status) == ("exited", 42)
    assert (rsp.parse_stop(b"X09").kind, rsp.parse_stop(b"X09").signal) == ("killed", 9)
    for bad in (b"", b"Q05", b"Tzz"):
        with pytest.raises(rsp.RspError):
            rsp.parse_stop(bad)


def test_gdb_signal_numbers_by_hand() -> None:
    # GDB's include/gdb/signals.def: its numbers, not Linux's, past 6
    assert rsp.signal_name(30) == "SIGUSR1" and rsp.signal_name(10) == "SIGBUS"
    assert rsp.signal_name(12) == "SIGSYS" and rsp.signal_name(11) == "SIGSEGV"
    assert rsp.signal_name(200) == "GDB signal 200"


# ------------------------------------------------------------------ traces in the stub
ISAS = ("x86_64", "aarch64")
SCENARIOS = ("recursion", "fnptr", "longjmp", "tail")


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("isa", ISAS)
def test_gdb_trace_equals_own_record_and_unicorn(isa: str, scenario: str) -> None:
    traced_equal(isa, scenario)


@pytest.mark.parametrize("isa", isa_params(Cap.GDB_TARGET))
def test_gdb_trace_on_every_isa(isa: str) -> None:
    """One scenario (calls through a pointer) on each ISA the table says the stub runs."""
    traced_equal(isa, "fnptr")


@pytest.mark.parametrize("scenario", ("recursion", "fnptr"))
@pytest.mark.parametrize("isa", ISAS)
def test_gdb_hwbp_on_the_stubs_hardware_breakpoints(isa: str, scenario: str) -> None:
    """hwbp's slots as the stub's Z1 breakpoints: the same trace."""
    process = traced_equal(isa, scenario, "hwbp")
    assert process.target.z1 and process.target.z1_placed > 10  # (no fallback to Z0)


def traced_equal(isa: str, scenario: str, backend: str = "int3") -> GdbProcess:
    want, program_functions = own_record(isa, scenario)
    plain = str(bin_path(isa, "calls"))
    config = RunConfig(plain, [scenario], backend=backend)
    process = GdbProcess(config)
    result = process.run()
    assert result.stop.kind == "exit"
    got = trace_key(canonical_text(result.records, namer(plain), program_functions))
    assert got.count("\n") > 3
    assert got == want
    emulated = Process(config, warn=lambda m: None).run()
    assert got == trace_key(canonical_text(emulated.records, namer(plain), program_functions))
    return process


@pytest.mark.parametrize("isa", ISAS)
def test_gdb_run_output_equals_qemu(isa: str) -> None:
    program = bin_path(isa, "calls")
    want = run_qemu(isa, program, "recursion")
    got = run_emutrace("run", "--target", "gdb", "--unconfined", "--backend", "int3",
                       "-o", "/dev/null", program, "recursion")
    assert got.returncode == want.returncode == 0, got.stderr
    assert got.stdout == want.stdout and b"fact(10) = 3628800" in got.stdout


@pytest.mark.parametrize("isa", ISAS)
def test_gdb_signals_pass_through_the_stub(isa: str) -> None:
    """testbins' `signals`: handlers run (the stub's reported signals passed back), and its
    death by SIGUSR1 is the status qemu-user's own run ends with."""
    program = bin_path(isa, "signals")
    want = run_qemu(isa, program)
    got = run_emutrace("run", "--target", "gdb", "--unconfined", "--backend", "int3",
                       "-o", "/dev/null", program)
    assert got.stdout == want.stdout and got.stdout.count(b"\n") > 3
    assert want.returncode == -signal.SIGUSR1 and got.returncode == 128 + signal.SIGUSR1


def test_gdb_exit_status_is_the_programs() -> None:
    program = bin_path("x86_64", "calls")
    want = run_qemu("x86_64", program, "exit42")
    got = run_emutrace("run", "--target", "gdb", "--unconfined", program, "exit42")
    assert got.returncode == want.returncode == 42


@pytest.mark.parametrize(("extra", "says"), [
    ((), b"--unconfined"),
    (("--unconfined", "--backend", "step"), b"no gdb-remote port"),
    (("--unconfined", "--root", "/tmp"), b"no sandbox"),
])
def test_gdb_refusals_are_usage_errors(extra: tuple[str, ...], says: bytes) -> None:
    got = run_emutrace("run", "--target", "gdb", *extra, bin_path("x86_64", "calls"),
                       "recursion")
    assert got.returncode == 64 and says in got.stderr and b"Traceback" not in got.stderr


def test_record_gdb_is_refused() -> None:
    got = run_emutrace("record", "--target", "gdb", "--unconfined", "-d", "/tmp/nowhere.data",
                       bin_path("x86_64", "calls"), "recursion")
    assert got.returncode == 64 and b"not built" in got.stderr


def test_gdb_timeout_ends_the_run() -> None:
    got = run_emutrace("run", "--target", "gdb", "--unconfined", "--timeout", "1",
                       "--backend", "int3", "-o", "/dev/null", bin_path("x86_64", "fib"), "40")
    assert got.returncode == 124 and b"--timeout reached" in got.stderr


def test_info_lists_the_gdb_engine_per_isa() -> None:
    section = run_emutrace("info").stdout.decode().split("Engines (run --target)\n")[1]
    lines = {line.split()[0]: line for line in section.split("\n\n")[0].splitlines()}
    for isa in (*ISAS, "mips"):  # (MIPS's stub: GDB's own register numbering)
        assert f"gdb (qemu-{isa}-static)" in lines[isa]
