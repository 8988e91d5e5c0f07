"""Argument placement rules of `discover/callabi.plan_call` that the typed testbin does not
reach, each against the ABI document's own rule (pure: no emulator)."""

from __future__ import annotations

from emutrace.discover.callabi import ByRef, Fpr, Slots, plan_call
from emutrace.discover.prototypes import CType
from emutrace.isa import by_name

INT = CType("int", 4, "int")
DOUBLE = CType("float", 8, "double")
FLOAT = CType("float", 4, "float")
LLONG = CType("int", 8, "long long")


def struct(size: int) -> CType:
    return CType("struct", size, "s", members=(("a", 0, INT),))


def test_arm_vfp_back_fills_single_registers() -> None:
    """AAPCS §6.1.2 (VFP CPRC allocation): f(float, double, float) -> s0, d1, s1."""
    plan = plan_call(by_name("arm"), (FLOAT, DOUBLE, FLOAT))
    assert [p.reg for p in plan if isinstance(p, Fpr)] == ["s0", "d1", "s1"]


def test_arm_variadic_uses_core_registers_and_even_pairs() -> None:
    """AAPCS §6.4.1 + C.3: variadic g(int, double, ...) -> r0, then r2:r3 (even pair)."""
    plan = plan_call(by_name("arm"), (INT, DOUBLE), variadic=True)
    assert [p.ids for p in plan if isinstance(p, Slots)] == [(0,), (2, 3)]


def test_mips_o32_fp_registers_only_for_leading_fp_arguments() -> None:
    """o32: f(double, int) -> $f12, a2 (the double's slots a0:a1 stay unused);
    g(int, double) -> a0, a2:a3 (no FP register once an integer came first)."""
    isa = by_name("mips")
    f = plan_call(isa, (DOUBLE, INT))
    assert isinstance(f[0], Fpr) and f[0].reg == "f12" and f[0].high == "f13"
    assert isinstance(f[1], Slots) and f[1].ids == (2,)
    g = plan_call(isa, (INT, DOUBLE))
    assert isinstance(g[1], Slots) and g[1].ids == (2, 3)


def test_ppc64le_fp_argument_skips_a_general_register() -> None:
    """ELFv2 §2.2.4: f(double, int) -> f1, r4 (r3 is the double's doubleword)."""
    plan = plan_call(by_name("ppc64le"), (DOUBLE, INT))
    assert isinstance(plan[0], Fpr) and plan[0].reg == "fpr1"
    assert isinstance(plan[1], Slots) and plan[1].ids == (1,)


def test_structs_by_reference_and_in_memory() -> None:
    """s390x: a 12-byte struct by reference, an 8-byte one as an integer; ppc32: every
    struct by reference; x86-64: a 24-byte struct on the stack while integers still take
    rdi...; i386: a struct result's hidden address is the first stack slot."""
    s390x = plan_call(by_name("s390x"), (struct(12), struct(8)))
    assert isinstance(s390x[0], ByRef) and s390x[0].slot == 0
    assert isinstance(s390x[1], Slots) and s390x[1].ids == (1,)
    ppc = plan_call(by_name("ppc"), (struct(8),))
    assert isinstance(ppc[0], ByRef)
    x86 = plan_call(by_name("x86_64"), (struct(24), INT))
    nregs = len(by_name("x86_64").registers.args)
    assert isinstance(x86[0], Slots) and x86[0].ids == (nregs, nregs + 1, nregs + 2)
    assert isinstance(x86[1], Slots) and x86[1].ids == (0,)
    i386 = plan_call(by_name("i386"), (INT,), ret=struct(8))
    assert [p.ids for p in i386 if isinstance(p, Slots)] == [(0,), (1,)]


def test_long_long_on_ppc32_starts_at_an_odd_register() -> None:
    """Power 32-bit ABI: f(int, long long) -> r3, r5:r6 (r4 skipped)."""
    plan = plan_call(by_name("ppc"), (INT, LLONG))
    assert [p.ids for p in plan if isinstance(p, Slots)] == [(0,), (2, 3)]
