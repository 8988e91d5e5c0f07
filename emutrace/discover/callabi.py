"""Where a call's arguments and result are, per function (pure: no emulator).

`CallTypes` answers, for a function's address, which prototype applies — DWARF, else the
bundled libc table by symbol name, else none — and how many values `-A FUNC@argN` asks
for.  `plan_call` turns a prototype into locations by the ISA's C ABI (`Registers` for
the integer slots, `CValues` for the rest); `backends/args.py` reads them at the event.

Integer *slots* are the argument registers followed by the stack words after them, in
order (i386: stack words only).  A location is one of:

* `Slots(ids, ctype)` — a scalar, a 64-bit pair, a struct's words, or a float the ABI
  passes in integer slots (i386, later MIPS o32 arguments);
* `Fpr(reg, high, ctype)` — a floating-point register (`high`: MIPS FR=0's second
  register holding a double's high word);
* `Reg(reg, ctype)` — an integer value in a register the C ABI would not use for it, as
  DWARF says (`Prototype.entry_registers`: i386 static functions in GCC's local calling
  convention);
* `ByRef(slot, ctype)` — a struct passed as a pointer to a copy: read from memory;
* `Unknown(ctype)` — a value this reader does not locate (a struct with float members,
  which ABIs pass in FP registers by rules not modelled here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from emutrace.discover.argformats import ArgFormats
from emutrace.discover.demangle import demangled
from emutrace.discover.memo import file_key, kept
from emutrace.discover.prototypes import (
    VOID,
    CType,
    ProgramTypes,
    Prototype,
    libc_prototypes,
    lookup,
    prefix_entries,
)
from emutrace.discover.store import stored_types
from emutrace.discover.symbols import SymbolTable, read_symbols
from emutrace.elf import Image
from emutrace.isa.base import CValues, Isa

T = TypeVar("T")
DEFAULT_ARGS = 4  # integer arguments shown for a function without a prototype or -A


@dataclass(frozen=True)
class Slots:
    ids: tuple[int, ...]  # slot numbers: below len(Registers.args) a register, else the
    ctype: CType  # stack word (id - len(Registers.args)) past the argument registers

    @property
    def first(self) -> int:
        return self.ids[0]


@dataclass(frozen=True)
class Fpr:
    reg: str
    high: str | None
    ctype: CType


@dataclass(frozen=True)
class Reg:
    reg: str
    ctype: CType


@dataclass(frozen=True)
class ByRef:
    slot: int
    ctype: CType


@dataclass(frozen=True)
class Unknown:
    ctype: CType


Loc = Slots | Fpr | Reg | ByRef | Unknown
AUTO = CType("auto", 0, "")  # a word of unknown type
SRET = CType("sret", 0, "")  # the hidden address of a struct result (not shown)


def has_float(t: CType) -> bool:
    return any(m.kind == "float" or (m.kind == "struct" and has_float(m))
               for _, _, m in t.members)


def plan_call(isa: Isa, params: tuple[CType, ...], variadic: bool = False,
              ret: CType = VOID) -> tuple[Loc, ...]:
    """The location of each parameter, by the ISA's C ABI (see the module docstring); a
    struct result in memory puts its hidden address first (ctype SRET; AArch64: x8)."""
    cv: CValues = isa.c_values
    word = isa.identity.word_size
    nregs = len(isa.registers.args)
    slot = stack = fp = 0  # next argument register, next stack word
    singles: set[int] = set()  # ARM VFP: single registers taken (back-filling)
    seen_int = False
    out: list[Loc] = []

    def take(size: int, ctype: CType, memory: bool = False) -> Slots:
        """The next n words: registers while they last (an argument may straddle into
        the stack, AAPCS C.5 / o32), then stack words; `memory`: on the stack whatever
        registers are free (x86-64 MEMORY class)."""
        nonlocal slot, stack
        n = max(1, -(-size // word))
        if n == 2 and word == 4 and cv.pair_aligned and ctype.kind != "struct":
            slot += slot % 2
            stack += stack % 2
        ids: list[int] = []
        if not memory:
            while slot < nregs and len(ids) < n:
                ids.append(slot)
                slot += 1
            if ids and len(ids) < n and cv.struct_large == "stack":  # x86-64: all or none
                slot, ids = ids[0], []
        while len(ids) < n:
            ids.append(nregs + stack)
            stack += 1
        return Slots(tuple(ids), ctype)

    core_only = variadic and cv.variadic_core_only
    if returns_in_memory(cv, ret):  # the hidden address of the struct result comes first
        out.append(Fpr(cv.sret_reg, None, SRET) if cv.sret_reg else take(word, SRET))
    for t in params:
        if t.kind == "float" and not core_only:
            loc = _fp_register(cv, t, fp, singles, seen_int)
            if loc is not None:
                if not cv.fp_single_args:
                    fp += 1
                out.append(loc)
                if cv.fp_shadow:
                    take(t.size, t)
                continue
            out.append(take(t.size, t))
            continue
        seen_int = True
        if t.kind == "struct":
            if (has_float(t) and cv.fp_args and not cv.fp_leading_only) or t.is_union and \
                    has_float(t):
                out.append(Unknown(t))  # floats of a struct travel in FP registers
                take(t.size, t)
                continue
            if cv.struct_scalar:
                if t.size in (1, 2, 4, 8):
                    out.append(take(word, t))
                else:
                    out.append(ByRef(take(word, t).first, t))
                continue
            if t.size <= cv.struct_in_slots:
                out.append(take(t.size, t))
            elif cv.struct_large == "ref":
                out.append(ByRef(take(word, t).first, t))
            else:
                out.append(take(t.size, t, memory=True))
            continue
        out.append(take(t.size or word, t))
    return tuple(out)


def returns_in_memory(cv: CValues, ret: CType) -> bool:
    """A struct result the caller provides memory for (its address a hidden argument)."""
    return ret.kind == "struct" and ret.size > cv.struct_ret_in_regs


def _fp_register(cv: CValues, t: CType, fp: int, singles: set[int],
                 seen_int: bool) -> Fpr | None:
    if cv.fp_leading_only and seen_int:
        return None
    if cv.fp_single_args:  # ARM VFP: s-registers back-filled, d<k> = s<2k>:s<2k+1>
        limit = len(cv.fp_single_args)
        if t.size == 4:
            free = next((i for i in range(limit) if i not in singles), None)
            if free is None:
                return None
            singles.add(free)
            return Fpr(cv.fp_single_args[free], None, t)
        pair = next((k for k in range(limit // 2)
                     if 2 * k not in singles and 2 * k + 1 not in singles), None)
        if pair is None:
            return None
        singles.update((2 * pair, 2 * pair + 1))
        return Fpr(cv.fp_args[pair], None, t)
    if fp >= len(cv.fp_args):
        return None
    return Fpr(cv.fp_args[fp], cv.fp_pair[fp] if fp < len(cv.fp_pair) else None, t)


@dataclass(frozen=True)
class FunctionValues:
    """What to read at a function's call and return."""

    args: tuple[Loc, ...]
    ret: CType  # VOID: nothing to read; AUTO: the result register as a word
    ret_in_core: bool = False  # a float result in the integer result register(s)


def _prototypes(path: str) -> ProgramTypes:
    """read_prototypes, kept for the next run of the same file in this process (memo.py)
    and on disk (store.py; its warning about garbage DWARF is said once per process either
    way, and a read that warned is not kept on disk)."""
    return kept("prototypes", file_key(path), lambda: stored_types(path))


class CallTypes:
    """Prototypes of one program's functions, resolved once per function address."""

    def __init__(self, isa: Isa, path: str, symbols: SymbolTable, bias: int = 0,
                 counts: dict[str, int] | None = None, default: int = DEFAULT_ARGS,
                 formats: dict[str, ArgFormats] | None = None) -> None:
        self.isa = isa
        self.symbols = symbols
        self.bias = bias
        self.counts = counts or {}
        self.formats = formats or {}  # -A/-R with uftrace's formats (discover/argformats.py)
        self.default = default
        self.dwarf = _prototypes(path)
        self.libc = libc_prototypes(isa.identity.word_size, isa.c_values.char_signed)
        self.libc_prefixes = prefix_entries(self.libc)
        self._cache: dict[int, FunctionValues] = {}
        self._sites: dict[int, tuple[int, FunctionValues]] = {}
        self._word = CType("auto", isa.identity.word_size, "")

    @classmethod
    def for_image(cls, image: Image, counts: dict[str, int] | None = None,
                  default: int = DEFAULT_ARGS,
                  formats: dict[str, ArgFormats] | None = None) -> CallTypes:
        """The image as loaded (run-time addresses; DWARF's are link addresses)."""
        return cls(image.isa, image.path, read_symbols(image), image.bias, counts, default,
                   formats)

    def prototype(self, addr: int) -> tuple[Prototype | None, str | None]:
        name = self.symbols.entry_name(addr)
        proto = self.dwarf.by_addr.get(addr - self.bias)
        if proto is None and name is not None:  # an ELFv2 local entry: DWARF's is global
            func = self.symbols.containing(addr)
            if func is not None and func.local_offset and addr == func.start + func.local_offset:
                proto = self.dwarf.by_addr.get(func.start - self.bias)
        if proto is None and name is not None:  # ELFv2 local entry, or no DWARF here
            proto = self.dwarf.by_name.get(name) or lookup(self.libc, name, self.libc_prefixes)
        return proto, name

    def at(self, addr: int) -> FunctionValues:
        """The function entered at addr (cached)."""
        got = self._cache.get(addr)
        if got is None:
            got = self._cache[addr] = self._resolve(addr)
        return got

    def function_of(self, addr: int) -> tuple[int, FunctionValues]:
        """(start, values) of the function whose code holds addr (a return site); the
        untyped default outside every symbol.  Cached per address."""
        got = self._sites.get(addr)
        if got is None:
            got = self._sites[addr] = self._function_of(addr)
        return got

    def _function_of(self, addr: int) -> tuple[int, FunctionValues]:
        sym = self.symbols.containing(addr)
        if sym is None:
            return -1, FunctionValues((), self._word)
        got = self._cache.get(sym.start + sym.local_offset)  # entered at its local entry
        if got is not None:
            return sym.start + sym.local_offset, got
        return sym.start, self.at(sym.start)

    def count_of(self, name: str | None) -> int | None:
        """`-A FUNC@argN`'s N for the symbol `name`: FUNC names it as it is, or (a C++
        function) by its simple or full demangled name (discover/demangle.py)."""
        return _by_name(self.counts, name)

    def _resolve(self, addr: int) -> FunctionValues:
        proto, name = self.prototype(addr)
        formats = _by_name(self.formats, name)
        if formats is not None:  # -A/-R with formats: the prototype they make
            proto = formats.prototype(proto, self.isa.identity.word_size)
        want = self.count_of(name)
        if proto is None:
            n = self.default if want is None else want
            return FunctionValues(plan_call(self.isa, (self._word,) * n), self._word)
        params = proto.params
        if want is not None:  # -A: the first N, untyped words past the prototype's
            params = (params + (self._word,) * max(0, want - len(params)))[:want]
        core = proto.variadic and self.isa.c_values.variadic_core_only
        locs = plan_call(self.isa, params, proto.variadic, proto.ret)
        if proto.entry_registers and self.isa.registers.dwarf and formats is None:
            locs = _where_dwarf_says(self.isa, locs, proto.entry_registers)
        return FunctionValues(locs, proto.ret, core)


def _where_dwarf_says(isa: Isa, locs: tuple[Loc, ...], registers: tuple[int, ...]
                      ) -> tuple[Loc, ...]:
    """The plan with each one-word integer argument the ABI puts on the stack read from
    the register DWARF says holds it at the entry instead (the parameters are the plan's
    locations after a hidden struct-result address)."""
    names, word, nregs = isa.registers.dwarf, isa.identity.word_size, len(isa.registers.args)
    shown = [i for i, loc in enumerate(locs) if loc.ctype is not SRET]
    out = list(locs)
    for i, reg in zip(shown, registers, strict=False):  # (-A may ask for more)
        loc = locs[i]
        if isinstance(loc, Slots) and len(loc.ids) == 1 and loc.ids[0] >= nregs \
                and 0 <= reg < len(names) and loc.ctype.kind not in ("float", "struct") \
                and (loc.ctype.size or word) <= word:
            out[i] = Reg(names[reg], loc.ctype)
    return tuple(out)


def _by_name(table: dict[str, T], name: str | None) -> T | None:
    """`table`'s entry for the symbol `name`, named as it is or (a C++ function) by its
    simple or full demangled name."""
    if name is None or not table:
        return None
    got = table.get(name)
    for mode in ("simple", "full"):
        if got is None and name.startswith("_Z"):
            got = table.get(demangled(name, mode))
    return got


__all__ = ["AUTO", "SRET", "VOID", "ByRef", "CallTypes", "Fpr", "FunctionValues", "Loc", "Reg",
           "Slots", "Unknown", "has_float", "plan_call", "returns_in_memory"]
