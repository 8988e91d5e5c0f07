"""Capstone set-up from an ISA description, and a cached instruction reader over an Image."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emutrace.discover.memo import file_key, kept
from emutrace.discover.sweep import SweepRule
from emutrace.elf import PF_X, Image
from emutrace.isa.base import NO_FLOW, Classifiers, Flow, FlowKind, Insn

if TYPE_CHECKING:
    from emutrace.native.disasmlib import Walker

_AHEAD = 256  # bytes decoded past a missed address in one capstone call
# Thumb instructions decoded per capstone call at most: a call decodes all it is asked for
# before the first is returned, and a Thumb stretch ends at the next IT instruction
# (_decode_stretch): decoding the rest of the function each time made ARM fib's cold
# discovery 71 ms instead of 55 (16: the fastest of 8 to 64 on static glibc's start-up)
_ALT_BATCH = 16
UNSEEN: Any = object()  # an address not looked at yet (None: nothing decodes there)
# Insn from its six fields without the named tuple's keyword-handling constructor (a cold
# run builds one per instruction it decodes)
_new = tuple.__new__


class NoClassifiers(LookupError):
    pass


def classifiers_of(image: Image) -> Classifiers:
    cls = image.isa.classifiers
    if cls is None:
        raise NoClassifiers(f"{image.isa.name}: no control-flow classifiers declared")
    return cls


def _mode(capstone: Any, names: tuple[str, ...]) -> int:
    mode = 0
    for name in names:
        mode |= getattr(capstone, name)
    return mode


def binding_engine(arch: str, modes: tuple[str, ...]) -> Any:
    """Capstone's Python binding for an ISA's capstone names: the reference decoder (its
    import costs ~30 ms)."""
    import capstone

    return capstone.Cs(getattr(capstone, arch), _mode(capstone, modes))


def engine(arch: str, modes: tuple[str, ...]) -> Any:
    """What decodes for the Decoder (disasm_lite): capstone's C library called from the native
    library (emutrace/native/disasm.c) where it is built, else the binding."""
    from emutrace.native.disasmlib import disassembler

    return disassembler(arch, modes) or binding_engine(arch, modes)


class Decoder:
    """Decodes instructions of the executable segments once; `alt` selects the alternative
    instruction set (ARM Thumb)."""

    # the sweep loops of scan and _decode_stretch in C where the engine has them
    # (native/sweep.c); the Python loops are their reference (tests/test_disasm.py)
    sweep_in_c = True

    def __init__(self, image: Image) -> None:
        self.isa = image.isa
        self.cls = classifiers_of(image)
        self._cs: Any = None  # capstone's, made at the first miss (_engine)
        self._cs_alt: Any = None
        # every module's executable file data for a dynamic program (shared, growing)
        self._code = image.modules.code if image.modules is not None else [
            (s.vaddr, s.data) for s in image.segments if s.flags & PF_X]
        # the file's instructions and instruction counts of translation blocks, shared
        # with the next run of the same file (memo.py) and the next process (store.py); a
        # dynamic program's modules are not one file: its own
        key = None if image.modules is not None else file_key(image.path, image.bias)
        self.file_key = key  # (memo.py) for what users derive from these instructions
        self.instructions: dict[tuple[int, bool], Insn | None] = kept(
            "instructions", key, dict)
        self.block_counts: dict[tuple[int, int, bool], int] = kept("block_counts", key, dict)
        # the sizes of the instructions decoded in C, by (range start, alt): a block count
        # reads them rather than decoding again (sweep.c size_map)
        self._size_maps: dict[tuple[int, bool], bytearray] = kept("size_maps", key, dict)
        # told of each size map made (base, alt, map): the native engine lends them to C
        self.on_size_map: Callable[[int, bool, bytearray], None] | None = None
        sweep = self.cls.sweep
        self.sweep_rule = None if sweep is None else SweepRule(
            sweep, image.isa.identity.endian, image.isa.code_mask)

    def _engine(self, alt: bool) -> Any:
        """The decoder for the main mode (alt: the alternative one, ARM Thumb), made when
        first needed: a run whose instructions all come from the store decodes nothing."""
        if self._cs is None:
            engines = self.isa.engines
            self._cs = engine(engines.cs_arch, engines.cs_mode)
            if self.cls.alt_mode:
                # the alternative mode keeps the byte-order bits of the main mode
                self._cs_alt = engine(engines.cs_arch, self.cls.alt_mode)
        return self._cs_alt if alt and self._cs_alt is not None else self._cs

    def code_ranges(self) -> list[tuple[int, bytes]]:
        """(address, file data) of every executable range known (grows with modules)."""
        return list(self._code)

    def _range(self, addr: int) -> tuple[int, bytes] | None:
        """(address, file data) of the executable range holding addr, if one does."""
        for base, data in self._code:
            if base <= addr < base + len(data):
                return base, data
        return None

    def _sweeper(self, alt: bool) -> Any:
        """sweep.c's loops for mode alt (disasmlib.Sweeper), None where the Python loops run:
        the extension not built, the binding decoding, or `sweep_in_c` off."""
        return getattr(self._engine(alt), "sweeper", None) if self.sweep_in_c else None

    def bytes_before(self, addr: int, n: int) -> bytes:
        """The up to n bytes of the executable file data just before addr (fewer at the
        start of its range; none outside every range)."""
        found = self._range(addr)
        if found is None:
            return b""
        base, data = found
        off = addr - base
        return bytes(data[max(0, off - n):off])

    def in_code(self, addr: int) -> bool:
        return self._range(addr) is not None

    def code_range(self, addr: int) -> tuple[int, int] | None:
        """[start, end) of the executable file data containing addr, if any."""
        found = self._range(addr)
        return None if found is None else (found[0], found[0] + len(found[1]))

    def code_end(self, addr: int) -> int:
        """End of the executable file data containing addr (addr itself if none)."""
        found = self.code_range(addr)
        return addr if found is None else found[1]

    def insn_at(self, addr: int, alt: bool = False) -> Insn | None:
        """The instruction at addr, or None where nothing valid decodes."""
        key = (addr, alt)
        if key in self.instructions:
            return self.instructions[key]
        # the instructions that follow, decoded in one call and kept: a sweep asks for
        # them next (disasm_lite's tuples cost a fifth of one CsInsn each)
        run = self._decode_stretch(addr, addr + _AHEAD - 16, alt)
        return run[0] if run else None

    def linear(self, addr: int, stop: int, alt: bool = False) -> list[Insn]:
        """The instructions back to back from addr while they start before stop (the last
        may reach past it), ending early where nothing decodes: what insn_at answers one
        by one, with the missing ones decoded in one capstone call per stretch (a sweep of a
        function's extent)."""
        out: list[Insn] = []
        at = addr
        cache = self.instructions
        while at < stop:
            insn = cache.get((at, alt), UNSEEN)
            if insn is UNSEEN:
                run = self._decode_stretch(at, stop, alt)
                if not run:
                    break
                out += run
                at = run[-1].addr + run[-1].size
                continue
            if insn is None:
                break
            out.append(insn)
            at += insn.size
        return out

    def scan(self, addr: int, stop: int, alt: bool, lo: int, hi: int
             ) -> tuple[list[Insn], int, Insn | None]:
        """A linear sweep from addr while instructions start before stop, as `linear`, going
        on past bytes where nothing decodes by the ISA's alignment: the instructions the
        ISA's SweepFilter keeps in a function whose code is [lo, hi) (all of them where it
        declares none), where the sweep stopped (stop, or past it), and the last instruction
        when the sweep ended on one (None: on undecodable bytes).  In C where sweep.c is
        built (the instructions left out never become Insns), else this loop, its reference
        (tests/test_disasm.py)."""
        rule = self.sweep_rule
        found = self._range(addr) if rule is not None and addr < stop else None
        sweeper = self._sweeper(alt) if found is not None else None
        if found is not None and sweeper is not None:
            base, data = found
            return sweeper.scan(  # type: ignore[no-any-return]
                data, base, addr, stop, _ALT_BATCH if alt else 0, self.align(alt), alt,
                self.instructions, Insn, rule, lo, hi, self._size_map(base, len(data), alt))
        kept: list[Insn] = []
        last = None
        at = addr
        while at < stop:
            run = self.linear(at, stop, alt)
            if run:
                kept += run if rule is None else [i for i in run if rule.keeps(i, lo, hi)]
                last = run[-1]
                at = last.addr + last.size
            if at < stop:  # nothing decodes here
                last = None
                at += self.align(alt)
        return kept, at, last

    def walker(self, alt: bool) -> Walker | None:
        """Straight-line code for recursive descent, by sweep.c: a function of an address,
        the descent's `seen` (address -> size), entry, is_entry, todo and followed that puts
        in seen the instructions from that address the ISA's SweepFilter leaves out whatever
        the extent, up to one seen already or the first it keeps, follows the conditional
        direct branches walked past into the function (descent.py `branch`'s rule), and
        gives the instruction it stopped at (None: seen, or nothing decodes), where it
        stopped and the (address, target) of the branches left to the descent (None: not in
        the code).  None where this is not done in C (no filter, sweep.c not built):
        descend decodes one instruction at a time, the reference."""
        rule = self.sweep_rule
        sweeper = self._sweeper(alt) if rule is not None else None
        if sweeper is None:
            return None
        return sweeper.walker(self._range, alt, self.instructions,  # type: ignore[no-any-return]
                              Insn, rule, self._size_map)

    def _decode_stretch(self, addr: int, stop: int, alt: bool = False) -> list[Insn]:
        """Decode from addr to stop (and the bytes an instruction starting before stop may
        reach past it) in one capstone call (Thumb: at most _ALT_BATCH instructions) and
        keep every instruction; the instructions from addr on, back to back (where one was
        kept already: that one), up to one known to be undecodable; none (None kept at
        addr) where nothing decodes at addr.

        Every instruction decodes as it does alone: capstone carries one state from one
        instruction to the next within a call, never across calls: Thumb's IT block (the
        up to four instructions after an IT are decoded as conditional: `moveq`).  A
        Thumb stretch therefore ends with an IT instruction, and the instructions after it
        are decoded by a new call, as they are when asked for one by one."""
        run: list[Insn] = []
        cache = self.instructions
        found = self._range(addr)
        if found is not None:
            base, data = found
            off = addr - base
            # past stop: room for the longest instruction (x86: 15 bytes), no more
            # (capstone decodes all it is given: a sweep's function ends at stop)
            code = bytes(data[off:off + stop - addr + 16])
            sweeper = self._sweeper(alt)
            if sweeper is not None:  # (sweep.c: the loop below, in C)
                return sweeper.stretch(  # type: ignore[no-any-return]
                    code, addr, stop, _ALT_BATCH if alt else 0, alt, cache, Insn)
            for at, size, mnemonic, op_str in self._engine(alt).disasm_lite(
                    code, addr, _ALT_BATCH if alt else 0):
                key = (at, alt)
                insn = cache.get(key, UNSEEN)
                if insn is None:
                    break
                if insn is UNSEEN:
                    start = at - addr
                    insn = cache[key] = _new(Insn, (at, size, mnemonic, op_str,
                                                    code[start:start + size], alt))
                run.append(insn)
                if at + size >= stop or alt and mnemonic.startswith("it"):
                    break
        if not run:
            cache[(addr, alt)] = None
        return run

    def align(self, alt: bool) -> int:
        return self.cls.alt_insn_align if alt else self.cls.insn_align

    def insn_starts(self, addr: int, size: int, alt: bool = False) -> list[int]:
        """Where each instruction of the block [addr, addr+size) starts (a translation block
        the CPU ran); undecodable bytes advance by the ISA's instruction alignment."""
        starts: list[int] = []
        at = addr
        while at < addr + size:
            starts.append(at)
            insn = self.insn_at(at, alt)
            at += insn.size if insn is not None else self.align(alt)
        return starts

    def block_count(self, addr: int, size: int, alt: bool = False) -> int:
        """How many instructions the block [addr, addr+size) holds (len of insn_starts),
        counted once per file (memo.py, store.py)."""
        key = (addr, size, alt)
        count = self.block_counts.get(key)
        if count is None:
            count = self.block_counts[key] = self._count(addr, size, alt)
        return count

    def _size_map(self, base: int, length: int, alt: bool) -> bytearray:
        """The size map of the code range at base (length bytes) in mode alt."""
        found = self._size_maps.get((base, alt))
        if found is None or len(found) != length:
            found = self._size_maps[(base, alt)] = bytearray(length)
            if self.on_size_map is not None:
                self.on_size_map(base, alt, found)
        return found

    def size_maps(self) -> dict[tuple[int, bool], bytearray]:
        """The size maps made so far, by (range start, alt)."""
        return dict(self._size_maps)

    def _count(self, addr: int, size: int, alt: bool) -> int:
        """len(insn_starts(...)), in C where sweep.c is built (no Insn made: a sweep keeps
        only the instructions sites may come from, so a block's are mostly not decoded)."""
        found = self._range(addr)
        sweeper = self._sweeper(alt) if found is not None else None
        if found is not None and sweeper is not None:
            base, data = found
            return sweeper.count(  # type: ignore[no-any-return]
                data, base, self._size_map(base, len(data), alt), addr, size, self.align(alt))
        return len(self.insn_starts(addr, size, alt))

    def flow_at(self, addr: int, alt: bool = False) -> tuple[Flow, Insn] | None:
        """What the instruction at addr does to control flow, as the backends that watch
        execution see it: s390x EXRL counts as a call when the instruction it executes is
        one, as nothing otherwise.  None where nothing decodes."""
        insn = self.insn_at(addr, alt)
        if insn is None:
            return None
        flow = self.cls.classify(insn)
        if flow.kind is FlowKind.EXECUTE and flow.target is not None:
            target = self.insn_at(flow.target, alt)
            inner = self.cls.classify(target) if target is not None else NO_FLOW
            flow = inner if inner.kind is FlowKind.CALL else NO_FLOW
        return flow, insn
