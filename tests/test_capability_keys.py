"""Capability keys are typed (`isa.base.Cap`): a table declares only Cap members, a lookup by
any other key is a KeyError, and every key some ISA declares is a member (so a helper that
reads the table by key cannot name a capability no ISA declares)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emutrace.isa import all_isas, by_name
from emutrace.isa.base import CAPABILITIES, Cap, Capability


def test_every_declared_key_is_a_cap_member() -> None:
    for isa in all_isas():
        assert all(isinstance(k, Cap) for k in isa.capabilities), isa.name


def test_every_isa_declares_the_matrix_keys() -> None:
    for isa in all_isas():
        assert set(CAPABILITIES) <= set(isa.capabilities), isa.name


def test_string_key_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        by_name("x86_64").capability("busybox")  # type: ignore[arg-type]


def test_table_with_a_string_key_is_refused() -> None:
    isa = by_name("x86_64")
    with pytest.raises(KeyError):
        replace(isa, capabilities={"busybox": Capability(True)})


def test_undeclared_member_does_not_work() -> None:
    # s390x alone declares the EXRL gap; another ISA answers "not declared"
    assert by_name("s390x").capabilities[Cap.EXRL_RELATIVE_LONG].works is False
    cap = by_name("x86_64").capability(Cap.EXRL_RELATIVE_LONG)
    assert (cap.works, cap.reason) == (False, "not declared")


def test_every_member_is_declared_somewhere() -> None:
    declared = {k for isa in all_isas() for k in isa.capabilities}
    assert declared == set(Cap)
