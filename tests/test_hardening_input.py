"""Program files are checked for their type before they are opened
for reading and mapped, not read whole; PT_INTERP garbage is one escaped, short line."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from emutrace import errors

from .conftest import bin_path, run_emutrace

CALLS = bin_path("x86_64", "calls")


def one_line(got: subprocess.CompletedProcess, code: int) -> str:
    err = got.stderr.decode()
    assert got.returncode == code, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_not_a_regular_file(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    if kind == "fifo":
        os.mkfifo(path)  # was: hung forever in open
    else:
        path = Path(kind)  # were: read until memory ran out
    err = one_line(run_emutrace("run", path, timeout=60), errors.EXIT_NO_INPUT)
    assert "not a regular file" in err


def test_sparse_gigabyte_program_reads_only_its_headers(tmp_path: Path) -> None:
    program = tmp_path / "calls"
    shutil.copy(CALLS, program)
    os.truncate(program, 1 << 30)  # a valid ELF followed by a 1 GiB hole
    start = time.monotonic()
    got = run_emutrace("run", program, timeout=60)
    assert got.returncode == run_emutrace("run", CALLS).returncode
    assert time.monotonic() - start < 20


def test_interp_garbage_is_one_short_escaped_line(tmp_path: Path) -> None:
    blob = bytearray(CALLS.read_bytes())
    phoff, = struct.unpack_from("<Q", blob, 0x20)
    phnum, = struct.unpack_from("<H", blob, 0x38)
    for i in range(phnum):  # PT_GNU_STACK → PT_INTERP over 10,000 bytes of the file
        at = phoff + 56 * i
        if struct.unpack_from("<I", blob, at)[0] == 0x6474E551:
            struct.pack_into("<IIQQQQQQ", blob, at, 3, 4, 0, 0, 0, 10000, 10000, 1)
            break
    else:
        pytest.fail("calls has no PT_GNU_STACK to rewrite")
    program = tmp_path / "garbage_interp"
    program.write_bytes(bytes(blob))
    got = run_emutrace("run", program)
    assert got.returncode in (errors.EXIT_BAD_ELF, errors.EXIT_UNSUPPORTED)
    err = one_line(got, got.returncode)
    assert len(err) < 400
    assert all(c.isprintable() for c in err.rstrip("\n"))


def _patch_last_load(tmp_path: Path, vaddr: int | None, memsz: int | None) -> Path:
    blob = bytearray(CALLS.read_bytes())
    phoff, = struct.unpack_from("<Q", blob, 0x20)
    phnum, = struct.unpack_from("<H", blob, 0x38)
    loads = [phoff + 56 * i for i in range(phnum)
             if struct.unpack_from("<I", blob, phoff + 56 * i)[0] == 1]
    at = loads[-1]  # Elf64_Phdr: p_vaddr at +16, p_memsz at +40
    if vaddr is not None:
        struct.pack_into("<QQ", blob, at + 16, vaddr, vaddr)
    if memsz is not None:
        struct.pack_into("<Q", blob, at + 40, memsz)
    program = tmp_path / "mutant"
    program.write_bytes(bytes(blob))
    return program


@pytest.mark.parametrize(("vaddr", "memsz"), [(None, 1 << 40), (None, 1 << 63),
                                              ((1 << 64) - 0x1000, None)],
                         ids=["memsz-1TiB", "memsz-2^63", "vaddr-top"])
def test_loader_errors_are_one_line_65(vaddr: int | None, memsz: int | None,
                                       tmp_path: Path) -> None:
    """Item 16 and item 12's p_memsz: refused before the page loop, naming the segment."""
    start = time.monotonic()
    got = run_emutrace("run", _patch_last_load(tmp_path, vaddr, memsz), timeout=60)
    err = one_line(got, errors.EXIT_BAD_ELF)
    assert "PT_LOAD" in err or "segments" in err
    assert time.monotonic() - start < 20


def test_garbage_dwarf_is_a_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    """Item 16: garbage in .debug_info under the tracing backend: one warning, exit 0."""
    from elftools.elf.elffile import ELFFile

    with open(CALLS, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".debug_info")
        off, size = sec["sh_offset"], sec["sh_size"]
    blob = bytearray(CALLS.read_bytes())
    blob[off:off + size] = bytes((i * 151 + 7) & 0xFF for i in range(size))
    program = tmp_path / "bad_dwarf"
    program.write_bytes(bytes(blob))
    got = run_emutrace("run", "--backend", "int3", program, timeout=120)
    assert got.returncode == run_emutrace("run", CALLS).returncode
    err = got.stderr.decode()
    assert "Traceback" not in err and "internal error" not in err
    warnings = [line for line in err.splitlines() if "unreadable DWARF" in line]
    assert len(warnings) == 1, err
    assert "main" in err  # the trace is still written (to stderr)
