"""Kernel images on boards: the mini-kernels of testbins/kernel print under
`emutrace run --machine` what they print under qemu-system-<arch> (the oracle), every
backend's trace equals the `-finstrument-functions` build's own record (taken under
qemu-system), exception entry and return are neither calls nor returns, and the board's
console, --until, --input and idle behave as documented.  A board traces on the engine
`--engine` names (default auto: the native hot path where it is built); the native engine
against the reference: tests/test_kernel_native.py."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from emutrace.board_session import BoardConfig, BoardMachine
from emutrace.cli.main import main
from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.isa import all_isas, by_name
from emutrace.isa.base import Cap, Isa
from emutrace.isa.kernel import kernel_support
from emutrace.machine.board.presets import BOARDS
from emutrace.session import RunResult
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import ENV, TESTBINS, run_emutrace

KERNELS = TESTBINS / "kernel"
BOARD_OF = {"aarch64": "virt-arm64", "arm": "virt-arm", "riscv64": "virt-riscv64",
            "i386": "pc-i386", "s390x": "s390-ccw-virtio",
            "x86_64": "pc-x86_64", "ppc": "bamboo", "ppc64le": "pseries",
            "mips": "malta", "mipsel": "maltael"}
# boards whose QEMU runs the image as raw firmware: the build's `<name>.bin` as -bios
# (pseries: in place of SLOF, which would load an ELF 4 MiB above its link address)
QEMU_BIOS = {"ppc64le"}
BANNER = "emutrace mini-kernel\n"
RECORD_MARK = "== record ==\n"
# what the trap layer emulates rather than delivers to a vector: firmware calls (PSCI, the
# s390x SCLP console), MIPS's CP0 accesses and eret, and power-off
EMULATED = ("PSCI", "SCLP", "disabled wait", "DBCR0", "H_", "CP0")


def kernel(isa: str, name: str = "kernel") -> Path:
    return KERNELS / isa / name


@cache
def qemu_system(isa: str, name: str) -> tuple[str, int]:
    """(console output, exit status) of testbins/kernel/<isa>/<name> under
    qemu-system-<arch>; the console from the kernel's banner on (on a PC, SeaBIOS prints
    first)."""
    board = BOARDS[BOARD_OF[isa]]
    if shutil.which(board.qemu[0]) is None:  # not a skip: scripts/setup.sh installs it
        pytest.fail(f"{board.qemu[0]} not found: install qemu-system-arm/-misc/-x86/-mips "
                    f"(scripts/setup.sh does)")
    image = ["-bios", f"{kernel(isa, name)}.bin"] if isa in QEMU_BIOS \
        else ["-kernel", str(kernel(isa, name))]
    done = subprocess.run([*board.qemu, "-nographic", "-monitor", "none", "-serial", "stdio",
                           "-net", "none", *image],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=ENV)
    console = done.stdout.decode(errors="replace")
    assert BANNER in console, done.stderr
    return console[console.index(BANNER):], done.returncode


def run_board(board: str, image: Path, **options: object) -> tuple[RunResult, str]:
    out = io.BytesIO()
    options.setdefault("timeout", 60)
    config = BoardConfig(board, str(image), console_out=out, **options)  # type: ignore[arg-type]
    result = BoardMachine(config).run()
    return result, out.getvalue().decode()


def namer(path: Path):  # type: ignore[no-untyped-def]
    syms = read_symbols(load_image(str(path)))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


@pytest.mark.parametrize("isa", BOARD_OF)
def test_console_equals_qemu_system(isa: str) -> None:
    result, console = run_board(BOARD_OF[isa], kernel(isa))
    want, status = qemu_system(isa, "kernel")
    assert console == want
    assert "trap returned = 0x29\n" in console  # the round trip through the own vector
    assert result.stop.kind == "exit" and result.exit_code == status
    assert "probe returned = 0xf\n" in console  # an undefined instruction skipped
    vectors = {k: v for k, v in result.syscall_counts.items() if not k.startswith(EMULATED)}
    assert sum(vectors.values()) == 2, vectors  # the trap and the probe


@pytest.mark.parametrize("backend", ("int3", "step", "hwbp", "bts", "btf", "entry"))
@pytest.mark.parametrize("isa", BOARD_OF)
def test_trace_equals_kernel_record(isa: str, backend: str) -> None:
    """Every backend's trace of the plain kernel equals the instrumented kernel's own
    record; trap_handler (called from the vector) nests under arch_trap's caller, and
    `eret`/`mret` close no frame."""
    record = qemu_system(isa, "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel(isa, "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, own)
    result, _ = run_board(BOARD_OF[isa], kernel(isa), backend=backend)
    got = canonical_text(result.records, namer(kernel(isa)), own)
    assert "> do_trap\n    > trap_handler\n" in want  # the oracle saw the handler nest
    assert got == want


VECTOR = {"aarch64": "vec_sync_el1h", "riscv64": "vec_trap", "ppc": "vec_sc",
          "ppc64le": "vec_sc", "mips": "vec_general", "mipsel": "vec_general"}


@pytest.mark.parametrize("isa", BOARD_OF)
def test_strict_trace_with_exception_frames(isa: str) -> None:
    """`int3 --cleanup strict` (the interrupted function disarmed while the handler runs,
    re-armed at the exception return) gives the kernel's own record, and the whole trace
    (every function, the vector's exception frame included) equals `step`'s: the frame
    opens at the vector under the trapping function and closes at `eret`/`mret`/`iret`."""
    record = qemu_system(isa, "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel(isa, "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    strict, _ = run_board(BOARD_OF[isa], kernel(isa), backend="int3", cleanup="strict")
    step, _ = run_board(BOARD_OF[isa], kernel(isa), backend="step")
    name = namer(kernel(isa))
    assert canonical_text(strict.records, name, own) == canonical_from_instr(record,
                                                                             instr_name, own)
    everything = canonical_text(strict.records, name)
    assert everything == canonical_text(step.records, name)
    if isa in VECTOR:  # (the arm and i386 vectors are unnamed: an address)
        assert f"  > arch_trap\n      > {VECTOR[isa]}\n        > trap_handler\n" in everything
        assert f"      < {VECTOR[isa]}\n    < arch_trap\n" in everything
    assert "<~" not in everything  # nothing unwound: every exception frame returned


def _kernel_cells() -> list:  # type: ignore[type-arg]
    cells = []
    for desc in all_isas():
        cap = desc.capability(Cap.KERNEL)
        marks = [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]
        cells.append(pytest.param(desc, id=desc.name, marks=marks))
    return cells


@pytest.mark.parametrize("desc", _kernel_cells())
def test_kernel_capability(desc: Isa) -> None:
    """The `kernel` column says whether the ISA has a trap-entry layer and a board (a
    strict xfail: it fails as XPASS once support exists and the table still says no)."""
    assert kernel_support(desc) is not None
    assert any(b.isa == desc.name for b in BOARDS.values())


def _raw(tmp_path: Path, asm: str) -> Path:
    """A raw aarch64 binary (not ELF): the board loads it where QEMU's -bios would."""
    from keystone import KS_ARCH_ARM64, KS_MODE_LITTLE_ENDIAN, Ks

    code, _ = Ks(KS_ARCH_ARM64, KS_MODE_LITTLE_ENDIAN).asm(asm, 0)
    path = tmp_path / "fw.bin"
    path.write_bytes(bytes(code))
    return path


# PL011 at 0x0900_0000: DR at +0, FR at +0x18 (RXFE = bit 4)
ECHO = """
    movz x0, #0x0900, lsl #16
loop:
    ldr w2, [x0, #0x18]
    tbnz w2, #4, idle
    ldr w1, [x0]
    add w1, w1, #1
    str w1, [x0]
    b loop
idle:
    wfi
    b loop
"""


def test_raw_firmware_input_and_idle(tmp_path: Path) -> None:
    """A raw binary runs from the flash at 0; typed input is read through the PL011; a
    `wfi` with nothing left to type ends the run cleanly (exit 0)."""
    result, console = run_board("virt-arm64", _raw(tmp_path, ECHO), typed=b"HAL")
    assert console == "IBM"
    assert result.stop.kind == "exit" and result.exit_code == 0
    assert result.stop.detail.startswith("idle")


# f jumps to g before anything is known to call g (descent takes g for f's own code); then
# g is called through a register (now a known entry); then f runs again: its jump is a tail
# call (backends/tails.py), which int3 must see as step does
STALE = """
    bl f
    adr x9, g
    blr x9
    bl f
    movz x0, #0x8400, lsl #16
    movk x0, #8
    hvc #0
f:
    mov x1, #1
    b g
g:
    ret
"""


@pytest.mark.parametrize("backend", ("int3", "hwbp"))
def test_stale_descent_tail_jump(backend: str, tmp_path: Path) -> None:
    """A stripped image: a function descended before its jump target became a known entry
    is descended again, and its jump reported as a tail call exactly when `step` reports
    it (the cause of int3 and step disagreeing over Debian's U-Boot)."""
    fw = _raw(tmp_path, STALE)
    step, _ = run_board("virt-arm64", fw, backend="step")
    got, _ = run_board("virt-arm64", fw, backend=backend)
    want = canonical_text(step.records, hex)
    assert want == "> 0x1c\n< 0x1c\n> 0x24\n< 0x24\n> 0x1c\n  > 0x24\n  < 0x24\n< 0x1c\n"
    assert canonical_text(got.records, hex) == want
    assert got.stop.detail.startswith("PSCI SYSTEM_OFF")


# copies itself (flash at 0) to RAM at 0x4010_0000 and returns into the copy, as U-Boot's
# relocate_code does; the copy calls work → leaf twice and powers off
RELOCATE = """
    movz x4, #0x4020, lsl #16
    mov sp, x4
    movz x0, #0x4010, lsl #16
    mov x1, #0
    adr x2, end
copy:
    ldr x3, [x1], #8
    str x3, [x0], #8
    cmp x1, x2
    b.lo copy
    adr x30, relocated
    movz x9, #0x4010, lsl #16
    add x30, x30, x9
    ret
relocated:
    bl work
    bl work
    movz x0, #0x8400, lsl #16
    movk x0, #8
    hvc #0
work:
    stp x29, x30, [sp, #-16]!
    bl leaf
    ldp x29, x30, [sp], #16
    ret
leaf:
    ret
    .balign 8
end:
"""


def test_relocated_image_keeps_names(tmp_path: Path) -> None:
    """An image that copies itself up and runs there: without --reloc the copy is not
    traced and the run says which --reloc to give; with it the copy is traced under the
    names of an nm listing of the original (addresses counted in the source), and int3
    agrees with step."""
    def offset(label: str) -> int:  # A64: 4 bytes an instruction
        lines = [w.strip() for w in RELOCATE.split(label + ":")[0].splitlines()]
        return 4 * sum(1 for w in lines if w and not w.endswith(":"))

    fw = _raw(tmp_path, RELOCATE)
    listing = tmp_path / "nm.txt"
    listing.write_text("".join(f"{offset(label):016x} T {label}\n"
                               for label in ("work", "leaf")))
    # (a process of its own: discovery keeps an image's symbol table per file and process)
    done = run_emutrace("run", "--machine", "virt-arm64", "--backend", "int3", "--symbols",
                        listing, fw)
    err = done.stderr.decode()
    # the trace's header line, then the one line that says what to give (code at 0 runs on
    # the native engine like any other: tests/test_kernel_native.py)
    assert done.returncode == 0 and len(err.splitlines()) == 2, err  # nothing traced
    assert err.rstrip().endswith("trace it with --reloc 0x40100000"), err
    traces = []
    for backend in ("int3", "step"):
        result, _ = run_board("virt-arm64", fw, backend=backend, symbols=str(listing),
                              reloc=0x40100000)
        image = result.image
        traces.append(canonical_text(result.records, lambda a, image=image: next(
            (s.name for s in reversed(image.symbols) if s.addr <= a), hex(a))))
    assert traces[0] == traces[1] == "> work\n  > leaf\n  < leaf\n< work\n" * 2


def test_until_after_input(tmp_path: Path) -> None:
    """--until ends the run (exit 0) once the text is printed after the last typed
    character was read: a firmware that never idles ends there, not by its budget."""
    busy = _raw(tmp_path, ECHO.replace("tbnz w2, #4, idle", "tbnz w2, #4, loop"))
    result, console = run_board("virt-arm64", busy, typed=b"HAL", until=b"M",
                                max_insns=1_000_000)
    assert console == "IBM"
    assert (result.stop.kind, result.stop.detail) == ("exit", "--until text printed")


def test_cli_input_escapes_and_input_after(tmp_path: Path) -> None:
    """--input escapes are decoded; --input-after holds the input back until its text
    was printed (never, here: the firmware idles with nothing read)."""
    fw = _raw(tmp_path, ECHO)
    done = run_emutrace("run", "--machine", "virt-arm64", "--input", "@\\x40\\n", fw)
    assert (done.returncode, done.stdout) == (0, b"AA\x0b")
    done = run_emutrace("run", "--machine", "virt-arm64", "--input", "xyz",
                        "--input-after", "never", fw)
    assert (done.returncode, done.stdout) == (0, b"")


def _main(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """`emutrace ARGV` in-process: (status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _main(capsys, "run", "--machine", "nosuch", kernel("aarch64"))
    assert status == 64 and "known: virt-arm64" in err
    status, _, err = _main(capsys, "run", "--machine", "virt-riscv64", kernel("aarch64"))
    assert status == 64 and err.count("\n") == 1
    status, _, err = _main(capsys, "run", "--machine", "virt-arm64", tmp_path / "missing")
    assert status == 66 and err.count("\n") == 1
    status, _, _ = _main(capsys, "run", "--machine", "virt-arm64", kernel("aarch64"), "arg")
    assert status == 64
    status, _, err = _main(capsys, "run", "--machine", "virt-arm", "--bios", kernel("arm"),
                           kernel("arm"))
    assert status == 64 and "no kernel address" in err
    garbage = tmp_path / "System.map"
    garbage.write_text("ffff0000 T ok\nthis is no symbol line\n")
    status, _, err = _main(capsys, "run", "--machine", "virt-arm64", "--symbols", garbage,
                           kernel("aarch64"))
    assert status == 64 and "System.map:2: not an nm" in err and err.count("\n") == 1
    status, out, _ = _main(capsys, "info", "--machines")
    assert status == 0
    assert all(name in out for name in BOARD_OF.values())


# ---------------------------------------------------------------- Debian's U-Boot
FIRMWARE = Path(__file__).resolve().parent.parent / ".cache" / "firmware"
UBOOT = FIRMWARE / "u-boot-qemu" / "usr" / "lib" / "u-boot"
PROMPT = b"=> "


def _uboot(config: str) -> Path:
    path = UBOOT / config / "u-boot.bin"
    if not path.exists():  # not a skip: scripts/setup.sh fetches it
        pytest.fail(f"{path} missing: run scripts/setup.sh (apt-get download u-boot-qemu)")
    return path


def qemu_dtb(board: str, tmp_path: Path) -> Path:
    """The device tree QEMU gives the board (`-M virt,dumpdtb=`)."""
    qemu = BOARDS[board].qemu
    machine = qemu.index("-M") + 1
    argv = [*qemu[:machine], f"{qemu[machine]},dumpdtb={tmp_path / 'virt.dtb'}",
            *qemu[machine + 1:], "-nographic", "-net", "none"]
    subprocess.run(argv, capture_output=True, timeout=60, check=True, env=ENV)
    return tmp_path / "virt.dtb"


def qemu_dialogue(argv: list[str], typed: bytes, timeout: float = 60) -> bytes:
    """qemu-system's console up to the prompt, `typed` typed at it, and the console up to
    the next prompt (an `expect` of one exchange)."""
    import select
    import time

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=ENV)
    assert proc.stdin is not None and proc.stdout is not None
    out, sent, deadline = bytearray(), 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    break
                out += chunk
            if not sent and out.endswith(PROMPT):
                proc.stdin.write(typed)
                proc.stdin.flush()
                sent = len(out)
            elif sent and out.endswith(PROMPT) and len(out) > sent + len(typed):
                return bytes(out)
    finally:
        proc.kill()
        proc.wait()
    raise AssertionError(f"no second prompt from {argv[0]}: {bytes(out[-200:])!r}")


def _without_flash(console: bytes) -> bytes:
    """Drop U-Boot's `Flash:` report: QEMU's CFI flash (pflash_cfi01) is not modelled, the
    board's flash is plain memory, so U-Boot finds no flash there (README, kernel images)."""
    head, sep, tail = console.partition(b"Flash: ")
    if not sep:
        return console
    return head + sep + tail[tail.index(b"Loading Environment"):]


def _with_bios(qemu: tuple[str, ...], bios: Path) -> list[str]:
    """The board's QEMU command with `-bios bios` (replacing its `-bios none`)."""
    argv = list(qemu)
    if "-bios" in argv:
        argv[argv.index("-bios") + 1] = str(bios)
    else:
        argv += ["-bios", str(bios)]
    return argv


# Unicorn 2.1.4's RISC-V CPU is QEMU 5.0's (privileged spec 1.10, no H, no Sstc, no
# hardware performance counters), so OpenSBI's report of the hart differs in these lines
HART_LINES = (b"Boot HART Priv Version", b"Boot HART Base ISA", b"Boot HART ISA Extensions",
              b"Boot HART MHPM Count", b"Boot HART MIDELEG", b"Boot HART MEDELEG")


def _without_hart(console: bytes) -> bytes:
    return b"".join(line for line in console.splitlines(keepends=True)
                    if not line.startswith(HART_LINES))


OPENSBI_FW_JUMP = FIRMWARE / "opensbi" / "usr" / "lib" / "riscv64-linux-gnu" / "opensbi" / \
    "generic" / "fw_jump.elf"


@pytest.mark.parametrize(("board", "config", "sbi"), [("virt-arm64", "qemu_arm64", False),
                                                      ("virt-arm", "qemu_arm", False),
                                                      ("virt-riscv64", "qemu-riscv64", False),
                                                      ("virt-riscv64", "qemu-riscv64_smode",
                                                       True)])
def test_uboot_version_answer(board: str, config: str, sbi: bool, tmp_path: Path) -> None:
    """Debian's U-Boot boots from where QEMU's -bios puts it (or, in S-mode, as the payload
    of Debian's OpenSBI fw_jump: `--bios`, QEMU's -kernel address), with QEMU's device tree,
    to the `=>` prompt and answers a typed `version` as under qemu-system: the whole
    console, but for the flash size line (and OpenSBI's description of the hart)."""
    fw, dtb = _uboot(config), qemu_dtb(board, tmp_path)
    if sbi:
        if not OPENSBI_FW_JUMP.exists():
            pytest.fail(f"{OPENSBI_FW_JUMP} missing: run scripts/setup.sh")
        argv = [*_with_bios(BOARDS[board].qemu, OPENSBI_FW_JUMP), "-kernel", str(fw)]
    else:
        argv = _with_bios(BOARDS[board].qemu, fw)
    with ThreadPoolExecutor(1) as pool:  # the oracle runs while emutrace does
        oracle = pool.submit(qemu_dialogue, [*argv, "-nographic", "-monitor", "none",
                                             "-serial", "stdio", "-net", "none"], b"version\r")
        result, console = run_board(board, fw, dtb=str(dtb), typed=b"version\r",
                                    input_after=PROMPT, until=PROMPT,
                                    bios=str(OPENSBI_FW_JUMP) if sbi else None)
        want = oracle.result()
    assert result.stop.detail == "--until text printed"
    got = console.encode()
    assert b"=> version\r\nU-Boot 2023.01" in got
    assert b" MiB\r\n" in want.partition(b"Flash: ")[2][:20]  # QEMU's CFI flash answered
    if sbi:
        assert b"OpenSBI v1.1" in got and result.syscall_counts["illegal instruction"] > 0
        got, want = _without_hart(got), _without_hart(want)
    assert _without_flash(got) == _without_flash(want)


def test_bios_traced_int3_equals_step(tmp_path: Path) -> None:
    """`--bios` traced: Debian's OpenSBI fw_jump with U-Boot S-mode as its payload, one image
    for discovery (both stripped: descent), int3 == step over OpenSBI's start, its CSR
    probes (illegal instructions) included as exception frames.  (The whole boot to the
    prompt agrees too, README; it takes a minute under step.)  At the budget's end a frame
    may close by its return under int3 (it counts a block when it enters it) and at the
    stop under step: the marks of closing are not compared."""
    if not OPENSBI_FW_JUMP.exists():
        pytest.fail(f"{OPENSBI_FW_JUMP} missing: run scripts/setup.sh")
    fw, dtb = _uboot("qemu-riscv64_smode"), qemu_dtb("virt-riscv64", tmp_path)
    texts = []
    for backend in ("int3", "step"):
        result, _ = run_board("virt-riscv64", fw, dtb=str(dtb), backend=backend,
                                    bios=str(OPENSBI_FW_JUMP), max_insns=3_000_000,
                                    timeout=600)  # (bounded by max_insns; a loaded CI)
        assert result.syscall_counts["illegal instruction"] >= 3
        texts.append(canonical_text(result.records, hex).replace("<! ", "< "))
    assert texts[0] == texts[1]
    assert texts[0].count("\n") > 40_000


def test_bench_machine_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --machine`: a row per image on the board (its ISA), int3 and strict int3
    agreeing with step over the mini-kernel's exception round trip; board options without
    --machine, and --arch with it, are usage errors."""
    import json

    status, _, err = _main(capsys, "bench", "--machine", "virt-riscv64", "--backend",
                           "int3,int3:strict,step", "--out", tmp_path, kernel("riscv64"))
    assert status == 0, err
    rows = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert {(r["isa"], r["backend"], r["agreement"]) for r in rows} == {
        ("riscv64", "none", "baseline"), ("riscv64", "int3", "ok"),
        ("riscv64", "int3:strict", "ok"), ("riscv64", "step", "ok")}
    status, _, err = _main(capsys, "bench", "--until", "x", kernel("riscv64"))
    assert status == 64 and err.count("\n") == 1
    status, _, err = _main(capsys, "bench", "--machine", "virt-riscv64", "--arch", "arm",
                           kernel("riscv64"))
    assert status == 64 and err.count("\n") == 1


@pytest.mark.parametrize("symbols", ("System.map", "kernel"))
def test_stripped_kernel_with_symbols(symbols: str) -> None:
    """A stripped kernel traced with --symbols (its `nm -n` listing, or the unstripped ELF)
    gives the trace of the unstripped kernel: names and all."""
    isa = "riscv64"
    record = qemu_system(isa, "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel(isa, "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    result, _ = run_board(BOARD_OF[isa], kernel(isa, "kernel.stripped"), backend="int3",
                          symbols=str(kernel(isa, symbols)))
    got = canonical_text(result.records, namer(kernel(isa)), own)
    assert got == canonical_from_instr(record, instr_name, own)
    done = run_emutrace("run", "--machine", BOARD_OF[isa], "--backend", "int3", "--symbols",
                        kernel(isa, symbols), "-F", "trap_handler",
                        kernel(isa, "kernel.stripped"))
    # no DWARF in a stripped file: the default four argument words
    assert done.stderr.decode().splitlines()[1].strip().startswith("| trap_handler(11, 20, ")


# ---------------------------------------------------------------- a Linux kernel
LINUX = FIRMWARE / "linux-arm64" / "vmlinuz"
VFS_PANIC = b"VFS: Unable to mount root fs"
CMDLINE = "console=ttyAMA0 earlycon=pl011,0x9000000"
# kernel messages about what the board does not model (README, kernel images): the
# PL061, PL031, PCIe host and GICv2m devices are constant regions; CMA and the free memory
# follow where QEMU put the DTB; Unicorn's A57 has 5 PMU counters (QEMU's: 7); audit's
# first message comes with the first timer tick, which never comes
UNMODELLED = (b"pl061_gpio", b"rtc-pl031", b"pci ", b"GICv2m", b"cma:", b"Memory:",
              b"hw perfevents", b"audit:")


def qemu_until(argv: list[str], text: bytes, timeout: float = 120) -> bytes:
    """qemu-system's console until it has printed text (then it is killed)."""
    import select
    import time

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=ENV)
    assert proc.stdout is not None
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and text not in out:
            if select.select([proc.stdout], [], [], 1.0)[0]:
                chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    break
                out += chunk
    finally:
        proc.kill()
        proc.wait()
    assert text in out, bytes(out[-300:])
    return bytes(out[:out.index(text) + len(text)])


# lines whose addresses are not a function of the image alone: qemu-system itself printed
# NODE_DATA at 0x47fad380 in one loaded full run and at 0x47fae380 in every other run
# (QEMU's device tree carries a fresh rng-seed each boot); compared with addresses masked
RANDOMISED = (b"NUMA: NODE_DATA [mem ",)


def kernel_messages(console: bytes) -> list[bytes]:
    """printk lines without their `[   0.000000] ` time stamps and without UNMODELLED."""
    lines = [line.split(b"] ", 1)[-1].rstrip(b"\r") for line in console.split(b"\n")]
    return [re.sub(rb"0x[0-9a-f]+", b"0x?", line) if line.startswith(RANDOMISED) else line
            for line in lines if line and not line.startswith(UNMODELLED)]


def test_linux_boots_to_vfs_panic(tmp_path: Path) -> None:
    """Debian's arm64 Linux (a raw Image, loaded as QEMU's -kernel loads it) boots on
    virt-arm64 with QEMU's device tree to the panic that wants a root file system, printing
    what it prints under qemu-system-aarch64 but for the lines of unmodelled devices."""
    if not LINUX.exists():  # not a skip: scripts/setup.sh fetches it
        pytest.fail(f"{LINUX} missing: run scripts/setup.sh")
    # the capability table says how far a Linux kernel gets: here, to this panic
    assert by_name("aarch64").capabilities[Cap.LINUX_KERNEL].works
    board = BOARDS["virt-arm64"]
    dtb = tmp_path / "linux.dtb"
    qemu = list(board.qemu)
    machine = qemu.index("-M") + 1
    subprocess.run([*qemu[:machine], f"{qemu[machine]},dumpdtb={dtb}", *qemu[machine + 1:],
                    "-nographic", "-net", "none", "-kernel", str(LINUX), "-append", CMDLINE],
                   capture_output=True, timeout=60, check=True, env=ENV)
    with ThreadPoolExecutor(1) as pool:  # the oracle runs while emutrace does
        oracle = pool.submit(qemu_until, [*qemu, "-nographic", "-monitor", "none", "-serial",
                                          "stdio", "-net", "none", "-kernel", str(LINUX),
                                          "-append", CMDLINE], VFS_PANIC)
        result, console = run_board("virt-arm64", LINUX, dtb=str(dtb), until=VFS_PANIC)
        want = oracle.result()
    assert result.stop.detail == "--until text printed"
    got = console.encode()
    assert b"Kernel command line: " + CMDLINE.encode() in got
    assert kernel_messages(got) == kernel_messages(want)


def test_budgets(tmp_path: Path) -> None:
    """--max-insns and --timeout end a board's run as they end a program's (125, 124)."""
    result, console = run_board("virt-riscv64", kernel("riscv64"), max_insns=500)
    assert (result.stop.kind, result.exit_code) == ("max_insns", 125)
    assert console.startswith("emutrace mini-kernel\n") and "bye" not in console
    spin_bin = tmp_path / "spin.bin"
    spin_bin.write_bytes(bytes.fromhex("00000014"))  # b . (A64 B imm26 = 0)
    spin = run_board("virt-arm64", spin_bin, timeout=0.5)[0]
    assert (spin.stop.kind, spin.exit_code) == ("timeout", 124)



RISCV_ASM_KERNELS = {
    # medeleg sends an S-mode illegal instruction to stvec (scause 2, SPP = S), an S-mode
    # ecall still goes to mtvec (mcause 9, MPP = S); mret/sret switch privilege natively
    "deleg": ("S trap, scause then SPP:\n2\n1\n", {"illegal instruction": 1, "ecall": 1}),
    # mtimecmp armed, MTIE and MIE on, wfi: the idle hart is woken by the machine timer
    # interrupt through the vectored mtvec (BASE + 4 × 7), mcause = interrupt | 7
    "timer": ("mcause interrupt bit then code:\n1\n7\n", {"timer interrupt": 1}),
}


@pytest.mark.parametrize("name", RISCV_ASM_KERNELS)
def test_riscv_privileged_kernels(name: str) -> None:
    """Trap delegation and the timer interrupt: the console equals qemu-system-riscv64's."""
    marker, traps = RISCV_ASM_KERNELS[name]
    image = kernel("riscv64", name)
    board = BOARDS["virt-riscv64"]
    want = subprocess.run([*board.qemu, "-nographic", "-monitor", "none", "-serial", "stdio",
                           "-net", "none", "-kernel", str(image)], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, env=ENV)
    result, console = run_board("virt-riscv64", image)
    assert marker in console
    assert console == want.stdout.decode()
    assert (result.exit_code, want.returncode) == (0, 0)
    assert result.syscall_counts == traps


def test_record_kernel_for_uftrace(tmp_path: Path) -> None:
    """`emutrace record --machine` writes a uftrace data directory Debian's uftrace reads:
    the handler the trap ran, under the function that trapped."""
    data = tmp_path / "data"
    done = run_emutrace("record", "-d", data, "--machine", "virt-riscv64", "--backend", "int3",
                        kernel("riscv64"))
    assert done.returncode == 0, done.stderr
    uftrace = shutil.which("uftrace")
    assert uftrace is not None, "uftrace not found: scripts/setup.sh installs it"
    replay = subprocess.run([uftrace, "replay", "-d", str(data), "-F", "do_probe"],
                            capture_output=True, timeout=60, env=ENV, check=True)
    lines = [line.split("|", 1)[1].rstrip() for line in replay.stdout.decode().splitlines()
             if "|" in line]
    names = [line.strip().split("(")[0] for line in lines[:4]]
    # the exception frame (the vector, vec_trap) between the trapping function and the
    # handler's call
    assert names == ["do_probe", "arch_probe", "vec_trap", "trap_handler"]
    assert lines[3].index("trap_handler") > lines[2].index("vec_trap") \
        > lines[1].index("arch_probe")  # nested


class _Memory:
    """A CPU port of registers and a byte array, enough for the pure SCLP emulation."""

    def __init__(self, regs: dict[str, int]) -> None:
        self.regs, self.mem = regs, bytearray(0x3000)

    def reg_read(self, name: str) -> int:
        return self.regs[name]

    def mem_read(self, addr: int, size: int) -> bytes:
        return bytes(self.mem[addr:addr + size])

    def mem_write(self, addr: int, data: bytes) -> None:
        self.mem[addr:addr + len(data)] = data


def test_s390x_sclp_events_and_servc_sweep() -> None:
    """SERVC Write Event Data prints every ASCII console event buffer of the SCCB and skips
    others (QEMU's event facility hands each buffer to the device of its type); another
    command answers "invalid command" (0x01F0); the sweep finds SERVC only at instruction
    starts (PoP instruction lengths), not inside another instruction's operands."""
    from emutrace.isa.kernel_s390x import find_servc, servc

    def event(kind: int, text: bytes) -> bytes:
        return (6 + len(text)).to_bytes(2, "big") + bytes((kind, 0, 0, 0)) + text

    body = event(0x1A, b"hi") + event(0x02, b"ignored") + event(0x1A, b"!\n")
    cpu = _Memory({"r0": 0x00760005, "r1": 0x2000})
    cpu.mem[0x1000:0x1004] = bytes.fromhex("b2200001")  # SERVC r0, r1
    cpu.mem[0x2000:0x2008] = (8 + len(body)).to_bytes(2, "big") + bytes(6)
    cpu.mem[0x2008:0x2008 + len(body)] = body
    outcome = servc(cpu, 0x1000)  # type: ignore[arg-type]
    assert (outcome.console, cpu.mem[0x2006:0x2008]) == (b"hi!\n", b"\x00\x20")
    cpu.regs["r0"] = 0x00020001  # Read SCP Info: not modelled
    assert servc(cpu, 0x1000).console == b""  # type: ignore[arg-type]
    assert cpu.mem[0x2006:0x2008] == b"\x01\xf0"
    # lhi r0, 0xb220 (a7 08 b220), then SERVC at offset 4, then a 6-byte larl
    code = bytes.fromhex("a708b220" "b2200001" "c01000000000")
    assert list(find_servc(code)) == [4]


# Power: the instructions on modelled SPRs that the board emulates (isa/kernel_power.py)
POWER_SITES = {"ppc": ("kernel_ppc", "CS_MODE_32", "CS_MODE_BIG_ENDIAN"),
               "ppc64le": ("kernel_ppc64le", "CS_MODE_64", "CS_MODE_LITTLE_ENDIAN")}


@pytest.mark.parametrize("isa", POWER_SITES)
def test_power_spr_sites_equal_capstone(isa: str) -> None:
    """The load-time scan finds exactly the `mfspr`/`mtspr` of modelled SPRs and the
    `rfi`/`rfid` that capstone's disassembly of the kernel's code shows (an independent
    decoder), and nothing else."""
    import importlib

    import capstone
    from elftools.elf.elffile import ELFFile

    module, *modes = POWER_SITES[isa]
    sites = importlib.import_module(f"emutrace.isa.{module}").SITES
    with open(kernel(isa), "rb") as fh:
        text = ELFFile(fh).get_section_by_name(".text")
        code, base = text.data(), text["sh_addr"]
    mode = 0
    for name in modes:
        mode |= getattr(capstone, name)
    md = capstone.Cs(capstone.CS_ARCH_PPC, mode)
    md.skipdata = True  # arch_probe's illegal word
    want = []
    for insn in md.disasm(code, base):
        if insn.mnemonic in ("rfi", "rfid"):
            want.append(insn.address)
        elif insn.mnemonic in ("mfspr", "mtspr"):
            spr = insn.op_str.split(", ")[1 if insn.mnemonic == "mfspr" else 0]
            if int(spr, 0) in sites.modelled:
                want.append(insn.address)
    got = [base + at for at in sites.find(code)]
    assert got == want
    assert len(got) >= 6  # both rfi/rfid, the SRR1 or ESR reads, SRR0 read and write, ...


class _PowerPort:
    """A CPU port with registers and 16 KiB of memory (for the pure Power trap layer)."""

    def __init__(self, **regs: int) -> None:
        self.regs, self.mem = dict(regs), bytearray(0x4000)

    @property
    def pc(self) -> int:
        return self.regs["pc"]

    def reg_read(self, name: str) -> int:
        return self.regs.get(name, 0)

    def reg_write(self, name: str, value: int) -> None:
        self.regs[name] = value

    def mem_read(self, addr: int, size: int) -> bytes:
        return bytes(self.mem[addr:addr + size])

    def mem_write(self, addr: int, data: bytes) -> None:
        self.mem[addr:addr + len(data)] = data


def test_power_traps_and_hypercalls() -> None:
    """The paths the mini-kernels do not take, against the architecture's and PAPR's
    numbers: a `tw` trap enters 0x700 with SRR1 bit 46 (Power ISA 3.0 Book III §7.5.9),
    the new MSR is SF|ME (+LE once H_SET_MODE asked for ILE); `mfspr`/`rfid` read the
    model; H_PUT_TERM_CHAR takes up to 16 bytes from r6:r7, most significant first; an
    unknown RTAS token answers -3 (not supported) in its return word, an unknown hcall
    H_FUNCTION (-2); BookE DBCR0[RST] powers off, other DBCR0 writes do not."""
    from emutrace.isa import kernel_ppc, kernel_ppc64le
    from emutrace.isa.kernel_power import SRR0, SRR1, spr_file

    sf, me, le, fp = 1 << 63, 1 << 12, 1, 1 << 13
    cpu = _PowerPort(pc=0x1004, msr=sf | le | me | fp)
    cpu.mem[0x1000:0x1004] = (0x7FE00008).to_bytes(4, "little")  # tw 31, 0, 0
    outcome = kernel_ppc64le.deliver(cpu, kernel_ppc.INTR_PROGRAM)  # type: ignore[arg-type]
    assert outcome is not None and (outcome.kind, outcome.vector) == ("vector", 0x700)
    model = spr_file(cpu)  # type: ignore[arg-type]
    assert (model.get(SRR0), model.get(SRR1)) == (0x1000, sf | le | me | fp | 1 << 17)
    assert (cpu.regs["pc"], cpu.regs["msr"]) == (0x700, sf | me)  # ILE not set yet
    # mfspr r5, SRR1 (XFX: SPR 27 as 0b11011 || 0b00000) at 0x710, then rfid at 0x714
    cpu.mem[0x710:0x718] = (0x7CBB02A6).to_bytes(4, "little") + (0x4C000024).to_bytes(4, "little")
    assert list(kernel_ppc64le.SITES.find(bytes(cpu.mem[0x700:0x720]))) == [0x10, 0x14]
    kernel_ppc64le.SITES.emulate(cpu, 0x710)  # type: ignore[arg-type]
    assert (cpu.regs["r5"], cpu.regs["pc"]) == (model.get(SRR1), 0x714)
    kernel_ppc64le.SITES.emulate(cpu, 0x714)  # type: ignore[arg-type]
    assert (cpu.regs["pc"], cpu.regs["msr"]) == (0x1000, model.get(SRR1))

    cpu.mem[0x2000:0x2004] = (0x44000022).to_bytes(4, "little")  # sc 1
    cpu.regs.update(pc=0x2004, r3=0x31C, r4=1, r5=4)  # H_SET_MODE(LE)
    assert kernel_ppc64le.deliver(cpu, 8).kind == "emulated"  # type: ignore[arg-type, union-attr]
    cpu.mem[0x2004:0x2008] = (0x44000002).to_bytes(4, "little")  # sc
    cpu.regs.update(pc=0x2008, msr=sf | le | me)
    assert kernel_ppc64le.deliver(cpu, 8).vector == 0xC00  # type: ignore[arg-type, union-attr]
    assert cpu.regs["msr"] == sf | me | le and model.get(SRR0) == 0x2008

    cpu.regs.update(pc=0x2004, r3=0x58, r4=0, r5=10, r6=int.from_bytes(b"emutrace", "big"),
                    r7=int.from_bytes(b"!\n\0\0\0\0\0\0", "big"))
    assert kernel_ppc64le.deliver(cpu, 8).console == b"emutrace!\n"  # type: ignore[arg-type, union-attr]
    block = 0x3000
    cpu.mem[block:block + 12] = b"".join(v.to_bytes(4, "big") for v in (0x2001, 1, 1))
    cpu.regs.update(pc=0x2004, r3=0xF000, r4=block)
    assert kernel_ppc64le.deliver(cpu, 8).kind == "emulated"  # type: ignore[arg-type, union-attr]
    assert cpu.mem[block + 16:block + 20] == (2**32 - 3).to_bytes(4, "big")
    cpu.mem[block:block + 4] = (0x2003).to_bytes(4, "big")
    cpu.regs.update(pc=0x2004, r3=0xF000, r4=block)
    assert kernel_ppc64le.deliver(cpu, 8).kind == "off"  # type: ignore[arg-type, union-attr]
    cpu.regs.update(pc=0x2004, r3=0x1234)
    kernel_ppc64le.deliver(cpu, 8)  # type: ignore[arg-type]
    assert cpu.regs["r3"] == 2**64 - 2

    booke = _PowerPort(pc=0x100, r3=0x30000000)
    booke.mem[0x100:0x104] = (0x7C744BA6).to_bytes(4, "big")  # mtspr DBCR0 (308), r3
    assert list(kernel_ppc.SITES.find(bytes(booke.mem[0x100:0x104]))) == [0]
    assert kernel_ppc.SITES.emulate(booke, 0x100).kind == "off"  # type: ignore[arg-type, union-attr]
    booke.regs["r3"] = 0x40000000  # DBCR0[IDM], no reset
    assert kernel_ppc.SITES.emulate(booke, 0x100) is None  # type: ignore[arg-type]

