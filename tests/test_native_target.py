"""`run --target native`: x86 programs run on this host under ptrace, traced by
the same backends through the target protocol.

Oracles: the program's own `-finstrument-functions` record (`calls.instr` run natively on
this x86_64 host), the emulated run of the same program (an independent delivery: Unicorn
hooks instead of real traps), and the hand-derived counts of `testbins/x86_64/counts`
(tests/test_counts.py's listing).  The comparison keeps the program's own functions: glibc's
start-up differs natively (its IFUNCs and cache-size probes follow the host CPU's CPUID,
which Unicorn's model does not match)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.errors import UsageError
from emutrace.native_session import NativeProcess
from emutrace.session import Process, RunConfig, RunResult
from emutrace.target.ptrace import PTRACE_SINGLEBLOCK, PTRACE_SINGLESTEP, kill, ptrace, spawn
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import BUSYBOX, ENV, TESTBINS, bin_path, run_emutrace, shell_status

NATIVE = ("--target", "native", "--unconfined")


def namer(path: str):  # type: ignore[no-untyped-def]
    syms = read_symbols(load_image(path))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


def native(program: Path, args: list[str], backend: str, cleanup: str = "lazy") -> RunResult:
    return NativeProcess(RunConfig(str(program), args, backend=backend,
                                   cleanup=cleanup)).run()


@pytest.mark.parametrize(("isa", "scenario", "backend"), [
    ("x86_64", "qsort", "int3"), ("x86_64", "longjmp", "int3"), ("x86_64", "crash", "int3"),
    ("x86_64", "tail", "hwbp"), ("x86_64", "tail", "btf"), ("i386", "recursion", "int3")])
def test_native_trace_equals_emulated_and_own_record(isa: str, scenario: str, backend: str,
                                                     tmp_path: Path) -> None:
    instr = str(bin_path(isa, "calls.instr"))
    direct = subprocess.run([instr, scenario], capture_output=True, timeout=60, env=ENV,
                            cwd=tmp_path)  # natively, no emutrace
    record = direct.stderr.decode()
    instr_name = namer(instr)
    keep = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, keep)

    plain = bin_path(isa, "calls")
    got = native(plain, [scenario], backend)
    assert got.exit_code == shell_status(direct.returncode)  # crash: SIGSEGV, 139
    emulated = Process(RunConfig(str(plain), [scenario], backend=backend),
                       warn=lambda m: None).run()
    name = namer(str(plain))
    text = canonical_text(got.records, name, keep)
    assert text.count("\n") > 3
    assert text == want
    assert text == canonical_text(emulated.records, name, keep)


COUNTS = TESTBINS / "x86_64" / "counts"


def test_native_counts_int3_lazy() -> None:
    """As tests/test_counts.py derives them: 8 traps (the 4 calls and 4 returns), all
    simulated, 7 patches (_start 1, main 3, leaf 1, mid 2) — and no cache removal: a real
    CPU sees the POKETEXT write at once (emulation drops 7 translations)."""
    r = native(COUNTS, [], "int3")
    assert r.exit_code == 0
    s = r.backend_stats
    assert (s["traps"], s["simulated"], s["fallbacks"]) == (8, 8, 0)
    assert (s["patches"], s["cache_removals"], s["functions"]) == (7, 0, 4)


def test_native_counts_int3_strict() -> None:
    """Strict: 33 breakpoint writes (tests/test_counts.py), none needing a cache removal."""
    s = native(COUNTS, [], "int3", "strict").backend_stats
    assert (s["traps"], s["patches"], s["cache_removals"]) == (8, 33, 0)


def test_native_step_counts_every_instruction() -> None:
    """PTRACE_SINGLESTEP stops before each of the 16 instructions once."""
    r = native(COUNTS, [], "step")
    assert r.backend_stats == {"steps": 16, "calls": 4, "returns": 4, "tail_calls": 0}


def test_native_counts_hwbp_debug_registers() -> None:
    """Real DR0-DR3 (tests/test_counts.py's derivation): 4 slots, 8 hits, 17 slot writes;
    one slot (--hw-slots 1): 9 writes, 5 stepped fall-backs, 3 stepped non-site
    instructions (the trap flag across main's and mid's spans)."""
    assert native(COUNTS, [], "hwbp").backend_stats == {
        "hits": 8, "slot_writes": 17, "fallbacks": 0, "stepped": 0, "max_slots": 3,
        "functions": 4}
    one = NativeProcess(RunConfig(str(COUNTS), [], backend="hwbp", hw_slots=1)).run()
    assert one.backend_stats == {"hits": 8, "slot_writes": 9, "fallbacks": 5, "stepped": 3,
                                 "max_slots": 1, "functions": 4}


def test_native_counts_entry_probes() -> None:
    """entry (eager int3 on every entry and return, uprobes' way), as tests/test_counts.py
    derives it: 6 probes, 7 traps, 2 step-overs of a displaced `push` (stepped natively),
    5 simulated."""
    assert native(COUNTS, [], "entry").backend_stats == {
        "probes": 6, "patches": 6, "traps": 7, "stepovers": 2, "simulated": 5, "functions": 4}


def raw_stops(request: int) -> int:
    """Stops of `counts` resumed with `request` each time, by a bare ptrace loop."""
    pid = spawn(str(COUNTS), [str(COUNTS).encode()], [])
    stops = 0
    try:
        while True:
            ptrace(request, pid, 0, 0)
            _, status = os.waitpid(pid, 0)
            if not os.WIFSTOPPED(status):
                return stops
            stops += 1
    finally:
        kill(pid)


def test_native_btf_and_its_degradation() -> None:
    """btf natively: the 8 taken branches of `counts` (4 calls, 4 returns) as derived by
    hand, and `degraded` reported exactly when PTRACE_SINGLEBLOCK stops as often as
    PTRACE_SINGLESTEP on the same program (bare ptrace loops: the hypervisor dropped
    DEBUGCTL.BTF; KVM does on this machine), with `stops` the block stops taken."""
    r = native(COUNTS, [], "btf")
    s = r.backend_stats
    assert (s["traps"], s["calls"], s["returns"], s["tail_calls"]) == (8, 4, 4, 0)
    blocks, steps = raw_stops(PTRACE_SINGLEBLOCK), raw_stops(PTRACE_SINGLESTEP)
    assert s["stops"] == blocks
    assert s["degraded"] == int(blocks == steps)
    cli = run_emutrace("run", *NATIVE, "--backend", "btf", COUNTS)
    assert cli.returncode == 0
    said = "PTRACE_SINGLEBLOCK degraded to single-stepping" in cli.stderr.decode()
    assert said == (blocks == steps)


def test_info_native_reports_the_probed_mechanisms() -> None:
    """`emutrace info --native`: branch traps said degraded exactly when bare
    PTRACE_SINGLEBLOCK stops as often as PTRACE_SINGLESTEP on `counts`; debug registers
    work (the DR0 stop this file's hwbp test relies on); no branch-record PMU claimed
    unless the kernel lists one."""
    r = run_emutrace("info", "--native")
    assert r.returncode == 0
    lines = {line.split()[0] + " " + line.split()[1]: line
             for line in r.stdout.decode().splitlines()[1:]}
    degraded = raw_stops(PTRACE_SINGLEBLOCK) == raw_stops(PTRACE_SINGLESTEP)
    assert ("degraded" in lines["branch traps"]) == degraded
    assert "works" in lines["debug registers"]
    pmus = set(os.listdir("/sys/bus/event_source/devices"))
    assert lines["branch records"].split()[2].startswith("no:") == (
        not {"intel_bts", "cpu"} & pmus)


def test_cli_native_output_and_status(tmp_path: Path) -> None:
    """Through the CLI: the program's stdout and exit status pass through (oracle: the same
    program run directly), the trace names its calls."""
    direct = subprocess.run([str(bin_path("x86_64", "calls")), "exit42"], capture_output=True,
                            timeout=60, env=ENV)
    r = run_emutrace("run", *NATIVE, "--backend", "int3", bin_path("x86_64", "calls"),
                     "exit42", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (direct.returncode, direct.stdout)
    assert direct.returncode == 42
    assert "| main(" in r.stderr.decode()


@pytest.mark.parametrize(("argv", "message"), [
    ((*NATIVE, "ARM"), "arm program"),
    ((*NATIVE, "--root", "/tmp", "COUNTS"), "--root"),  # nothing to confine with --unconfined
    (("--target", "native", "--max-insns", "5", "COUNTS"), "--max-insns"),
])
def test_native_usage_errors(argv: tuple[str, ...], message: str) -> None:
    """Refused before anything runs: one line, exit 64."""
    paths = {"COUNTS": str(COUNTS), "ARM": str(bin_path("arm", "calls"))}
    r = run_emutrace("run", *(paths.get(a, a) for a in argv))
    err = r.stderr.decode()
    assert r.returncode == 64, err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("options", "message"), [
    ({"backend": "bts"}, "backend bts: "),
    ({"backend": "hwbp", "hw_slots": 5}, "4 instruction breakpoint registers"),
    ({"backend": "int3", "root": "/tmp", "program": str(bin_path("i386", "calls.dyn"))},
     "interpreter /lib/ld-linux.so.2 is not on this host, nor in a root of i386"),
])
def test_native_refusals_before_the_child_starts(options: dict, message: str) -> None:
    """What the native target cannot do is a UsageError before any child is spawned."""
    program = options.pop("program", str(COUNTS))
    with pytest.raises(UsageError, match=message):
        NativeProcess(RunConfig(program, [], **options))


@pytest.mark.parametrize(("shape", "backend", "note"), [
    ("fork", "int3", "2 forked child process(es) ran untraced"),
    ("exec", "none", "the program called execve; the new image ran untraced")])
def test_native_fork_and_exec_run_untraced(shape: str, backend: str, note: str,
                                           tmp_path: Path) -> None:
    """A program that forks (busybox sh running a pipeline, traced by int3) or execs
    (busybox env): the children and the new image run untraced, the children with the
    program's own code bytes (no inherited 0xCC kills them), so stdout and the exit status
    are those of the same command run directly; emutrace says what it did not trace."""
    bb = str(BUSYBOX / "x86_64" / "busybox")
    argv = [bb, "sh", "-c", f"{bb} echo a | {bb} cat; exit 3"] if shape == "fork" else \
        [bb, "env", bb, "echo", "hi"]
    direct = subprocess.run(argv, capture_output=True, timeout=60, env=ENV, cwd=tmp_path)
    trace = ["-o", tmp_path / "trace"] if backend != "none" else []  # (untraced: no -o)
    r = run_emutrace("run", *NATIVE, "--backend", backend, *trace, *argv, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (direct.returncode, direct.stdout)
    assert note in r.stderr.decode()


def test_native_child_start_failure_is_one_line(tmp_path: Path) -> None:
    """A child that cannot be started (execve refused: not executable) is exit 69 with the
    reason, never a traceback."""
    copy = tmp_path / "counts"
    shutil.copy(COUNTS, copy)
    copy.chmod(0o644)
    r = run_emutrace("run", *NATIVE, copy)
    err = r.stderr.decode()
    assert r.returncode == 69, err
    assert "Permission denied" in err and err.count("\n") == 1


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_native_child_dies_with_emutrace(sig: int, tmp_path: Path) -> None:
    """The traced child never outlives emutrace: SIGKILL emutrace while the child sleeps
    (busybox sleep) and the child is gone too (PR_SET_PDEATHSIG, PTRACE_O_EXITKILL);
    SIGTERM ends the run as interrupted (128 + 15, one line), the child killed."""
    busybox = BUSYBOX / "x86_64" / "busybox"
    if not busybox.exists():  # not a skip: scripts/setup.sh fetches it
        pytest.fail(f"{busybox} missing: run `make setup`")
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", *NATIVE, "--backend",
                             "int3", "-o", str(tmp_path / "trace"), str(busybox), "sleep",
                             "60"], env=ENV, cwd=tmp_path, stderr=subprocess.PIPE)
    child = None
    deadline = time.monotonic() + 60
    while child is None and time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            kids = []
        if kids and Path(f"/proc/{kids[0]}/exe").resolve() == busybox.resolve():
            child = int(kids[0])
        else:
            time.sleep(0.05)
    assert child is not None, "the traced child never started"
    time.sleep(0.5)  # past start-up, in its nanosleep
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=30)
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        assert err.decode().startswith("emutrace: interrupted at pc "), err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{child}/stat").exists() \
            and _state(child) not in "ZX":
        time.sleep(0.05)
    assert _state(child) in "ZX"  # gone, or dead and waiting only to be reaped


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return "X"
