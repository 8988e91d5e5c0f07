"""What discovery learnt about each module of a dynamic program (the program, ld.so, each
library, those dlopen maps too), kept on disk per module file for the next process.

store.py keeps a static program's discoveries in one file named by the program's digest and
load bias.  A dynamic process's tables — the functions read from symbols, the descents, the
decoder's instructions and block counts — are one set over all its modules at run-time
addresses, and one library is loaded at different addresses by different programs.  So each
module gets its own file, `module-<digest>-<code>.jsonl` in the store directory, named by
the SHA-256 of the module's bytes (and of the separate debug file its names came from) and
the reading code's digest (store.code_version), not by where it is loaded:

* every address is kept relative to the module's load bias and relocated when the module is
  mapped (`ModuleMap.on_add`);
* the instructions kept at the sites hold only at the bias they were decoded at (capstone
  prints a branch's absolute target): each record says which bias; at another bias they are
  left out and decoded again when asked for;
* what leaves the module — a function, site, target or entry question outside it, a block
  past its end — is not kept.

The file is laid out as store.py's: one line of JSON (the format, each function's and each
descent's place in the body, the block counts as one flat list of numbers), then one record a
function or descent, each parsed when first asked for (python3's stripped program: ~2,000
descents, ~5 MB; parsing them all cost more than a small run uses).  It is untrusted
input (anything that wrote the cache directory): at most MAX_BYTES are read, every record is
checked by the types of its fields (store._checked), every address must lie in the module
(a function's start, a site, a block in its code), a kept instruction's bytes must be the
file's bytes at its address.  A damaged first line makes the file ignored; a damaged record
costs its function, block or descent (read again from the module), never an error.
"""

from __future__ import annotations

import atexit
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emutrace.discover.model import Function
from emutrace.discover.store import (
    _INDEX,
    Blocks,
    Descents,
    Insns,
    StoredFunctions,
    _checked,
    _descent,
    _encode,
    _file_digest,
    _function,
    _json,
    _learn,
    _signatures,
    _write,
    cache_dir,
    code_version,
)

if TYPE_CHECKING:
    from emutrace.discover.decode import Decoder
    from emutrace.discover.modules import Module, ModuleMap

MODULE_FORMAT = 2
MAX_BYTES = 64 << 20  # a longer file is not read (libc's after a test suite: ~2 MB)
FILES_KEPT = 512  # module files kept in the directory (a program maps ~5-15)
RUNS_KEPT = 2  # processes' tables waiting to be written (older ones are written earlier)


def module_store_path(module: Module) -> Path | None:
    """Where what discovery learnt about the module's file is kept (None: nowhere)."""
    top = cache_dir()
    if top is None:
        return None
    try:
        digest = _file_digest(module.path)
        if module.debug is not None:
            both = f"{digest} {_file_digest(module.debug)}".encode()
            digest = hashlib.sha256(both).hexdigest()[:32]
    except OSError:
        return None
    return top / f"module-{digest}-{code_version()}.jsonl"


_DESCENT_INDEX = _signatures(int, bool, int, int)  # entry, alt, offset, length


class _ModuleFile:
    """One module's store file as this process read it."""

    def __init__(self, module: Module, where: Path, body: bytes = b"") -> None:
        self.module = module
        self.where = where
        self.body = body
        self.blocks = 0  # block counts and descents it holds
        self.descents = 0
        # descents not parsed yet, by (run-time entry, alt): their places in body
        self.unread: dict[tuple[int, bool], list[tuple[int, int]]] = {}


def _module_function(raw: Any, bias: int) -> tuple[Function, Insns]:
    """A module record (store's function record and the bias its instructions were
    decoded at) at the module's bias: its instructions only where that is the same."""
    if type(raw) is not list or len(raw) != 9 or type(raw[8]) is not int:
        raise ValueError("not a module function record")
    return _function(raw[:8], shift=bias, with_insns=raw[8] == bias)


def _module_descent(raw: Any, bias: int
                    ) -> tuple[tuple[int, bool], Function, tuple[tuple[int, bool], ...], Insns]:
    """A module's descent record (store's and the bias of its instructions) at the
    module's bias."""
    if type(raw) is not list or len(raw) != 6 or type(raw[5]) is not int:
        raise ValueError("not a module descent record")
    found: Insns = {}
    key, func, answers = _descent(raw[:5], found, bias, raw[5] == bias)
    return key, func, answers, found


class ModuleFunctions(StoredFunctions):
    """The functions read from symbols of every module of one process: those kept in the
    modules' store files (parsed and checked when first asked for) and those read in this
    process."""

    def __init__(self, insns: Insns, stores: ModuleStores) -> None:
        super().__init__(insns)
        self._stores = stores
        self._kept: dict[int, tuple[_ModuleFile, int, int]] = {}  # start → file, place
        self.new: list[int] = []  # starts of the functions read from the modules

    def add_file(self, kept: _ModuleFile, index: dict[int, tuple[int, int]]) -> None:
        bias = kept.module.bias
        for start, place in index.items():
            self._kept.setdefault(start + bias, (kept, *place))

    def get(self, start: int) -> Function | None:
        func = self._read.get(start)
        if func is None and start in self._kept:
            kept, off, length = self._kept.pop(start)
            try:
                func, found = _module_function(json.loads(kept.body[off:off + length]),
                                               kept.module.bias)
            except (ValueError, TypeError, RecursionError):
                return None  # (not kept: the function read again replaces it)
            if func.start != start or not self._stores.fits(kept.module, func, found):
                return None
            _learn(self.instructions, found)
            self._read[start] = func
        return func

    def __setitem__(self, start: int, func: Function) -> None:
        self._kept.pop(start, None)
        self._read[start] = func
        self.added += 1
        self.new.append(start)

    def __len__(self) -> int:
        return len(self._read) + len(self._kept)

    def records_of(self, kept: _ModuleFile) -> list[tuple[int, bytes]]:
        """The module's functions (relative start, record): those read here encoded at its
        bias, those never parsed as they were read."""
        module, stores = kept.module, self._stores
        bias = module.bias
        out = [(start - bias, _json([*_encode(f, self.instructions, -bias), bias]))
               for start, f in self._read.items()
               if module.start <= start < module.end and stores.fits(module, f, {})]
        out += [(start - bias, k.body[off:off + length])
                for start, (k, off, length) in self._kept.items() if k is kept]
        return out


class ModuleStores:
    """The store files of one process's modules: each read when its module is mapped, into
    discovery's tables (relocated); written back at exit when the run added to them."""

    def __init__(self, modules: ModuleMap, decoder: Decoder, descents: Descents) -> None:
        self.modules = modules
        self.decoder = decoder
        self.descents = descents
        self.functions = ModuleFunctions(decoder.instructions, self)
        self.files: dict[int, _ModuleFile] = {}  # by the module's start
        self._code: dict[int, list[tuple[int, int, bytes]]] = {}  # a module's code ranges
        self._loaded = (0, 0)  # block counts and descents the files added
        self.closed = False
        _live.append(self)
        while len(_live) > RUNS_KEPT:
            _live.pop(0).close()
        modules.on_add.append(self.added)
        for module in list(modules.modules):
            self.added(module)

    # reading

    def added(self, module: Module) -> None:
        """A module mapped: what its file holds goes into the tables."""
        if self.closed or module.start in self.files:
            return
        where = module_store_path(module)
        if where is None or any(k.where == where for k in self.files.values()):
            return  # (one file twice in the process: kept at its first place)
        for other in _live:
            if other is not self:
                other.release(where)
        kept = _ModuleFile(module, where)
        self.files[module.start] = kept
        self._read(kept)

    def _read(self, kept: _ModuleFile) -> None:
        module = kept.module
        try:
            with open(kept.where, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                return
            head_end = data.index(b"\n") + 1
            head = json.loads(data[:head_end])
            if not isinstance(head, dict) or head.get("format") != MODULE_FORMAT:
                return
            end = len(data) - head_end

            def place(off: int, length: int) -> tuple[int, int]:
                if off < 0 or length <= 0 or off + length > end:
                    raise ValueError("a record outside the file")
                return head_end + off, length

            index = {start: place(off, length) for start, off, length in
                     (_checked(raw, _INDEX, "index entry") for raw in head["functions"])}
            unread: dict[tuple[int, bool], list[tuple[int, int]]] = {}
            for entry, alt, off, length in (_checked(raw, _DESCENT_INDEX, "descent entry")
                                            for raw in head["descents"]):
                unread.setdefault((entry + module.bias, alt), []).append(place(off, length))
            flat = head["blocks"]
            if type(flat) is not list or len(flat) % 4 or set(map(type, flat)) - {int}:
                raise ValueError("not block counts")
        except (OSError, ValueError, TypeError, KeyError, RecursionError):
            return  # (JSONDecodeError is a ValueError)
        kept.body = data
        kept.unread = unread
        kept.descents = sum(map(len, unread.values()))
        self.functions.add_file(kept, index)
        counts, bias = self.decoder.block_counts, module.bias
        ranges = self._ranges(module)
        lo, hi = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else (0, 0)
        for i in range(0, len(flat), 4):
            addr, size, alt, count = flat[i] + bias, flat[i + 1], flat[i + 2], flat[i + 3]
            if 0 < count <= size and lo <= addr and addr + size <= hi and alt in (0, 1) \
                    and self._in_code(module, addr):
                counts.setdefault((addr, size, bool(alt)), count)
                kept.blocks += 1
        blocks_n, descents_n = self._loaded
        self._loaded = (blocks_n + kept.blocks, descents_n + kept.descents)

    def descents_at(self, entry: int, alt: bool) -> None:
        """The kept descents entered at (entry, alt), parsed and checked into the
        descents table (Discovery._descend asks before it looks there)."""
        for kept in self.files.values():
            places = kept.unread.pop((entry, alt), None)
            if places is None:
                continue
            module = kept.module
            for off, length in places:
                try:
                    key, func, answers, found = _module_descent(
                        json.loads(kept.body[off:off + length]), module.bias)
                except (ValueError, TypeError, RecursionError):
                    continue
                if key != (entry, alt) or not self.fits(module, func, found) \
                        or not all(self._inside(module, target) for target, _ in answers):
                    continue
                _learn(self.decoder.instructions, found)
                self.descents.setdefault(key, []).append((func, answers))

    # checking

    def _ranges(self, module: Module) -> list[tuple[int, int, bytes]]:
        """[start, end) and file data of each executable range of the module."""
        ranges = self._code.get(module.start)
        if ranges is None:
            ranges = self._code[module.start] = [
                (base, base + len(data), data) for base, data in self.decoder.code_ranges()
                if module.start <= base < module.end]
        return ranges

    def _in_code(self, module: Module, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi, _data in self._ranges(module))

    def _all_in_code(self, module: Module, addrs: list[int]) -> bool:
        """Every one of addrs in the module's code (one range holding the least and the
        greatest holds them all)."""
        if not addrs:
            return True
        least, most = min(addrs), max(addrs)
        if any(lo <= least and most < hi for lo, hi, _data in self._ranges(module)):
            return True
        return all(self._in_code(module, a) for a in addrs)

    def _inside(self, module: Module, addr: int | None) -> bool:
        return addr is None or module.start <= self.decoder.isa.code_address(addr) < module.end

    def _all_inside(self, module: Module, addrs: list[int]) -> bool:
        """Every one of addrs (branch targets: ARM's Thumb bit cleared) in the module."""
        if not addrs:
            return True
        mask = self.decoder.isa.code_mask
        return module.start <= min(addrs) & mask and max(addrs) & mask < module.end

    def fits(self, module: Module, func: Function, found: Insns) -> bool:
        """func and the instructions at its sites lie in the module (its sites in its code),
        each instruction's bytes those of the file there: what a store may hold."""
        if not (self._in_code(module, func.start) and func.start <= func.end <= module.end):
            return False
        sites = func.sites
        if not (self._all_in_code(module, [s.addr for s in sites])
                and self._all_inside(module, [s.target for s in sites if s.target is not None])
                and self._all_inside(module, [s.executes for s in sites
                                              if s.executes is not None])
                and self._all_inside(module, list(func.followed))
                and self._all_in_code(module, [addr for addr, _alt in found])):
            return False
        ranges = self._ranges(module)
        for (addr, _alt), insn in found.items():
            if insn is None:
                continue
            if insn.addr != addr or not any(
                    lo <= addr < hi and data[addr - lo:addr - lo + insn.size] == insn.raw
                    for lo, hi, data in ranges):
                return False
        return True

    # writing

    def release(self, where: Path) -> None:
        """Another process opens the file at `where`: what this one learnt written first,
        the file no longer this one's."""
        for start, kept in list(self.files.items()):
            if kept.where == where:
                self.save({start})
                del self.files[start]

    def close(self) -> None:
        """Everything written; nothing read or written any more."""
        if not self.closed:
            self.save()
            self.closed = True
            self.files.clear()

    def save(self, only: set[int] | None = None) -> None:
        """Each module file (of `only`: those modules' starts) the run added to, written."""
        if self.closed:
            return
        blocks, descents = self.decoder.block_counts, self.descents
        unread = sum(len(p) for k in self.files.values() for p in k.unread.values())
        if not self.functions.new and self._loaded == (len(blocks), _count(descents) + unread):
            return  # (the usual later run: everything it used came from the files)
        mine = {start: kept for start, kept in self.files.items()
                if only is None or start in only}
        if not mine:
            return
        modules = self.modules
        new = {start: 0 for start in mine}
        for start in self.functions.new:
            module = modules.module_of(start)
            if module is not None and module.start in new:
                new[module.start] += 1
        by_blocks: dict[int, Blocks] = {start: {} for start in mine}
        for key, count in blocks.items():
            module = modules.module_of(key[0])
            if module is not None and module.start in mine and key[0] + key[1] <= module.end:
                by_blocks[module.start][(key[0] - module.bias, key[1], key[2])] = count
        # (descents: by run-time entry, made relative as they are written)
        by_descents: dict[int, Descents] = {start: {} for start in mine}
        for entry, found in descents.items():
            module = modules.module_of(entry[0])
            if module is None or module.start not in mine:
                continue
            fit = [(func, answers) for func, answers in found
                   if self.fits(module, func, {})
                   and all(self._inside(module, target) for target, _ in answers)]
            if fit:
                by_descents[module.start][entry] = fit
        for start, kept in mine.items():
            n_descents = _count(by_descents[start]) + sum(map(len, kept.unread.values()))
            if new[start] or len(by_blocks[start]) > kept.blocks or n_descents > kept.descents:
                self._write(kept, by_blocks[start], by_descents[start])

    def _write(self, kept: _ModuleFile, blocks: Blocks, descents: Descents) -> None:
        bias = kept.module.bias
        index: list[list[int]] = []
        body = bytearray()
        for start, record in self.functions.records_of(kept):
            index.append([start, len(body), len(record)])
            body += record + b"\n"
        found: list[list[Any]] = []
        insns = self.decoder.instructions
        records = [(entry - bias, alt, _json(
                    [entry - bias, alt, _encode(func, insns, -bias),
                     sorted(f - bias for f in func.followed),
                     [[target - bias, known] for target, known in answers], bias]))
                   for (entry, alt), fit in descents.items() for func, answers in fit]
        records += [(entry - bias, alt, kept.body[off:off + length])
                    for (entry, alt), places in kept.unread.items() for off, length in places]
        for entry, alt, record in records:
            found.append([entry, alt, len(body), len(record)])
            body += record + b"\n"
        flat = [n for (addr, size, alt), count in blocks.items()
                for n in (addr, size, int(alt), count)]
        head = _json({"format": MODULE_FORMAT, "functions": index, "descents": found,
                      "blocks": flat})
        try:
            kept.where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write(kept.where, head + b"\n" + body, FILES_KEPT)
        except OSError:
            return


def _count(descents: Descents) -> int:
    return sum(len(found) for found in descents.values())


_live: list[ModuleStores] = []  # the processes whose tables are not written yet


@atexit.register
def write_all() -> None:
    while _live:
        _live.pop(0).close()
