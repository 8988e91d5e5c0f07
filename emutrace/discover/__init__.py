"""Function discovery (pure: capstone and pyelftools, no emulator).

`Discovery(image).function_at(addr)` gives a :class:`Function` — its extent, its call sites
(direct target or the operand an indirect target is read from), its returns and the jumps
that may leave it (tail calls) — decoded once and cached.  With a symbol table the function
is the symbol containing addr (a linear sweep of its extent, skipping `$d` data); without
one it is found by recursive descent from addr (see descent.py).  The ISA-specific reading
of instructions is the `classifiers` section of each `emutrace.isa.<isa>` module.
"""

from __future__ import annotations

from emutrace.discover.decode import Decoder, NoClassifiers
from emutrace.discover.descent import descend
from emutrace.discover.functions import from_symbol
from emutrace.discover.memo import file_key, kept
from emutrace.discover.model import Function, Site, SiteKind
from emutrace.discover.module_store import ModuleStores
from emutrace.discover.store import Descents, StoredFunctions, cache_dir, stored_functions
from emutrace.discover.symbols import SymbolTable, read_symbols
from emutrace.elf import Image

__all__ = ["Discovery", "Function", "NoClassifiers", "Site", "SiteKind"]


class Discovery:
    def __init__(self, image: Image, use_symbols: bool = True) -> None:
        self.image = image
        self.decoder = Decoder(image)
        self.symbols = read_symbols(image) if use_symbols else SymbolTable([], [])
        # functions read from a symbol depend on the file alone: shared with the next run of
        # the same file in this process (memo.py) and with later processes through the
        # on-disk store (store.py); descent's depend on what the run saw as well: kept with
        # the answers about function entries they depend on (_descend), shared the same way
        # on disk too; a dynamic program's (a module map) in one file per module
        # (module_store.py), unless names come from the command line (--symbols)
        modules = image.modules
        key = file_key(image.path, image.bias) if use_symbols else None
        self._descents: Descents = kept(
            "descents", key if modules is None else None, dict)  # (modules: not one file)
        self._from_symbols: StoredFunctions
        self._module_stores: ModuleStores | None = None
        if modules is not None and use_symbols and not modules.listed \
                and cache_dir() is not None:
            self._module_stores = ModuleStores(modules, self.decoder, self._descents)
            self._from_symbols = self._module_stores.functions
        else:
            self._from_symbols = kept(
                "functions", key, lambda: stored_functions(image.path, image.bias,
                                                           self.decoder, self._descents)
                if use_symbols and modules is None and image.tables is not None
                else StoredFunctions(self.decoder.instructions))
        self._by_start: dict[int, Function] = {}
        self._entries: set[int] = set()  # known function entries (code addresses)
        self._descended: dict[tuple[int, bool], Function] = {}
        # descent: followed jump target → starts of the functions that followed it; a
        # target that becomes a known entry makes them stale (descended again when asked)
        self._followed_by: dict[int, set[int]] = {}
        self.stale: set[int] = set()  # starts of stale functions, for a backend to re-arm

    def function_at(self, addr: int) -> Function:
        """The function containing addr (symbols), or the one entered at addr (descent).
        On ARM without symbols, bit 0 of addr selects Thumb."""
        code, alt = self.image.isa.entry_of(addr)
        sym = self.symbols.containing(code)
        key = sym.start if sym is not None else code
        cached = self._by_start.get(key)
        if cached is not None:
            return cached
        if sym is not None:
            func = self._from_symbols.get(key)
            if func is None:
                func = self._from_symbols[key] = from_symbol(sym, self.symbols, self.decoder)
        else:
            func = self._descend(code, alt)
        self._by_start[key] = func
        for target in func.followed:
            self._followed_by.setdefault(target, set()).add(key)
        self._learn(func.start)
        for site in func.calls:
            if site.target is not None:
                self._learn(self.image.isa.code_address(site.target))
        return func

    def _learn(self, entry: int) -> None:
        """A known function entry; the functions whose descent followed a jump to it as
        their own code are stale: forgotten, so that the next `function_at` descends them
        again with the jump as a TAIL site (backends re-arm `stale`)."""
        self._entries.add(entry)
        for start in self._followed_by.pop(entry, ()):
            if self._by_start.pop(start, None) is not None:
                self.stale.add(start)

    def _is_entry(self, addr: int) -> bool:
        """A known function entry: a symbol's start or its ELFv2 local entry (a direct
        call or tail jump from code sharing the TOC enters there: ELFv2 ABI §3.4.1), or
        an address a call went to.  The same entries as backends.tails' rule, so that a
        descended function's jump to one is a TAIL site, not code followed as its own."""
        if addr in self._entries:
            return True
        sym = self.symbols.containing(addr)
        return sym is not None and addr in (sym.start, sym.start + sym.local_offset)

    def function_by_name(self, name: str) -> Function:
        sym = self.symbols.by_name(name)
        if sym is None:
            raise KeyError(name)
        return self.function_at(self.image.isa.mode_address(sym.start, sym.alt))

    def function_entered_at(self, addr: int, alt: bool) -> Function:
        """Code entered at addr in the given ISA mode, found by recursive descent whatever
        the symbols say (ARM: `bx pc` switches to A32 code inside a Thumb symbol)."""
        key = (self.image.isa.code_address(addr), alt)
        func = self._descended.get(key)
        if func is None:
            func = self._descended[key] = self._descend(key[0], alt)
        return func

    def _descend(self, code: int, alt: bool) -> Function:
        """Recursive descent from code.  Its result depends on the file and on which of the
        addresses it asks about are known function entries now (what the run has seen so
        far): a result kept from an earlier descent (this process, or the on-disk store) is
        used when every one of its entry questions has the same answer now — the descent
        would read the same instructions and take the same turns."""
        if self._module_stores is not None:
            self._module_stores.descents_at(code, alt)
        for func, answers in self._descents.get((code, alt), ()):
            if all(self._is_entry(target) is known for target, known in answers):
                return func
        asked: dict[int, bool] = {}

        def is_entry(target: int) -> bool:
            known = asked[target] = self._is_entry(target)
            return known

        func = descend(self.decoder, code, alt, is_entry)
        self._descents.setdefault((code, alt), []).append((func, tuple(asked.items())))
        return func
