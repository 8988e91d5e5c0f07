"""What N-version agreement compares: the canonical trace (`canonical.py`) of each backend's
run, with functions named so that a frame entered in the middle of a symbol shows it.

Names: a frame entered at a symbol's start (ELFv2: or its local entry) is the symbol's
name; one entered inside a symbol is `name+0xOFF`; one outside every symbol is its hex
address.

One documented exception: the `entry` backend probes function *entries*, so it cannot see a
call that lands elsewhere — AArch64 glibc calls `main` through a `b main` placed inside
`_start`, s390x through an unnamed stub, i386's `_start` calls a thunk inside itself.  The
ISA's capability table says where (`entry_sees_every_call`); there its trace is compared
with the others' with every frame not entered at a named entry dropped on both sides (its
children move up), and `tests/test_mechanisms.py` shows the raw difference.
"""

from __future__ import annotations

from collections.abc import Iterable

from emutrace.discover.symbols import SymbolTable
from emutrace.isa.base import Cap, Isa
from emutrace.trace.canonical import canonical_text
from emutrace.trace.events import Record

ENTRY_ONLY = frozenset({"entry"})  # backends that only see function entries
ENTRY_CAPABILITY = Cap.ENTRY_SEES_EVERY_CALL


def entries_only(backend: str, isa: Isa) -> bool:
    """Compare this backend's trace at named entries only: an entry-only backend on an ISA
    whose capability table declares that it cannot see every call."""
    cap = isa.capabilities.get(ENTRY_CAPABILITY)
    return backend in ENTRY_ONLY and cap is not None and not cap.works


def at_named_entry(name: str) -> bool:
    return "+" not in name and not name.startswith("0x")


def agreement_text(records: Iterable[Record], symbols: SymbolTable, code_mask: int,
                   entries_only: bool = False) -> str:
    keep = at_named_entry if entries_only else None
    return canonical_text(records, symbols.namer(code_mask, offsets=True), keep)
