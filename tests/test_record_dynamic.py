"""A recording of a dynamic program names the library functions for Debian's uftrace 0.13
(the independent reader): one map line and one `.sym` file per module, so `uftrace replay`
shows the call tree `emutrace run` printed — the same calls at the same depths with the
same names (`printf@plt`, `printf`, ld.so's `_dl_fixup`…) — on x86_64 (the host's
libraries), aarch64 and ppc64le (Debian's cross sysroots; ppc64le: ELFv2 functions called at
their local entry, named there too); `emutrace replay -d` too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .conftest import bin_path, run_emutrace

ROOTS = {"x86_64": "/", "aarch64": "/usr/aarch64-linux-gnu",
         "ppc64le": "/usr/powerpc64le-linux-gnu"}
LINE = re.compile(r"^[^|]*\| (?P<indent> *)(?P<text>.*)$")


def calls(text: str) -> list[tuple[int, str, str]]:
    """(depth, name, kind) of main's call tree in a replay text; kind: { } or ;."""
    rows = []
    for line in text.splitlines()[1:]:
        m = LINE.match(line)
        assert m, line
        body, depth = m.group("text"), len(m.group("indent")) // 2
        if body.startswith("}"):
            name = re.search(r"/\* (\S+)", body)
            assert name, line
            rows.append((depth, name.group(1), "}"))
            if depth == 0:
                break  # main returned: what follows (exit handlers) uftrace's -F main hides
        else:
            rows.append((depth, body.split("(", 1)[0], "{" if body.endswith("{") else ";"))
    return rows


@pytest.mark.parametrize("isa", list(ROOTS))
def test_uftrace_names_library_calls_as_run(isa: str, tmp_path: Path) -> None:
    program = bin_path(isa, "calls.dyn")
    rec = run_emutrace("record", "--root", ROOTS[isa], "-d", tmp_path / "d", program,
                       "recursion")
    assert rec.returncode == 0, rec.stderr.decode()
    run = run_emutrace("run", "--backend", "int3", "--root", ROOTS[isa], program, "recursion")
    assert run.returncode == 0, run.stderr.decode()
    theirs = subprocess.run(["uftrace", "replay", "--no-pager", "--no-args", "-F", "main",
                             "-d", str(tmp_path / "d")], capture_output=True, text=True,
                            check=True).stdout
    want, got = calls(run.stderr.decode()), calls(theirs)
    assert len(want) == len(got) > 100
    for w, g in zip(want, got, strict=True):
        # an address outside every symbol (run shows it in hex) uftrace names by the
        # symbol before it; everything else has the same name
        assert w[0] == g[0] and w[2] == g[2] and (w[1] == g[1] or w[1].startswith("0x")), \
            (w, g)
    # our own reader takes each `.sym` file's base from its module's map line
    ours = run_emutrace("replay", "-d", tmp_path / "d")
    assert ours.returncode == 0, ours.stderr.decode()
    assert calls(ours.stdout.decode()) == want
    names = {name for _d, name, _k in got}
    assert {"main", "printf@plt", "printf"} <= names
    # functions of each library are named: libc's and ld.so's (lazy binding, ifuncs)
    for lib in ("libc.so.6", "ld*.so.*"):
        sym = next((tmp_path / "d").glob(f"{lib}.sym"))
        defined = {line.split()[2] for line in sym.read_text().splitlines()[2:]}
        assert names & defined, lib
