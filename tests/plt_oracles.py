"""Independent oracles for `func@plt` names, one per PLT layout, from the cross binutils
(never from emutrace): `plt_names(isa, path)` maps each stub's link-time address to the
name binutils gives it.

* Default (a `.plt` / `.plt.sec` of stubs; ppc's secure PLT): `objdump -d` labels
  `<func@plt>:`, BFD's synthetic symbols, read from the PLT layout and relocations.
* ppc -fPIC/-pie and ppc64le (ELFv2): the linker's stub labels (`plt_pic32.func`,
  `plt_call.func`); on ppc64le each stub's `ld r12,OFF(r2)` is decoded too: the slot at
  `.TOC.`+OFF must carry a JMP_SLOT relocation of the same function (`readelf -r`).  A
  stripped ppc64le module: every stub-shaped sequence in its disassembly whose slot (TOC
  from a global entry's `addis r2,r12; addi r2,r2`, + displacement) is a JMP_SLOT.
* mips/mipsel: `readelf -A`'s global GOT entries: an undefined function with a nonzero
  Sym.Val is its lazy stub; each stub's last instruction `li t8,N` names .dynsym entry N,
  which must be the same function (`objdump -d`, `readelf --dyn-syms`)."""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from emutrace.isa import by_name


def _tool(isa: str, name: str, *args: str | Path) -> str:
    triple = by_name(isa).identity.triple
    return subprocess.run([f"{triple}-{name}", *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=True).stdout


def objdump_plt(isa: str, path: Path, dump: str = "") -> dict[int, str]:
    """BFD's synthetic `@plt` symbols in .plt/.plt.sec (or in the whole `dump` given)."""
    dump = dump or _tool(isa, "objdump", "-d", "-j", ".plt", "-j", ".plt.sec", path)
    return {int(a, 16): f"{n}@plt" for a, n in
            re.findall(r"^([0-9a-f]+) <([\w.]+)(?:@[\w.]+)?@plt>:$", dump, re.M)}


def _stub_labels(dump: str, kind: str) -> dict[int, str]:
    """objdump labels of the linker's stubs, `<00008000.got2.plt_pic32.strcmp@@GLIBC_2.0>:`."""
    return {int(a, 16): f"{n}@plt" for a, n in re.findall(
        rf"^([0-9a-f]+) <[0-9a-f]{{8}}\.(?:got2\.)?{kind}\.([\w.]+?)(?:@@?[\w.]+)?>:$",
        dump, re.M)}


def ppc_plt(isa: str, path: Path) -> dict[int, str]:
    """BFD's synthetic `@plt` symbols for the secure-PLT stubs in .text, and the -fPIC
    stubs' labels."""
    dump = _tool(isa, "objdump", "-d", path)
    return objdump_plt(isa, path, dump) | _stub_labels(dump, "plt_pic32")


def _jmp_slots(isa: str, path: Path) -> dict[int, str]:
    relocs = _tool(isa, "readelf", "-rW", path)
    return {int(a, 16): n for a, n in
            re.findall(r"^([0-9a-f]+)\s+\S+\s+R_\w+_JU?MP_SLOT\s+\S+\s+([\w.]+)", relocs, re.M)}


def _toc(isa: str, path: Path, dump: str) -> int:
    """The TOC pointer as an ELFv2 function's global entry computes it (`addis r2,r12,hi;
    addi r2,r2,lo` at a defined function with a local entry; ELFv2 ABI §2.3.2.1)."""
    syms = _tool(isa, "readelf", "--dyn-syms", "-W", path)
    for value in re.findall(r"^\s+\d+: ([0-9a-f]+)\s+\d+ FUNC .*<localentry>: 8\]\s+\d+ ",
                            syms, re.M):
        entry = re.search(rf"^\s+{int(value, 16):x}:\s+(?:[0-9a-f]{{2}} ){{4}}\s*addis\s+"
                          r"r2,r12,(-?\d+)\n\s+[0-9a-f]+:\s+(?:[0-9a-f]{2} ){4}\s*addi\s+"
                          r"r2,r2,(-?\d+)$", dump, re.M)
        if entry:
            return int(value, 16) + (int(entry.group(1)) << 16) + int(entry.group(2))
    raise AssertionError("no global entry computes the TOC")


def _decoded_stubs(isa: str, path: Path, dump: str) -> dict[int, str]:
    """Every `std r2,24(r1); ld r12,off(r2); mtctr r12; bctr` (or `addis r12,r2,hi; ld
    r12,lo(r12)`) in the disassembly whose slot, TOC + displacement, is a JMP_SLOT."""
    toc, slots = _toc(isa, path, dump), _jmp_slots(isa, path)
    insn = r"\n\s+[0-9a-f]+:\s+(?:[0-9a-f]{2} ){4}\s*"
    out = {}
    for m in re.finditer(rf"^\s+([0-9a-f]+):\s+(?:[0-9a-f]{{2}} ){{4}}\s*std\s+r2,24\(r1\)"
                         rf"(?:{insn}ld\s+r12,(-?\d+)\(r2\)|{insn}addis\s+r12,r2,(-?\d+)"
                         rf"{insn}ld\s+r12,(-?\d+)\(r12\)){insn}mtctr\s+r12{insn}bctr$",
                         dump, re.M):
        off = int(m.group(2)) if m.group(2) else (int(m.group(3)) << 16) + int(m.group(4))
        if toc + off in slots:
            out[int(m.group(1), 16)] = f"{slots[toc + off]}@plt"
    return out


def ppc64le_plt(isa: str, path: Path) -> dict[int, str]:
    """The linker's stub labels; a stripped module's stubs decoded from its code."""
    dump = _tool(isa, "objdump", "-d", path)
    want = _stub_labels(dump, r"plt_call\w*")
    if not want:
        return _decoded_stubs(isa, path, dump)
    toc = re.search(r"^\s*\d+: ([0-9a-f]+)\s+\d+\s+\w+\s+\w+\s+\w+\s+\d+ \.TOC\.$",
                    _tool(isa, "readelf", "-sW", path), re.M)
    slots = _jmp_slots(isa, path)
    for addr, name in want.items():
        if name == "__gmon_start__@plt" or toc is None:
            continue  # (a weak undefined symbol: no JMP_SLOT of that name in some links)
        body = dump[dump.index(f"\n{addr:016x} <"):][:400]
        off = re.search(r"ld\s+r12,(-?\d+)\(r2\)", body)
        assert off is not None, body
        slot = int(toc.group(1), 16) + int(off.group(1))
        assert f"{slots[slot]}@plt" == name
    return want


def mips_plt(isa: str, path: Path) -> dict[int, str]:
    got = _tool(isa, "readelf", "-A", path)
    want = {int(v, 16): f"{n}@plt" for v, n in re.findall(
        r"^\s+[0-9a-f]+ -?\d+\(gp\) [0-9a-f]+ ([0-9a-f]+) FUNC\s+UND (\S+)$", got, re.M)
        if int(v, 16)}
    dynsym = {int(i): n for i, n in re.findall(
        r"^\s+(\d+): [0-9a-f]+\s+\d+\s+\w+\s+\w+\s+\w+\s+\w+\s+([\w.]+)",
        _tool(isa, "readelf", "--dyn-syms", "-W", path), re.M)}
    if ".MIPS.stubs" not in _tool(isa, "readelf", "-SW", path):
        return want  # (ld.so: no stubs)
    stubs = re.findall(r"^\s+([0-9a-f]+):\s+[0-9a-f]+\s+li\s+t8,(\d+)$",
                       _tool(isa, "objdump", "-d", "-j", ".MIPS.stubs", path), re.M)
    assert {int(a, 16) - 12: f"{dynsym[int(i)]}@plt" for a, i in stubs} == want
    return want


ORACLES: dict[str, Callable[[str, Path], dict[int, str]]] = {
    "ppc": ppc_plt, "ppc64le": ppc64le_plt, "mips": mips_plt, "mipsel": mips_plt}


@functools.cache
def plt_names(isa: str, path: Path) -> dict[int, str]:
    return ORACLES.get(isa, objdump_plt)(isa, path)
