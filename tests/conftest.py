"""Shared helpers: where the committed test programs are, and how to run a program under
emutrace and under qemu-user (the oracle) the same way."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emutrace.isa import MODULES, by_name
from emutrace.isa.base import Cap

REPO = Path(__file__).resolve().parent.parent
TESTBINS = REPO / "testbins"
BUSYBOX = REPO / ".cache" / "busybox"
# the ISAs emulation runs (every test program runs there); those only the gdb target runs
# (the capability table's run_static says why) are tested in tests/test_isa_new.py (an ISA
# with neither, x86_16, runs under Qiling's DOS layer: tests/test_qiling.py)
ISAS = tuple(m for m in MODULES if by_name(m).capability(Cap.RUN_STATIC).works)
GDB_ONLY_ISAS = tuple(m for m in MODULES if m not in ISAS
                      and by_name(m).capability(Cap.GDB_TARGET).works)
# PYTHONPATH: `python -m emutrace` in a subprocess runs the code beside these tests (a
# second checkout or worktree), not whatever checkout is installed in editable mode.
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": "/nonexistent",
       "PYTHONPATH": str(REPO)}


def bin_path(isa: str, name: str) -> Path:
    return TESTBINS / isa / name


def cli_argv(args: tuple[str | os.PathLike[str], ...]) -> list[str]:
    """An emutrace command line as the tests give it: a `run` without `--backend` gets
    `--backend none`."""
    argv = [str(a) for a in args]
    if argv[:1] == ["run"] and "--backend" not in argv:
        argv[1:1] = ["--backend", "none"]
    return argv


def run_emutrace(*args: str | os.PathLike[str], cwd: Path | None = None,
                 stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m emutrace ARGS` in a subprocess, with a small fixed environment.  A `run`
    without `--backend` gets `--backend none`: tests about running (not tracing) compare
    stderr with qemu's, and the default backend would add the trace there.  The process is
    forked from a warm start (tests/warm_start.py) when there is one: the same command in
    a process of its own, without the interpreter's start and emutrace's imports."""
    argv = cli_argv(args)
    command = [sys.executable, "-m", "emutrace", *argv]
    server = WarmStart.here()
    if server is not None and server.lock.acquire(blocking=False):
        try:
            return server.run(command, argv, cwd, stdin, timeout)
        finally:
            server.lock.release()
    return subprocess.run(command, cwd=cwd, input=stdin, capture_output=True,
                          timeout=timeout, env=ENV)


class WarmStart:
    """This pytest process's server of tests/warm_start.py: started at the first command,
    ended with the process.  Commands run one at a time through it; a command asked for
    while another is running (from a second thread) starts the plain way."""

    _server: WarmStart | None = None
    # the CPU its commands used so far (their processes are the server's children, whose
    # time reaches this process's RUSAGE_CHILDREN only when the server ends): tools/suite_cost.py
    cpu_seconds = 0.0
    DISABLED = os.environ.get("EMUTRACE_TESTS_COLD_START") == "1"  # every command cold

    def __init__(self) -> None:
        import socket
        import threading

        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "warm_start.py"), str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=REPO, env=ENV)
        theirs.close()
        import atexit

        atexit.register(self.close)

    def close(self) -> None:
        """End the server (it ends when its socket closes) and reap it: its commands' CPU
        time is then this process's children's, as a plain subprocess's is."""
        self.sock.close()
        if self.pid == os.getpid():
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    @classmethod
    def here(cls) -> WarmStart | None:
        if cls.DISABLED:
            return None
        server = cls._server
        if server is None or server.pid != os.getpid() or server.proc.poll() is not None:
            server = cls._server = cls()
        return server

    def run(self, command: list[str], argv: list[str], cwd: Path | None, stdin: bytes | None,
            timeout: float) -> subprocess.CompletedProcess:
        import json
        import socket
        import threading
        import time

        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), -1)
        try:
            request = json.dumps({"argv": argv, "cwd": str(cwd or os.getcwd())}).encode()
            socket.send_fds(self.sock, [request], [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        if in_w >= 0:
            threading.Thread(target=_feed, args=(in_w, stdin), daemon=True).start()
        pid = int(self.sock.recv(64))
        deadline = time.monotonic() + timeout
        out, err, timed_out = _drain(out_r, err_r, deadline, pid)
        code_text, cpu_text = self.sock.recv(64).split()
        code = int(code_text)
        WarmStart.cpu_seconds += float(cpu_text)
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(command, code, out, err)


def _feed(fd: int, data: bytes) -> None:
    """The command's stdin, written as subprocess does (a pipe, closed at the end)."""
    try:
        with open(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def _drain(out_r: int, err_r: int, deadline: float, pid: int) -> tuple[bytes, bytes, bool]:
    """Read both pipes to their ends; past the deadline, kill the command (SIGKILL, as
    subprocess.run does at its timeout) and read what is left."""
    import selectors
    import signal
    import time

    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = None if timed_out else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                continue
            for key, _ in sel.select(left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out


@pytest.fixture
def emutrace_here(monkeypatch: pytest.MonkeyPatch, capfdbinary: pytest.CaptureFixture[bytes]
                  ) -> Callable[..., subprocess.CompletedProcess]:
    """`run_emutrace` in this process: the command line's `main` with the same small
    environment, in `cwd`, stdin the bytes given (or /dev/null), the guest's and emutrace's
    output read from file descriptors 1 and 2 (capfd), the exit status main returns.  It
    spares the cells of a large grid the interpreter's start and emutrace's imports (~0.2 s
    each) and lets discovery's per-file memo serve the next cell; the subprocess form stays
    for what only a process shows (its signals, a crash, a fork).  (A guest's fork forks
    this process under `run`: the child never returns into pytest.)"""
    import tempfile

    from emutrace.cli.main import main

    def run(*args: str | os.PathLike[str], cwd: Path,
            stdin: bytes | None = None) -> subprocess.CompletedProcess:
        argv = cli_argv(args)
        pid = os.getpid()
        with monkeypatch.context() as m, tempfile.TemporaryFile() as given:
            for name in list(os.environ):
                m.delenv(name)
            for name, value in ENV.items():
                m.setenv(name, value)
            m.chdir(cwd)
            given.write(stdin or b"")
            given.flush()
            given.seek(0)
            saved = os.dup(0)
            os.dup2(given.fileno(), 0)
            capfdbinary.readouterr()
            code = 70  # (EX_SOFTWARE, should main raise in a forked child)
            try:
                code = main(argv)
            finally:
                if os.getpid() != pid:  # a forked child back from its run: its status to
                    os._exit(code)  # its parent, never into pytest
                os.dup2(saved, 0)
                os.close(saved)
                sys.stdout.flush()
                sys.stderr.flush()
            out, err = capfdbinary.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)
    return run


def qemu_binary(isa: str) -> str:
    name = f"qemu-{by_name(isa).identity.qemu}-static"
    path = shutil.which(name)
    if path is None:  # not a skip: CI installs qemu-user-static, its absence is a failure
        pytest.fail(f"{name} not found: install qemu-user-static (make setup does)")
    return path


def run_qemu(isa: str, program: str | os.PathLike[str], *args: str, cwd: Path | None = None,
             stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([qemu_binary(isa), str(program), *args], cwd=cwd, input=stdin,
                          capture_output=True, timeout=timeout, env=ENV)


def hard_results(stdout: bytes) -> dict[str, str]:
    """The lines of the hostile test programs (testbins/src/hard_show.h): what → "ret" or
    "ret ERRNO"."""
    out = {}
    for line in stdout.decode().splitlines():
        what, sep, rest = line.partition(" = ")
        if sep:
            out[what] = rest
    return out


def shell_status(returncode: int) -> int:
    """subprocess reports a killed child as -signal; a shell (and emutrace) as 128+signal."""
    return 128 - returncode if returncode < 0 else returncode


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (proc(5): fields 14 and 15 of
    /proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_emulated(proc: subprocess.Popen, cpu: float, limit: float = 120) -> None:
    """Until `proc` (an emutrace run) is emulating — its watcher thread exists only while
    emulation runs (target/unicorn_run.py) — and has then used `cpu` more seconds of CPU.
    CPU time, not wall time: on a loaded machine a fixed sleep may end before the guest got
    anywhere, which made signal tests flaky."""
    import time

    deadline = time.monotonic() + limit
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 2:
        assert proc.poll() is None, "emutrace ended before emulation was seen"
        assert time.monotonic() < deadline, "emulation did not start"
        time.sleep(0.02)
    start = cpu_seconds(proc.pid)
    while cpu_seconds(proc.pid) - start < cpu:
        assert proc.poll() is None, "emutrace ended before it was stopped"
        assert time.monotonic() < deadline, "emutrace made no progress"
        time.sleep(0.02)


def wait_until_blocked(proc: subprocess.Popen, limit: float = 120) -> None:
    """Until `proc` (an emutrace run) is emulating and its main thread sleeps (state S in
    /proc/PID/task/PID/stat, proc(5)) at two polls in a row: the guest waits in a blocking
    system call (a sleep, a read of an empty pipe)."""
    import time

    deadline = time.monotonic() + limit
    stat = Path(f"/proc/{proc.pid}/task/{proc.pid}/stat")
    asleep = 0
    while asleep < 2:
        assert proc.poll() is None, "emutrace ended before it was stopped"
        assert time.monotonic() < deadline, "the guest never blocked"
        emulating = len(os.listdir(f"/proc/{proc.pid}/task")) > 1
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
        asleep = asleep + 1 if emulating and state == "S" else 0
        time.sleep(0.05)


# The cyclic garbage collector, in the pytest processes: a full collection traverses every
# live object, and a worker holds many (the test modules, discovery's memo of a static glibc,
# the module memos below, the records of the run at hand): with Python's thresholds
# (700, 10, 10) full collections took ~15 % of a worker's time (measured: 68-81 s of 605 s
# per worker on test_trace_oracle, test_native_engine and test_native_writer).  A full
# collection after 100 younger ones instead of 10 (and the objects alive once collection
# has imported every module moved out of its sight, gc.freeze, as cli/main.py does for the
# `emutrace` process) leaves 21-25 s; garbage cycles (a finished Process) still go at the
# next collection, at the latest when a module's memos are released.
GC_THRESHOLDS = (700, 10, 100)


def pytest_configure(config: pytest.Config) -> None:
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()


def isa_params(capability: Cap) -> list:
    """Every ISA as a pytest parameter; where the ISA's capability table says `capability`
    does not work, a strict xfail carrying its reason."""
    out = []
    for isa in ISAS:
        cap = by_name(isa).capability(capability)
        marks = [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]
        out.append(pytest.param(isa, marks=marks, id=isa))
    return out


@pytest.fixture(autouse=True, scope="module")
def _release_module_memos(request: pytest.FixtureRequest) -> Iterator[None]:
    """Runs shared between a module's tests are memoised (`functools.cache`) and hold whole
    emulated processes (~30-60 MB each); forget them when the module is done, so one pytest
    worker does not carry every module's runs to the end of the suite (a CI worker grew
    past 10 GB and was killed)."""
    yield
    for value in list(vars(request.module).values()):
        if getattr(value, "__module__", "").startswith("tests.") and \
                callable(getattr(value, "cache_clear", None)):
            value.cache_clear()
    gc.collect()

