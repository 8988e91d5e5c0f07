"""Symbols from elsewhere: a stripped program is traced by name from its
separate debug file, found inside the root by build ID or by `.gnu_debuglink` as gdb finds
it, or from `--symbols` (an nm listing).  The oracle: the shared golden traces
(tests/golden/, from the programs' own -finstrument-functions records), over the golden's
functions — a trace without names could not match them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from emutrace import errors
from emutrace.discover.symbols import read_symbols
from emutrace.errors import UsageError
from emutrace.isa import by_name
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_text
from tests.conftest import TESTBINS, run_emutrace

GOLDEN = Path(__file__).parent / "golden" / "calls-recursion.txt"


def tool(isa: str, name: str) -> str:
    return f"{by_name(isa).identity.triple}-{name}"


def split_debug(isa: str, root: Path, where: str) -> Path:
    """ROOT/bin/calls: testbins' `calls` stripped, its debug file split off
    (`objcopy --only-keep-debug`, debuglink added) and placed where gdb looks: by build
    ID (`build-id`) or next to the program in `.debug/` (`debuglink`)."""
    objcopy = tool(isa, "objcopy")
    (root / "bin" / ".debug").mkdir(parents=True)
    full, program = root / "full", root / "bin" / "calls"
    shutil.copy(TESTBINS / isa / "calls", full)
    debug = root / "bin" / ".debug" / "calls.debug"
    subprocess.run([objcopy, "--only-keep-debug", full, debug], check=True)
    subprocess.run([objcopy, "--strip-all", f"--add-gnu-debuglink={debug}", full, program],
                   check=True, cwd=debug.parent)
    notes = subprocess.run([tool(isa, "readelf"), "-n", program], capture_output=True,
                           text=True, check=True).stdout
    assert ".symtab" not in subprocess.run([tool(isa, "readelf"), "-S", program],
                                           capture_output=True, text=True).stdout
    if where == "build-id":
        bid = re.search(r"Build ID: ([0-9a-f]+)", notes)
        assert bid is not None
        by_id = root / "usr/lib/debug/.build-id" / bid[1][:2] / f"{bid[1][2:]}.debug"
        by_id.parent.mkdir(parents=True)
        debug.rename(by_id)
    full.unlink()
    return program


def traced_names(program: Path, root: Path, symbols: tuple[str, ...] = ()) -> str:
    config = RunConfig(str(program), ["recursion"], root=str(root), backend="int3",
                       symbols=symbols)
    process = Process(config, warn=lambda m: None)
    result = process.run()
    assert result.stop.kind == "exit" and result.stop.status == 0
    table = read_symbols(process.image)

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)
    keep = set(re.findall(r"[<>] (\w+)", GOLDEN.read_text()))
    return canonical_text(result.records, name, keep)


@pytest.mark.parametrize(("isa", "where"), [("arm", "build-id"), ("x86_64", "debuglink")])
def test_stripped_program_named_from_its_debug_file(tmp_path: Path, isa: str,
                                                    where: str) -> None:
    program = split_debug(isa, tmp_path, where)
    assert traced_names(program, tmp_path) == GOLDEN.read_text()


def test_symbols_from_an_nm_listing(tmp_path: Path) -> None:
    listing = tmp_path / "calls.nm"
    listing.write_text(subprocess.run(["nm", TESTBINS / "x86_64" / "calls"], capture_output=True,
                                      text=True, check=True).stdout)
    stripped = TESTBINS / "x86_64" / "calls.stripped"
    assert traced_names(stripped, Path("/"), (str(listing),)) == GOLDEN.read_text()


def test_bad_symbols_listing_is_a_usage_error(tmp_path: Path) -> None:
    """One line, exit 64, before the program runs: a file that is no listing (by the
    command line), a missing file and a bad BIAS (in-process: the same UsageError)."""
    listing = tmp_path / "junk.map"
    listing.write_text("this is not a symbol listing\n")
    stripped = TESTBINS / "x86_64" / "calls.stripped"
    got = run_emutrace("run", "--backend", "int3", "--symbols", str(listing), stripped,
                       "recursion")
    assert got.returncode == errors.EXIT_USAGE and got.stdout == b""
    assert got.stderr.count(b"\n") == 1 and b"--symbols" in got.stderr
    for spec in (str(tmp_path / "missing"), f"{listing}@zz"):
        with pytest.raises(UsageError, match="--symbols"):
            Process(RunConfig(str(stripped), ["recursion"], backend="int3", symbols=(spec,)))
