"""Recordings as untrusted input: a hostile data directory through every viewer (`replay`,
`report`, `graph`, `dump` in each format, `info -d`) and `diff`.  Each run is a child under
`timeout` and an address-space limit: it must end in success or exit 65 with one line on
stderr, in bounded time and memory (a FIFO must not block it, a link to /dev/zero must not
feed it forever, a huge `.sym` must be refused before it is read, 5,000 nested calls must
not reach a recursion limit), and names with control characters must reach the terminal
escaped.  The fuzz harness's `recordings` mode (tools/fuzz_recordings.py) mutates the same
recording at random; a short slice of it runs here."""

from __future__ import annotations

import random
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from emutrace.trace.events import Entry, Exit
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.uftrace_write import Mapping, UftraceDirSink
from tools import fuzz
from tools import fuzz_recordings as fr

REPO = Path(__file__).resolve().parent.parent
SECONDS = 60  # a viewer's wall-time budget (`timeout`): the deep cases take a few seconds
MEMORY = 1 << 30  # its address space (RLIMIT_AS): the caps keep every case far below


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_viewer(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["timeout", "-s", "KILL", str(SECONDS), sys.executable, "-m",
                           "emutrace", *argv], capture_output=True, cwd=REPO,
                          preexec_fn=_limited)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fr.record_base(tmp_path_factory.mktemp("base") / "rec")


def _file(name: str) -> Callable[[Path], Path]:
    return lambda d: d / name


SYM = f"{fr.PROGRAM.name}.sym"
MAP = "sid-0123456789abcdef.map"
# (what is done to the copy, whether a viewer may still succeed)
HOSTILE: dict[str, tuple[Callable[[Path], None], bool]] = {
    "fifo-info": (lambda d: fr.replace_with_fifo(d / "info"), False),
    "fifo-sym": (lambda d: fr.replace_with_fifo(d / SYM), False),
    "fifo-dat": (lambda d: fr.replace_with_fifo(d / fr.DAT), False),
    "fifo-exits": (lambda d: fr.replace_with_fifo(d / "emutrace-exits.txt"), False),
    "zero-link-sym": (lambda d: fr.replace_with_link(d / SYM), False),
    "zero-link-map": (lambda d: fr.replace_with_link(d / MAP), False),
    "zero-link-info": (lambda d: fr.replace_with_link(d / "info"), False),
    "zero-link-dat": (lambda d: fr.replace_with_link(d / fr.DAT), False),
    "directory-sym": (lambda d: fr.replace_with_directory(d / "more.sym"), False),
    "huge-sym": (lambda d: fr.grow_sparse(d / SYM, 210 << 20), False),
    "huge-info": (lambda d: fr.grow_sparse(d / "info", 100 << 20), False),
    "huge-emutrace-txt": (lambda d: fr.grow_sparse(d / "emutrace.txt", 100 << 20), False),
    "deep-5000": (lambda d: fr.deep_recursion(d, 5000), True),
    "control-names": (fr.control_names, True),
}


@pytest.fixture(scope="module")
def hostile(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            d = fr.copy_recording(base, tmp_path_factory.mktemp(kind) / "rec")
            HOSTILE[kind][0](d)
            made[kind] = d
        return made[kind]

    return get


def _check(proc: subprocess.CompletedProcess[bytes], may_succeed: bool, what: str) -> None:
    err = proc.stderr.decode(errors="replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode != -9, f"{what}: killed after {SECONDS} s (a hang)"
    assert "Traceback" not in err and proc.returncode != 70, f"{what}: {err[-800:]}"
    assert len(lines) <= 1, f"{what}: {lines[:4]}"
    allowed = (0, 1, 65) if may_succeed else (65,)
    assert proc.returncode in allowed, f"{what}: exit {proc.returncode}: {err}"


VIEWERS = ["replay", "report", "graph", "graph-main", "dump", "dump-chrome", "dump-flame",
           "dump-flame-sampled",
           "dump-perfetto", "info", "diff"]


def _argv(viewer: str, data: Path, other: Path, scratch: Path) -> list[str]:
    return fr.viewer_commands(data, other, scratch)[
        ["replay", "report", "graph", "graph-main", "dump", "dump-chrome", "dump-flame",
         "dump-flame-sampled", "dump-perfetto", "info", "diff"].index(viewer)]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("viewer", VIEWERS)
def test_hostile_recording(kind: str, viewer: str, base: Path, hostile: Callable[[str], Path],
                           tmp_path: Path) -> None:
    proc = run_viewer(_argv(viewer, hostile(kind), base, tmp_path))
    _check(proc, HOSTILE[kind][1], f"{viewer} on {kind}")
    if kind == "control-names" and viewer != "dump-perfetto":
        out = proc.stdout.decode(errors="replace")
        assert not any(c in out for c in "\x1b\r\x07\x9b"), out[:300]
        if viewer not in ("info", "diff", "graph-main"):  # no function is named `main`
            assert "\\x1b[31m" in out, out[:300]


def test_deep_recursion_graph_is_whole(hostile: Callable[[str], Path]) -> None:
    """5,000 nested calls: `graph` walks them all (no recursion limit) and the lines stay
    short (indentation past MAX_INDENT levels is cut, not drawn)."""
    proc = run_viewer(["graph", "-d", str(hostile("deep-5000"))])
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert sum(1 for ln in lines if ln.endswith(") main")) == 5000
    assert max(map(len, lines)) < 400


def test_flame_graph_stays_linear(hostile: Callable[[str], Path]) -> None:
    """Folded stacks of 5,000 nested calls with a leaf at each level: every line is cut to
    MAX_FRAMES frames, so the output grows with the calls, not calls × depth."""
    data = hostile("deep-5000")
    proc = run_viewer(["dump", "--flame-graph", "-d", str(data)])
    assert proc.returncode == 0, proc.stderr.decode()
    dat = (data / fr.DAT).stat().st_size
    assert len(proc.stdout) < 64 * dat, (len(proc.stdout), dat)
    assert max(ln.count(";") for ln in proc.stdout.decode().splitlines()) < 64


def test_huge_sym_is_refused_naming_the_cap(hostile: Callable[[str], Path]) -> None:
    proc = run_viewer(["report", "-d", str(hostile("huge-sym"))])
    assert proc.returncode == 65
    assert b"larger than the 64 MiB" in proc.stderr


def test_a_million_symbols_in_bounded_memory(base: Path, tmp_path: Path) -> None:
    """A `.sym` of 2^20 symbols (the most a recording may name: about 30 MiB) is read within
    the 1 GiB address-space limit; one more symbol is refused."""
    data = fr.copy_recording(base, tmp_path / "rec")
    sym = data / SYM
    have = sum(1 for ln in sym.read_text().splitlines() if not ln.startswith("#"))
    extra = (1 << 20) - have
    with open(sym, "a") as f:
        f.writelines(f"{0x200000 + 16 * i:016x} T fn_{i:08d}\n" for i in range(extra))
    _check(run_viewer(["report", "-d", str(data)]), True, "report, 2^20 symbols")
    with open(sym, "a") as f:
        f.write(f"{0x200000 + 16 * extra:016x} T one_more\n")
    proc = run_viewer(["report", "-d", str(data)])
    assert proc.returncode == 65 and b"more than 1048576 symbols" in proc.stderr


def test_nesting_past_any_recording_is_refused(base: Path, tmp_path: Path) -> None:
    """More than 8,192 open calls (a recording holds 1,024 levels) end in exit 65, not in
    stacks and indentation growing with the file."""
    data = fr.copy_recording(base, tmp_path / "rec")
    fr.deep_recursion(data, 8193, fanout=1)
    proc = run_viewer(["report", "-d", str(data)])
    assert proc.returncode == 65 and b"nested more than 8192 deep" in proc.stderr


def test_fifo_is_refused_not_waited_on(hostile: Callable[[str], Path]) -> None:
    proc = run_viewer(["info", "-d", str(hostile("fifo-info"))])
    assert proc.returncode == 65 and b"not a regular file (a FIFO)" in proc.stderr


@pytest.mark.parametrize("line", [
    "argspec:main@arg1/i999", "retspec:main@retval/f8", "exit_status:1e9999"])
def test_malformed_info_field(line: str, base: Path, tmp_path: Path) -> None:
    data = fr.copy_recording(base, tmp_path / "rec")
    blob = (data / "info").read_bytes()
    (data / "info").write_bytes(blob + line.encode() + b"\n")
    for viewer in ("replay", "report", "info"):
        _check(run_viewer([viewer, "-d", str(data)]), True, f"{viewer} with {line}")


@pytest.mark.parametrize("edit", ["sym-address", "map-address", "isa", "task", "dat-magic"])
def test_malformed_fields(edit: str, base: Path, tmp_path: Path) -> None:
    data = fr.copy_recording(base, tmp_path / "rec")
    if edit == "sym-address":
        (data / SYM).write_text((data / SYM).read_text() + "zzzz T broken\n")
    elif edit == "map-address":
        (data / MAP).write_text("nothex-1000 r-xp 0 0 0 x\n")
    elif edit == "isa":
        (data / "emutrace.txt").write_text("isa:vax\n")
    elif edit == "task":
        (data / "task.txt").write_bytes(b"\x00\xff garbage\n")
    else:
        blob = bytearray((data / fr.DAT).read_bytes())
        blob[8] = 0xFF
        (data / fr.DAT).write_bytes(bytes(blob))
    for viewer in ("replay", "report", "graph", "dump", "info"):
        _check(run_viewer([viewer, "-d", str(data)]), edit == "task", f"{viewer}: {edit}")


def test_a_file_that_starts_with_an_exit_is_read(base: Path, tmp_path: Path) -> None:
    """A task's file may start inside frames it never entered (a forked child's starts in
    its parent's, as uftrace writes it): the exit of such a frame is read, not refused, and
    shows no line (it has no entry)."""
    data = fr.copy_recording(base, tmp_path / "rec")
    (data / fr.DAT).write_bytes(fr.record_words(1, 1, 0, 0x401000))
    for viewer in ("replay", "report", "graph", "dump", "info"):
        _check(run_viewer([viewer, "-d", str(data)]), True, f"{viewer}: exit first")
    replay = run_viewer(["replay", "-d", str(data)])
    assert replay.returncode == 0 and replay.stdout.decode().splitlines()[1:] == []


def test_a_name_with_a_newline_reads_back(tmp_path: Path) -> None:
    """The recorder writes a name holding a newline or an escape as one escaped `.sym` line;
    the reader (and so every viewer) reads it back as that text."""
    funcs = [(0x401000, 0x401010, "main"), (0x401010, 0x401020, "odd\nname\x1b[0m")]
    (tmp_path / "d").mkdir()
    sink = UftraceDirSink(str(tmp_path / "d"), "/bin/prog", ["prog"], funcs,
                          [Mapping(0x400000, 0x402000, "r-xp")], (0x7F0000, 0x800000))
    sink.write([Entry(1, 0, 0x401000), Entry(2, 1, 0x401010), Exit(3, 1, 0x401010, None, 1),
                Exit(4, 0, 0x401000, None, 3)])
    sink.close()
    sym = (tmp_path / "d" / "prog.sym").read_text()
    assert "odd\\nname\\x1b[0m\n" in sym
    records, symbolize, _isa = load_recording(str(tmp_path / "d"))
    assert [symbolize(r.func) for r in records][:2] == ["main", "odd\\nname\\x1b[0m"]
    proc = run_viewer(["replay", "-d", str(tmp_path / "d")])
    assert proc.returncode == 0 and b"odd\\nname\\x1b[0m()" in proc.stdout, proc


def test_fuzz_slice(base: Path, tmp_path: Path) -> None:
    """A short seeded slice of `tools/fuzz.py recordings` (the long run: tools/fuzz.py)."""
    for i in range(12):
        rng = random.Random(f"ci:{i}")
        data = fr.mutant(base, tmp_path / f"m{i}", rng)
        fuzz.isolated(lambda d=data: fr.check_viewers(d, base, tmp_path),
                      budget=60.0, wall=120.0, memory=fuzz.RECORDING_MEMORY)


def test_flame_graph_budget_refuses_before_writing() -> None:
    """Many distinct paths under a chain at the frame limit, every name at the name limit:
    each line would be ~32 KB, far past the budget, so nothing is written and the error is
    one line (65)."""
    from emutrace.errors import EmutraceError
    from emutrace.trace import flame

    records: list[Entry | Exit] = []
    chain = flame.MAX_FRAMES - 1
    records += [Entry(d, d, d + 1) for d in range(chain)]
    for leaf in range(20_000):
        records += [Entry(0, chain, 10_000 + leaf), Exit(1, chain, 10_000 + leaf, None, 1)]
    records += [Exit(9, d, d + 1, None, 9) for d in reversed(range(chain))]
    lines = flame.folded_stacks(records, lambda a: f"{a:x}".rjust(flame.MAX_NAME + 50, "n"))
    with pytest.raises(EmutraceError) as e:
        next(lines)
    assert e.value.exit_code == 65 and "would pass" in e.value.message


def test_a_directory_named_like_a_pattern(base: Path, tmp_path: Path) -> None:
    """The `.sym` and map files are found in a directory whose name holds `[`, `*`, `?`."""
    data = fr.copy_recording(base, tmp_path / "rec[1]*?")
    proc = run_viewer(["report", "-d", str(data)])
    assert proc.returncode == 0 and b"main" in proc.stdout, proc.stderr
