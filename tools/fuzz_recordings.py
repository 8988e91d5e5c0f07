"""The `recordings` mode of the fuzz harness (tools/fuzz.py): a data directory is input from
anywhere, so every viewer (`replay`, `report`, `graph`, `dump` in each format, `info -d`)
and `diff` must read a damaged or hostile one and end in success or one line with exit 65
(or 66 for a missing directory, 1 for a `diff` that found differences) — never a
traceback, an internal error (70), a hang or memory without bound.

A case is a copy of one real recording (`emutrace record` of a small program with values)
with 1..4 edits drawn from `EDITS`: bytes of a file changed, a file cut short, grown, removed
or replaced by a FIFO, a link to /dev/zero, a directory or a file past its size cap (sparse:
cheap to make), lines with control characters, and records nesting past any recursion
limit.  The helpers that build the hostile directories are shared with
tests/test_hardening_recordings.py.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: the emutrace of this checkout
    sys.path.insert(0, str(REPO))

PROGRAM = REPO / "testbins" / "x86_64" / "calls"
PROGRAM_ARGS = ("qsort",)  # calls with arguments, return values and strings
DAT = "1.dat"
ENTRY_MAGIC = 5 << 3  # uftrace's record magic (uftrace_write.MAGIC) in the type word
OK_CODES = (0, 1, 65, 66)  # success; diff found differences; data error; no input


def viewer_commands(data: Path, other: Path, scratch: Path) -> list[list[str]]:
    """Every reader of a data directory, as emutrace argv (other: a sane recording for
    `diff`; scratch: where `--perfetto` writes)."""
    d = str(data)
    return [["replay", "-d", d], ["report", "-d", d], ["graph", "-d", d],
            ["graph", "-d", d, "main"], ["dump", "-d", d], ["dump", "-d", d, "--chrome"],
            ["dump", "-d", d, "--flame-graph"],
            ["dump", "-d", d, "--flame-graph", "--sample-time", "3"],
            ["dump", "-d", d, "--perfetto", "-o", str(scratch / "trace.pftrace")],
            ["info", "-d", d], ["diff", d, str(other)]]


def record_base(out: Path) -> Path:
    """A real recording to mutate (made once per campaign or test module)."""
    proc = subprocess.run([sys.executable, "-m", "emutrace", "record", "-d", str(out),
                           str(PROGRAM), *PROGRAM_ARGS], capture_output=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"record failed: {proc.stderr.decode()[-500:]}")
    return out


def copy_recording(base: Path, to: Path) -> Path:
    if to.exists() or to.is_symlink():
        shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(base, to, symlinks=True)
    return to


def record_words(time: int, kind: int, depth: int, addr: int, more: int = 0) -> bytes:
    word = kind | (more << 2) | ENTRY_MAGIC | ((depth & 0x3FF) << 6) | ((addr & (2**48 - 1)) << 16)
    return struct.pack("<QQ", time, word)


def symbol_address(data: Path, name: str) -> int:
    """The absolute address of `name` in the recording's program `.sym` (as our reader)."""
    base = int(next(data.glob("sid-*.map")).read_text().split("-", 1)[0], 16)
    for sym in data.glob("*.sym"):
        for line in sym.read_text().splitlines():
            fields = line.split(maxsplit=2)
            if len(fields) == 3 and fields[2] == name and not line.startswith("#"):
                return base + int(fields[0], 16)
    raise KeyError(name)


# ---------------------------------------------------------------- hostile directories
def deep_recursion(data: Path, levels: int = 5000, fanout: int = 2) -> None:
    """`main` calling itself `levels` deep (past the recorder's 1,024 and Python's recursion
    limit), each level also calling `fanout` - 1 leaves: replaces the `.dat`."""
    main = symbol_address(data, "main")
    leaf = main  # the leaves: other functions of the program
    sym_names = [line.split(maxsplit=2)[2] for line in
                 (data / f"{PROGRAM.name}.sym").read_text().splitlines()
                 if not line.startswith("#") and len(line.split()) == 3]
    leaves = [symbol_address(data, n) for n in sym_names[:fanout] if n != "main"] or [leaf]
    out = bytearray()
    t = 0
    for depth in range(levels):
        t += 1
        out += record_words(t, 0, depth, main)
        for f in leaves[:fanout - 1]:
            out += record_words(t, 0, depth + 1, f) + record_words(t + 1, 1, depth + 1, f)
            t += 2
    for depth in reversed(range(levels)):
        t += 1
        out += record_words(t, 1, depth, main)
    (data / DAT).write_bytes(bytes(out))
    # values are described for some functions: none follow these records
    _strip_specs(data)


def _strip_specs(data: Path) -> None:
    info = (data / "info").read_bytes()
    lines = info[40:].split(b"\n")
    kept = [ln for ln in lines if not ln.startswith((b"argspec:", b"retspec:"))]
    (data / "info").write_bytes(info[:40] + b"\n".join(kept))


def replace_with_fifo(path: Path) -> None:
    _remove(path)
    os.mkfifo(path)


def replace_with_link(path: Path, target: str = "/dev/zero") -> None:
    _remove(path)
    os.symlink(target, path)


def replace_with_directory(path: Path) -> None:
    _remove(path)
    path.mkdir()


def grow_sparse(path: Path, size: int) -> None:
    """`path` made `size` bytes long without writing them (a hole): past any cap, cheaply.
    Never through a link (an earlier edit may have made one to a file outside)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _regular(path: Path) -> bool:
    """A regular file of the copy itself (not a link out of it, a FIFO, a directory, a file
    an earlier edit made unreadable)."""
    return not path.is_symlink() and path.is_file() and os.access(path, os.R_OK | os.W_OK)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def control_names(data: Path) -> None:
    """Every name of the program's `.sym` (and the value specs naming them in `info` and
    `emutrace.txt`) wrapped in an escape sequence, a carriage return, a bell, a tab and a
    C1 control."""
    sym = data / f"{PROGRAM.name}.sym"
    renamed: dict[str, str] = {}
    out = []
    for line in sym.read_text().splitlines():
        fields = line.split(maxsplit=2)
        if not line.startswith("#") and len(fields) == 3 and fields[2] != "__sym_end":
            renamed[fields[2]] = f"\x1b[31m{fields[2]}\r\x07\t\x9b"
            line = f"{fields[0]} {fields[1]} {renamed[fields[2]]}"
        out.append(line)
    sym.write_text("\n".join(out) + "\n")
    for name in ("info", "emutrace.txt"):
        blob = (data / name).read_bytes()
        head, text = (blob[:40], blob[40:]) if name == "info" else (b"", blob)
        for old, new in renamed.items():
            for sep in (b":", b";"):
                text = text.replace(sep + old.encode() + b"@", sep + new.encode() + b"@")
        (data / name).write_bytes(head + text)


# ---------------------------------------------------------------- mutations
def _files(data: Path) -> list[Path]:
    return sorted(p for p in data.iterdir() if _regular(p))


def _flip(data: Path, rng: random.Random) -> None:
    files = _files(data)
    if not files:
        return
    weights = [4 if p.name == DAT else 2 if p.suffix in (".sym", ".map") or p.name == "info"
               else 1 for p in files]
    path = rng.choices(files, weights)[0]
    blob = bytearray(path.read_bytes())
    if not blob:
        return
    for _ in range(rng.randint(1, 8)):
        where = rng.randrange(len(blob))
        if rng.random() < 0.5:
            blob[where] = rng.getrandbits(8)
        else:
            blob[where] = rng.choice(b"\n\r\x00\x1b:;@,/-# 0123456789abcdefxTu")
    path.write_bytes(bytes(blob))


def _cut(data: Path, rng: random.Random) -> None:
    files = _files(data)
    if files:
        path = rng.choice(files)
        size = path.stat().st_size
        os.truncate(path, rng.randrange(size + 1) if size else 0)


def _garbage(data: Path, rng: random.Random) -> None:
    files = _files(data)
    if files:
        with open(rng.choice(files), "ab") as f:
            f.write(rng.randbytes(rng.choice((1, 7, 16, 100, 4096))))


def _line(data: Path, rng: random.Random) -> None:
    """A hostile line added to a text file: huge numbers, bad specs, control characters."""
    choices = {
        "info": ["exit_status:99999999999999999999999", "argspec:main@arg1/i999,arg2/z",
                 "retspec:main@retval/f8", "taskinfo:nr_tid=-1", "cmdline:\x1b]0;x\x07",
                 "exename:/dev/zero"],
        "emutrace.txt": ["isa:vax", "isa:", "argkinds:main@arg1/nonsense",
                         "retkinds:main@retval/float", "not_recorded_deep:-5",
                         "not_recorded_deep:1e999"],
        "task.txt": ["TASK timestamp=x tid=-1 pid=0", "SESS\x00"],
        "emutrace-exits.txt": ["99999999999999999999 u", "-1 x", "1" * 10000],
        f"{PROGRAM.name}.sym": ["ffffffffffffffffffff T huge", "zz T bad", "0 T",
                                "0000000000000010 T a\x1b[2Jb", "# path name: /dev/zero"],
        "sid-0123456789abcdef.map": ["zz-zz r-xp", "ffffffffffffffffffffff-0 r-xp 0 0 0 x",
                                     ""],
    }
    name = rng.choice(sorted(choices))
    path = data / name
    if not _regular(path):
        return
    text = rng.choice(choices[name]) + "\n"
    blob = path.read_bytes()
    if name == "info":  # after the 40-byte binary header
        at = rng.randrange(40, len(blob) + 1) if len(blob) > 40 else len(blob)
    else:
        at = rng.randrange(len(blob) + 1)
    at = blob.rfind(b"\n", 0, at) + 1 if at else 0
    path.write_bytes(blob[:at] + text.encode("utf-8", "surrogateescape") + blob[at:])


def _records(data: Path, rng: random.Random) -> None:
    """Records appended, dropped or reordered in the `.dat`: unbalanced exits, deep nesting,
    huge times, unknown addresses."""
    path = data / DAT
    if not _regular(path):
        return
    blob = bytearray(path.read_bytes())
    n = len(blob) // 16
    what = rng.randrange(5)
    if what == 0 and n:  # an exit without its entry, or an entry never closed
        i = rng.randrange(n)
        del blob[16 * i:16 * i + 16]
    elif what == 1:  # nesting far past 1,024 levels
        depth = rng.choice((1100, 3000, 6000))
        addr = rng.choice((0, 0x401000, 2**48 - 1))
        blob += b"".join(record_words(i, 0, i, addr) for i in range(depth))
    elif what == 2 and n > 1:
        i, j = rng.randrange(n), rng.randrange(n)
        a, b = bytes(blob[16 * i:16 * i + 16]), bytes(blob[16 * j:16 * j + 16])
        blob[16 * i:16 * i + 16], blob[16 * j:16 * j + 16] = b, a
    elif what == 3:  # a record claiming values after it
        blob += record_words(2**64 - 1, rng.randrange(2), rng.randrange(1024),
                             rng.getrandbits(48), 1) + rng.randbytes(rng.choice((0, 3, 16)))
    else:  # many distinct call paths under a deep chain (the flame graph's worst case)
        t = 1 << 40
        for depth in range(200):
            blob += record_words(t + depth, 0, depth, 0x1000 + depth)
        for leaf in range(rng.choice((10, 500))):
            blob += record_words(t, 0, 200, 0x100000 + leaf) + record_words(t, 1, 200,
                                                                             0x100000 + leaf)
    path.write_bytes(bytes(blob))


def _replace(data: Path, rng: random.Random) -> None:
    """A file swapped for something that is not a small regular file."""
    names = ["info", DAT, "task.txt", "emutrace.txt", "emutrace-exits.txt",
             f"{PROGRAM.name}.sym", "sid-0123456789abcdef.map", "extra.sym"]
    path = data / rng.choice(names)
    how = rng.randrange(6)
    if how in (4, 5) and not _regular(path):  # grown or made unreadable: only our own files
        how = 3
    if how == 0:
        replace_with_fifo(path)
    elif how == 1:
        replace_with_link(path, rng.choice(("/dev/zero", "/dev/urandom", "/etc/passwd",
                                            "/nonexistent", "/proc/self/mem")))
    elif how == 2:
        replace_with_directory(path)
    elif how == 3:
        _remove(path)
    elif how == 4 and path.name != DAT:
        grow_sparse(path, 65 << 20 if path.suffix == ".sym" else 5 << 20)
    elif os.getuid() != 0:
        os.chmod(path, 0)
    else:  # root reads a file of mode 0 all the same
        _remove(path)


EDITS: tuple[Callable[[Path, random.Random], None], ...] = (
    _flip, _flip, _flip, _cut, _garbage, _line, _line, _records, _records, _replace)


def mutant(base: Path, to: Path, rng: random.Random) -> Path:
    """A copy of `base` at `to` with 1..4 edits."""
    copy_recording(base, to)
    for _ in range(rng.randint(1, 4)):
        rng.choice(EDITS)(to, rng)
    return to


# ---------------------------------------------------------------- checking
@contextmanager
def viewer_stdio() -> Iterator[io.StringIO]:
    """Output (text and binary) to /dev/null, emutrace's own stderr lines captured."""
    null = open(os.devnull, "w")  # noqa: SIM115 - closed below
    err, old_out, old_err = io.StringIO(), sys.stdout, sys.stderr
    sys.stdout, sys.stderr = null, err
    try:
        yield err
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        null.close()


class ViewerFinding(Exception):
    pass


def check_viewers(data: Path, other: Path, scratch: Path) -> None:
    """Every viewer over `data`, in this process: a finding raises ViewerFinding."""
    from emutrace.cli.main import main

    for argv in viewer_commands(data, other, scratch):
        with viewer_stdio() as err:
            code = main(argv)
        text = err.getvalue()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if code not in OK_CODES or "Traceback" in text or len(lines) > 1:
            raise ViewerFinding(f"{' '.join(argv[:1] + argv[3:])}: exit {code}: "
                                f"{text.strip()[:600]}")


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="emutrace-fuzz-rec-"))
