"""Reading recordings back (`trace/uftrace_read.py`): `emutrace replay -d DIR` shows the call
tree Debian's `uftrace replay` shows for the same directory (the independent reader), and
the program's own -finstrument-functions record; `emutrace diff DIR DIR` compares
recordings; a damaged directory is one line and exit 65 (66 when missing), nothing changed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import bin_path, run_emutrace, run_qemu
from .test_trace_oracle import namer
from .test_uftrace_write import UFTRACE, replay_records


def record(tmp_path: Path, isa: str, *argv: str, name: str = "rec") -> Path:
    out = tmp_path / name
    proc = run_emutrace("record", "-d", out, bin_path(isa, argv[0]), *argv[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    return out


@pytest.mark.parametrize("isa", ["x86_64", "s390x"])  # little- and big-endian guests
def test_replay_equals_uftrace_and_self_record(isa: str, tmp_path: Path) -> None:
    scenario = "fnptr"
    data = record(tmp_path, isa, "calls", scenario)
    instr = str(bin_path(isa, "calls.instr"))
    own_record = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(a) for _, a in parse_instr_record(own_record)}
    want = canonical_from_instr(own_record, instr_name, program_functions)

    ours = run_emutrace("replay", "-d", data, "--start", "__libc_start_main")
    assert ours.returncode == 0, ours.stderr.decode()
    theirs = subprocess.run([UFTRACE, "replay", "--no-pager", "-d", str(data)],
                            capture_output=True, text=True, check=True).stdout
    for text in (ours.stdout.decode(), theirs):
        records, names = replay_records(text)
        assert canonical_text(records, names.__getitem__, program_functions) == want


def test_diff_of_recordings_points_at_char_signedness(tmp_path: Path) -> None:
    # isadep's `char` branch: x86_64 char is signed, aarch64 char is unsigned (the psABIs)
    a = record(tmp_path, "x86_64", "isadep", "char", name="a")
    b = record(tmp_path, "aarch64", "isadep", "char", name="b")
    c = record(tmp_path, "i386", "isadep", "char", name="c")
    same = run_emutrace("diff", a, c)
    assert same.returncode == 0, same.stdout.decode() + same.stderr.decode()
    differ = run_emutrace("diff", a, b)
    out = differ.stdout.decode()
    assert differ.returncode == 1, out + differ.stderr.decode()
    # the recordings hold the typed arguments: the first divergence is classify's char
    assert "classify(-56)" in out and "classify(200)" in out, out
    names = run_emutrace("diff", "--no-values", a, b).stdout.decode()
    assert "char_is_signed" in names and "char_is_unsigned" in names, names


def _one_line(proc: subprocess.CompletedProcess, code: int, needle: str) -> None:
    err = proc.stderr.decode().strip()
    assert proc.returncode == code, err
    assert len(err.splitlines()) == 1 and needle in err, err


def test_damaged_recordings(tmp_path: Path) -> None:
    good = record(tmp_path, "x86_64", "calls", "recursion")
    _one_line(run_emutrace("replay", "-d", tmp_path / "nothing"), 66, "no such data directory")

    cut = tmp_path / "cut"
    subprocess.run(["cp", "-r", str(good), str(cut)], check=True)
    dat = cut / "1.dat"
    size = dat.stat().st_size
    os.truncate(dat, size - 5)
    _one_line(run_emutrace("replay", "-d", cut), 65, "cut mid-record")
    assert dat.stat().st_size == size - 5  # nothing rewritten

    noinfo = tmp_path / "noinfo"
    subprocess.run(["cp", "-r", str(good), str(noinfo)], check=True)
    (noinfo / "info").unlink()
    _one_line(run_emutrace("replay", "-d", noinfo), 65, "info")

    garbage = tmp_path / "garbage"
    subprocess.run(["cp", "-r", str(good), str(garbage)], check=True)
    for m in garbage.glob("sid-*.map"):
        m.write_bytes(b"\x00garbage\n")
    _one_line(run_emutrace("replay", "-d", garbage), 65, ".map")

    notrecords = tmp_path / "notrecords"
    subprocess.run(["cp", "-r", str(good), str(notrecords)], check=True)
    (notrecords / "1.dat").write_bytes(b"\xff" * 32)
    _one_line(run_emutrace("replay", "-d", notrecords), 65, "not a uftrace record")
