"""Functions read from a program's symbols, kept on disk for the next run of the same file.

Decoding the functions a run reaches is most of a small traced run's start-up (capstone and
the ISA's classifier, ~40 µs an instruction: ~0.5-1 s for static glibc's start-up code,
bench/results/startup.md).  A function read from its symbol is a pure function of the file's
bytes, its load bias and the code that reads it (memo.py), so it is kept in
`$XDG_CACHE_HOME/emutrace` (default `~/.cache/emutrace`) in a file named by

* the SHA-256 of the program file's bytes and the load bias,
* a digest of the reading code: emutrace's version, capstone's, and the source of
  `emutrace/discover`, `emutrace/isa` and the ELF readers (any change there is a new file),

and written when the process ends (atexit), or when newer files are opened, if the run
decoded something new.  Beside the
functions: the instructions at their sites, the instruction counts of the translation blocks
run (int3's time stamps) and the functions found by descent (stripped code, PLT stubs),
each with the entry questions its descent asked: one is used only where every answer is
the same in the run at hand (Discovery._descend), as descent depends on what the run saw.

Reading is proportional to what a run uses: the store holds every function any run of the
file reached (~1 MB for static glibc after a test suite), so the file is one line of JSON
with each function's place, then the functions' records, and a record is parsed only when
its function is first asked for (StoredFunctions).

Safety: the file is JSON of plain numbers and strings, checked field by field when read;
anything unexpected in the first line (a truncated write, another format, garbage) makes
the whole file ignored, in a function's record that function (read from the program
again), never an error.  It is not used when the directory is one a guest of this run may
write into (inside `--allow-write` or a `--root` other than /: set by the session), and
EMUTRACE_CACHE=off turns it off.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emutrace.discover.memo import file_key, kept
from emutrace.discover.model import Function, Site, SiteKind
from emutrace.discover.prototypes import (
    ProgramTypes,
    decode_types,
    encode_types,
    read_prototypes,
    warn_stderr,
)
from emutrace.isa.base import Insn

if TYPE_CHECKING:
    from emutrace.discover.decode import Decoder

FORMAT = 4
FILES_KEPT = 64  # the newest files kept in the directory; older ones are deleted on save

_guest_dirs: list[str] = []  # directories a guest of this process may write (session)
_version: str | None = None


def guest_writable(dirs: list[str]) -> None:
    """Directories the guests of this process may write into: the cache is not used when
    it lies in one of them (a guest must not choose the functions a later run arms)."""
    _guest_dirs[:] = [os.path.realpath(d) for d in dirs]


def cache_dir() -> Path | None:
    if os.environ.get("EMUTRACE_CACHE", "").lower() in ("off", "0", "no"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = os.path.realpath(os.path.join(base, "emutrace"))
    for d in _guest_dirs:
        if where == d or where.startswith(d.rstrip("/") + "/"):
            return None
    return Path(where)


def code_version() -> str:
    """Digest of everything a stored function depends on besides the file."""
    global _version
    if _version is None:
        import emutrace

        top = Path(emutrace.__file__).resolve().parent
        h = hashlib.sha256(f"{FORMAT} {getattr(emutrace, '__version__', '')}".encode())
        sources = [*sorted((top / "discover").glob("*.py")), *sorted((top / "isa").glob("*.py")),
                   top / "elf.py", top / "elf_tables.py", *_capstone_files()]
        for src in sources:
            h.update(src.name.encode() + b"\0" + src.read_bytes())
        _version = h.hexdigest()[:20]
    return _version


def _capstone_files() -> list[Path]:
    """Capstone's binding module (it sets the version numbers), found without importing
    capstone (~30-50 ms: decode.Decoder imports it at the first instruction it decodes, and
    a run whose instructions all come from the store decodes none)."""
    spec = importlib.util.find_spec("capstone")
    return [] if spec is None or spec.origin is None else [Path(spec.origin)]


def _file_digest(path: str) -> str:
    """SHA-256 of the file's bytes (the functions and the prototypes both ask: computed
    once per process while the file stays the same, memo.py)."""
    def digest() -> str:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()[:32]
    return kept("digest", file_key(path), digest)


def store_path(path: str, bias: int) -> Path | None:
    """Where the functions of the file at `path` loaded at `bias` are kept (None: nowhere)."""
    top = cache_dir()
    if top is None:
        return None
    try:
        digest = _file_digest(path)
    except OSError:
        return None
    return top / f"functions-{digest}-{bias:x}-{code_version()}.jsonl"


# Each record is checked by the types of its fields at once (a field that may be null has
# two): a store holds thousands of records, and a check per field was most of its reading.


def _signatures(*fields: type | tuple[type, ...]) -> frozenset[tuple[type, ...]]:
    """Every tuple of field types a record may have."""
    out: list[tuple[type, ...]] = [()]
    for f in fields:
        choices = f if isinstance(f, tuple) else (f,)
        out = [(*sig, c) for sig in out for c in choices]
    return frozenset(out)


_NONE = type(None)
# name, start, end, alt, local offset, sites, the instructions at the sites, the addresses
# at the sites where nothing decodes
_FUNCTION = _signatures((str, _NONE), int, int, bool, int, list, list, list)
_BLOCK = _signatures(int, int, bool, int)  # addr, size, alt, count
_DESCENT = _signatures(int, bool, list, list, list)  # entry, alt, function, followed, answers
_INDEX = _signatures(int, int, int)  # a function's start, offset and length in the body


def _checked(raw: Any, signatures: frozenset[tuple[type, ...]], what: str) -> Any:
    """raw, a record (list) whose field types are one of signatures (bool is an int subclass:
    a number field must not be true/false and vice versa); ValueError otherwise."""
    if type(raw) is not list or tuple(map(type, raw)) not in signatures:
        raise ValueError(f"not a {what}: {raw!r}")
    return raw


# A function's sites and instructions are checked a column at a time (the types of each
# field over all rows, in C): python3's stripped program has ~27,000 sites in its descents.
# addr, size, kind, target, indirect, delay, cond, alt, executes, maybe_ret, alt_link
_SITE_COLUMNS = tuple(frozenset(c if isinstance(c, tuple) else (c,)) for c in (
    int, int, str, (int, _NONE), (str, _NONE), bool, bool, bool, (int, _NONE), bool, bool))
# addr, size, mnemonic, op_str, code, thumb
_INSN_COLUMNS = tuple(frozenset((c,)) for c in (int, int, str, str, str, bool))
_PAIR_COLUMNS = (frozenset((int,)), frozenset((bool,)))  # addr and alt; target and answer
_KINDS = {kind.value: kind for kind in SiteKind}
_new = tuple.__new__  # (Insn, a named tuple, from its fields without its keyword handling)


def _columns(rows: Any, types: tuple[frozenset[type], ...], what: str) -> list[tuple[Any, ...]]:
    """The columns of rows (a list of lists of len(types) fields), each field's type one of
    its column's (bool is an int subclass: a number must not be true/false and vice
    versa); ValueError otherwise."""
    if type(rows) is not list:
        raise ValueError(f"not a list of {what}s")
    if not rows:
        return [()] * len(types)
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {len(types)}:
        raise ValueError(f"not {what}s: {rows!r}")
    cols = list(zip(*rows, strict=True))
    for col, allowed in zip(cols, types, strict=True):
        if not allowed.issuperset(map(type, col)):
            raise ValueError(f"not {what}s: {rows!r}")
    return cols


def _moved_all(col: tuple[Any, ...], shift: int) -> Any:
    return [None if a is None else a + shift for a in col] if shift else col


def _sites(raw: Any, shift: int = 0) -> tuple[Site, ...]:
    """The sites of a record whose addresses are `shift` below the run's (a module's
    record: relative to its load bias)."""
    addr, size, kind, target, indirect, delay, cond, alt, executes, maybe_ret, alt_link = \
        _columns(raw, _SITE_COLUMNS, "site")
    kinds = [_KINDS.get(k) for k in kind]
    if None in kinds:
        raise ValueError(f"not site kinds: {kind!r}")
    return tuple(map(Site, _moved_all(addr, shift), size, kinds, _moved_all(target, shift),
                     indirect, delay, cond, alt, _moved_all(executes, shift), maybe_ret,
                     alt_link))


def _insns(raw: Any, shift: int = 0) -> list[Insn]:
    addr, size, mnemonic, op_str, code, thumb = _columns(raw, _INSN_COLUMNS, "instruction")
    return [_new(Insn, fields) for fields in zip(
        _moved_all(addr, shift), size, mnemonic, op_str, map(bytes.fromhex, code), thumb,
        strict=True)]


def _pairs(raw: Any, what: str) -> list[tuple[Any, ...]]:
    """A list of [int, bool] pairs as two columns."""
    return _columns(raw, _PAIR_COLUMNS, what)


Insns = dict[tuple[int, bool], "Insn | None"]  # a Decoder's instructions, by (addr, alt)
Blocks = dict[tuple[int, int, bool], int]  # a Decoder's block counts, by (addr, size, alt)
# Discovery's descents by (entry, alt): each result with the entry questions it asked and
# their answers (Discovery._descend)
Descents = dict[tuple[int, bool], list[tuple[Function, tuple[tuple[int, bool], ...]]]]


def _function(raw: Any, followed: frozenset[int] = frozenset(), shift: int = 0,
              with_insns: bool = True) -> tuple[Function, Insns]:
    """The function of a record, and the instructions at its sites (none unless
    with_insns); shift: what the record's addresses lie below the run's."""
    name, start, end, alt, local_offset, sites, at_sites, undecodable = \
        _checked(raw, _FUNCTION, "function")
    func = Function(name, start + shift, end + shift, _sites(sites, shift), alt, local_offset,
                    followed)
    if not with_insns:
        return func, {}
    addrs, alts = _pairs(undecodable, "address")
    found: Insns = dict.fromkeys(zip(_moved_all(addrs, shift), alts, strict=True))
    found.update(((i.addr, i.thumb), i) for i in _insns(at_sites, shift))
    return func, found


def _learn(insns: Insns, found: Insns) -> None:
    """found's instructions into insns (those kept there stay)."""
    for key, insn in found.items():
        insns.setdefault(key, insn)


def _encode_insn(insn: Insn, shift: int = 0) -> list[Any]:
    return [insn.addr + shift, insn.size, insn.mnemonic, insn.op_str, insn.raw.hex(),
            insn.thumb]


def _read_at(site: Site) -> tuple[int | None, ...]:
    """Where the backends read the instructions of a site: the site, the instruction an
    s390x EXRL executes, a MIPS delay slot (hooked_sites.py: its effect on sp)."""
    return (site.addr, site.executes, site.addr + site.size if site.delay_slot else None)


def _encode(func: Function, insns: Insns, shift: int = 0) -> list[Any]:
    """The record of func, with the instructions at its sites (_read_at) as insns holds
    them: the backends decode them to arm the sites; where nothing decodes is kept too, or
    capstone is set up again to find that out.  shift: added to every address (a module's
    record: minus its load bias)."""
    wanted = dict.fromkeys((addr, site.alt_mode) for site in func.sites
                           for addr in _read_at(site) if addr is not None and
                           (addr, site.alt_mode) in insns)
    found = [insns[key] for key in wanted]
    # (kind._value_: the member's value without Enum's descriptor, ~40,000 sites a save)
    return [func.name, func.start + shift, func.end + shift, func.alt_mode, func.local_offset,
            [[s.addr + shift, s.size, s.kind._value_, _moved(s.target, shift), s.indirect,
              s.delay_slot, s.conditional, s.alt_mode, _moved(s.executes, shift),
              s.maybe_return, s.alt_link] for s in func.sites],
            [_encode_insn(insn, shift) for insn in found if insn is not None],
            [[addr + shift, alt] for (addr, alt), insn in zip(wanted, found, strict=True)
             if insn is None]]


def _moved(addr: int | None, shift: int) -> int | None:
    return None if addr is None else addr + shift


class StoredFunctions:
    """A file's functions read from its symbols, by start: those kept in the store, each
    parsed and checked when first asked for (the store holds every function any run of
    the file reached: hundreds for static glibc, ~1 MB; reading them all cost more than a
    small run decodes), and those read in this process.  A damaged record is not used: the
    function is read from the program again."""

    def __init__(self, insns: Insns, body: bytes = b"",
                 index: dict[int, tuple[int, int]] | None = None) -> None:
        self.instructions = insns  # the decoder's: a function's site instructions go there
        self._body = body
        self._unread = index or {}  # start → (offset, length) of its record in body
        self._read: dict[int, Function] = {}
        self.added = 0  # functions read from the program, not from the store

    def get(self, start: int) -> Function | None:
        func = self._read.get(start)
        if func is None and start in self._unread:
            off, length = self._unread.pop(start)
            try:
                func, found = _function(json.loads(self._body[off:off + length]))
            except (ValueError, TypeError, RecursionError):
                return None  # (not kept: the function read again replaces it)
            if func.start != start:
                return None
            _learn(self.instructions, found)
            self._read[start] = func
        return func

    def __setitem__(self, start: int, func: Function) -> None:
        """A function read from the program (kept on the next save)."""
        self._unread.pop(start, None)
        self._read[start] = func
        self.added += 1

    def __len__(self) -> int:
        return len(self._read) + len(self._unread)

    def records(self) -> list[tuple[int, bytes]]:
        """Every function's start and record: those never parsed as they were read."""
        body = self._body
        return [*((start, _json(_encode(f, self.instructions))) for start, f in self._read.items()),
                *((start, body[off:off + length])
                  for start, (off, length) in self._unread.items())]


def _descent(raw: Any, insns: Insns, shift: int = 0, with_insns: bool = True
             ) -> tuple[tuple[int, bool], Function, tuple[tuple[int, bool], ...]]:
    """A descent's (entry, alt), function and answers; its instructions go into insns
    (with_insns).  shift: what the record's addresses lie below the run's."""
    entry, alt, func, followed, answers = _checked(raw, _DESCENT, "descent")
    if {type(v) for v in followed} - {int}:
        raise ValueError(f"not addresses: {followed!r}")
    targets, known = _pairs(answers, "answer")
    pairs = tuple(zip(_moved_all(targets, shift), known, strict=True))
    function, found = _function(func, frozenset(f + shift for f in followed), shift,
                                with_insns)
    _learn(insns, found)
    return (entry + shift, alt), function, pairs


def _encode_descents(descents: Descents, insns: Insns, shift: int = 0) -> list[Any]:
    return [[entry + shift, alt, _encode(func, insns, shift),
             sorted(f + shift for f in func.followed),
             [[target + shift, known] for target, known in answers]]
            for (entry, alt), found in descents.items() for func, answers in found]


def _block(raw: Any) -> tuple[tuple[int, int, bool], int]:
    addr, size, alt, count = _checked(raw, _BLOCK, "block")
    return (addr, size, alt), count


Kept = tuple[StoredFunctions, Blocks, Descents]


def load(where: Path, insns: Insns) -> Kept:
    """What is kept in `where`: the functions (parsed when asked for), the instruction
    counts of the translation blocks the runs met (int3 counts each new block's
    instructions for the time stamps) and the descents; the instructions at the sites of
    the descents go into insns now, those of a function when it is parsed.  Nothing when
    missing or damaged.

    The file: one line of JSON (the format, each function's place in the body, the block
    counts and the descents), then the body: the functions' records back to back."""
    try:
        data = where.read_bytes()
        head_end = data.index(b"\n") + 1
        head = json.loads(data[:head_end])
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            return StoredFunctions(insns), {}, {}
        index = {start: (head_end + off, length) for start, off, length in
                 (_checked(raw, _INDEX, "index entry") for raw in head["functions"])}
        blocks = dict(_block(raw) for raw in head["blocks"])
        found: Insns = {}
        descents: Descents = {}
        for raw in head["descents"]:
            key, func, answers = _descent(raw, found)
            descents.setdefault(key, []).append((func, answers))
    except (OSError, ValueError, TypeError, KeyError):  # (JSONDecodeError is a ValueError)
        return StoredFunctions(insns), {}, {}
    _learn(insns, found)
    return StoredFunctions(insns, data, index), blocks, descents


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def save(where: Path, funcs: StoredFunctions, blocks: Blocks | None = None,
         descents: Descents | None = None) -> None:
    """Write `funcs`, `descents` (each with the instructions at its sites) and `blocks` to
    `where` atomically (a reader sees the old file or the new one); failures are silent:
    the cache is an optimisation."""
    index: list[list[int]] = []
    body = bytearray()
    for start, record in funcs.records():
        index.append([start, len(body), len(record)])
        body += record + b"\n"
    head = _json({"format": FORMAT, "functions": index,
                  "blocks": [[*key, n] for key, n in (blocks or {}).items()],
                  "descents": _encode_descents(descents or {}, funcs.instructions)})
    try:
        where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write(where, head + b"\n" + body)
    except OSError:
        return


def _write(where: Path, data: bytes, keep: int = FILES_KEPT) -> None:
    """data into where atomically (a reader sees the old file or the new one), then the
    oldest files of its kind beyond `keep` deleted; OSError on failure."""
    fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, where)
    kind = where.name.split("-", 1)[0]
    files = sorted(where.parent.glob(f"{kind}-*{where.suffix}"),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[keep:]:
        old.unlink(missing_ok=True)


def stored_types(path: str, read: Callable[[str, Callable[[str], None]], ProgramTypes]
                 = read_prototypes, warn: Callable[[str], None] = warn_stderr) -> ProgramTypes:
    """read(path, warn)'s DWARF prototypes of the file at `path`, kept in the store directory
    beside its functions (`types-<digest>-<code>.json`, written once read): setting
    pyelftools' DWARF reader up costs 5-8 ms of a small run.  A damaged file is read again
    from the program; a read that warned (garbage DWARF) is not kept, so the next run says
    it again."""
    top = cache_dir()
    where = None
    if top is not None:
        try:
            where = top / f"types-{_file_digest(path)}-{code_version()}.json"
        except OSError:
            where = None
    if where is not None:
        try:
            return decode_types(json.loads(where.read_bytes()))
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            pass
    warned: list[str] = []

    def told(message: str) -> None:
        warned.append(message)
        warn(message)

    types = read(path, told)
    if where is not None and not warned:
        try:
            where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write(where, _json(encode_types(types)))
        except OSError:
            pass
    return types


# what runs decoded beyond what their file held, written at exit; at most PENDING_KEPT of
# them wait (each holds a file's functions and instructions, tens of MB for static glibc):
# an older one is written when a newer file is opened, so a process that traces many
# programs (the test suite, `bench`) does not keep every one until it ends
PENDING_KEPT = 2
_pending: OrderedDict[Path, Callable[[], None]] = OrderedDict()


@atexit.register
def write_pending() -> None:
    while _pending:
        _pending.popitem(last=False)[1]()


def stored_functions(path: str, bias: int, decoder: Decoder,
                     descents: Descents) -> StoredFunctions:
    """The functions kept for this file (possibly none), which discovery adds the functions
    it reads to; the instructions and block counts kept with them go into the decoder's
    tables, the descents into `descents` (Discovery's).  What the run added is written at
    the process's exit, or earlier when PENDING_KEPT newer files are open."""
    insns, blocks = decoder.instructions, decoder.block_counts
    where = store_path(path, bias)
    if where is None:
        return StoredFunctions(insns)
    earlier = _pending.pop(where, None)
    if earlier is not None:
        earlier()
    funcs, kept_blocks, kept_descents = load(where, insns)
    for bkey, count in kept_blocks.items():
        blocks.setdefault(bkey, count)
    for dkey, found in kept_descents.items():
        descents.setdefault(dkey, []).extend(found)

    def sizes() -> tuple[int, int]:
        return len(blocks), sum(len(found) for found in descents.values())

    known = sizes()

    def write_back() -> None:
        if funcs.added or any(n > k for n, k in zip(sizes(), known, strict=True)):
            save(where, funcs, blocks, descents)

    _pending[where] = write_back
    while len(_pending) > PENDING_KEPT:
        _pending.popitem(last=False)[1]()
    return funcs
