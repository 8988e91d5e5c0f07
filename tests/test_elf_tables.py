"""elf_tables (struct) against pyelftools (the oracle): the same symbols, fields and
executable sections for every test program of every ISA, busybox and the Debian roots'
shared libraries; damaged tables are a one-line "malformed ELF" error as before."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_ST_INFO_TYPE, ENUM_ST_SHNDX, ENUM_ST_VISIBILITY

from emutrace import errors
from emutrace.discover.symbols import data_ranges, read_symbols
from emutrace.elf import load_image
from emutrace.elf_tables import ElfSymbol, read_file_tables
from tests.conftest import BUSYBOX, ISAS, REPO, TESTBINS, run_emutrace

ROOTFS = REPO / ".cache" / "rootfs"


SAMPLE = ("calls", "calls.dyn", "calls.stripped", "edge_interwork")


def _elf_files() -> list[Path]:
    """Per ISA: a static program, a dynamic one, a stripped one and ARM interworking code
    where they exist (pyelftools' reading is the slow part of this test)."""
    files = [TESTBINS / isa / name for isa in ISAS for name in SAMPLE
             if (TESTBINS / isa / name).is_file()]
    files += sorted(BUSYBOX.glob("*/busybox"))
    files += sorted(ROOTFS.glob("*/lib/*/libc.so.6"))
    return files


FILES = _elf_files()


def _oracle(path: Path, name: str) -> list[ElfSymbol] | None:
    with open(path, "rb") as fh:
        table = ELFFile(fh).get_section_by_name(name)
        if table is None or not hasattr(table, "iter_symbols"):
            return None
        return [ElfSymbol(s.name, s["st_value"], s["st_size"],
                          _number(ENUM_ST_INFO_TYPE, s["st_info"]["type"]),
                          s["st_other"]["local"] << 5
                          | _number(ENUM_ST_VISIBILITY, s["st_other"]["visibility"]),
                          _number(ENUM_ST_SHNDX, s["st_shndx"]))
                for s in table.iter_symbols()]


def _number(enum: Mapping[str, int], value: str | int) -> int:
    """pyelftools' name of an enumerated field back to its number."""
    return value if isinstance(value, int) else enum[value]


def test_the_sample_is_large() -> None:
    # every ISA's static, dynamic and stripped program (busybox and Debian's libc join
    # them where scripts/setup.sh fetched them)
    assert len([p for p in FILES if TESTBINS in p.parents]) >= 3 * len(ISAS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_tables_equal_pyelftools(path: Path) -> None:
    got = read_file_tables(str(path))
    assert got.symtab == _oracle(path, ".symtab")
    assert got.dynsym == _oracle(path, ".dynsym")
    with open(path, "rb") as fh:
        code = sorted((s["sh_addr"], s["sh_addr"] + s["sh_size"])
                      for s in ELFFile(fh).iter_sections()
                      if s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR
                      and s["sh_type"] == "SHT_PROGBITS" and s["sh_size"])
    assert got.code_sections == code


def test_the_image_carries_the_tables_and_discovery_reads_no_file(tmp_path: Path) -> None:
    """The symbol table comes from what load_image read: the file may be gone."""
    program = tmp_path / "calls"
    program.write_bytes((TESTBINS / "arm" / "calls").read_bytes())
    image = load_image(str(program))
    program.unlink()
    table = read_symbols(image)
    main = table.by_name("main")
    assert main is not None and table.containing(main.start) == main
    with open(TESTBINS / "arm" / "calls", "rb") as fh:  # Thumb: bit 0 of st_value
        sym = next(s for s in ELFFile(fh).get_section_by_name(".symtab").iter_symbols()
                   if s.name == "main")
    assert (main.start, main.alt) == (sym["st_value"] & ~1, bool(sym["st_value"] & 1))


def _damaged_symtab(tmp_path: Path) -> Path:
    """calls with its .symtab's sh_size grown past the end of the file."""
    src = TESTBINS / "x86_64" / "calls"
    blob = bytearray(src.read_bytes())
    with open(src, "rb") as fh:
        elf = ELFFile(fh)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".symtab")
        at = elf.header["e_shoff"] + index * elf.header["e_shentsize"] + 32  # Elf64 sh_size
    struct.pack_into("<Q", blob, at, 1 << 40)
    out = tmp_path / "damaged"
    out.write_bytes(bytes(blob))
    out.chmod(0o755)
    return out


def test_a_damaged_symbol_table_is_one_line_65(tmp_path: Path) -> None:
    got = run_emutrace("run", _damaged_symtab(tmp_path), timeout=120)
    err = got.stderr.decode().strip()
    assert got.returncode == errors.EXIT_BAD_ELF, err
    assert len(err.splitlines()) == 1 and "malformed ELF" in err and ".symtab" in err


def test_data_ranges_end_at_the_next_code_mark() -> None:
    """Hand-made mapping symbols (ARM ELF ABI §5.5.5: `$d` starts data, `$a`/`$t`/`$x`
    code): a `$d` range ends at the next code mark above it, a last one after one byte; a
    code mark at the same address as a `$d` sorts before it (so it is not its end)."""
    marks = [(0x30, True), (0x10, True), (0x20, False), (0x14, True), (0x40, False),
             (0x40, True), (0x50, True)]
    assert data_ranges(marks) == [(0x10, 0x20), (0x14, 0x20), (0x30, 0x40), (0x40, 0x41),
                                  (0x50, 0x51)]
