"""Function prototypes: the C type of each parameter and of the return value (pure:
pyelftools, no emulator).

Two sources, in this order of trust:

* DWARF (`read_prototypes`): every defined function (DW_TAG_subprogram with a name and
  code), its DW_TAG_formal_parameter children and its DW_AT_type, with typedefs and
  const/volatile stripped.  GCC describes plain `char` as DW_ATE_signed_char or
  DW_ATE_unsigned_char as the target ABI has it, so DWARF carries `char`'s signedness.
* The bundled libc table (`libc_prototypes`, file `libc_prototypes.txt` beside this module):
  common C library functions by symbol name, for programs without DWARF (glibc's static
  archive carries none).  Its `char` takes the ISA's signedness (`CValues.char_signed`).

A type is a `CType` whose `kind` is one of `trace.values` kinds (int, uint, char, uchar,
bool, enum, ptr, str, buf, float, struct, oct, hex) or `void`.  The program's *own* functions — what
`emutrace diff` compares by default — are the ones defined in a compile unit whose source
is not a system path (`is_system_source`) and not assembler.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar, cast

from elftools.dwarf.die import DIE
from elftools.dwarf.locationlists import LocationParser
from elftools.elf.elffile import ELFFile


@dataclass(frozen=True)
class CType:
    kind: str  # a trace.values kind, or "void"
    size: int  # bytes (0: void or unknown)
    name: str = ""
    enumerators: tuple[tuple[int, str], ...] = ()  # enum: (value, name)
    members: tuple[tuple[str, int, CType], ...] = ()  # struct: (name, byte offset, type)
    is_union: bool = False


VOID = CType("void", 0, "void")


@dataclass(frozen=True)
class Prototype:
    params: tuple[CType, ...]
    ret: CType  # VOID when the function returns nothing
    variadic: bool = False
    names: tuple[str, ...] = ()  # parameter names where known
    # per parameter, the DWARF register number holding it at the function's entry (DWARF 5
    # §2.6.1.1.3 register location descriptions: DW_OP_reg<n>, DW_OP_regx), -1 where DWARF
    # puts it elsewhere or says nothing: where a compiler passed it in a register its ABI
    # would not (GCC's local calling convention for i386 static functions: regparm)
    entry_registers: tuple[int, ...] = ()


@dataclass
class ProgramTypes:
    """What DWARF says about a program's functions."""

    by_addr: dict[int, Prototype] = field(default_factory=dict)  # link address → prototype
    by_name: dict[str, Prototype] = field(default_factory=dict)
    own: set[str] = field(default_factory=set)  # functions of the program's own sources


# DW_ATE_* base type encodings (DWARF 5 §5.1, table 5.2)
_ATE = {0x2: "bool", 0x4: "float", 0x5: "int", 0x6: "char", 0x7: "uint", 0x8: "uchar",
        0x10: "uint"}
_QUALIFIERS = ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type",
               "DW_TAG_restrict_type", "DW_TAG_atomic_type")
# DW_LANG_Mips_Assembler (DWARF 5 §7.12): the CUs `as -g` writes
_ASSEMBLER = 0x8001
# where system headers and the C library's sources live: not the program's own code
_SYSTEM_PREFIXES = ("/usr/", "/build/", "/lib/", "/opt/", "../sysdeps/", "./sysdeps/")


def is_system_source(name: str, comp_dir: str) -> bool:
    """A compile unit that belongs to the system (the C library, its start files), not to
    the program: its source or build directory is a system path or a glibc source tree."""
    path = name if name.startswith("/") else f"{comp_dir.rstrip('/')}/{name}"
    return (name.startswith(_SYSTEM_PREFIXES) or path.startswith(_SYSTEM_PREFIXES)
            or "/glibc" in path or "/sysdeps/" in path or "/csu/" in path)


def _text(die: DIE, attr: str) -> str:
    a = die.attributes.get(attr)
    if a is None:
        return ""
    v = a.value
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class _TypeReader:
    def __init__(self) -> None:
        self.cache: dict[int, CType] = {}

    def of(self, die: DIE | None, depth: int = 0) -> CType:
        if die is None:
            return VOID
        got = self.cache.get(die.offset)
        if got is None:
            got = self.cache[die.offset] = self._read(die, depth)
        return got

    @staticmethod
    def _target(die: DIE) -> DIE | None:
        return die.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in die.attributes \
            else None

    def _read(self, die: DIE, depth: int) -> CType:
        while die.tag in _QUALIFIERS:
            target = self._target(die)
            if target is None:
                return VOID
            die = target
        size = die.attributes["DW_AT_byte_size"].value \
            if "DW_AT_byte_size" in die.attributes else 0
        name = _text(die, "DW_AT_name")
        if die.tag == "DW_TAG_base_type":
            kind = _ATE.get(die.attributes["DW_AT_encoding"].value, "hex")
            return CType(kind, size, name)
        if die.tag == "DW_TAG_enumeration_type":
            values = tuple((int(c.attributes["DW_AT_const_value"].value), _text(c, "DW_AT_name"))
                           for c in die.iter_children() if c.tag == "DW_TAG_enumerator")
            return CType("enum", size or 4, name, enumerators=values)
        if die.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type"):
            pointee = self._target(die)
            const = False
            while pointee is not None and pointee.tag in _QUALIFIERS:
                const = const or pointee.tag == "DW_TAG_const_type"
                pointee = self._target(pointee)
            if pointee is not None and pointee.tag == "DW_TAG_base_type" and \
                    pointee.attributes["DW_AT_encoding"].value in (0x6, 0x8) and \
                    pointee.attributes["DW_AT_byte_size"].value == 1:
                # `const char *`: a string; `char *`: maybe a buffer to fill ("buf")
                return CType("str", size, "const char *") if const else \
                    CType("buf", size, "char *")
            return CType("ptr", size, "*")
        if die.tag in ("DW_TAG_structure_type", "DW_TAG_union_type"):
            members = []
            if depth < 2:
                for m in die.iter_children():
                    if m.tag != "DW_TAG_member" or "DW_AT_bit_size" in m.attributes:
                        continue
                    loc = m.attributes.get("DW_AT_data_member_location")
                    off = loc.value if loc is not None and isinstance(loc.value, int) else 0
                    members.append((_text(m, "DW_AT_name"), off,
                                    self.of(self._target(m), depth + 1)))
            return CType("struct", size, name, members=tuple(members),
                         is_union=die.tag == "DW_TAG_union_type")
        if die.tag == "DW_TAG_array_type":  # (a struct member: arguments decay)
            elem = self.of(self._target(die), depth + 1)
            count = 1
            for sub in die.iter_children():
                if sub.tag != "DW_TAG_subrange_type":
                    continue
                if "DW_AT_count" in sub.attributes:
                    count *= int(sub.attributes["DW_AT_count"].value)
                elif "DW_AT_upper_bound" in sub.attributes:
                    count *= int(sub.attributes["DW_AT_upper_bound"].value) + 1
                else:
                    count = 0
            return CType("array", size or count * elem.size, name, members=(("", 0, elem),))
        if die.tag == "DW_TAG_unspecified_type":
            return VOID
        return CType("hex", size, name)  # arrays, function types: raw words


# a concrete DIE's DW_AT_specification / DW_AT_abstract_origin chain, followed this far
# (GCC writes at most two links: an out-of-line constructor's instance -> its abstract
# DIE -> the declaration in the class)
_ORIGIN_LINKS = 4


@dataclass
class _Described:
    """What a DIE says of itself, completed by the DIEs it refers to (DWARF 5 §2.13.2
    DW_AT_specification, §3.3.8.3 DW_AT_abstract_origin): a C++ member function or a
    function in a namespace defined outside its declaration has its name, linkage name and
    return type on the declaration, an out-of-line instance of an inlinable function (a
    constructor's C1/C2) on its abstract origin."""

    plain_name: str = ""
    linkage_name: str = ""
    type: DIE | None = None
    children: list[DIE] = field(default_factory=list)
    named_by: DIE | None = None  # the DIE whose DW_AT_name plain_name is

    @property
    def name(self) -> str:
        """The name the symbol table has: the linkage name (C++'s mangled name) when
        there is one, else the plain name (C, `extern "C"`, `main`)."""
        return self.linkage_name or self.plain_name

    @classmethod
    def of(cls, die: DIE, step: Callable[[], None]) -> _Described:
        out = cls()
        seen: set[int] = set()
        at: DIE | None = die
        for _ in range(_ORIGIN_LINKS):
            if at is None or at.offset in seen:
                break
            seen.add(at.offset)
            step()
            if not out.plain_name:
                out.plain_name = _text(at, "DW_AT_name")
                out.named_by = at if out.plain_name else None
            out.linkage_name = out.linkage_name or _text(at, "DW_AT_linkage_name") \
                or _text(at, "DW_AT_MIPS_linkage_name")
            if out.type is None and "DW_AT_type" in at.attributes:
                out.type = at.get_DIE_from_attribute("DW_AT_type")
            at = _origin(at)
        return out


    def qualified_name(self) -> str:
        """The plain name inside the namespaces and classes its declaration is nested in
        (`geo::note`): a function with internal linkage has no linkage name in DWARF, and
        this is how `--demangle=simple` shows its symbol.  The plain name where a scope has
        no name (an anonymous namespace)."""
        scopes = []
        at = self.named_by.get_parent() if self.named_by is not None else None
        while at is not None and at.tag in _SCOPES:
            scope = _text(at, "DW_AT_name")
            if not scope:
                return self.plain_name
            scopes.append(scope)
            at = at.get_parent()
        return "::".join([*reversed(scopes), self.plain_name])


_SCOPES = ("DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type",
           "DW_TAG_union_type")


def _origin(die: DIE) -> DIE | None:
    for attr in ("DW_AT_abstract_origin", "DW_AT_specification"):
        if attr in die.attributes:
            return die.get_DIE_from_attribute(attr)
    return None


def _entry_of(die: DIE, dwarf: Any, cu: Any) -> int | None:
    """A function's entry address: its DW_AT_low_pc, or for a function in several pieces
    (DW_AT_ranges: GCC's hot/cold partitioning, f and f.cold) the start of its first range,
    which GCC writes first (the part the function's symbol names); None for a declaration
    or inlined-only instance, and for ranges this reader cannot follow."""
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs:
        return int(attrs["DW_AT_low_pc"].value)
    ranges = attrs.get("DW_AT_ranges")
    if ranges is None or ranges.form != "DW_FORM_sec_offset":
        return None
    lists = dwarf.range_lists()
    if lists is None:
        return None
    base_attr = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
    base = int(base_attr.value) if base_attr is not None else 0
    for piece in lists.get_range_list_at_offset(ranges.value, cu=cu):
        if hasattr(piece, "base_address"):  # a base address selection entry
            base = int(piece.base_address)
        elif piece.end_offset > piece.begin_offset:
            return int(piece.begin_offset) + (0 if piece.is_absolute else base)
    return None


_DW_OP_REG0, _DW_OP_REG31, _DW_OP_REGX = 0x50, 0x6F, 0x90  # DWARF 5 §7.7.1, table 7.9


def _entry_registers(die: DIE, entry: int, dwarf: Any, cu: Any,
                     step: Callable[[], None]) -> tuple[int, ...]:
    """The register each of the function's parameters is in at its entry (-1: not a
    register), from the concrete DIE's own parameters' DW_AT_location: a single location
    description, or the location list's entry that starts at `entry`; () where the DIE
    lists no parameters of its own (they are its origin's, without locations)."""
    out = []
    parser: LocationParser | None = None
    for child in _children(die, step):
        if child.tag != "DW_TAG_formal_parameter":
            continue
        attr = child.attributes.get("DW_AT_location")
        expr = None
        if attr is not None and attr.form == "DW_FORM_exprloc":
            expr = attr.value
        elif attr is not None and attr.form in ("DW_FORM_sec_offset", "DW_FORM_loclistx"):
            lists = dwarf.location_lists() if parser is None else None
            if lists is not None:
                parser = LocationParser(lists)
            if parser is not None:
                expr = _expression_at(parser.parse_from_attribute(
                    attr, cu.header["version"], child), entry, cu)
        out.append(_register_of(expr))
    return tuple(out)


def _expression_at(entries: Any, entry: int, cu: Any) -> list[int] | None:
    """The location expression of a location list's entry that begins at `entry`."""
    if not isinstance(entries, list):
        return None
    base_attr = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
    base = int(base_attr.value) if base_attr is not None else 0
    for piece in entries:
        if hasattr(piece, "base_address"):
            base = int(piece.base_address)
        elif hasattr(piece, "begin_offset"):
            begin = int(piece.begin_offset) + (0 if getattr(piece, "is_absolute", False)
                                               else base)
            if begin == entry:
                return list(piece.loc_expr)
    return None


def _register_of(expr: list[int] | None) -> int:
    """n for an expression that is exactly DW_OP_reg<n> or DW_OP_regx n; else -1."""
    if not expr:
        return -1
    if len(expr) == 1 and _DW_OP_REG0 <= expr[0] <= _DW_OP_REG31:
        return expr[0] - _DW_OP_REG0
    if expr[0] == _DW_OP_REGX:
        n, shift = 0, 0
        for i, byte in enumerate(expr[1:], 1):  # ULEB128
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return n if i == len(expr) - 1 else -1
    return -1


def _described(die: DIE, step: Callable[[], None]) -> _Described:
    """A defined function's description; its parameters are the concrete DIE's children,
    or, where it lists none, its origin's (the declaration's parameters carry the types)."""
    out = _Described.of(die, step)
    out.children = _children(die, step)
    if not any(c.tag == "DW_TAG_formal_parameter" for c in out.children):
        origin = _origin(die)
        if origin is not None:
            out.children = _children(origin, step)
    return out


def _children(die: DIE, step: Callable[[], None]) -> list[DIE]:
    """die's children, each a step of the reader's budget (a mutated DW_AT_sibling that
    points back makes iter_children endless: the budget ends it as unreadable DWARF)."""
    children = []
    for child in die.iter_children():
        step()
        children.append(child)
    return children


_warned: set[str] = set()


def warn_stderr(message: str) -> None:
    if message not in _warned:  # both the run and the trace writer ask: say it once
        _warned.add(message)
        print(message, file=sys.stderr)


def read_prototypes(path: str, warn: Callable[[str], None] = warn_stderr) -> ProgramTypes:
    """Every function DWARF defines in the file at `path`; empty without DWARF.  Garbage
    DWARF (DWARFError, MemoryError from a huge section, OverflowError, a bad string table...)
    is one warning line: the run goes on with the default argument counts."""
    out = ProgramTypes()
    types = _TypeReader()
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":  # raw firmware (`run --machine`): no DWARF
                return out
            f.seek(0)
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return out
            # every DIE takes at least one byte of .debug_info: more steps than that is a
            # loop (a mutated DW_AT_sibling pointing back made iter_children endless: fuzz
            # seed 31 case 88206), reported as unreadable DWARF like any other garbage
            info = elf.get_section_by_name(".debug_info")
            steps = [(info.data_size if info is not None else 0) + 1024]

            def step() -> None:
                steps[0] -= 1
                if steps[0] < 0:
                    raise ValueError("more DIEs than .debug_info has bytes (a loop)")
            # a linked program's DWARF is final: relocating it is for object files (ET_REL),
            # and pyelftools' search for relocation sections reads every section header
            # nine times (~7 ms of a small traced run)
            dwarf = elf.get_dwarf_info(relocate_dwarf_sections=elf["e_type"] == "ET_REL")
            for cu in dwarf.iter_CUs():
                top = cu.get_top_DIE()
                lang = top.attributes.get("DW_AT_language")
                own = not is_system_source(_text(top, "DW_AT_name"), _text(top, "DW_AT_comp_dir")) \
                    and (lang is None or lang.value != _ASSEMBLER)
                for die in cu.iter_DIEs():
                    step()
                    if die.tag != "DW_TAG_subprogram":
                        continue
                    entry = _entry_of(die, dwarf, cu)
                    if entry is None:
                        continue
                    described = _described(die, step)
                    name = described.name
                    if not name:
                        continue
                    params, names, variadic = [], [], False
                    registers = _entry_registers(die, entry, dwarf, cu, step)
                    for child in described.children:
                        step()
                        if child.tag == "DW_TAG_formal_parameter":
                            param = _Described.of(child, step)
                            params.append(types.of(param.type))
                            names.append(param.plain_name)
                        elif child.tag == "DW_TAG_unspecified_parameters":
                            variadic = True
                    proto = Prototype(tuple(params), types.of(described.type), variadic,
                                      tuple(names),
                                      registers if len(registers) == len(params) else ())
                    out.by_addr[entry] = proto
                    out.by_name.setdefault(name, proto)
                    if own:
                        out.own.add(name if described.linkage_name
                                    else described.qualified_name())
    except OSError:
        return ProgramTypes()
    except Exception as e:  # noqa: BLE001 - pyelftools raises anything on garbage
        first = str(e).splitlines()[0][:120] if str(e) else ""
        warn(f"emutrace: warning: {path}: unreadable DWARF ({type(e).__name__}: {first!r}); "
             "functions show the default number of arguments")
        return ProgramTypes()
    return out


# ---------------------------------------------------------------- kept on disk
# ProgramTypes as plain JSON values for discover/store.py: each prototype once (by_addr and
# by_name share them), referred to by its index; a CType as [kind, size, name, enumerators,
# members, is_union], members nesting CTypes.  `decode_types` checks every field and raises
# ValueError on anything else.
MAX_NESTING = 64  # struct members inside members, at most (a planted file may nest more)
T = TypeVar("T")


def encode_types(types: ProgramTypes) -> dict[str, object]:
    protos: dict[int, int] = {}  # id(prototype) -> index
    table: list[object] = []

    def ctype(t: CType) -> list[object]:
        return [t.kind, t.size, t.name, [list(e) for e in t.enumerators],
                [[name, off, ctype(m)] for name, off, m in t.members], t.is_union]

    def index(p: Prototype) -> int:
        if id(p) not in protos:
            protos[id(p)] = len(table)
            table.append([[ctype(t) for t in p.params], ctype(p.ret), p.variadic,
                          list(p.names), list(p.entry_registers)])
        return protos[id(p)]

    return {"by_addr": [[addr, index(p)] for addr, p in types.by_addr.items()],
            "by_name": [[name, index(p)] for name, p in types.by_name.items()],
            "own": sorted(types.own), "prototypes": table}


def _of(value: Any, kind: type[T]) -> T:
    # (bool is an int subclass: a number must not be true/false, and vice versa)
    if type(value) is not kind:
        raise ValueError(f"{value!r} is not {kind.__name__}")
    return cast(T, value)


def _pairs(raw: Any) -> list[tuple[Any, Any]]:
    if type(raw) is not list or any(type(p) is not list or len(p) != 2 for p in raw):
        raise ValueError("not a list of pairs")
    return [(a, b) for a, b in raw]


def _ctype(raw: Any, depth: int = 0) -> CType:
    if depth > MAX_NESTING or type(raw) is not list or len(raw) != 6:
        raise ValueError("not a type")
    kind, size, name, enumerators, members, is_union = raw
    fields = []
    for member in _of(members, list):
        if type(member) is not list or len(member) != 3:
            raise ValueError("not a member")
        fields.append((_of(member[0], str), _of(member[1], int), _ctype(member[2], depth + 1)))
    return CType(_of(kind, str), _of(size, int), _of(name, str),
                 tuple((_of(v, int), _of(n, str)) for v, n in _pairs(enumerators)),
                 tuple(fields), _of(is_union, bool))


def decode_types(raw: Any) -> ProgramTypes:
    if type(raw) is not dict:
        raise ValueError("not prototypes")
    protos = []
    for p in _of(raw["prototypes"], list):
        if type(p) is not list or len(p) != 5:
            raise ValueError("not a prototype")
        params, ret, variadic, names, registers = p
        protos.append(Prototype(tuple(_ctype(t) for t in _of(params, list)), _ctype(ret),
                                _of(variadic, bool),
                                tuple(_of(n, str) for n in _of(names, list)),
                                tuple(_of(r, int) for r in _of(registers, list))))
    out = ProgramTypes()
    for addr, i in _pairs(raw["by_addr"]):
        out.by_addr[_of(addr, int)] = protos[_of(i, int)]
    for name, i in _pairs(raw["by_name"]):
        out.by_name[_of(name, str)] = protos[_of(i, int)]
    out.own = {_of(n, str) for n in _of(raw["own"], list)}
    return out


def parameter_counts(path: str) -> dict[str, int]:
    """How many parameters each DWARF-described function declares."""
    return {name: len(p.params) for name, p in read_prototypes(path).by_name.items()}


# ---------------------------------------------------------------- the libc table

def _table_type(spec: str, word: int, char_signed: bool) -> CType:
    """A type word of libc_prototypes.txt (see the file's header)."""
    sizes = {"int": 4, "uint": 4, "long": word, "ulong": word, "size": word, "ssize": word,
             "char": 1, "ptr": word, "str": word, "double": 8, "float": 4, "bool": 1,
             "llong": 8, "ullong": 8}
    kinds = {"int": "int", "uint": "uint", "long": "int", "ulong": "uint", "size": "uint",
             "ssize": "int", "char": "char" if char_signed else "uchar", "ptr": "ptr",
             "str": "str", "double": "float", "float": "float", "bool": "bool",
             "llong": "int", "ullong": "uint", "hex": "hex", "oct": "oct"}
    if spec == "void":
        return VOID
    if spec == "oct":
        return CType("oct", 4, "mode_t")
    if spec not in kinds:
        raise ValueError(f"libc_prototypes.txt: unknown type {spec!r}")
    return CType(kinds[spec], sizes.get(spec, word), spec)


def libc_prototypes(word: int, char_signed: bool) -> dict[str, Prototype]:
    """The bundled table for an ISA of `word`-byte words and the given `char` signedness."""
    out: dict[str, Prototype] = {}
    text = resources.files("emutrace.discover").joinpath("libc_prototypes.txt").read_text()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        ret, _, rest = line.partition(" ")
        names, _, params = rest.partition("(")
        params = params.rstrip(")").strip()
        words = [p.strip() for p in params.split(",")] if params else []
        variadic = bool(words) and words[-1] == "..."
        if variadic:
            words.pop()
        proto = Prototype(tuple(_table_type(w, word, char_signed) for w in words),
                          _table_type(ret, word, char_signed), variadic)
        for name in names.split("|"):
            out[name.strip()] = proto
    return out


def prefix_entries(table: dict[str, Prototype]) -> list[tuple[str, Prototype]]:
    """The table's `prefix*` entries as (prefix, prototype), longest prefix first (the
    table's order among equal lengths): what `lookup` scans for a name not in the table."""
    found = [(key[:-1], proto) for key, proto in table.items() if key.endswith("*")]
    return sorted(found, key=lambda entry: -len(entry[0]))


def lookup(table: dict[str, Prototype], name: str,
           prefixes: list[tuple[str, Prototype]] | None = None) -> Prototype | None:
    """The table's prototype for a symbol name: exact, else the longest `prefix*` entry
    (`prefixes`: the table's prefix_entries, computed once by a caller that looks up many)."""
    got = table.get(name)
    if got is not None:
        return got
    for prefix, proto in prefix_entries(table) if prefixes is None else prefixes:
        if name.startswith(prefix):
            return proto
    return None
