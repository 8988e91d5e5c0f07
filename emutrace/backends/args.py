"""Reading a call's arguments and a return's value as typed `trace.values.Value`s, at the
event, per the ISA's C ABI.  Shared by every backend that records values (int3, hwbp,
entry, btf, step; bts records none).

Where each value is comes from `discover.callabi` (prototype → locations, resolved once per
function address and cached there); this module only reads registers and memory.  Strings
(`char *`) are read *now*, bounded (`values.STRING_LIMIT`), and an unreadable pointer
leaves the text None (shown in hex).

Arguments are read at the callee's entry (`at_entry=True`: btf, entry, and int3/hwbp/step,
which resolve a call once it has reached its target — after a MIPS delay slot that may set
an argument register), or at the call instruction (`at_entry=False`), where on ISAs whose
call pushes the return address (x86) the stack slots sit one word higher than at the entry
where `stack_args_offset` is measured.
"""

from __future__ import annotations

import struct
from fractions import Fraction

from emutrace.discover.callabi import (
    AUTO,
    SRET,
    VOID,
    ByRef,
    CallTypes,
    Fpr,
    Pieces,
    Reg,
    Slots,
    Unknown,
    has_float,
    is_long_double,
)
from emutrace.discover.prototypes import CType
from emutrace.target.protocol import MemoryFault, Target
from emutrace.trace.events import SignalDelivery, Trap
from emutrace.trace.long_double import long_double_value
from emutrace.trace.values import STRING_LIMIT, Value, quote_c, render

_SRET_DEPTH = 256  # struct-result addresses kept per function (deep recursion, longjmp)


class ArgReader:
    def __init__(self, cpu: Target, types: CallTypes, at_entry: bool = False) -> None:
        isa = cpu.isa
        regs = isa.registers
        self.cpu = cpu
        self.types = types
        self.cv = isa.c_values
        self.regs = regs.args
        self.sp = regs.sp
        self.ret_reg = regs.retval
        self.word = cpu.word
        self.big = cpu.byteorder == "big"
        self.offset = regs.stack_args_offset - (0 if at_entry else call_push_size(cpu))
        # per function: the addresses its open calls will return a struct at (a frame left
        # by longjmp leaves one behind; bounded by _SRET_DEPTH)
        self._sret: dict[int, list[int]] = {}

    # ------------------------------------------------------------ arguments
    def read(self, func: int) -> tuple[Value, ...]:
        """The arguments of the function entered at `func`, as its prototype types them."""
        locs = self.types.at(func).args
        if not locs:
            return ()
        sp = None
        out = []
        stack = None  # (the stack words of this call, read at once, sp with them: `_slot`)
        deepest = max((max(loc.ids) if isinstance(loc, Slots) and loc.ids else
                       loc.slot if isinstance(loc, ByRef) else
                       max((w for _, _, w in loc.parts if isinstance(w, int)), default=-1)
                       if isinstance(loc, Pieces) else -1) for loc in locs)
        if deepest >= len(self.regs):
            sp = self.cpu.reg_read(self.sp)
            stack = self._stack_words(sp, deepest + 1 - len(self.regs))
        for loc in locs:
            if loc.ctype is SRET:  # where the struct result will be: read at the return
                reg = loc.reg if isinstance(loc, Fpr) else None
                if reg is not None:
                    addr = self.cpu.reg_read(reg)
                else:
                    assert isinstance(loc, Slots)
                    addr = self._slot(loc.ids[0], sp, stack)
                pending = self._sret.setdefault(func, [])
                pending.append(addr)
                if len(pending) > _SRET_DEPTH:
                    del pending[0]
                continue
            if isinstance(loc, Slots):
                words = [self._slot(i, sp, stack) for i in loc.ids]
                out.append(self._from_words(words, loc.ctype))
            elif isinstance(loc, Fpr):
                out.append(self._fp(loc.reg, loc.high, loc.ctype))
            elif isinstance(loc, Reg):
                out.append(self._from_words([self.cpu.reg_read(loc.reg)], loc.ctype))
            elif isinstance(loc, ByRef):
                out.append(self._struct_at(self._slot(loc.slot, sp, stack), loc.ctype))
            elif isinstance(loc, Pieces):
                out.append(self._pieces(loc, sp, stack))
            else:
                assert isinstance(loc, Unknown)
                out.append(Value("struct", 8 * loc.ctype.size, 0, "{?}"))
        return tuple(out)

    def _stack_words(self, sp: int, n: int) -> list[int] | None:
        """The first n stack argument words at a call with stack pointer sp, in one read;
        None where that read faults, or the words come from a snapshot of them (each word
        is then read alone: `_slot`)."""
        mem_read = getattr(self.cpu, "mem_read", None)  # (native_args.Snapshot: words only)
        if mem_read is None:
            return None
        try:
            data = mem_read(sp + self.offset, n * self.word)
        except MemoryFault:
            return None
        order = self.cpu.byteorder
        return [int.from_bytes(data[k:k + self.word], order)
                for k in range(0, len(data), self.word)]

    def _slot(self, i: int, sp: int | None, stack: list[int] | None = None) -> int:
        """Argument word i: a register, else a stack word (from `stack`, the call's stack
        words read at once, where it has it)."""
        if i < len(self.regs):
            return self.cpu.reg_read(self.regs[i])
        if stack is not None and i - len(self.regs) < len(stack):
            return stack[i - len(self.regs)]
        assert sp is not None
        try:
            return self.cpu.read_word(sp + self.offset + (i - len(self.regs)) * self.word)
        except MemoryFault:
            return 0

    def _from_words(self, words: list[int], t: CType) -> Value:
        if len(words) == 1 and t.kind != "struct" and not is_long_double(t):
            return self.value(words[0], t)
        mask = (1 << (8 * self.word)) - 1
        data = b"".join((w & mask).to_bytes(self.word, self.cpu.byteorder) for w in words)
        if is_long_double(t):
            return self._long_double(data)
        if t.kind == "struct":
            if self.cv.struct_scalar and len(words) == 1:  # s390x: right-justified
                data = data[self.word - t.size:]
            return self.struct_value(data[:t.size], t)
        return self.value(int.from_bytes(data[:t.size or 8], self.cpu.byteorder), t)

    # ------------------------------------------------------------ return values
    def read_return(self, site: int) -> Value | None:
        """The result of the function whose return instruction is at `site` (None: void)."""
        func, values = self.types.function_of(site)
        t = values.ret
        if t is VOID or t.kind == "void":
            return None
        if is_long_double(t) and self.cv.long_double != "double" and not values.ret_in_core:
            return self._long_double_result(func)
        if t.kind == "float" and not values.ret_in_core:
            reg = self.cv.fp_retval
            if reg is not None:
                return self._fp(reg, self.cv.fp_retval_high, t)
        low = self.cpu.reg_read(self.ret_reg)
        if t.size > self.word and t.kind != "struct" and self.cv.retval_hi is not None:
            high = self.cpu.reg_read(self.cv.retval_hi)  # (ret, ret_hi) in memory order
            return self._from_words([low, high], t)
        if values.ret_pieces is not None:  # a struct with FP members, in registers
            return self._pieces(values.ret_pieces, None, None)
        if t.kind == "struct":
            if t.size > self.cv.struct_ret_in_regs:  # in memory: at the call's hidden address
                pending = self._sret.get(func)
                if pending:
                    return self._struct_at(pending.pop(), t)
                return Value("struct", 8 * t.size, 0, "{...}")
            if has_float(t) and not self.cv.struct_fp:  # (the ISA's rule not modelled)
                return Value("struct", 8 * t.size, 0, "{...}")
            words = [low]
            if t.size > self.word and self.cv.retval_hi is not None:
                words.append(self.cpu.reg_read(self.cv.retval_hi))
            mask = (1 << (8 * self.word)) - 1
            data = b"".join((w & mask).to_bytes(self.word, self.cpu.byteorder) for w in words)
            return self.struct_value(data[:t.size], t)
        return self.value(low, t)

    # ------------------------------------------------------------ values
    def value(self, raw: int, t: CType) -> Value:
        """A scalar of type t from the bits it travelled in (an integer register or slot)."""
        kind = t.kind
        bits = 8 * (t.size or self.word)
        if kind == "auto" or t is AUTO:
            return Value("auto", 8 * self.word, raw & ((1 << (8 * self.word)) - 1))
        raw &= (1 << bits) - 1
        if kind == "enum":
            signed = raw - (1 << bits) if raw >> (bits - 1) else raw
            name = next((n for v, n in t.enumerators if v == signed), None)
            return Value("enum", bits, raw, name)
        if kind in ("str", "buf"):
            return self.string_value(raw, t, self.string(raw))
        if is_long_double(t):  # (a struct's member: its bytes as in memory)
            return self._long_double(raw.to_bytes(t.size, self.cpu.byteorder))
        if kind in ("int", "uint", "char", "uchar", "bool", "ptr", "float", "hex", "oct"):
            return Value(kind, bits, raw)
        return Value("hex", bits, raw)

    def string_value(self, raw: int, t: CType, text: str | None) -> Value:
        """A `char *` of type t (kind str or buf) and the text read at it (`string`, or the
        native hot path's copy made at the event)."""
        bits = 8 * (t.size or self.word)
        return Value(t.kind, bits, raw & ((1 << bits) - 1), text)

    def string(self, addr: int) -> str | None:
        """The C string at addr, at most STRING_LIMIT + 1 characters (the renderer shows the
        limit and `...`); None when NULL or unreadable."""
        if addr == 0:
            return None
        out = bytearray()
        try:
            while len(out) <= STRING_LIMIT:
                at = addr + len(out)
                chunk = self.cpu.mem_read(at, min(STRING_LIMIT + 1, 0x1000 - (at & 0xFFF)))
                nul = chunk.find(b"\0")
                if nul >= 0:
                    out += chunk[:nul]
                    break
                out += chunk
        except MemoryFault:
            return None
        return out[:STRING_LIMIT + 1].decode("latin-1")

    # ------------------------------------------------------------ floating point
    def _long_double(self, data: bytes) -> Value:
        """A `long double` from its memory image, in the ISA's format (trace/long_double)."""
        return long_double_value(data, self.cv.long_double, self.cpu.byteorder)

    def _long_double_result(self, func: int) -> Value:
        """A `long double` result where CValues.long_double_ret says."""
        cpu, cv, order = self.cpu, self.cv, self.cpu.byteorder
        where = cv.long_double_ret
        if where == "x87":  # st(0) = physical FP<TOP> (Intel SDM vol. 1 §8.1.3)
            reg = cpu.raw_reg(f"fp{(cpu.reg_read('fpsw') >> 11) & 7}")
            mant, se = (int(reg[0]), int(reg[1])) if isinstance(reg, tuple) else \
                (reg & (1 << 64) - 1, (reg >> 64) & 0xFFFF)
            return self._long_double(mant.to_bytes(8, "little") + se.to_bytes(2, "little"))
        if where == "fp" and cv.fp_quad:
            return self._long_double(self._fp_bits(cv.fp_quad[0], 16).to_bytes(16, order))
        if where == "pair":
            return self._long_double(b"".join(self._fp_bits(r, 8).to_bytes(8, order)
                                              for r in cv.fp_args[:2]))
        if where == "memory":
            pending = self._sret.get(func)
            size = cv.long_double_size
            if pending:
                return self._struct_at(pending.pop(), CType("float", size, "long double"))
            return Value("float", 8 * size, 0, "?")  # (its call was not seen)
        words = [cpu.reg_read(self.ret_reg)]  # "core": the integer result registers
        if cv.retval_hi is not None:
            words.append(cpu.reg_read(cv.retval_hi))
        mask = (1 << (8 * self.word)) - 1
        return self._long_double(b"".join((w & mask).to_bytes(self.word, order)
                                          for w in words))

    def _fp_bits(self, reg: str, size: int) -> int:
        """The `size` bytes of a value in an FP register, as that value's bit pattern: a
        float where CValues.fp_single says (converted from double format on Power)."""
        raw = self.cpu.raw_reg(reg)
        assert isinstance(raw, int)
        if size == 4:
            if self.cv.fp_single == "high32":
                return (raw >> 32) & 0xFFFFFFFF
            if self.cv.fp_single == "double":
                return _float_value(raw & (1 << 64) - 1, 4).raw
            return raw & 0xFFFFFFFF
        return raw & (1 << (8 * size)) - 1

    def _pieces(self, loc: Pieces, sp: int | None, stack: list[int] | None) -> Value:
        """A value split over registers (callabi.Pieces), put together as in memory."""
        t, order = loc.ctype, self.cpu.byteorder
        data = bytearray(max([t.size] + [off + size for off, size, _ in loc.parts]))
        for off, size, where in loc.parts:
            if where == "":  # (a result: the first integer result register)
                bits = self.cpu.reg_read(self.ret_reg) & (1 << (8 * size)) - 1
            elif isinstance(where, str):
                bits = self._fp_bits(where, size)
            else:  # an integer register: the member's value in its low bytes
                bits = self._slot(where, sp, stack) & (1 << (8 * size)) - 1
            data[off:off + size] = bits.to_bytes(size, order)
        if is_long_double(t):
            return self._long_double(bytes(data))
        return self.struct_value(bytes(data[:t.size]), t)

    def _fp(self, reg: str, high: str | None, t: CType) -> Value:
        if is_long_double(t) and self.cv.long_double != "double":  # (AArch64: a q register)
            return self._long_double(self._fp_bits(reg, t.size).to_bytes(t.size,
                                                                         self.cpu.byteorder))
        got = self._fp_scalar(reg, high, t)
        if is_long_double(t) and got.bits == 64:  # (long double is double: shown as one)
            return long_double_value(got.raw.to_bytes(8, "little"), "double", "little")
        return got

    def _fp_scalar(self, reg: str, high: str | None, t: CType) -> Value:
        cpu, cv = self.cpu, self.cv
        if cv.fp_x87 or (cv.long_double_x87 and t.size > 8):
            # st(0) is physical register FP<TOP>, TOP = FPU status word bits 11-13 (Intel
            # SDM vol. 1 §8.1.3); Unicorn's ST0 read drops the exponent, FP<n> has both
            top = (cpu.reg_read("fpsw") >> 11) & 7
            bits = _x87_to_double(cpu.raw_reg(f"fp{top}"))
            return _float_value(bits, t.size)
        raw = cpu.raw_reg(reg)
        assert isinstance(raw, int)
        if t.size == 4:
            if cv.fp_single == "high32":
                return Value("float", 32, (raw >> 32) & 0xFFFFFFFF)
            if cv.fp_single == "double":
                return _float_value(raw & (1 << 64) - 1, 4)
            return Value("float", 32, raw & 0xFFFFFFFF)
        if high is not None:  # MIPS FR=0: the even register holds the low word
            raw = (raw & 0xFFFFFFFF) | (cpu.reg_read(high) & 0xFFFFFFFF) << 32
        return Value("float", 64, raw & (1 << 64) - 1)

    def _struct_at(self, addr: int, t: CType) -> Value:
        """A struct (or a `long double`) read from memory at addr."""
        try:
            data = self.cpu.mem_read(addr, t.size)
        except MemoryFault:
            return Value(t.kind, 8 * t.size, addr, None if t.kind == "struct" else "?")
        if is_long_double(t):
            return self._long_double(data)
        return self.struct_value(data, t)

    def _array(self, data: bytes, t: CType) -> str:
        """An array member: a char array as the string it holds, else `[v, v, ...]`."""
        elem = t.members[0][2] if t.members else None
        if elem is None or elem.size == 0:
            return "[...]"
        if elem.kind in ("char", "uchar") and elem.size == 1:
            return quote_c(data.split(b"\0", 1)[0].decode("latin-1"))
        items = [render(self.value(int.from_bytes(data[i:i + elem.size], self.cpu.byteorder),
                                   elem))
                 for i in range(0, min(len(data), 16 * elem.size), elem.size)]
        return "[" + ", ".join(items) + (", ...]" if len(data) > 16 * elem.size else "]")

    def struct_value(self, data: bytes, t: CType) -> Value:
        """A struct from its bytes as in memory: `{.x=3, .y=-4}` (members of struct type
        and strings are not followed)."""
        parts = []
        for name, off, m in t.members:
            chunk = data[off:off + m.size]
            if len(chunk) < m.size or m.size == 0:
                continue
            raw = int.from_bytes(chunk, self.cpu.byteorder)
            if m.kind == "struct":
                text = "{...}"
            elif m.kind == "array":
                text = self._array(chunk, m)
            elif m.kind in ("str", "buf"):
                text = render(Value("ptr", 8 * m.size, raw))
            else:
                text = render(self.value(raw, m))
            parts.append(f".{name}={text}" if name else text)
        return Value("struct", 8 * len(data), int.from_bytes(data, "big") if data else 0,
                     "{" + ", ".join(parts) + "}")


def handler_frame(time: int, cpu: Target, vector: int, signal: SignalDelivery | None,
                  reader: ArgReader | None) -> Trap:
    """The frame of an exception or signal handler entered at vector: the address of its
    first instruction (`code_address`: an ARM Thumb handler's vector has bit 0 set), the
    stack pointer, and for a signal handler the signal's stack and the handler's arguments
    (none where the backend records no values: reader None)."""
    entry = cpu.isa.code_address(vector)
    args = reader.read(entry) if signal is not None and reader is not None else ()
    return Trap(time, entry, cpu.reg_read(cpu.isa.registers.sp),
                signal.stack if signal is not None else None, args)


def _float_value(double_bits: int, size: int) -> Value:
    """A value held as a double (Power FPRs, x87 after conversion) of a float or double."""
    if size == 4:
        f = struct.unpack("<d", double_bits.to_bytes(8, "little"))[0]
        try:
            return Value("float", 32, int.from_bytes(struct.pack("<f", f), "little"))
        except OverflowError:
            return Value("float", 64, double_bits)
    return Value("float", 64, double_bits)


def _x87_to_double(reg: object) -> int:
    """x87 80-bit extended (Intel SDM vol. 1 §4.2.2: sign+15-bit exponent, 64-bit
    significand with explicit integer bit) as the bits of the double C's conversion gives
    (round to nearest): a value beyond the double range is ±inf, one below it ±0 or a
    subnormal, as `(double)x` prints in the program itself.  Unicorn hands the register as
    (significand, sign|exponent) or as one integer."""
    if isinstance(reg, tuple):
        mant, se = int(reg[0]), int(reg[1])
    else:
        assert isinstance(reg, int)
        mant, se = reg & (1 << 64) - 1, (reg >> 64) & 0xFFFF
    sign, exp = se >> 15, se & 0x7FFF
    if exp == 0x7FFF:
        value = float("nan") if mant << 1 & (1 << 64) - 1 else float("inf")
    elif mant.bit_length() + exp - 16383 - 63 > 1024:  # 2^1024 and above: past DBL_MAX
        value = float("inf")
    else:
        # exact in binary, then one rounding to 53 bits: Fraction → float rounds to nearest
        # (subnormals too), where mant * 2.0**e would round twice or overflow
        try:
            value = float(Fraction(mant) * Fraction(2) ** (exp - 16383 - 63))
        except OverflowError:  # just below 2^1024, rounded up to it
            value = float("inf")
    return int.from_bytes(struct.pack("<d", -value if sign else value), "little")


def call_push_size(cpu: Target) -> int:
    """Bytes a call instruction pushes: the return address on ISAs without a link register
    (x86: CALL pushes one word, Intel SDM vol. 2), nothing elsewhere.  The stack pointer
    before a call is the callee's entry sp plus this."""
    return cpu.word if cpu.isa.registers.link is None else 0
