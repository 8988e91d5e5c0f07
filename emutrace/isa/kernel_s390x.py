"""s390x kernel images: PSW-swap interruptions through the lowcore, the SCLP console.

z/Architecture Principles of Operation (SA22-7832-12) ch. 6: an interruption stores the
current PSW as the class's old PSW and loads its new PSW (fig. 3-2, "Assigned storage
locations", prefix 0: SVC old/new PSW at 0x140/0x1C0, program old/new at 0x150/0x1D0),
with the interruption code and the instruction-length code stored beside it (SVC: ILC
halfword at 0x88, code at 0x8A; program: 0x8C, 0x8E; the halfword holds the length in
bytes, ILC × 2).  SVC stores the address of the next instruction; an operation exception
suppresses, so its old PSW also points past the instruction (6-26, fig. 6-25).

Unicorn 2.1.4 (measured): `svc` → INTR 2 (EXCP_SVC) and a program check → INTR 3
(EXCP_PGM), the PC on the instruction in both; the program interruption code is not exposed,
so only the one instruction whose exception is certain is delivered: opcode 0x00, never
assigned (an operation exception, code 1).  `lpswe` works natively, but a wait PSW does not
stop the CPU: it runs on at the PSW's address (a program check at an odd one).  SERVC is a
no-op: the SCLP console is emulated before it runs (`SCLP`), as QEMU's `hw/s390x/sclp.c`
answers it.
"""

from collections.abc import Iterator

from emutrace.isa.kernel import FirmwareCall, KernelSupport, SysRegPort, TrapOutcome

EXCP_SVC, EXCP_PGM = 2, 3  # QEMU target/s390x/cpu.h
SVC_OLD, SVC_NEW, SVC_ILC = 0x140, 0x1C0, 0x88
PGM_OLD, PGM_NEW, PGM_ILC = 0x150, 0x1D0, 0x8C
PGM_OPERATION = 0x0001
PSW_WAIT = 1 << 49  # PSW bit 14
PSW_IO, PSW_EXT, PSW_MCHECK = 1 << 57, 1 << 56, 1 << 50  # bits 6, 7, 13
# QEMU target/s390x/helper.c is_special_wait_psw: a disabled wait at an address ending in
# 0xfff is the "quiesce" signal, a clean shutdown
QUIESCE = 0xFFF


def insn_length(first_byte: int) -> int:
    """Instruction length from the opcode's two high bits (PoP 5-6: 00 → 2, 01/10 → 4,
    11 → 6 bytes)."""
    return (2, 4, 4, 6)[first_byte >> 6]


def interrupt(cpu: SysRegPort, old: int, new: int, ilc_at: int, code: int,
              next_pc: int) -> int:
    """Store the old PSW (mask, next_pc), the ILC and code halfwords, load the new PSW."""
    length = next_pc - cpu.pc
    cpu.mem_write(old, cpu.reg_read("pswm").to_bytes(8, "big") + next_pc.to_bytes(8, "big"))
    cpu.mem_write(ilc_at, length.to_bytes(2, "big") + code.to_bytes(2, "big"))
    psw = cpu.mem_read(new, 16)
    vector = int.from_bytes(psw[8:], "big")
    cpu.reg_write("pswm", int.from_bytes(psw[:8], "big"))
    cpu.reg_write("pc", vector)
    return vector


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    pc, mask = cpu.pc, cpu.reg_read("pswm")
    if mask & PSW_WAIT:  # the CPU ran on after a wait PSW: it should have stopped there
        if not mask & (PSW_IO | PSW_EXT | PSW_MCHECK) and pc & 0xFFF == QUIESCE:
            return TrapOutcome("off", "disabled wait (quiesce)")
        return None  # an enabled wait (no interrupts modelled) or a crash's disabled wait
    first = cpu.mem_read(pc, 2)
    if intno == EXCP_SVC:
        return TrapOutcome("vector", "svc",
                           interrupt(cpu, SVC_OLD, SVC_NEW, SVC_ILC, first[1], pc + 2))
    if intno == EXCP_PGM and first[0] == 0x00:
        return TrapOutcome("vector", "operation exception",
                           interrupt(cpu, PGM_OLD, PGM_NEW, PGM_ILC, PGM_OPERATION, pc + 2))
    return None


# ------------------------------------------------------------------ SCLP console
SERVC = b"\xb2\x20"  # SERVICE CALL, RRE: B220 ---- R1 R2
SCLP_WRITE_EVENT_DATA = 0x00760005  # QEMU include/hw/s390x/sclp.h
EVENT_ASCII_CONSOLE = 0x1A
RC_NORMAL_COMPLETION, RC_INVALID_COMMAND = 0x0020, 0x01F0
SCCB_HEADER, EVENT_HEADER = 8, 6  # length, function code, control mask, response code;
#                                   length, type, flags, reserved


def find_servc(code: bytes) -> Iterator[int]:
    """Offsets of SERVC in a code segment, by a linear sweep of instruction lengths (code
    with data in it can desynchronise the sweep; compilers put no data in .text here)."""
    at = 0
    while at + 2 <= len(code):
        if code[at:at + 2] == SERVC:
            yield at
        at += insn_length(code[at])


def servc(cpu: SysRegPort, addr: int) -> TrapOutcome:
    """SERVC R1, R2 (R1: the SCLP command, R2: the SCCB's address), done before Unicorn runs
    it as a no-op (condition code 0, as QEMU's: initiated).  Write Event Data with ASCII
    console event buffers prints their text (QEMU hw/char/sclpconsole.c); the response
    code says normal completion.  Other commands answer "invalid command"."""
    regs = cpu.mem_read(addr + 3, 1)[0]
    command = cpu.reg_read(f"r{regs >> 4}") & 0xFFFFFFFF
    sccb = cpu.reg_read(f"r{regs & 0xF}") & 0x7FFFFFF8
    length = int.from_bytes(cpu.mem_read(sccb, 2), "big")
    if command != SCLP_WRITE_EVENT_DATA or length < SCCB_HEADER:
        cpu.mem_write(sccb + 6, RC_INVALID_COMMAND.to_bytes(2, "big"))
        return TrapOutcome("emulated", f"SCLP command {command:#x}")
    text = bytearray()
    body = cpu.mem_read(sccb + SCCB_HEADER, length - SCCB_HEADER)
    at = 0
    while at + EVENT_HEADER <= len(body):
        size = int.from_bytes(body[at:at + 2], "big")
        if size < EVENT_HEADER:
            break
        if body[at + 2] == EVENT_ASCII_CONSOLE:
            text += body[at + EVENT_HEADER:at + size]
        at += size
    cpu.mem_write(sccb + 6, RC_NORMAL_COMPLETION.to_bytes(2, "big"))
    return TrapOutcome("emulated", "SCLP write event data", console=bytes(text))


KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,  # the ISA's reset already sets PSW EA|BA (64-bit addressing), as QEMU's IPL
    idle=(),
    firmware_call=FirmwareCall(find_servc, servc),
    # LPSWE D2(B2) = B2B2 BDDD (z/Architecture Principles of Operation, "LOAD PSW EXTENDED"):
    # the opcode, whatever the operand; instructions are halfword-aligned
    returns=(bytes.fromhex("b2b2"),),
    returns_align=2,
    modelled="svc (old PSW at 0x140, SVC code and ILC at 0x88) and operation exceptions of "
             "opcode 0x00 (program old PSW at 0x150, code 1) swap PSWs through the lowcore "
             "(prefix 0); SERVC Write Event Data prints ASCII console event buffers (QEMU's "
             "SCLP console); a disabled wait PSW at ...fff powers off. Not modelled: other "
             "program checks (Unicorn hides the code), external, I/O and machine-check "
             "interruptions, enabled waits, prefixing, other SCLP commands.",
)
