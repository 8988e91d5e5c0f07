"""The ISA registry: exact lookups, clear errors, ELF matching against real binaries."""

from __future__ import annotations

import pytest

from emutrace.elf import load_image
from emutrace.isa import MODULES, UnknownIsa, all_isas, by_name, from_elf
from emutrace.isa.base import CAPABILITIES

from .conftest import GDB_ONLY_ISAS, ISAS, bin_path


def test_isas_with_unique_names() -> None:
    names = [isa.name for isa in all_isas()]
    assert names == list(MODULES)
    assert len(set(names)) == len(names) == 16
    aliases = [a for isa in all_isas() for a in isa.identity.aliases]
    assert len(aliases) == len(set(aliases)), "an alias names two ISAs"
    assert not set(aliases) & set(names)


@pytest.mark.parametrize("isa", MODULES)
def test_by_name_and_aliases(isa: str) -> None:
    desc = by_name(isa)
    assert desc.name == isa
    for alias in desc.identity.aliases:
        assert by_name(alias.upper()) is desc


def test_unknown_name_lists_known() -> None:
    with pytest.raises(UnknownIsa) as err:
        by_name("vax")
    for name in MODULES:
        assert name in str(err.value)


def test_no_prefix_guessing() -> None:
    # "arm64" is a declared alias; "arm6" or "x86_6" are not names of anything
    for bad in ("arm6", "x86_6", "mips6", "ppc6", "ppc64l", ""):
        with pytest.raises(UnknownIsa):
            by_name(bad)


@pytest.mark.parametrize("isa", ISAS + GDB_ONLY_ISAS)  # (the ISAs with ELF programs)
def test_from_elf_matches_the_testbins(isa: str) -> None:
    image = load_image(str(bin_path(isa, "calls")))
    assert image.isa.name == isa


def test_from_elf_rejects_unknown_machine() -> None:
    with pytest.raises(UnknownIsa, match="EM_SPARC"):
        from_elf("EM_SPARC", 32, "big")
    with pytest.raises(UnknownIsa):
        from_elf("EM_PPC64", 64, "big", 2)  # big-endian ELFv2: neither ppc64 nor ppc64le


@pytest.mark.parametrize("isa", MODULES)
def test_every_gap_has_a_reason(isa: str) -> None:
    desc = by_name(isa)
    assert set(CAPABILITIES) <= set(desc.capabilities)
    for name, cap in desc.capabilities.items():
        assert cap.works or len(cap.reason) > 10, f"{isa}.{name} lacks a reason"
    for fix in desc.reset:
        assert fix.reason, f"{isa}: reset fix-up of {fix.reg} lacks a reason"
