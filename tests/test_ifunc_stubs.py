"""Static glibc programs' IFUNC stubs are named `func@plt` (discover/ifunc_stubs.py).

The oracle is binutils, not our reading of the file: the cross objdump's disassembly of
`.plt` says which GOT slot each stub jumps through, readelf's relocations (RELA) or
objdump's dump of `.got.plt` (REL: the addend is the slot's word) which resolver fills
that slot, and readelf's symbol table which IFUNC symbols have that resolver as their
value.  Every stub must carry one of those names (aliases: `strchr` or `index`)."""

from __future__ import annotations

import re
import subprocess

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image

from .conftest import bin_path

TRIPLES = {"x86_64": "x86_64-linux-gnu", "i386": "i686-linux-gnu",
           "aarch64": "aarch64-linux-gnu", "s390x": "s390x-linux-gnu"}


def tool(isa: str, name: str, *args: str) -> str:
    return subprocess.run([f"{TRIPLES[isa]}-{name}", *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def stub_slots(isa: str, path: str) -> dict[int, int]:
    """Stub address → the GOT slot it jumps through, from objdump's disassembly."""
    text = tool(isa, "objdump", "-d", "-j", ".plt", path)
    lines = [ln for ln in text.splitlines() if re.match(r"^\s+[0-9a-f]+:\t", ln)]
    out: dict[int, int] = {}
    page = start = None
    for ln in lines:
        addr = int(ln.split(":")[0], 16)
        if isa == "x86_64" and (m := re.search(r"jmp\s+\*0x[0-9a-f]+\(%rip\)\s+# ([0-9a-f]+)", ln)):
            out[addr] = int(m[1], 16)
        elif isa == "i386" and (m := re.search(r"jmp\s+\*0x([0-9a-f]+)$", ln)):
            out[addr] = int(m[1], 16)
        elif isa == "aarch64":
            if m := re.search(r"adrp\s+x16, ([0-9a-f]+)", ln):
                page, start = int(m[1], 16), addr
            elif (m := re.search(r"ldr\s+x17, \[x16(?:, #(\d+))?\]", ln)) and page is not None:
                out[start] = page + int(m[1] or 0)
        elif isa == "s390x" and (m := re.search(r"larl\s+%r1,([0-9a-f]+)", ln)):
            out[addr] = int(m[1], 16)
    return out


def slot_resolvers(isa: str, path: str) -> dict[int, int]:
    """GOT slot → resolver address: readelf's RELA addends, or the slot's word (REL)."""
    if isa == "i386":
        words: dict[int, int] = {}
        for ln in tool(isa, "objdump", "-s", "-j", ".got.plt", path).splitlines():
            m = re.match(r"^ ([0-9a-f]+) ((?:[0-9a-f]{8} ?){1,4})", ln)
            if m:
                base = int(m[1], 16)
                for k, word in enumerate(m[2].split()):
                    words[base + 4 * k] = int.from_bytes(bytes.fromhex(word), "little")
        return words
    out = {}
    for ln in tool(isa, "readelf", "-rW", path).splitlines():
        m = re.match(r"^([0-9a-f]+)\s+[0-9a-f]+\s+R_\w+_IRELATIVE\s+([0-9a-f]+)", ln)
        if m:
            out[int(m[1], 16)] = int(m[2], 16)
    return out


def ifunc_names(isa: str, path: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for ln in tool(isa, "readelf", "-sW", path).splitlines():
        f = ln.split()
        if len(f) >= 8 and f[3] == "IFUNC" and f[6] != "UND":
            out.setdefault(int(f[1], 16), set()).add(f[7].split("@")[0])
    return out


@pytest.mark.parametrize("isa", list(TRIPLES))
def test_every_ifunc_stub_is_named_as_its_ifunc(isa: str) -> None:
    path = str(bin_path(isa, "conform"))
    slots, resolvers, names = stub_slots(isa, path), slot_resolvers(isa, path), \
        ifunc_names(isa, path)
    expected = {stub: names[resolvers[slot]] for stub, slot in slots.items()}
    assert len(expected) >= 5  # static glibc calls strcmp, strlen, memcpy... through them
    table = read_symbols(load_image(path))
    ours = {f.start: f.name for f in table.funcs if f.name.endswith("@plt")}
    assert set(ours) == set(expected)
    for stub, aliases in expected.items():
        assert ours[stub].removesuffix("@plt") in aliases, (hex(stub), ours[stub], aliases)

