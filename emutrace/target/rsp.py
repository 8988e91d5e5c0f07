"""The GDB Remote Serial Protocol's packets, without any I/O (the GDB manual, appendix E
"GDB Remote Serial Protocol": Overview, Binary Data, Stop Reply Packets).

A packet is ``$payload#cc``: cc is the sum of the payload's bytes modulo 256 in two hex
digits.  Inside a payload ``}`` escapes the next byte, which is sent XORed with 0x20
(``#``, ``$``, ``}`` and ``*`` must be escaped in binary data); a stub may compress a reply
with run-length encoding: ``X*n`` is X repeated n - 29 more times (n a printable byte,
never ``#`` or ``$``).  The receiver answers ``+`` (received) or ``-`` (send it again)
until no-acknowledgement mode is agreed (``QStartNoAckMode``).

`PacketReader` turns a received byte stream into payloads (RLE expanded, escapes kept: a
binary reply is unescaped by whoever knows it is binary, `unescape`); `frame` makes a
packet to send; `parse_stop` reads a stop reply."""

from __future__ import annotations

from dataclasses import dataclass, field

ESCAPE = 0x7D  # '}'
ESCAPE_XOR = 0x20
MUST_ESCAPE = frozenset(b"#$}*")
RLE_MARK = 0x2A  # '*'
RLE_BIAS = 29  # "X*n": n - 29 more copies of X


class RspError(Exception):
    """A malformed packet or reply (a stub that does not speak the protocol)."""


def checksum(payload: bytes) -> int:
    return sum(payload) & 0xFF


def escape(data: bytes) -> bytes:
    """Binary data as it may stand in a payload (the `X` packet's data)."""
    out = bytearray()
    for b in data:
        if b in MUST_ESCAPE:
            out += bytes((ESCAPE, b ^ ESCAPE_XOR))
        else:
            out.append(b)
    return bytes(out)


def unescape(data: bytes) -> bytes:
    """Binary data from a payload (a `qXfer` reply's, an `X` packet's)."""
    out = bytearray()
    it = iter(data)
    for b in it:
        if b == ESCAPE:
            nxt = next(it, None)
            if nxt is None:
                raise RspError("a binary payload ends with its escape byte")
            out.append(nxt ^ ESCAPE_XOR)
        else:
            out.append(b)
    return bytes(out)


def expand_rle(payload: bytes) -> bytes:
    """A reply with its run-length encoding expanded (an escaped byte is never a run's
    first: ``}*`` is the escape of 0x0A, not a run)."""
    if RLE_MARK not in payload:
        return payload
    out = bytearray()
    i, n = 0, len(payload)
    while i < n:
        b = payload[i]
        if b == ESCAPE and i + 1 < n:
            out += payload[i:i + 2]
            i += 2
            continue
        if b == RLE_MARK:
            if not out or i + 1 >= n:
                raise RspError("a run-length mark with nothing to repeat")
            count = payload[i + 1] - RLE_BIAS
            if count < 0:
                raise RspError(f"run-length count byte {payload[i + 1]:#x} below 29")
            out += bytes((out[-1],)) * count
            i += 2
            continue
        out.append(b)
        i += 1
    return bytes(out)


def frame(payload: bytes) -> bytes:
    """The packet that carries payload (already escaped where it holds binary data)."""
    return b"$" + payload + b"#" + f"{checksum(payload):02x}".encode()


class PacketReader:
    """Payloads out of a received byte stream: `feed` the bytes as they come, `packets`
    the payloads complete so far (checksums checked), `acks` the ``+``/``-`` seen."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.packets: list[bytes] = []
        self.acks: list[bytes] = []
        self.bad = 0  # packets whose checksum did not match (to be asked again: '-')

    def feed(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        while buf:
            start = buf[0]
            if start in b"+-":
                self.acks.append(bytes((start,)))
                del buf[0]
                continue
            if start == 0x03:  # an interrupt request (a stub's side only)
                del buf[0]
                continue
            if start != ord("$"):
                at = buf.find(b"$")
                del buf[:at if at >= 0 else len(buf)]
                continue
            end = buf.find(b"#")
            if end < 0 or len(buf) < end + 3:
                return  # incomplete
            payload = bytes(buf[1:end])
            try:
                sent = int(buf[end + 1:end + 3], 16)
            except ValueError:
                raise RspError(f"checksum {bytes(buf[end + 1:end + 3])!r} is not hex") from None
            del buf[:end + 3]
            if sent != checksum(payload):
                self.bad += 1
                continue
            self.packets.append(expand_rle(payload))


# GDB's own signal numbers, which stop replies carry and `C`/`S` take (GDB's
# include/gdb/signals.def; the stub translates them from and to the target's): equal to
# Linux's for 1-6, 8, 9, 11, 13-15 only
GDB_SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGEMT", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV", 12: "SIGSYS",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGURG", 17: "SIGSTOP", 18: "SIGTSTP",
    19: "SIGCONT", 20: "SIGCHLD", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGIO", 24: "SIGXCPU",
    25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGLOST",
    30: "SIGUSR1", 31: "SIGUSR2", 32: "SIGPWR", 33: "SIGPOLL",
}


def signal_name(number: int) -> str:
    """The name of GDB's signal number (a real-time signal or an unknown one by number)."""
    return GDB_SIGNALS.get(number, f"GDB signal {number}")


@dataclass
class StopReply:
    """A stop reply: `kind` "signal" (S or T: `signal` is GDB's signal number; `registers`
    the expedited values by register number, as hex text in target byte order; `info`
    the other pairs, e.g. "thread", "swbreak"), "exited" (W: `status` is the exit status)
    or "killed" (X: `signal` ended the process)."""

    kind: str
    signal: int = 0
    status: int = 0
    registers: dict[int, str] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)


def parse_stop(payload: bytes) -> StopReply:
    """A stop reply packet's payload (`S05`, `T05thread:p1.1;06:...;`, `W00`, `X0b`)."""
    text = payload.decode("ascii", "replace")
    if not text:
        raise RspError("an empty stop reply")
    letter, rest = text[0], text[1:]
    try:
        value = int(rest[:2], 16)
    except ValueError:
        raise RspError(f"stop reply {text[:20]!r}: no signal or status") from None
    if letter == "W":
        return StopReply("exited", status=value)
    if letter == "X":
        return StopReply("killed", signal=value)
    if letter == "S":
        return StopReply("signal", signal=value)
    if letter != "T":
        raise RspError(f"stop reply {text[:20]!r}: not S, T, W or X")
    reply = StopReply("signal", signal=value)
    for pair in rest[2:].split(";"):
        if not pair:
            continue
        key, _, val = pair.partition(":")
        try:
            reply.registers[int(key, 16)] = val
        except ValueError:
            reply.info[key] = val
    return reply


def hex_value(text: str, byteorder: str) -> int:
    """A register or word from the hex text of its bytes in target order."""
    return int.from_bytes(bytes.fromhex(text), byteorder)  # type: ignore[arg-type]


def value_hex(value: int, size: int, byteorder: str) -> str:
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, byteorder).hex()  # type: ignore[arg-type]
