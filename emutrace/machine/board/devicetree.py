"""The device tree a board makes for its image, as QEMU's virt boards do: the board's tree
(spec.Board.tree), a `memory` node for the RAM the DTB lies in, and `/chosen` with the
kernel command line (`bootargs`), the console (`stdout-path`) and the initrd's range
(`linux,initrd-start`/`-end`, Documentation/devicetree/bindings/chosen.txt).  Written as DTS
text and compiled by dtc (Debian's device-tree-compiler), the devicetree spec's own tool."""

from __future__ import annotations

import shutil
import subprocess

from emutrace.errors import Unsupported
from emutrace.machine.board.spec import Board, Node, Prop, Ref

# /chosen rng-seed: QEMU's boards give 32 fresh random bytes each boot, which Linux credits
# as entropy; these are fixed, so that every run is the same boot (its trace reproducible).
# No kaslr-seed: the kernel stays at its link address, where its System.map names it.
RNG_SEED = tuple(0x9E3779B9 * (i + 1) & 0xFFFFFFFF for i in range(8))


def _value(prop: str | tuple[str, ...] | tuple[int | Ref, ...]) -> str:
    if isinstance(prop, str):
        return _quoted(prop)
    if all(isinstance(v, str) for v in prop):
        return ", ".join(_quoted(str(v)) for v in prop)
    cells = " ".join(f"&{v.label}" if isinstance(v, Ref) else f"{v:#x}" for v in prop)
    return f"<{cells}>"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _lines(node: Node, depth: int) -> list[str]:
    pad = "\t" * depth
    label = f"{node.label}: " if node.label else ""
    out = [f"{pad}{label}{node.name or '/'} {{"]
    for name, prop in node.props.items():
        if prop is True:
            out.append(f"{pad}\t{name};")
        elif not isinstance(prop, bool):
            out.append(f"{pad}\t{name} = {_value(prop)};")
    for child in node.children:
        out += _lines(child, depth + 1)
    out.append(f"{pad}}};")
    return out


def _cells(value: int, count: int) -> tuple[int, ...]:
    return tuple((value >> 32 * (count - 1 - i)) & 0xFFFFFFFF for i in range(count))


def with_memory_and_chosen(board: Board, bootargs: str | None,
                           initrd: tuple[int, int] | None) -> Node:
    """The board's tree with its `memory` node (the RAM region the DTB goes to) and
    `/chosen`; initrd is (start, end) in physical memory."""
    tree = board.tree
    if tree is None or board.dtb_at is None:
        raise ValueError(f"machine {board.name} makes no device tree")
    addr_cells = _count(tree.props.get("#address-cells"), 2)
    size_cells = _count(tree.props.get("#size-cells"), 1)
    ram = next(r for r in board.ram if r.base <= board.dtb_at < r.base + r.size)
    memory = Node(f"memory@{ram.base:x}", {
        "device_type": "memory",
        "reg": (*_cells(ram.base, addr_cells), *_cells(ram.size, size_cells))})
    chosen: dict[str, Prop] = {}
    if initrd is not None:
        chosen["linux,initrd-start"] = _cells(initrd[0], board.initrd_cells)
        chosen["linux,initrd-end"] = _cells(initrd[1], board.initrd_cells)
    if bootargs is not None:
        chosen["bootargs"] = bootargs
    if board.stdout_path:
        chosen["stdout-path"] = board.stdout_path
    chosen["rng-seed"] = RNG_SEED
    return Node(tree.name, tree.props, (*tree.children, memory, Node("chosen", chosen)),
                tree.label)


def _count(prop: Prop | None, default: int) -> int:
    if isinstance(prop, tuple) and len(prop) == 1 and isinstance(prop[0], int):
        return prop[0]
    return default


def source(tree: Node) -> str:
    """The tree as DTS text (devicetree spec v0.4 §6)."""
    return "\n".join(["/dts-v1/;", "", *_lines(tree, 0), ""])


def compiled(text: str) -> bytes:
    """DTS text compiled to a flattened device tree by dtc."""
    dtc = shutil.which("dtc")
    if dtc is None:
        raise Unsupported("dtc not found: the board's device tree is compiled by Debian's "
                          "device-tree-compiler (scripts/setup.sh installs it), or give "
                          "--dtb FILE")
    done = subprocess.run([dtc, "-q", "-I", "dts", "-O", "dtb", "-o", "-", "-"],
                          input=text.encode(), capture_output=True, check=False)
    if done.returncode != 0:  # a board's tree is ours: a failure here is a bug
        raise RuntimeError(f"dtc rejected the board's tree: {done.stderr.decode().strip()}")
    return done.stdout


def board_dtb(board: Board, bootargs: str | None = None,
              initrd: tuple[int, int] | None = None) -> bytes:
    """The flattened device tree the board gives its image."""
    return compiled(source(with_memory_and_chosen(board, bootargs, initrd)))
