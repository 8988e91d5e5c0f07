"""Values from the register snapshot a native hook saved at an event (int3, step, btf on the
native hot path): what `ArgReader` would read from the live CPU at that moment.

C saves, per call (or jump that may be a tail call), the integer argument registers and
then the first stack words (8 words in all), as the callee sees them at its entry; per
return, the return registers.  `Snapshot` serves those words to an `ArgReader` like a CPU;
`args_fast` / `return_fast` say whether a function's values are all among them (else the
event is made on the live CPU), and `arg_plan` / `ret_plan` the common cases without the
snapshot (one word per value: `ArgReader.value`).
"""

from __future__ import annotations

from emutrace.discover.callabi import SRET, VOID, CallTypes, Slots, Unknown
from emutrace.discover.prototypes import CType
from emutrace.target.protocol import MemoryFault, Target
from emutrace.trace.values import Value

ArgPlan = list[tuple[int, "CType | Value"]]  # per argument: its word's index, type or value
SNAPSHOT = object()  # a value plan: read through an ArgReader over the snapshot
VOID_PLAN = object()  # a return plan: no value


class Snapshot:
    """The registers and stack words a native hook saved at one event, read like a CPU by
    `ArgReader` (a word it did not save reads as unmapped, as ArgReader expects)."""

    def __init__(self, target: Target) -> None:
        self.isa, self.word, self.byteorder = target.isa, target.word, target.byteorder
        self.regs: dict[str, int] = {}
        self.words: dict[int, int] = {}

    def reg_read(self, name: str) -> int:
        return self.regs[name]

    def read_word(self, addr: int) -> int:
        try:
            return self.words[addr]
        except KeyError:
            raise MemoryFault(f"{addr:#x}: not saved with the event") from None


def args_fast(types: CallTypes, target: int, saved_words: int, strings: bool = False,
              word: int = 0) -> bool:
    """Are the arguments of the function at target integer words among the first
    `saved_words` argument slots (no buffer or SRET pointer to follow)?  strings: `char *`
    values count too, each one word (C copies their strings at the event, hotpath.c), when
    the plan reads every value from its own word (not SNAPSHOT: that reads strings from
    memory)."""
    locs = types.at(target).args
    has_strings = False
    for loc in locs:
        if isinstance(loc, Unknown):
            continue
        if not isinstance(loc, Slots) or loc.ctype is SRET or max(loc.ids) >= saved_words:
            return False
        if loc.ctype.kind in ("str", "buf"):
            if not strings or len(loc.ids) != 1 or loc.ctype.size not in (0, word):
                return False
            has_strings = True
    return not has_strings or arg_plan(types, target) is not SNAPSHOT


def return_fast(types: CallTypes, site: int, strings: bool = False, word: int = 0) -> bool:
    """Is the value returned at site an integer in the return registers?  strings: a
    one-word `char *` counts too (C copies its string at the event, hotpath.c)."""
    _func, values = types.function_of(site)
    t = values.ret
    if t is not None and t.kind in ("str", "buf"):
        return strings and t.size in (0, word)
    return t is not None and (t is VOID or t.kind not in ("float", "struct"))


def arg_plan(types: CallTypes, target: int) -> ArgPlan | object:
    """The arguments of the function at target as (word index, type) pairs, or SNAPSHOT."""
    out: ArgPlan = []
    for loc in types.at(target).args:
        if isinstance(loc, Unknown):
            out.append((0, Value("struct", 8 * loc.ctype.size, 0, "{?}")))
        elif (isinstance(loc, Slots) and len(loc.ids) == 1 and loc.ctype.kind != "struct"
              and loc.ctype is not SRET):
            out.append((loc.ids[0], loc.ctype))
        else:
            return SNAPSHOT
    return out


def ret_plan(types: CallTypes, site: int, word: int) -> object:
    """The type of the value returned at site, VOID_PLAN, or SNAPSHOT."""
    _func, values = types.function_of(site)
    t = values.ret
    if t is VOID or t.kind == "void":
        return VOID_PLAN
    if t.kind in ("float", "struct") or t.size > word:
        return SNAPSHOT
    return t
