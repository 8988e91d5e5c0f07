"""Debian's arm64 Linux traced ftrace-style on virt-arm64: the kernel's own function names
(Debian's System.map, `--symbols`) at its link addresses, tracing from the first exception
after the initramfs's /init printed its BEGIN line (`--trace-after`), so only `cat
/proc/version` and what follows it are traced (~2 M instructions of a ~10 s boot).

busybox's cat copies a file with sendfile(2), so its read of /proc/version is `do_sendfile`'s
graph (do_splice_direct, seq_read_iter, version_proc_show ...), not vfs_read's.

The oracle is the kernel's own function_graph tracer: the same kernel and the same command
under qemu-system-aarch64, with /init turning the tracer on for `do_sendfile` around `cat`
(funcgraph-irqs off) and printing the trace.  ftrace sees only the functions it can patch:
those whose entry holds the two NOPs of -fpatchable-function-entry=2 (read from the image's
bytes here, not from emutrace); emutrace also sees the others (memcpy, notrace helpers).
What time puts into the oracle's graph and not into emutrace's (the timer runs in host time,
and a busy CPU takes no interrupt: docs/kernels.md) is cut on both sides at three named
functions: the interrupt exit path (irq_enter_rcu, ksoftirqd_running, do_softirq_own_stack,
idle_cpu, shown with funcgraph-irqs off), a preemption inside `__cond_resched` (the
scheduler's calls under it), and `touch_atime`'s update of an atime that relatime finds
old.  Only one backend pair is run (int3 and step, the ground truth): one boot each, about
10 s of CPU (the other backends trace kernels in test_kernel.py)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from emutrace.machine.board.initramfs import BEGIN, END, busybox_initramfs
from emutrace.machine.board.presets import BOARDS

from .conftest import ENV, run_emutrace
from .test_kernel import LINUX
from .test_linux_boot import BUSYBOX, CMDLINE, COMMAND

SYSTEM_MAP = LINUX.parent / "System.map"
GRAPH = "do_sendfile"
ORACLE_INIT = "\n".join([
    "mount -t tracefs nodev /sys",
    f"echo {GRAPH} > /sys/set_graph_function",
    "echo 0 > /sys/options/funcgraph-irqs",
    "echo 1 > /sys/options/funcgraph-proc",
    "echo function_graph > /sys/current_tracer",
    COMMAND,
    "echo 0 > /sys/tracing_on",
    "cat /sys/trace"])
# where time enters the graph (module docstring): cut here, on both sides
ASYNC = frozenset({"irq_enter_rcu", "ksoftirqd_running", "do_softirq_own_stack", "idle_cpu"})
LEAVES = frozenset({"__cond_resched", "touch_atime"})
NOP = bytes.fromhex("1f2003d5")  # AArch64 NOP (C6.2.203)
TEXT_TYPES = "tTwW"

Call = tuple[int, str]  # (depth, function name)


def _need(*paths: Path) -> None:
    for path in paths:
        if not path.exists():  # not a skip: scripts/setup.sh fetches them
            pytest.fail(f"{path} missing: run scripts/setup.sh")


@pytest.fixture(scope="module")
def traceable() -> set[str]:
    """The functions ftrace can trace: their entry is the two patchable NOPs (from the
    Image's bytes at the System.map address; the Image is loaded from its first byte,
    `_text`)."""
    _need(LINUX, SYSTEM_MAP)
    image = LINUX.read_bytes()
    starts = {}
    for line in SYSTEM_MAP.read_text().splitlines():
        addr, kind, name = line.split()[:3]
        if kind in TEXT_TYPES:
            starts.setdefault(name, int(addr, 16))
    base = starts["_text"]
    return {name for name, addr in starts.items()
            if image[addr - base:addr - base + 8] == NOP * 2}


@pytest.fixture(scope="module")
def initrd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need(BUSYBOX)
    path = tmp_path_factory.mktemp("linux") / "initramfs.cpio"
    path.write_bytes(busybox_initramfs(BUSYBOX.read_bytes(), COMMAND))
    return path


@pytest.fixture(scope="module")
def ftrace_graph(tmp_path_factory: pytest.TempPathFactory) -> list[Call]:
    """function_graph of GRAPH while cat runs, under qemu-system-aarch64."""
    _need(LINUX, BUSYBOX)
    path = tmp_path_factory.mktemp("ftrace") / "initramfs.cpio"
    path.write_bytes(busybox_initramfs(BUSYBOX.read_bytes(), ORACLE_INIT))
    qemu = [*BOARDS["virt-arm64"].qemu, "-nographic", "-monitor", "none", "-serial", "stdio",
            "-net", "none", "-kernel", str(LINUX), "-initrd", str(path), "-append", CMDLINE]
    console = subprocess.run(qemu, capture_output=True, timeout=300, env=ENV,
                             stdin=subprocess.DEVNULL).stdout.decode(errors="replace")
    graph = ftrace_calls(console.split(BEGIN)[1].split(END)[0])
    assert graph and graph[0] == (0, GRAPH), console[-2000:]
    return graph


@pytest.fixture(scope="module")
def traces(initrd: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """int3's trace filtered by -F GRAPH, and step's whole trace (the same boot and
    command, each from the first exception after BEGIN until END is printed)."""
    out = tmp_path_factory.mktemp("traces")
    got = {}
    for backend, filters in (("int3", ("-F", GRAPH)), ("step", ())):
        trace = out / f"{backend}.txt"
        done = run_emutrace(
            "run", "--machine", "virt-arm64", "--backend", backend, "--symbols", SYSTEM_MAP,
            "--initrd", initrd, "--append", CMDLINE, "--trace-after", BEGIN, "--until", END,
            *filters, "-o", trace, LINUX, timeout=600)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert b"Linux version 6.1" in done.stdout.split(BEGIN.encode())[1]
        got[backend] = trace.read_text()
    return got


def ftrace_calls(console: str) -> list[Call]:
    """(depth, name) of each call in a function_graph trace (funcgraph-proc lines:
    ` 0)     cat-79     |   1.872 us    |      PageHuge();`), of the first task shown."""
    calls, task = [], None
    for line in console.splitlines():
        parts = line.split("|")
        head = re.match(r"\s*\d+\)\s+(\S+)", parts[0])
        if len(parts) < 3 or head is None:
            continue
        task = task or head.group(1)
        body = parts[2].rstrip()
        name = body.lstrip(" ")
        if head.group(1) == task and not name.startswith("}"):
            calls.append(((len(body) - len(name)) // 2 - 1, name.split("(")[0]))
    return calls


def emutrace_calls(trace: str) -> list[Call]:
    """(depth, name) of each call in emutrace's text trace (`DURATION | FUNCTION`)."""
    calls = []
    for line in trace.splitlines()[1:]:
        body = line.split("|", 1)[1]
        name = body.lstrip(" ")
        if not name.startswith("}"):
            calls.append(((len(body) - len(name)) // 2, name.split("(")[0]))
    return calls


def subtrees(calls: list[Call], root: str) -> list[Call]:
    """The calls under (and of) each call of `root`, re-rooted at depth 0."""
    out: list[Call] = []
    top = None
    for depth, name in calls:
        if top is not None and depth <= top:
            top = None
        if top is None and name == root:
            top = depth
        if top is not None:
            out.append((depth - top, name))
    return out


def visible(calls: Iterable[Call], traceable: set[str]) -> list[Call]:
    """The calls ftrace could show, nested as ftrace nests them (a function it cannot
    trace is left out and its callees move up), cut where time enters (ASYNC, LEAVES)."""
    out: list[Call] = []
    stack: list[tuple[int, bool]] = []  # (depth, shown) of the open calls
    cut: int | None = None
    for depth, name in calls:
        if cut is not None and depth > cut:
            continue
        cut = None
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if name in ASYNC:
            cut = depth
            continue
        shown = name in traceable
        if shown:
            out.append((sum(s for _, s in stack), name))
        stack.append((depth, shown))
        if name in LEAVES:
            cut = depth
    return out


def shape(trace_lines: Iterable[str], indent: int = 0) -> list[str]:
    """The lines of a text trace without the values (the two boots' pointers differ),
    `indent` levels taken off: duration, nesting, name."""
    out = []
    for line in trace_lines:
        duration, body = line.split("|", 1)
        body = re.sub(r"\(.*|= .*|/\*.*", "", body[1 + 2 * indent:]).rstrip()
        out.append(f"{duration}|{body}")
    return out


def lines_under(trace: str, root: str) -> list[list[str]]:
    """The lines of each call of `root` in a whole text trace: its line to its closing
    line, with the depth it was called at."""
    found, open_at = [], None
    for line in trace.splitlines()[1:]:
        body = line.split("|", 1)[1]
        name = body.lstrip(" ")
        depth = (len(body) - len(name)) // 2  # (one space, then two per level)
        if open_at is None and name.startswith(f"{root}("):
            found.append((depth, [line]))
            if not name.rstrip().endswith("{"):
                continue  # a leaf: one line
            open_at = depth
        elif open_at is not None:
            found[-1][1].append(line)
            if depth == open_at and name.startswith("}"):
                open_at = None
    return [shape(lines, depth) for depth, lines in found]


def test_int3_equals_step(traces: dict[str, str]) -> None:
    """int3's `-F do_sendfile` and the do_sendfile calls in step's whole trace: the same
    calls, nested alike, with the same instruction counts."""
    int3 = traces["int3"].splitlines()
    assert int3[1].endswith(f"| {GRAPH}(1, 3, 0, 0x1000000) {{")  # sendfile(1, 3, ...)
    step = lines_under(traces["step"], GRAPH)
    assert len(step) == 2  # the copy, then the call that finds the end of the file
    assert shape(int3[1:]) == [line for call in step for line in call]


def test_calls_equal_ftrace(traces: dict[str, str], ftrace_graph: list[Call],
                            traceable: set[str]) -> None:
    got = visible(emutrace_calls(traces["int3"]), traceable)
    want = visible(ftrace_graph, traceable | {n for _d, n in ftrace_graph})
    assert [f"{'  ' * d}{n}" for d, n in got] == [f"{'  ' * d}{n}" for d, n in want]
    names = {n for _d, n in got}
    assert {"do_splice_direct", "seq_read_iter", "version_proc_show"} <= names


def test_exceptions_and_user_code(traces: dict[str, str]) -> None:
    """System calls, faults and interrupts are exception frames (the vector's function,
    marked `exception`), the handler's calls under them; no user-mode code (EL0, outside
    the image) is traced: every function is the kernel's."""
    text = traces["step"]
    frames = [line for line in text.splitlines() if "/* exception */" in line]
    assert frames and all(re.search(r"\| +vectors\(", f) for f in frames)
    calls = emutrace_calls(text)
    syscalls = subtrees(calls, "el0t_64_sync_handler")
    assert (1, "el0_svc") in syscalls
    assert all(not re.fullmatch(r"0x[0-9a-f]+", n) for _d, n in calls)


MINI_KERNEL = Path(__file__).resolve().parent.parent / "testbins" / "kernel" / "aarch64" / "kernel"


@pytest.mark.parametrize("backend", ("int3", "step"))
def test_trace_after_mini_kernel(backend: str, tmp_path: Path) -> None:
    """--trace-after on the aarch64 mini-kernel (its own record checks its whole trace in
    test_kernel.py): the text it prints before its `svc` starts the trace at the `svc`'s
    exception frame; the calls from there on are the whole trace's; a text never printed
    leaves the trace empty, and the run and its console are the same."""
    def run(*options: str) -> tuple[str, bytes]:
        trace = tmp_path / "trace.txt"
        done = run_emutrace("run", "--machine", "virt-arm64", "--backend", backend, *options,
                            "-o", trace, MINI_KERNEL)
        assert done.returncode == 0, done.stderr.decode()
        return trace.read_text(), done.stdout

    whole, console = run()
    after, console_after = run("--trace-after", "apply(sub")
    never, console_never = run("--trace-after", "not printed")
    assert console == console_after == console_never
    assert after.splitlines()[1].endswith("| vec_sync_el1h() { /* exception */")
    names = [name for _depth, name in emutrace_calls(whole)]
    assert [name for _depth, name in emutrace_calls(after)] == \
        names[names.index("vec_sync_el1h"):]
    assert never.splitlines()[1:] == []
