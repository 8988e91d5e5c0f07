"""Boards on the native engine: every board testbin the kernel tests run, traced by every
backend on the C hot path (`--engine native`, the Linux run's), gives the records of the
Python reference, and both equal the oracle the kernel tests hold them to — the instrumented
build's own record and the console under qemu-system-<arch> (tests/test_kernel.py,
tests/test_kernel_mips.py).  The CLI's trace text is compared byte for byte; `auto` runs
the board natively where the library is built and says in one line when it cannot."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from emutrace import native
from emutrace.backends import NATIVE_BACKENDS
from emutrace.board_session import BoardConfig, BoardMachine
from emutrace.session import RunResult
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import run_emutrace
from .test_kernel import BOARD_OF, RECORD_MARK, STALE, _raw, kernel, namer, qemu_system

pytestmark = pytest.mark.skipif(not native.available(), reason="the native library is not "
                                "built (pip install -e .)")


def run_on(engine: str, board: str, image: Path, **options: object
           ) -> tuple[BoardMachine, RunResult, str]:
    out = io.BytesIO()
    options.setdefault("timeout", 60)
    config = BoardConfig(board, str(image), console_out=out,  # type: ignore[arg-type]
                         engine=engine, **options)
    machine = BoardMachine(config)
    result = machine.run()
    return machine, result, out.getvalue().decode()


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("isa", BOARD_OF)
def test_native_board_equals_reference_and_kernel_record(isa: str, backend: str) -> None:
    """The plain kernel on its board: the native engine's records are the reference's, its
    trace the instrumented kernel's own record, its console and exit status qemu-system's."""
    record = qemu_system(isa, "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel(isa, "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, own)
    console_want, status = qemu_system(isa, "kernel")
    machine, fast, console = run_on("native", BOARD_OF[isa], kernel(isa), backend=backend)
    _, ref, _ = run_on("python", BOARD_OF[isa], kernel(isa), backend=backend)
    assert machine.engine == "native"
    assert fast.records == ref.records
    assert canonical_text(fast.records, namer(kernel(isa)), own) == want
    assert console == console_want
    assert (fast.stop.kind, fast.exit_code) == ("exit", status)
    assert fast.syscall_counts == ref.syscall_counts


# the other kernels the kernel tests run: (isa, name) → what its console must hold
OTHER_KERNELS = {("mips", "cp0"): "handler cause = 0x80000020\n",
                 ("mipsel", "cp0"): "handler cause = 0x80000020\n",
                 ("mips", "timer"): "cause after compare written = 0x0\n",
                 ("mipsel", "timer"): "cause after compare written = 0x0\n"}


@pytest.mark.parametrize("cleanup", ("lazy", "strict"))
@pytest.mark.parametrize("isa,name", OTHER_KERNELS)
def test_native_mips_kernels_equal_reference_and_qemu(isa: str, name: str,
                                                      cleanup: str) -> None:
    """MIPS's CP0 and timer kernels (emulated mfc0/mtc0/eret in the middle of blocks, a
    trap in a delay slot, an idle hart woken by the timer): int3's records natively are the
    reference's and step's, the console qemu-system's."""
    image = kernel(isa, name)
    console_want, status = qemu_system(isa, name)
    _, fast, console = run_on("native", BOARD_OF[isa], image, backend="int3",
                              cleanup=cleanup)
    _, ref, _ = run_on("python", BOARD_OF[isa], image, backend="int3", cleanup=cleanup)
    _, step, _ = run_on("python", BOARD_OF[isa], image, backend="step")
    assert fast.records == ref.records
    names = namer(image)
    if cleanup == "strict":  # (lazy's frames of the vector differ from step's by design)
        assert canonical_text(fast.records, names) == canonical_text(step.records, names)
    assert OTHER_KERNELS[(isa, name)] in console
    assert console == console_want
    assert (fast.stop.kind, fast.exit_code) == ("exit", status)


@pytest.mark.parametrize("isa", BOARD_OF)
def test_native_strict_cleanup_equals_reference(isa: str) -> None:
    """`int3 --cleanup strict` natively (strict.c switches, exception frames): the
    reference's records, and the kernel's own record."""
    record = qemu_system(isa, "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel(isa, "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    _, fast, _ = run_on("native", BOARD_OF[isa], kernel(isa), backend="int3",
                        cleanup="strict")
    _, ref, _ = run_on("python", BOARD_OF[isa], kernel(isa), backend="int3",
                       cleanup="strict")
    assert fast.records == ref.records
    assert canonical_text(fast.records, namer(kernel(isa)), own) == \
        canonical_from_instr(record, instr_name, own)


@pytest.mark.parametrize("isa", ("riscv64", "mips", "aarch64"))
def test_cli_trace_text_byte_for_byte(isa: str, tmp_path: Path) -> None:
    """`emutrace run --machine ... -o FILE`: the same bytes with --engine native as with
    --engine python, the same exit status (qemu-system's), nothing on stderr."""
    _, status = qemu_system(isa, "kernel")
    texts = []
    for engine in ("native", "python"):
        out = tmp_path / f"{engine}.txt"
        done = run_emutrace("run", "--machine", BOARD_OF[isa], "--backend", "int3",
                            "--engine", engine, "-o", out, kernel(isa))
        assert done.returncode == status, done.stderr
        assert done.stderr == b"", done.stderr
        texts.append(out.read_bytes())
    assert texts[0] == texts[1]
    assert b"trap_handler" in texts[0]


def test_auto_runs_boards_natively_or_says_why(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """auto is the native engine on a board when the library is built; without it, the
    reference, said in one line on stderr."""
    machine, _, _ = run_on("auto", "virt-riscv64", kernel("riscv64"), backend="int3")
    assert machine.engine == "native"
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(native, "unavailable_reason", lambda backend="int3": "not built")
    machine, result, _ = run_on("auto", "virt-riscv64", kernel("riscv64"), backend="int3")
    assert machine.engine == "python" and result.exit_code == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Python reference engine" in err and "not built" in err


# (entry probes every function up front: a raw image has no symbol list to probe)
@pytest.mark.parametrize("backend", [b for b in NATIVE_BACKENDS if b != "entry"])
def test_code_at_address_zero_runs_natively(tmp_path: Path, backend: str) -> None:
    """A raw image started at virt-arm64's -bios address 0, its first instruction a call
    (a site, a block and a jump pair at address 0 in C's tables): auto runs it natively,
    silently, with the reference's records, and its trace is step's on the reference (the
    test_kernel oracle of this image); `run --engine native -o` writes the reference's text."""
    fw = _raw(tmp_path, STALE)
    machine, fast, _ = run_on("auto", "virt-arm64", fw, backend=backend)
    _, ref, _ = run_on("python", "virt-arm64", fw, backend=backend)
    _, step, _ = run_on("python", "virt-arm64", fw, backend="step")
    assert machine.engine == "native"
    assert fast.records == ref.records
    assert canonical_text(fast.records, hex) == canonical_text(step.records, hex)
    assert canonical_text(fast.records, hex).startswith("> 0x1c\n")  # the call at address 0
    texts = []
    for engine in ("native", "python"):
        out = tmp_path / f"{engine}.txt"
        done = run_emutrace("run", "--machine", "virt-arm64", "--backend", backend,
                            "--engine", engine, "-o", out, fw)
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        texts.append(out.read_bytes())
    assert texts[0] == texts[1]
    info = run_emutrace("info", "--machines").stdout.decode()
    assert "address 0" not in info and "native (the C hot path" in info


def test_opensbi_uboot_native_equals_reference(tmp_path: Path) -> None:
    """Debian's OpenSBI fw_jump with U-Boot S-mode as its payload (`--bios`; both stripped:
    descent, CSR probes as exception frames), 3 million instructions traced by int3: the
    native engine's records are the reference's, and its canonical trace step's (the
    oracle test_kernel.py holds this boot to)."""
    from .test_kernel import OPENSBI_FW_JUMP, _uboot, qemu_dtb

    if not OPENSBI_FW_JUMP.exists():
        pytest.fail(f"{OPENSBI_FW_JUMP} missing: run scripts/setup.sh")
    fw, dtb = _uboot("qemu-riscv64_smode"), qemu_dtb("virt-riscv64", tmp_path)
    options = {"dtb": str(dtb), "bios": str(OPENSBI_FW_JUMP), "max_insns": 3_000_000,
               "timeout": 900}  # (bounded by max_insns; a loaded machine)
    machine, fast, _ = run_on("native", "virt-riscv64", fw, backend="int3", **options)
    _, ref, _ = run_on("python", "virt-riscv64", fw, backend="int3", **options)
    _, step, _ = run_on("python", "virt-riscv64", fw, backend="step", **options)
    assert machine.engine == "native"
    assert fast.records == ref.records
    assert len(fast.records) > 40_000
    assert fast.stop.kind == ref.stop.kind == "max_insns"
    assert canonical_text(fast.records, hex).replace("<! ", "< ") == \
        canonical_text(step.records, hex).replace("<! ", "< ")
