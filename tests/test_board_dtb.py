"""Boards make their own device tree (machine/board/devicetree.py): the tree of each board
that passes one equals the one qemu-system makes for the same machine (`-M virt,dumpdtb=`,
both decompiled by dtc) node for node and property for property, phandles compared by the
node they name; U-Boot reaches its prompt and Debian's Linux its root-mount panic with no
--dtb, printing what they print under qemu-system; --append/--initrd land in /chosen."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emutrace.machine.board.devicetree import board_dtb
from emutrace.machine.board.presets import BOARDS

from .conftest import ENV
from .test_kernel import (
    CMDLINE,
    LINUX,
    OPENSBI_FW_JUMP,
    PROMPT,
    VFS_PANIC,
    _main,
    _uboot,
    _with_bios,
    _without_flash,
    _without_hart,
    kernel_messages,
    qemu_dialogue,
    qemu_until,
    run_board,
)

TREE_BOARDS = [name for name, board in BOARDS.items() if board.tree is not None]

# properties that hold phandles, and where: every cell (None), or these cell positions
REFERENCES: dict[str, tuple[int, ...] | None] = {
    "interrupt-parent": None, "clocks": None, "cpu": None, "gpios": (0,), "regmap": (0,),
    "msi-map": (1,), "interrupts-extended": (0, 2)}
# what the board's tree says otherwise than QEMU 7.2's, and why: Unicorn 2.1.4's RISC-V CPU
# is QEMU 5.0's (no H, no Sstc, no hardware performance counters: no PMU node)
DIFFERENT = {("virt-riscv64", "/cpus/cpu@0", "riscv,isa"), ("virt-riscv64", "/pmu", None)}
# QEMU's /chosen: fresh each boot; the board's rng-seed is fixed, it gives no kaslr-seed
RANDOM = ("rng-seed", "kaslr-seed")


def decompiled(blob: bytes) -> str:
    return subprocess.run(["dtc", "-q", "-I", "dtb", "-O", "dts", "-o", "-", "-"],
                          input=blob, capture_output=True, check=True).stdout.decode()


def parsed(dts: str) -> dict[str, dict[str, str]]:
    """{node path: {property: value text}} of dtc's output (one property a line)."""
    nodes: dict[str, dict[str, str]] = {}
    path: list[str] = []
    for line in dts.splitlines():
        line = line.strip()
        if line.endswith("{"):
            name = line[:-1].strip()
            path.append("" if name == "/" else name)
            nodes["/".join(path) or "/"] = {}
        elif line == "};":
            path.pop()
        elif line.endswith(";") and path:
            name, _, value = line[:-1].partition(" = ")
            nodes["/".join(path) or "/"][name] = value
    return nodes


def _cells(value: str) -> list[int]:
    return [int(c, 16) for c in value.strip("<>").split()]


def resolved(nodes: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Phandle values replaced by the path of the node they name; `phandle` dropped."""
    by_handle = {_cells(p["phandle"])[0]: path for path, p in nodes.items() if "phandle" in p}

    def named(cells: list[int], where: tuple[int, ...] | None) -> str:
        return " ".join(by_handle[c] if where is None or i in where else hex(c)
                        for i, c in enumerate(cells))

    out: dict[str, dict[str, str]] = {}
    for path, props in nodes.items():
        out[path] = {}
        for name, value in props.items():
            if name == "phandle":
                continue
            if name in REFERENCES:
                value = named(_cells(value), REFERENCES[name])
            elif name == "interrupt-map":
                value = _interrupt_map(nodes, by_handle, _cells(value))
            out[path][name] = value
    return out


def _interrupt_map(nodes: dict[str, dict[str, str]], by_handle: dict[int, str],
                   cells: list[int]) -> str:
    """An interrupt-map (devicetree spec §2.4.3.1): child unit address (3 cells for PCI)
    and specifier (1), the parent's phandle, its #address-cells and #interrupt-cells."""
    entries = []
    while cells:
        parent = by_handle[cells[4]]
        width = sum(_cells(nodes[parent].get(n, "<0x00>"))[0]
                    for n in ("#address-cells", "#interrupt-cells"))
        entries.append(f"{cells[:4]} {parent} {cells[5:5 + width]}")
        cells = cells[5 + width:]
    return "; ".join(entries)


def qemu_tree(board: str, tmp_path: Path, *extra: str) -> dict[str, dict[str, str]]:
    qemu = list(BOARDS[board].qemu)
    machine = qemu.index("-M") + 1
    dtb = tmp_path / "qemu.dtb"
    subprocess.run([*qemu[:machine], f"{qemu[machine]},dumpdtb={dtb}", *qemu[machine + 1:],
                    "-nographic", "-net", "none", *extra],
                   capture_output=True, timeout=60, check=True, env=ENV)
    return resolved(parsed(decompiled(dtb.read_bytes())))


@pytest.mark.parametrize("board", TREE_BOARDS)
def test_tree_equals_qemus(board: str, tmp_path: Path) -> None:
    """Every node and property of qemu-system's tree is the board's (DIFFERENT aside)."""
    want = qemu_tree(board, tmp_path)
    got = resolved(parsed(decompiled(board_dtb(BOARDS[board]))))
    for path in list(want):
        if (board, path, None) in DIFFERENT:
            assert path not in got
            del want[path]
            continue
        for name in list(want[path]):
            if (board, path, name) in DIFFERENT or name in RANDOM:
                del want[path][name]
                got[path].pop(name, None)
    assert set(got) == set(want)
    for path in want:
        assert got[path] == want[path], path


def test_chosen_equals_qemus_for_a_linux_image(tmp_path: Path) -> None:
    """With a Linux image, -append and -initrd, QEMU's /chosen holds the command line and
    the initrd's range; --append and --initrd put the same there."""
    if not LINUX.exists():  # not a skip: scripts/setup.sh fetches it
        pytest.fail(f"{LINUX} missing: run scripts/setup.sh")
    initrd = tmp_path / "initrd"
    initrd.write_bytes(bytes(range(256)) * 5)
    want = qemu_tree("virt-arm64", tmp_path, "-kernel", str(LINUX), "-append", CMDLINE,
                     "-initrd", str(initrd))["/chosen"]
    board = BOARDS["virt-arm64"]
    assert board.initrd_at is not None
    blob = board_dtb(board, CMDLINE, (board.initrd_at, board.initrd_at + 1280))
    got = resolved(parsed(decompiled(blob)))["/chosen"]
    assert len(_cells(got["rng-seed"])) == len(_cells(want["rng-seed"])) == 8
    for name in RANDOM:
        want.pop(name, None)
        got.pop(name, None)
    assert got == want
    assert set(want) == {"bootargs", "stdout-path", "linux,initrd-start", "linux,initrd-end"}


@pytest.mark.parametrize(("board", "config", "sbi"), [("virt-arm64", "qemu_arm64", False),
                                                      ("virt-arm", "qemu_arm", False),
                                                      ("virt-riscv64", "qemu-riscv64", False),
                                                      ("virt-riscv64", "qemu-riscv64_smode",
                                                       True)])
def test_uboot_prompt_without_dtb(board: str, config: str, sbi: bool) -> None:
    """Debian's U-Boot on the board's own tree (no --dtb) prints to its prompt and answers
    `version` as under qemu-system (the flash size and OpenSBI's hart lines aside, as in
    test_kernel.py)."""
    fw = _uboot(config)
    if sbi:
        argv = [*_with_bios(BOARDS[board].qemu, OPENSBI_FW_JUMP), "-kernel", str(fw)]
    else:
        argv = _with_bios(BOARDS[board].qemu, fw)
    with ThreadPoolExecutor(1) as pool:  # the oracle runs while emutrace does
        oracle = pool.submit(qemu_dialogue, [*argv, "-nographic", "-monitor", "none",
                                             "-serial", "stdio", "-net", "none"], b"version\r")
        result, console = run_board(board, fw, typed=b"version\r", input_after=PROMPT,
                                    until=PROMPT, bios=str(OPENSBI_FW_JUMP) if sbi else None,
                                    timeout=300)
        want = oracle.result()
    assert result.stop.detail == "--until text printed"
    got = console.encode()
    assert b"=> version\r\nU-Boot 2023.01" in got
    if sbi:
        got, want = _without_hart(got), _without_hart(want)
    if BOARDS[board].isa == "riscv64":
        # U-Boot prints the tree's riscv,isa (DIFFERENT), and where it moved the tree to,
        # below its own end by the tree's size (the PMU node and the longer ISA string)
        assert re.search(rb"\nCPU:   rv64imafdc_zicsr_zifencei\r\n", got)
        got, want = (re.sub(rb"\nCPU:   [^\r]*|(Working FDT set to )[0-9a-f]+", rb"\1",
                            text) for text in (got, want))
    assert _without_flash(got) == _without_flash(want)


# the board gives no kaslr-seed (devicetree.RNG_SEED); QEMU's would move the kernel
NO_KASLR = CMDLINE + " nokaslr"


def test_linux_to_vfs_panic_without_dtb() -> None:
    """Debian's arm64 Linux with --append and no --dtb prints what it prints under
    qemu-system-aarch64 -append up to the root-mount panic (test_kernel.py's unmodelled
    devices' lines aside)."""
    if not LINUX.exists():
        pytest.fail(f"{LINUX} missing: run scripts/setup.sh")
    qemu = list(BOARDS["virt-arm64"].qemu)
    with ThreadPoolExecutor(1) as pool:
        oracle = pool.submit(qemu_until, [*qemu, "-nographic", "-monitor", "none", "-serial",
                                          "stdio", "-net", "none", "-kernel", str(LINUX),
                                          "-append", NO_KASLR], VFS_PANIC)
        result, console = run_board("virt-arm64", LINUX, append=NO_KASLR, until=VFS_PANIC,
                                    timeout=300)
        want = oracle.result()
    assert result.stop.detail == "--until text printed"
    got = console.encode()
    assert b"Kernel command line: " + NO_KASLR.encode() in got
    assert kernel_messages(got) == kernel_messages(want)


def test_device_tree_options_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--append/--initrd with --dtb, on a board without a device tree, or an initrd that
    would reach the device tree: one line, 64."""
    from .test_kernel import kernel

    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(board_dtb(BOARDS["virt-arm64"]))
    big = tmp_path / "big.cpio"
    big.write_bytes(bytes(0x3E00001))  # from 0x84200000 past virt-riscv64's DTB at 0x87e00000
    for argv in (("--machine", "virt-arm64", "--dtb", dtb, "--append", "x"),
                 ("--machine", "virt-riscv64", "--initrd", big),
                 ("--machine", "pc-i386", "--initrd", dtb),
                 ("--machine", "malta", "--append", "x")):
        isa = BOARDS[str(argv[1])].isa
        status, _, err = _main(capsys, "run", *argv, kernel(isa))
        assert status == 64 and err.count("\n") == 1 and re.search(
            r"--(append|initrd)", err), err
