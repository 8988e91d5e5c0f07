"""The one namer (`SymbolTable.namer`, `entry_name`) every trace uses to name addresses.

Expected names are written from the symbol layout built here (an oracle independent of any
run): the ELFv2 local entry is start + 8 (st_other 3, ELFv2 ABI §3.4.1), ARM's Thumb bit is
masked by the ISA's code mask, and an address in no function is shown in hex."""
from __future__ import annotations

from emutrace.discover.symbols import FuncSymbol, SymbolTable
from emutrace.isa import by_name


def table() -> SymbolTable:
    return SymbolTable([FuncSymbol("main", 0x1000, 0x40, False, 0),
                        FuncSymbol("leaf", 0x1040, 0x10, True, 0),
                        FuncSymbol("elfv2", 0x2000, 0x30, False, 8)], [])


def test_entry_name_is_start_or_local_entry_only() -> None:
    t = table()
    assert t.entry_name(0x1000) == "main"
    assert t.entry_name(0x2000) == "elfv2" and t.entry_name(0x2008) == "elfv2"
    assert t.entry_name(0x1004) is None and t.entry_name(0x2004) is None
    assert t.entry_name(0x5000) is None


def test_namer_plain_and_with_offsets() -> None:
    t = table()
    plain, offsets = t.namer(), t.namer(offsets=True)
    assert plain(0x1000) == "main" and plain(0x101c) == "main"
    assert offsets(0x1000) == "main" and offsets(0x101c) == "main+0x1c"
    assert offsets(0x2008) == "elfv2" and offsets(0x200c) == "elfv2+0xc"
    assert plain(0x5000) == "0x5000" == offsets(0x5000)


def test_namer_masks_the_thumb_bit_with_the_isas_code_mask() -> None:
    mask = by_name("arm").code_mask
    named = table().namer(mask, offsets=True)
    assert named(0x1041) == "leaf"        # a Thumb entry, bit 0 set, is the entry
    assert named(0x5001) == "0x5000"      # and unknown code is shown without it
    assert table().namer(by_name("x86_64").code_mask)(0x5001) == "0x5001"
