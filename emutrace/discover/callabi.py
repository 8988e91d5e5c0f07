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
* `ByRef(slot, ctype)` — a struct (or s390x `long double`) passed as a pointer to a
  copy: read from memory;
* `Pieces(parts, ctype)` — a value split over registers: a struct with floating-point
  members by its ABI's aggregate rule (`CValues.struct_fp`: x86-64 eightbytes, HFAs,
  RISC-V flattening, s390x single-member structs), an IBM double-double in two FPRs;
* `Unknown(ctype)` — a value this reader does not locate (a struct with float members on
  an ISA whose rule is not modelled: `struct_fp` empty).

`long double` goes where `CValues.long_double_args` says; its value is decoded exactly
from its bytes (trace/long_double.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class Pieces:
    """A value the ABI splits over registers: per piece (byte offset in the value's memory
    image, bytes, where) with `where` an FP register's name or an integer slot number."""

    parts: tuple[tuple[int, int, str | int], ...]
    ctype: CType


Loc = Slots | Fpr | Reg | ByRef | Pieces | Unknown
AUTO = CType("auto", 0, "")  # a word of unknown type
SRET = CType("sret", 0, "")  # the hidden address of a struct result (not shown)


def has_float(t: CType) -> bool:
    return any(m.kind == "float" or (m.kind == "struct" and has_float(m))
               for _, _, m in t.members)


def is_long_double(t: CType) -> bool:
    return t.kind == "float" and t.name == "long double"


def leaves(t: CType, at: int = 0) -> list[tuple[int, CType]]:
    """The scalar members of a struct, nested structs and arrays flattened, as (byte offset,
    type): what the ABIs' aggregate rules classify."""
    out: list[tuple[int, CType]] = []
    for _, off, m in t.members:
        if m.kind == "struct":
            out += leaves(m, at + off)
        elif m.kind == "array":
            elem = m.members[0][2] if m.members else None
            if elem is None or elem.size == 0:
                return [(at + off, m)]  # (not classifiable: an integer-class blob)
            for k in range(m.size // elem.size):
                out += leaves(elem, at + off + k * elem.size) if elem.kind == "struct" \
                    else [(at + off + k * elem.size, elem)]
        else:
            out.append((at + off, m))
    return out


def _fp_leaf(t: CType) -> bool:
    return t.kind == "float" and t.size in (4, 8) and not (is_long_double(t) and t.size > 8)


def homogeneous(t: CType, limit: int) -> int:
    """Members of a homogeneous floating-point aggregate (all float, or all double; at most
    `limit`), else 0."""
    parts = leaves(t)
    if not 0 < len(parts) <= limit or t.is_union:
        return 0
    size = parts[0][1].size
    return len(parts) if all(_fp_leaf(m) and m.size == size for _, m in parts) else 0


def plan_call(isa: Isa, params: tuple[CType, ...], variadic: bool = False,
              ret: CType = VOID) -> tuple[Loc, ...]:
    """The location of each parameter, by the ISA's C ABI (see the module docstring); a
    struct result in memory puts its hidden address first (ctype SRET; AArch64: x8)."""
    plan = _Plan(isa)
    cv = plan.cv
    out: list[Loc] = []
    core_only = variadic and cv.variadic_core_only
    if returns_in_memory(cv, ret):  # the hidden address of the result comes first (o32:
        out.append(Fpr(cv.sret_reg, None, SRET) if cv.sret_reg else plan.take(plan.word, SRET))
        plan.seen_int = True  # an integer first argument: no FP argument registers then)
    for t in params:
        if is_long_double(t) and cv.long_double != "double" and not core_only:
            out.append(plan.long_double(t))
        elif t.kind == "float" and not core_only:
            out.append(plan.fp_scalar(t))
        elif t.kind == "struct":
            plan.seen_int = True
            out.append(plan.struct(t))
        else:
            plan.seen_int = True
            out.append(plan.take(t.size or plan.word, t))
    return tuple(out)


class _Plan:
    """The registers and stack words a call's arguments have taken so far."""

    def __init__(self, isa: Isa) -> None:
        self.cv: CValues = isa.c_values
        self.word = isa.identity.word_size
        self.nregs = len(isa.registers.args)
        self.slot = self.stack = self.fp = 0  # next argument register, stack word, FPR
        self.singles: set[int] = set()  # ARM VFP: single registers taken (back-filling)
        self.seen_int = False

    def take(self, size: int, ctype: CType, memory: bool = False, align: int = 0) -> Slots:
        """The next n words: registers while they last (an argument may straddle into
        the stack, AAPCS C.5 / o32), then stack words; `memory`: on the stack whatever
        registers are free (x86-64 MEMORY class); `align`: the argument's alignment in
        bytes (a doubleword-aligned one starts at an even slot on pair_aligned ISAs)."""
        cv, word, nregs = self.cv, self.word, self.nregs
        n = max(1, -(-size // word))
        if (n == 2 and word == 4 and cv.pair_aligned and ctype.kind != "struct") or \
                (align > word and cv.pair_aligned):
            if not memory:  # (AAPCS C.3 rounds the core register number only when used)
                self.slot += self.slot % 2
            self.stack += self.stack % 2
        if memory and align > word:
            self.stack += -self.stack % (align // word)
        ids: list[int] = []
        if not memory:
            while self.slot < nregs and len(ids) < n:
                ids.append(self.slot)
                self.slot += 1
            if ids and len(ids) < n and cv.struct_large == "stack":  # x86-64: all or none
                self.slot, ids = ids[0], []
        while len(ids) < n:
            ids.append(nregs + self.stack)
            self.stack += 1
        return Slots(tuple(ids), ctype)

    def fp_scalar(self, t: CType) -> Loc:
        cv = self.cv
        loc = _fp_register(cv, t, self.fp, self.singles, self.seen_int)
        if loc is None:
            return self.take(t.size, t, memory=cv.fp_overflow_stack)
        if not cv.fp_single_args:
            self.fp += 1
        if cv.fp_shadow:
            self.take(t.size, t)
        return loc

    def long_double(self, t: CType) -> Loc:
        """A `long double` where CValues.long_double_args says (the ISA module cites its
        ABI): one FP register, an FP pair, integer slots, stack words, or by reference."""
        cv, where = self.cv, self.cv.long_double_args
        if where == "fp" and cv.fp_quad and self.fp < len(cv.fp_quad):
            self.fp += 1
            return Fpr(cv.fp_quad[self.fp - 1], None, t)
        if where == "pair" and self.fp + 2 <= len(cv.fp_args):
            self.fp += 2
            if cv.fp_shadow:
                self.take(t.size, t)
            half = t.size // 2
            return Pieces(((0, half, cv.fp_args[self.fp - 2]),
                           (half, half, cv.fp_args[self.fp - 1])), t)
        if where == "ref":
            return ByRef(self.take(self.word, t).first, t)
        on_stack = where == "memory" or (where == "fp" and cv.fp_overflow_stack)
        return self.take(t.size, t, memory=on_stack, align=cv.long_double_align)

    def struct(self, t: CType) -> Loc:
        cv = self.cv
        if has_float(t):
            rule = STRUCT_RULES.get(cv.struct_fp)
            if (t.is_union and cv.struct_fp != "eightbytes") or \
                    (rule is None and cv.fp_args and not cv.fp_leading_only):
                self.take(t.size, t)
                return Unknown(t)  # floats of a struct travel by rules not modelled here
            got = rule(self, t) if rule is not None else None
            if got is not None:
                return got
        if cv.struct_scalar:
            if t.size in (1, 2, 4, 8):
                return self.take(self.word, t)
            return ByRef(self.take(self.word, t).first, t)
        if t.size <= cv.struct_in_slots:
            return self.take(t.size, t, align=_alignment(t))
        if cv.struct_large == "ref":
            return ByRef(self.take(self.word, t).first, t)
        return self.take(t.size, t, memory=True)

    # ---------------------------------------------------------- aggregates with floats
    # Each returns the struct's location, or None: passed as a struct without floats is.

    def core(self, t: CType) -> Loc | None:
        """i386, MIPS o32, PPC32: a struct is a struct, whatever its members (i386 psABI
        §2.2.3 on the stack; o32 in a0-a3 then the stack; SysV PPC32 by reference)."""
        return None

    def eightbytes(self, t: CType) -> Loc | None:
        """x86-64 psABI §3.2.3: a struct of at most 16 bytes is classified per eightbyte:
        SSE when every member in it is float or double (the next %xmm, its low bytes),
        else INTEGER (the next integer register); when the registers for all of them are
        not free the whole struct is MEMORY (on the stack)."""
        members = leaves(t)
        if t.size > 16 or any(is_long_double(m) and m.size > 8 for _, m in members):
            return self.take(t.size, t, memory=True)  # (a long double member: X87, MEMORY)
        classes = [bool(inside) and all(_fp_leaf(m) for _, m in inside)
                   for inside in ([(o, m) for o, m in members if o // 8 == k]
                                  for k in range(-(-t.size // 8)))]
        sse = sum(classes)
        if self.fp + sse > len(self.cv.fp_args) or self.slot + len(classes) - sse > self.nregs:
            return self.take(t.size, t, memory=True)
        parts: list[tuple[int, int, str | int]] = []
        for k, is_sse in enumerate(classes):
            size = min(8, t.size - 8 * k)
            if is_sse:
                parts.append((8 * k, size, self.cv.fp_args[self.fp]))
                self.fp += 1
            else:
                parts.append((8 * k, size, self.slot))
                self.slot += 1
        return Pieces(tuple(parts), t)

    def hfa(self, t: CType) -> Loc | None:
        """A homogeneous floating-point aggregate (up to hfa_limit floats, or doubles): one
        member per FP register, consecutive.  AAPCS64 §6.8.2 C.2/C.3 (v registers; when
        too few are left, NSRN = 8 and the struct goes on the stack); AAPCS §7.1.2 VFP
        C.1.cp/C.2.cp (s or d registers, the lowest free run; else every VFP register is
        marked used and the struct goes on the stack); ELFv2 §2.2.4.1 (up to 8 members
        in f1-f13, floats in double format, the parameter save area words skipped)."""
        cv = self.cv
        n = homogeneous(t, cv.hfa_limit)
        if not n:
            return None
        size = leaves(t)[0][1].size
        regs = self._vfp_run(n, size) if cv.fp_single_args else (
            list(cv.fp_args[self.fp:self.fp + n]) if self.fp + n <= len(cv.fp_args) else None)
        if regs is None:
            if cv.hfa_to_stack:
                self.fp = len(cv.fp_args)
                self.singles.update(range(len(cv.fp_single_args)))
                return self.take(t.size, t, memory=True, align=_alignment(t))
            return None
        if not cv.fp_single_args:
            self.fp += n
        if cv.fp_shadow:
            self.take(t.size, t)
        return Pieces(tuple((off, m.size, reg) for (off, m), reg in zip(leaves(t), regs,
                                                                      strict=True)), t)

    def _vfp_run(self, n: int, size: int) -> list[str] | None:
        """AAPCS VFP: the lowest run of n free s registers (floats) or d registers
        (doubles, each two s registers), taken; None when there is none."""
        cv, per = self.cv, size // 4
        limit = len(cv.fp_single_args) // per
        for first in range(limit - n + 1):
            wanted = {s for k in range(first, first + n) for s in range(per * k, per * k + per)}
            if not wanted & self.singles:
                self.singles |= wanted
                names = cv.fp_single_args if per == 1 else cv.fp_args
                return [names[k] for k in range(first, first + n)]
        return None

    def flatten(self, t: CType) -> Loc | None:
        """RISC-V psABI, hardware floating-point calling convention: a struct whose
        flattened members are one float or double, two of them, or one of them and one
        integer (each at most XLEN) travels in FP registers (and an integer register) when
        they are free; else by the integer convention."""
        members = leaves(t)
        fps = [m for _, m in members if _fp_leaf(m)]
        ints = [m for _, m in members if not _fp_leaf(m)]
        if not fps or len(members) > 2 or any(m.size > self.word or m.kind == "array"
                                              for m in ints):
            return None
        if self.fp + len(fps) > len(self.cv.fp_args) or self.slot + len(ints) > self.nregs:
            return None
        parts: list[tuple[int, int, str | int]] = []
        for off, m in members:
            if _fp_leaf(m):
                parts.append((off, m.size, self.cv.fp_args[self.fp]))
                self.fp += 1
            else:
                parts.append((off, m.size, self.slot))
                self.slot += 1
        return Pieces(tuple(parts), t)

    def single(self, t: CType) -> Loc | None:
        """s390x ELF ABI supplement §1.2.2.3: a struct with one member of type float or
        double (nested structs included) is passed as that member, in an FP register."""
        members = leaves(t)
        if len(members) != 1 or not _fp_leaf(members[0][1]) or members[0][1].size != t.size:
            return None
        if self.fp >= len(self.cv.fp_args):
            return None
        self.fp += 1
        return Pieces(((0, t.size, self.cv.fp_args[self.fp - 1]),), t)


STRUCT_RULES = {"core": _Plan.core, "eightbytes": _Plan.eightbytes, "hfa": _Plan.hfa,
                "flatten": _Plan.flatten, "single": _Plan.single}


def _alignment(t: CType) -> int:
    """A struct's alignment: its largest scalar member's (at most 8)."""
    return max((min(m.size, 8) for _, m in leaves(t) if m.kind != "array"), default=1)


def returns_in_memory(cv: CValues, ret: CType) -> bool:
    """A result the caller provides memory for (its address a hidden argument): a struct
    too large for the result registers and not one the ABI returns in FP registers, or a
    `long double` the ABI returns so (s390x)."""
    if is_long_double(ret) and cv.long_double != "double":
        return cv.long_double_ret == "memory"
    return ret.kind == "struct" and ret.size > cv.struct_ret_in_regs and \
        result_pieces(cv, ret) is None


def result_pieces(cv: CValues, ret: CType) -> Pieces | None:
    """Where a struct result with floating-point members is, when its ABI returns it in
    registers by the rule that passes it (None: as any struct).  x86-64 psABI §3.2.3: SSE
    eightbytes in %xmm0, %xmm1, INTEGER ones in %rax, %rdx; AAPCS64 §6.9, AAPCS §7.1.2
    (VFP) and ELFv2 §2.2.5: a homogeneous aggregate in the first FP registers (s0-s3 or
    d0-d3 on ARM); RISC-V: a struct its flattening puts in FP registers comes back in fa0,
    fa1 (and a0)."""
    if ret.kind != "struct" or ret.is_union or not has_float(ret):
        return None
    members = leaves(ret)
    # the integer result registers: "" the first (Registers.retval), then retval_hi
    ints: tuple[str, ...] = ("", cv.retval_hi) if cv.retval_hi else ("",)
    if cv.struct_fp == "hfa":
        n = homogeneous(ret, cv.hfa_limit)
        if not n:
            return None
        size = members[0][1].size
        regs = cv.fp_single_args if cv.fp_single_args and size == 4 else cv.fp_args
        return Pieces(tuple((off, m.size, reg) for (off, m), reg in zip(members, regs[:n],
                                                                      strict=True)), ret)
    if cv.struct_fp == "eightbytes" and ret.size <= 16:
        classes = [bool(inside) and all(_fp_leaf(m) for _, m in inside)
                   for inside in ([(o, m) for o, m in members if o // 8 == k]
                                  for k in range(-(-ret.size // 8)))]
        fps, cores = iter(cv.fp_args), iter(ints)
        return Pieces(tuple((8 * k, min(8, ret.size - 8 * k), next(fps) if sse else next(cores))
                            for k, sse in enumerate(classes)), ret)
    if cv.struct_fp == "flatten" and len(members) <= 2 and any(_fp_leaf(m) for _, m in members):
        if any(m.kind == "array" or (not _fp_leaf(m) and m.size > 8) for _, m in members):
            return None
        fps, cores = iter(cv.fp_args), iter(ints)
        return Pieces(tuple((off, m.size, next(fps) if _fp_leaf(m) else next(cores))
                            for off, m in members), ret)
    return None


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
    # a struct result with FP members in registers (register names; "": Registers.retval)
    ret_pieces: Pieces | None = None


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
            proto = _sized(formats.prototype(proto, self.isa.identity.word_size),
                           self.isa.c_values)
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
        return FunctionValues(locs, proto.ret, core, None if core else
                              result_pieces(self.isa.c_values, proto.ret))


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


def _sized(proto: Prototype, cv: CValues) -> Prototype:
    """A prototype from -A/-R formats with its `long double`s (`f80`) of the ISA's size."""
    def size(t: CType) -> CType:
        return CType("float", cv.long_double_size, t.name) if is_long_double(t) else t
    return replace(proto, params=tuple(size(t) for t in proto.params), ret=size(proto.ret))


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


__all__ = ["AUTO", "SRET", "VOID", "ByRef", "CallTypes", "Fpr", "FunctionValues", "Loc",
           "Pieces", "Reg", "Slots", "Unknown", "has_float", "homogeneous", "is_long_double",
           "leaves", "plan_call", "result_pieces", "returns_in_memory"]
