"""The gdb-remote target: a program run by a GDB remote stub, driven over TCP with the
Remote Serial Protocol (target/rsp.py) behind the target protocol (target/protocol.py).

The stub here is qemu-user's (``qemu-<isa>-static -g PORT PROGRAM ARGS``: QEMU's own Linux
layer serves the system calls; the program waits at its first instruction for the
debugger), so any ISA QEMU runs can be traced; any stub that speaks the packets below would
do.  What is asked of the stub (the GDB manual, appendix E):

* registers: the layout from ``qXfer:features:read:target.xml`` (each ``<reg>`` in order,
  numbered from 0 unless it says ``regnum``; ``xi:include``d files read the same way),
  or, from a stub that sends none (qemu's MIPS stub), GDB's own numbering for the ISA
  (`Isa.gdb_registers`);
  ``g`` once per stop for the registers it carries, ``p n`` for the rest, ``P n=v`` for
  the writes, sent before the program resumes;
* memory: ``m addr,len`` and ``M addr,len:hex`` (an ``E`` reply is a `MemoryFault`);
* breakpoints: a `hook_hw` on one address is a hardware breakpoint ``Z1`` (``Z0`` where
  the stub has none); the ISA's breakpoint encoding written with `write_code` is placed
  as a software breakpoint ``Z0,addr,kind`` (kind: the encoding's length; the stub keeps the
  program's bytes, so loads see them) and the original bytes written back remove it
  (``z0``); a stub without Z0 gets the bytes written with ``M``;
* running: ``vCont;c`` / ``vCont;s`` (``C``/``S`` with the guest's own signal, which the
  stub reported and would otherwise drop); stop replies ``T``/``S`` (a signal), ``W``
  (exit), ``X`` (killed).

Like the native target it is pulled (target/gdb_run.py waits for each stop and calls the
hooks).  A stop at one of the placed breakpoints stands before its instruction; the run
loop shows it to the backend as the ISA's trap would (the PC `pc_after` past it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from emutrace.errors import Unsupported
from emutrace.isa.base import Endian, Isa, RegValue
from emutrace.target import rsp
from emutrace.target.protocol import BlockHook, Capabilities, CodeHook, MemHook, MemoryFault
from emutrace.target.pulled import Lacking, WordMemory

MEMORY_CHUNK = 0x400  # bytes per m/M packet (well inside qemu's PacketSize, 4000 hex)
CONNECT_SECONDS = 10.0
XFER_CHUNK = 0xFFB


class StubError(Unsupported):
    """The stub refused a request or went away (exit 69, one line)."""


@dataclass(frozen=True)
class RegSlot:
    """One register of the stub's layout: its number and size; `offset` in the ``g``
    packet's data (None: only through ``p``)."""

    number: int
    size: int
    offset: int | None


class StubConnection:
    """One TCP connection to a stub: a request and its reply, acknowledgements until
    no-ack mode is agreed."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = rsp.PacketReader()
        self.acks = True
        self.packets = 0  # requests sent (the per-event cost's measure)

    def send(self, payload: bytes) -> None:
        packet = rsp.frame(payload)
        for _ in range(3):
            self.sock.sendall(packet)
            self.packets += 1
            if not self.acks:
                return
            while not self.reader.acks:
                self._receive()
            if self.reader.acks.pop(0) == b"+":
                return
        raise StubError(f"gdb stub: packet {payload[:20]!r} refused three times")

    def reply(self, timeout: float | None = None) -> bytes:
        self.sock.settimeout(timeout)
        try:
            while not self.reader.packets:
                self._receive()
        finally:
            self.sock.settimeout(None)
        if self.acks:
            self.sock.sendall(b"+")
        return self.reader.packets.pop(0)

    def request(self, payload: bytes) -> bytes:
        self.send(payload)
        return self.reply()

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise StubError("gdb stub: the connection closed")
        bad = self.reader.bad
        self.reader.feed(data)
        if self.reader.bad > bad and self.acks:
            self.sock.sendall(b"-")

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def qemu_user(isa: Isa) -> str | None:
    """The qemu-user binary that runs isa's programs, if installed."""
    return shutil.which(f"qemu-{isa.identity.qemu}-static") or \
        shutil.which(f"qemu-{isa.identity.qemu}")


def start_qemu(isa: Isa, program: str, args: list[str], argv0: str | None,
               env: dict[str, str] | None) -> tuple[subprocess.Popen[bytes], StubConnection]:
    """qemu-user with its gdb stub on a free local port, the program stopped at its first
    instruction; the connection to it."""
    qemu = qemu_user(isa)
    if qemu is None:
        raise Unsupported(f"--target gdb: no qemu-{isa.identity.qemu}-static on PATH "
                          f"(Debian: qemu-user-static)")
    port = free_port()
    argv = [qemu, "-g", str(port)]
    if argv0 is not None:
        argv += ["-0", argv0]
    proc = subprocess.Popen([*argv, program, *args], env=env, close_fds=True)
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise StubError(f"--target gdb: {os.path.basename(qemu)} did not open its "
                                f"gdb stub on port {port}") from None
            time.sleep(0.02)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return proc, StubConnection(sock)


class GdbRemoteTarget(Lacking, WordMemory):
    """One program stopped in a GDB remote stub behind the target protocol."""

    kind = "gdb"
    translates_code = False  # the stub keeps its breakpoints coherent itself
    watches_memory = False
    capabilities = Capabilities(missing={
        "block": "a stub reports stops, not blocks: block entries only while single-stepping "
                 "(want_blocks)",
        "memory_watch": "watchpoints (Z2-Z4) are not used: loads and stores are unseen",
        "invalid_instruction": "an undecodable instruction is the stub's SIGILL to the "
                               "program, delivered as its signal",
        "port_io": "a user program under qemu-user has no I/O ports",
        "context": "the program's threads are the stub's: it saves and switches them",
        "host_memory": "the program's memory is the stub's",
        "devices": "the stub models the machine",
        "run": "the run loop is the target's own (target/gdb_run.py)",
        "c_port": "no C engine drives a stub",
    })

    def __init__(self, isa: Isa, conn: StubConnection) -> None:
        self.isa = isa
        self.conn = conn
        self.word = isa.identity.word_size
        self.byteorder: Endian = isa.identity.endian
        self._mask = (1 << (8 * self.word)) - 1
        self._g: bytes | None = None  # the `g` reply of this stop
        self.features = self._handshake()
        self.layout = self._read_layout()
        self._values: dict[int, int] = {}  # register number → value this stop
        self._read: dict[int, int] = {}  # register number → value the stub gave this stop
        self.p_packet = True  # the stub takes P (learnt from its first answer; else G)
        self._dirty: set[int] = set()
        # the ISA's breakpoint encodings: written with write_code, they become Z0
        self._encodings = {bp.encoding for bp in isa.breakpoints}
        self.z0 = True  # the stub has Z0 (learnt from its first answer)
        self.placed: dict[int, int] = {}  # address → kind of the Z0 placed there
        self.z1 = True  # the stub has Z1 (hardware breakpoints; learnt as for Z0)
        self.hw_placed: dict[int, int] = {}  # address → kind of the Z1 placed there
        self.z1_placed = 0  # Z1 breakpoints placed in the run (hook_hw)
        self.written: dict[int, bytes] = {}  # address → original bytes (a stub without Z0)
        # hooks the run loop calls (target/gdb_run.py)
        self.range_hooks: dict[int, tuple[CodeHook, int, int, Any]] = {}
        self.point_hooks: dict[int, dict[int, tuple[CodeHook, Any]]] = {}
        self.block_hooks: dict[int, BlockHook] = {}
        self._next_handle = 1
        self.blocks_wanted = False
        self.stop_requested = False
        self.last_pc = 0
        reply = self.conn.request(b"vCont?")
        self.vcont = reply.startswith(b"vCont") and b";s" in reply and b";c" in reply

    # ------------------------------------------------------------ set-up
    def _handshake(self) -> set[str]:
        reply = self.conn.request(b"qSupported:swbreak+;hwbreak+")
        features = {f.decode() for f in reply.split(b";")}
        if "QStartNoAckMode+" in features and self.conn.request(b"QStartNoAckMode") == b"OK":
            self.conn.acks = False
        if "qXfer:features:read+" not in features and self.isa.gdb_registers is None:
            raise StubError("gdb stub: no qXfer:features:read (its register layout is "
                            "unknown)")
        return features

    def _xfer(self, annex: str) -> str:
        out = bytearray()
        while True:
            reply = self.conn.request(
                f"qXfer:features:read:{annex}:{len(out):x},{XFER_CHUNK:x}".encode())
            if not reply or reply[:1] not in b"lm":
                raise StubError(f"gdb stub: reading {annex}: {reply[:20]!r}")
            out += rsp.unescape(reply[1:])
            if reply[:1] == b"l":
                return out.decode()

    def _read_layout(self) -> dict[str, RegSlot]:
        """Register name → slot: from the stub's target description, else from GDB's own
        numbering for the ISA (`Isa.gdb_registers`)."""
        if "qXfer:features:read+" in self.features:
            return self._described_layout()
        return self._numbered_layout()

    def _numbered_layout(self) -> dict[str, RegSlot]:
        """GDB's fixed numbering: the first `in_g` registers one word each in ``g``; where
        ``g`` is not exactly that long (MIPS FPRs of 8 bytes on a 32-bit CPU under
        Status.FR=1) only the first `word_sized` are read from it, the rest with ``p``."""
        fixed = self.isa.gdb_registers
        assert fixed is not None
        sizes = [(fixed.sizes[n] if n < len(fixed.sizes) else 0) or self.word
                 for n in range(len(fixed.names))]
        g = self._fetch_g()
        exact = len(g) == sum(sizes[:fixed.in_g])
        layout: dict[str, RegSlot] = {}
        at = 0
        for number, name in enumerate(fixed.names):
            inside = number < (fixed.in_g if exact else fixed.word_sized)
            if name:
                layout[name] = RegSlot(number, sizes[number], at if inside else None)
            at += sizes[number]
        return layout

    def _described_layout(self) -> dict[str, RegSlot]:
        """From target.xml and its includes (GDB manual, "Target Description Format": a
        <reg> without regnum follows the one before)."""
        regs: list[tuple[str, int, int]] = []  # name, number, size in bytes
        number = 0

        def walk(annex: str) -> None:
            nonlocal number
            # (stubs write xi:include without declaring the XInclude namespace)
            root = ET.fromstring(self._xfer(annex).replace("xi:include", "include"))
            for node in root.iter():
                tag = node.tag.rsplit("}", 1)[-1]
                if tag == "include":
                    walk(node.attrib["href"])
                elif tag == "reg":
                    number = int(node.attrib.get("regnum", number))
                    regs.append((node.attrib["name"], number, int(node.attrib["bitsize"]) // 8))
                    number += 1
        walk("target.xml")
        g = self._fetch_g()
        layout: dict[str, RegSlot] = {}
        at = 0
        for name, num, size in sorted(regs, key=lambda r: r[1]):
            inside = at + size <= len(g)
            layout[name] = RegSlot(num, size, at if inside else None)
            at += size
        return layout

    # ------------------------------------------------------------ registers
    def _fetch_g(self) -> bytes:
        if self._g is None:
            reply = self.conn.request(b"g")
            if reply.startswith(b"E"):
                raise StubError(f"gdb stub: g: {reply!r}")
            self._g = bytes.fromhex(reply.decode())
        return self._g

    def _slot(self, name: str) -> RegSlot:
        slot = self.layout.get(name) or self.layout.get(self.isa_aliases.get(name, ""))
        if slot is None:
            raise KeyError(f"gdb target: the stub has no register {name}")
        return slot

    # the ISA's short names that GDB's descriptions spell otherwise, used where the stub's
    # layout lacks the name (AArch64 flags: GDB's cpsr holds NZCV in bits 31-28, as
    # Unicorn's nzcv does; s390x: the PSW's address half is GDB's pswa; Power's FPRs are
    # GDB's f0-f31, power-fpu.xml)
    isa_aliases = {"nzcv": "cpsr", "x29": "fp", "x30": "lr", "pc": "pswa",
                   **{f"fpr{n}": f"f{n}" for n in range(32)}}

    def reg_read(self, name: str) -> int:
        slot = self._slot(name)
        value = self._values.get(slot.number)
        if value is None:
            if slot.offset is not None:
                g = self._fetch_g()
                raw = g[slot.offset:slot.offset + slot.size]
            else:
                reply = self.conn.request(f"p{slot.number:x}".encode())
                if not reply or reply.startswith(b"E"):
                    raise KeyError(f"gdb target: register {name}: {reply!r}")
                raw = bytes.fromhex(reply.decode())
            value = self._values[slot.number] = int.from_bytes(raw, self.byteorder)
            self._read[slot.number] = value
        return value

    def reg_write(self, name: str, value: RegValue) -> None:
        assert isinstance(value, int)
        flag = self.isa.alt_mode_flag
        if name == self.isa.registers.pc and self.isa.thumb_bit and flag is not None:
            # an odd PC selects the alternate instruction set (ARM: interworking, ARM ARM
            # A2.3.2): the stub's PC is the address, the state is its flag's bit
            reg, bit = flag
            state = self.reg_read(reg)
            self.reg_write(reg, state | bit if value & 1 else state & ~bit)
            value &= ~1
        fixed = self.isa.gdb_registers
        if name == self.isa.registers.pc and fixed is not None and fixed.next_pc is not None \
                and name in self.layout and fixed.next_pc[0] in self.layout:
            self.reg_write(fixed.next_pc[0], value + fixed.next_pc[1])
        slot = self._slot(name)
        self._values[slot.number] = value & ((1 << (8 * slot.size)) - 1)
        self._dirty.add(slot.number)

    def raw_reg(self, name: str) -> Any:
        return self.reg_read(name)

    @property
    def pc(self) -> int:
        return self.reg_read(self.isa.registers.pc)

    def in_alt_mode(self) -> bool:
        flag = self.isa.alt_mode_flag  # (ARM: CPSR.T)
        return flag is not None and bool(self.reg_read(flag[0]) & flag[1])

    def reg_id(self, name: str) -> int:
        slot = self.layout.get(name)
        return slot.number if slot is not None else -1

    def flush(self) -> None:
        """Before the program resumes: the registers written with a new value sent (P; all
        of ``g`` with G from a stub without P: qemu answers P only to a debugger that read
        its target description), this stop's forgotten."""
        slots = {s.number: s for s in self.layout.values()}
        changed = [n for n in sorted(self._dirty) if self._values[n] != self._read.get(n)]
        for number in changed if self.p_packet else ():
            size = slots[number].size
            text = rsp.value_hex(self._values[number], size, self.byteorder)
            reply = self.conn.request(f"P{number:x}={text}".encode())
            if not reply:
                self.p_packet = False
                break
            if reply != b"OK":
                raise StubError(f"gdb stub: writing register {number}: {reply[:20]!r}")
        if changed and not self.p_packet:
            self._write_g([slots[n] for n in changed])
        self._dirty.clear()
        self._values.clear()
        self._read.clear()
        self._g = None

    def _write_g(self, written: list[RegSlot]) -> None:
        g = bytearray(self._fetch_g())
        for slot in written:
            if slot.offset is None:
                raise StubError(f"gdb stub: register {slot.number} is outside g and the stub "
                                f"takes no P")
            g[slot.offset:slot.offset + slot.size] = \
                self._values[slot.number].to_bytes(slot.size, self.byteorder)
        reply = self.conn.request(b"G" + g.hex().encode())
        if reply != b"OK":
            raise StubError(f"gdb stub: writing the registers (G): {reply[:20]!r}")

    # ------------------------------------------------------------ memory
    def mem_read(self, addr: int, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            n = min(MEMORY_CHUNK, size - len(out))
            reply = self.conn.request(f"m{addr + len(out):x},{n:x}".encode())
            if not reply or reply.startswith(b"E"):
                raise MemoryFault(f"gdb target: reading {n} bytes at {addr + len(out):#x}")
            got = bytes.fromhex(reply.decode())
            if not got:
                raise MemoryFault(f"gdb target: reading at {addr + len(out):#x}")
            out += got
        return bytes(out[:size])

    def mem_write(self, addr: int, data: bytes) -> None:
        for at in range(0, len(data), MEMORY_CHUNK):
            chunk = data[at:at + MEMORY_CHUNK]
            reply = self.conn.request(f"M{addr + at:x},{len(chunk):x}:{chunk.hex()}".encode())
            if reply != b"OK":
                raise MemoryFault(f"gdb target: writing {len(chunk)} bytes at "
                                  f"{addr + at:#x}: {reply[:20]!r}")

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None:
        raise Unsupported("gdb target: the program maps its own memory")

    def memory_regions(self) -> list[tuple[int, int, int]]:
        raise Unsupported("gdb target: the stub's memory map is not read")

    # ------------------------------------------------------------ code and breakpoints
    def write_code(self, addr: int, data: bytes) -> None:
        """The ISA's breakpoint encoding: a Z0 breakpoint there (memory unchanged); the
        bytes under a placed one: it removed (z0).  Anything else, or a stub without Z0:
        the bytes written (M)."""
        if addr in self.placed:
            kind = self.placed.pop(addr)
            reply = self.conn.request(f"z0,{addr:x},{kind:x}".encode())
            if reply != b"OK":
                raise StubError(f"gdb stub: removing the breakpoint at {addr:#x}: {reply!r}")
            return
        if self.z0 and data in self._encodings:
            reply = self.conn.request(f"Z0,{addr:x},{len(data):x}".encode())
            if reply == b"OK":
                self.placed[addr] = len(data)
                return
            if reply:
                raise StubError(f"gdb stub: a breakpoint at {addr:#x}: {reply!r}")
            self.z0 = False  # an empty reply: not supported
        self.mem_write(addr, data)

    def drop_code_cache(self, begin: int, end: int) -> bool:
        return False  # the stub keeps what it runs coherent with its breakpoints

    def holds(self, addr: int) -> bool:
        """A breakpoint of the target's (Z0 or Z1) is placed at addr."""
        return addr in self.placed or addr in self.hw_placed

    def lift(self, addr: int) -> None:
        """The placed breakpoint at addr removed for one step over its instruction."""
        if addr in self.hw_placed:
            self.conn.request(f"z1,{addr:x},{self.hw_placed[addr]:x}".encode())
        else:
            self.conn.request(f"z0,{addr:x},{self.placed[addr]:x}".encode())

    def settle(self, addr: int) -> None:
        if addr in self.hw_placed:
            self.conn.request(f"Z1,{addr:x},{self.hw_placed[addr]:x}".encode())
        else:
            self.conn.request(f"Z0,{addr:x},{self.placed[addr]:x}".encode())

    # ------------------------------------------------------------ running
    def resume(self, step: bool, signal: int = 0, timeout: float | None = None
               ) -> rsp.StopReply:
        """Registers written back, the program resumed (one instruction when step), its
        next stop reply (socket.timeout when none came in time)."""
        self.flush()
        action = ("S" if step else "C") + f"{signal:02x}" if signal else ("s" if step else "c")
        self.conn.send(f"vCont;{action}".encode() if self.vcont else action.encode())
        return rsp.parse_stop(self.conn.reply(timeout))

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------ hooks
    def _handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def hook_code(self, fn: CodeHook, begin: int = 1, end: int = 0, data: Any = None) -> int:
        """A hook on one address: the run loop stops there (a Z0 of the target's own) and
        calls it before the instruction; on a range or everywhere: single-stepping."""
        handle = self._handle()
        if begin == end:
            self.point_hooks.setdefault(begin, {})[handle] = (fn, data)
            if begin not in self.placed and begin not in self.hw_placed:
                kind = self._point_kind()
                if self.conn.request(f"Z0,{begin:x},{kind:x}".encode()) != b"OK":
                    raise StubError(f"gdb stub: no breakpoint at {begin:#x} for a code hook")
                self.placed[begin] = kind
        else:
            self.range_hooks[handle] = (fn, begin, end, data)
        return handle

    def hook_hw(self, fn: CodeHook, begin: int, end: int, data: Any = None) -> int:
        """One address: the stub's hardware breakpoint (Z1; qemu-user keeps it as it keeps
        Z0), a Z0 where the stub has no Z1; a span: single-stepping across it."""
        if begin != end or not self.z1:
            return self.hook_code(fn, begin, end, data)
        handle = self._handle()
        self.point_hooks.setdefault(begin, {})[handle] = (fn, data)
        if begin not in self.placed and begin not in self.hw_placed:
            kind = self._point_kind()
            reply = self.conn.request(f"Z1,{begin:x},{kind:x}".encode())
            if reply == b"OK":
                self.hw_placed[begin] = kind
                self.z1_placed += 1
            elif reply:
                raise StubError(f"gdb stub: a hardware breakpoint at {begin:#x}: {reply!r}")
            else:  # an empty reply: no Z1 here; a software breakpoint instead
                self.z1 = False
                kind_sw = self.conn.request(f"Z0,{begin:x},{kind:x}".encode())
                if kind_sw != b"OK":
                    raise StubError(f"gdb stub: no breakpoint at {begin:#x} for a code hook")
                self.placed[begin] = kind
        return handle

    def _point_kind(self) -> int:
        """A hook breakpoint's kind: the length of the ISA's breakpoint instruction."""
        bp = self.isa.breakpoint_for(alt_mode=False)
        return len(bp.encoding) if bp is not None else self.word

    def hook_block(self, fn: BlockHook, begin: int = 1, end: int = 0) -> int:
        if begin <= end:
            raise Unsupported("gdb target: a block hook covers every block")
        handle = self._handle()
        self.block_hooks[handle] = fn
        return handle

    def hook_mem_read(self, fn: MemHook, begin: int, end: int) -> int:
        raise self._lacks("memory_watch")

    def hook_mem_write(self, fn: MemHook, begin: int, end: int) -> int:
        raise self._lacks("memory_watch")

    def hook_code_stores(self, fn: MemHook, begin: int, end: int) -> None:
        raise self._lacks("memory_watch")

    def hook_del(self, handle: int) -> None:
        self.block_hooks.pop(handle, None)
        self.range_hooks.pop(handle, None)
        for addr, at in list(self.point_hooks.items()):
            if at.pop(handle, None) is not None and not at:
                del self.point_hooks[addr]
                if addr in self.hw_placed:
                    kind = self.hw_placed.pop(addr)
                    self.conn.request(f"z1,{addr:x},{kind:x}".encode())
                else:
                    self.write_code(addr, b"")  # its Z0 removed

    def want_blocks(self) -> None:
        self.blocks_wanted = True

    # ------------------------------------------------------------ what it has not
    # (the services only an emulator gives: pulled.Lacking refuses them)
    lacking_label = "gdb target"

    @property
    def page_size(self) -> int:
        return 0x1000

    def stop(self) -> None:
        self.stop_requested = True
