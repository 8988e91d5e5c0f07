"""The Arm condition codes over the N, Z, C, V flags, as data for the native hot path
(`Condition` tests of isa/base.py).  A32/T32's CPSR and AArch64's NZCV keep the four flags at
the same bits (N 31, Z 30, C 29, V 28; Arm ARM, "Condition codes"), so arm.py and aarch64.py
share the table."""

from __future__ import annotations

NZCV_CONDITIONS: dict[str, tuple[str, tuple[int, ...]]] = {
    "eq": ("set", (30,)), "ne": ("clear", (30,)), "cs": ("set", (29,)), "hs": ("set", (29,)),
    "cc": ("clear", (29,)), "lo": ("clear", (29,)), "mi": ("set", (31,)), "pl": ("clear", (31,)),
    "vs": ("set", (28,)), "vc": ("clear", (28,)), "hi": ("set_and_clear", (29, 30)),
    "ls": ("clear_or_set", (29, 30)), "ge": ("eq", (31, 28)), "lt": ("ne", (31, 28)),
    "gt": ("clear_and_eq", (30, 31, 28)), "le": ("set_or_ne", (30, 31, 28)),
}
