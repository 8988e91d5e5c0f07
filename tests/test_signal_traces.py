"""What signal handlers run is traced, nested where the signal arrived.

Program: testbins/<isa>/signals (src/signals.c): handlers run by raise and kill, an
SA_SIGINFO handler, SIGCHLD handlers while the program waits for its children, SIGALRM
in pause(), and a SIGSEGV handler on a sigaltstack that leaves by siglongjmp, twice.
Oracle: the program's own -finstrument-functions record (testbins/<isa>/signals.instr,
the same source with src/instr_signals.c: `~` marks siglongjmp), written under qemu-user.
Its canonical trace over the program's own functions must equal emutrace's of `signals`.
A program that forks runs in a Python process of its own (tests/signal_trace_run.py);
the runs of one test go at once (each waits a second for its alarm)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emutrace import native
from emutrace.elf import load_image
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import (
    canonical_from_instr,
    canonical_text,
    instr_records,
    parse_instr_record,
)
from emutrace.trace.events import Call, Entry, Exit, Return, Trap, TrapReturn
from emutrace.trace.format import ReplayOptions, replay_text
from emutrace.trace.shadow import ShadowStack

from .conftest import ENV, REPO, bin_path, isa_params, qemu_binary

FUNCS = ("main", "on_signal", "on_info", "on_chld", "on_segv", "status")


def _oracle(isa: str, workdir: Path) -> subprocess.Popen[bytes]:
    record = workdir / "record"
    return subprocess.Popen([qemu_binary(isa), str(bin_path(isa, "signals.instr"))],
                            env={**ENV, "CALLTRACE_OUT": str(record)}, cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _traced(isa: str, workdir: Path, backend: str, cleanup: str = "lazy",
            engine: str = "python") -> tuple[subprocess.Popen[bytes], Path]:
    out = workdir / f"{backend}.{cleanup}.{engine}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.signal_trace_run", str(out), backend, cleanup,
         str(bin_path(isa, "signals")), ",".join(FUNCS), engine],
        cwd=REPO, env={**ENV, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    return proc, out


def _compare(isa: str, workdir: Path, runs: list[tuple[str, str, str]]) -> None:
    """Start the oracle and every run at once; each run's canonical trace (and exit
    status: killed by SIGUSR1 at the end, 138) must equal the record's."""
    oracle = _oracle(isa, workdir)
    started = [(f"{b} {c} {e}", *_traced(isa, workdir, b, c, e)) for b, c, e in runs]
    oracle.wait(timeout=120)
    image = load_image(str(bin_path(isa, "signals.instr")))

    def name(addr: int) -> str:
        return image.symbolize(image.isa.code_address(addr)).split("+")[0]

    record = (workdir / "record").read_text()
    want = canonical_from_instr(record, name, set(FUNCS))
    # the record is sane: every handler ran, nested in main; on_segv left by siglongjmp
    lines = want.splitlines()
    assert lines[0] == "> main" and lines[-1] == "<! main"
    for handler in ("on_signal", "on_info", "on_chld"):
        assert f"  > {handler}" in lines and f"  < {handler}" in lines, handler
    assert lines.count("  > on_segv") == lines.count("  <~ on_segv") == 2
    for what, proc, out in started:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{what}: {err.decode()[-2000:]}"
        assert out.read_text() == f"exit 138\n{want}", what


@pytest.mark.oracle
@pytest.mark.parametrize("isa", isa_params(Cap.SIGNAL_HANDLERS))
def test_handlers_traced_as_the_program_records_them(isa: str, tmp_path: Path) -> None:
    """int3 and step: every handler's run is a frame nested under the interrupted
    function, the siglongjmp'd ones closed as unwound (`<~`).  (int3's strict cleanup,
    twice as slow here, on x86_64 and riscv64: test_every_mechanism_agrees_on_handlers.)"""
    _compare(isa, tmp_path, [("int3", "lazy", "python"), ("step", "lazy", "python")])


@pytest.mark.oracle
def test_arm_handlers_traced_by_the_native_engine(tmp_path: Path) -> None:
    """arm's calls and returns are finished in C (isa/arm.py lower_arm): around handler
    frames, sigreturn and siglongjmp, the native engine's trace is still the record's."""
    assert native.available(), "the native library is not built (pip install -e .)"
    _compare("arm", tmp_path, [("int3", "lazy", "native")])


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["x86_64", "riscv64"])
def test_every_mechanism_agrees_on_handlers(isa: str, tmp_path: Path) -> None:
    """N-version: hwbp, bts, btf and entry give the record's trace too (x86_64 and a RISC
    ISA whose breakpoints are site hooks); and int3 with strict cleanup, on x86_64 by the
    native engine (lazy too; and step's native engine), on riscv64 by both engines (the
    native one switching its site hooks in C: strict.c).
    bts, btf and entry by the native engine on both (C's records around the signal
    frames; entry's probes C's on x86_64, Python's site hooks on riscv64)."""
    runs = [(b, "lazy", "python") for b in ("hwbp", "bts", "btf", "entry")]
    runs += [("bts", "lazy", "native"), ("btf", "lazy", "native"), ("entry", "lazy", "native")]
    if isa == "x86_64":
        assert native.available(), "the native library is not built (pip install -e .)"
        runs += [("int3", "lazy", "native"), ("int3", "strict", "native"),
                 ("step", "lazy", "native")]
    else:
        runs += [("int3", "strict", "python"), ("int3", "strict", "native")]
    _compare(isa, tmp_path, runs)


# ------------------------------------------------------- the shadow stack's policy 7
MAIN, F, HANDLER, G = 0x100, 0x200, 0x300, 0x400
TRAMPOLINE = 0x9000


def _canonical(events: list) -> str:
    shadow = ShadowStack()
    records = [r for ev in events for r in shadow.feed(ev)]
    records += shadow.close_all(99)
    names = {MAIN: "main", F: "f", HANDLER: "handler", G: "g"}
    return canonical_text(records, names.__getitem__)


def test_signal_frame_returns_by_sigreturn() -> None:
    """A handler that returns: its frame ends at rt_sigreturn (not unwound), its own
    return to the trampoline is no frame's; f goes on after it."""
    text = _canonical([
        Call(0, 0x10, MAIN, 0x8000, 0x11), Call(1, 0x120, F, 0x7f00, 0x121),
        Trap(2, HANDLER, 0x7a00, (0, 0x7ef0)),
        Call(3, 0x310, G, 0x7a00, 0x311), Return(4, 0x410, 0x79f8, None, 0x311),
        Return(5, 0x320, 0x7a00, None, TRAMPOLINE), TrapReturn(6, TRAMPOLINE),
        Return(7, 0x220, 0x7ef8, None, 0x121)])
    assert text == ("> main\n  > f\n    > handler\n      > g\n      < g\n    < handler\n"
                    "  < f\n<! main\n")


def test_signal_frame_left_by_siglongjmp() -> None:
    """A handler on a sigaltstack (above the stack here: the range decides, not the
    order) calls g there: no frame is closed.  After siglongjmp to main, main's next call
    lies outside the handler's stack: handler and f are unwound there, g is main's."""
    alt = (0xa0000, 0xb0000)
    text = _canonical([
        Call(0, 0x10, MAIN, 0x8000, 0x11), Call(1, 0x120, F, 0x7f00, 0x121),
        Trap(2, HANDLER, 0xaff00, alt),
        Call(3, 0x310, G, 0xafe00, 0x311), Return(4, 0x410, 0xafdf8, None, 0x311),
        Call(5, 0x130, G, 0x7f00, 0x131), Return(6, 0x410, 0x7ef8, None, 0x131)])
    assert text == ("> main\n  > f\n    > handler\n      > g\n      < g\n    <~ handler\n"
                    "  <~ f\n  > g\n  < g\n<! main\n")


def test_record_marks_siglongjmp() -> None:
    """`~` in a self-record: the innermost open frame leaves by a non-local jump."""
    records = instr_records(parse_instr_record("> 0x1\n> 0x2\n~ 0x2a\n> 0x3\n< 0x3\n< 0x1\n"))
    assert [(type(r).__name__, r.func, getattr(r, "unwound", None)) for r in records] == [
        ("Entry", 1, None), ("Entry", 2, None), ("Exit", 2, True), ("Entry", 3, None),
        ("Exit", 3, False), ("Exit", 1, False)]
    assert all(isinstance(r, (Entry, Exit)) for r in records)


def test_text_marks_handler_frames() -> None:
    """The text trace says which frames a signal handler is, left by siglongjmp or not."""
    shadow = ShadowStack()
    events = [Call(0, 0x10, MAIN, 0x8000, 0x11), Trap(1, HANDLER, 0x7a00, (0, 0x7ff8)),
              Return(2, 0x320, 0x7a00, None, TRAMPOLINE), TrapReturn(3, TRAMPOLINE),
              Trap(4, F, 0x7a00, (0, 0x7ff8)), Call(5, 0x310, G, 0x79f0, 0x311),
              Return(6, 0x410, 0x79e8, 7, 0x311), Call(7, 0x12, G, 0x7ff8, 0x13)]
    records = [r for ev in events for r in shadow.feed(ev)] + shadow.close_all(9)
    names = {MAIN: "main", F: "f", HANDLER: "handler", G: "g"}
    lines = [line.split("|", 1)[1] for line in replay_text(
        records, names.__getitem__, ReplayOptions(show_args=False)).splitlines() if "|" in line]
    assert lines == [" main() {", "   handler(); /* signal handler */",
                     "   f() { /* signal handler */", "     g() = 7;",
                     "   } /* f (unwound) */", "   g(); /* at exit */",
                      " } /* main (at exit) */"]


@pytest.mark.oracle
def test_alarm_between_blocks_nests_as_step_sees_it() -> None:
    """`sigctx`'s SIGALRM arrives between blocks of a loop without system calls (its
    back-edge jump not resolved yet when the handler is entered): int3 == step == bts
    over every function, the handler nested where it ran (N-version: no record here)."""
    traces = {}
    for backend in ("int3", "step", "bts"):
        config = RunConfig(str(bin_path("x86_64", "sigctx")), backend=backend, env={})
        result = Process(config, warn=lambda _m: None).run()
        assert result.exit_code == 0
        image = result.image
        traces[backend] = canonical_text(result.records,
                                         lambda a, i=image: i.symbolize(a).split("+")[0])
    assert traces["int3"] == traces["step"] == traces["bts"]
    assert "> on_alarm\n" in traces["step"]
