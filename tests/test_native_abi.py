"""The Python mirrors of the native library's layouts against emutrace/native/abi.h, the one C
header that holds them: every ctypes structure and struct format the Python side reads C's
memory through, and every constant it shares with C.

A tiny C program that includes abi.h is compiled with the host's C compiler and prints, for
each struct, its size and each field's offset and size; the field names and their order come
from abi.h's own text.  A ctypes structure must have the same field names in the same order at
the same offsets with the same sizes; a struct format (no names) the same items at the same
offsets with the same sizes, array fields counted element by element.  Each constant must have
the value C gives it.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emutrace import native
from emutrace.backends import NATIVE_BACKENDS
from emutrace.errors import Unsupported
from emutrace.isa.base import CONDITION_TESTS, FlowKind
from emutrace.native import branchlib, disasmlib, ploop, replaytext, steplib, strictlib

NATIVE = Path(__file__).resolve().parent.parent / "emutrace" / "native"
ABI_H = NATIVE / "abi.h"

# C struct -> its Python mirror (module, attribute): a ctypes structure or a struct format
MIRRORS = [
    ("nt_abi", "emutrace.native", "CallAbi"),
    ("nt_config", "emutrace.native", "Config"),
    ("nt_event", "emutrace.native", "EVENT"),
    ("nt_learned", "emutrace.native", "LEARNED"),
    ("hs_config", "emutrace.backends.hooked_sites", "NsConfig"),
    ("st_config", "emutrace.native.steplib", "StepConfig"),
    ("bb_config", "emutrace.native.branchlib", "BranchConfig"),
    ("ns_entry", "emutrace.native.strictlib", "JOURNAL_ENTRY"),
    ("ns_frame", "emutrace.native.strictlib", "FRAME"),
    ("ep_frame", "emutrace.backends.entry_native", "FRAME"),
    ("uw_frame", "emutrace.backends.native_writer", "_FRAME"),
    ("uw_tail", "emutrace.backends.native_writer", "_TAIL"),
    ("pl_config", "emutrace.native.ploop", "LoopConfig"),
]

# C constant -> its Python name (module, attribute)
CONSTANTS = [
    ("NT_MAX_REGS", "emutrace.native", "MAX_REGS"),
    ("EV_CALL", "emutrace.native", "EV_CALL"),
    ("EV_RETURN", "emutrace.native", "EV_RETURN"),
    ("EV_TAIL", "emutrace.native", "EV_TAIL"),
    ("EV_CALL", "emutrace.native.branchlib", "BR_CALL"),
    ("EV_RETURN", "emutrace.native.branchlib", "BR_RETURN"),
    ("EV_TAIL", "emutrace.native.branchlib", "BR_JUMP"),
    ("EV_RAW", "emutrace.native.branchlib", "BR_RAW"),
    ("NT_STRINGS_SHIFT", "emutrace.native", "STRINGS_SHIFT"),
    ("NT_STRING_NONE", "emutrace.native", "STRING_NONE"),
    ("NT_STRING_LIMIT", "emutrace.trace.values", "STRING_LIMIT"),
    ("OP_NONE", "emutrace.native", "OP_NONE"),
    ("OP_CALL", "emutrace.native", "OP_CALL"),
    ("OP_RETURN", "emutrace.native", "OP_RETURN"),
    ("OP_JUMP", "emutrace.native", "OP_JUMP"),
    ("FINISH_UNLESS_RETURN", "emutrace.backends.hooked_sites", "_C_UNLESS_RETURN"),
    ("F_CONDITIONAL", "emutrace.backends.step_native", "_CONDITIONAL"),
    ("F_MAYBE_RETURN", "emutrace.backends.step_native", "_MAYBE_RETURN"),
    ("F_ALT_LINK", "emutrace.backends.step_native", "_ALT_LINK"),
    ("F_RET_FAST", "emutrace.backends.step_native", "_RET_FAST"),
    ("B_SITE", "emutrace.native.branchlib", "B_SITE"),
    ("B_CONDITIONAL", "emutrace.native.branchlib", "B_CONDITIONAL"),
    ("B_SPLIT", "emutrace.native.branchlib", "B_SPLIT"),
    ("B_KIND_SHIFT", "emutrace.native.branchlib", "B_KIND_SHIFT"),
    ("B_MAYBE_RETURN", "emutrace.native.branchlib", "B_MAYBE_RETURN"),
    ("B_RET_FAST", "emutrace.native.branchlib", "B_RET_FAST"),
    ("NS_ARMED", "emutrace.native.strictlib", "ARMED"),
    ("NS_DISARMED", "emutrace.native.strictlib", "DISARMED"),
    ("F_RET_KNOWN", "emutrace.backends.native_writer", "_RET_KNOWN"),
    ("F_TAIL", "emutrace.backends.native_writer", "_TAIL_FRAME"),
    ("F_CALLED", "emutrace.backends.native_writer", "_CALLED"),
    ("PL_STOP", "emutrace.native.ploop", "PL_STOP"),
    ("PL_FULL", "emutrace.native.ploop", "PL_FULL"),
    ("PL_EINTR", "emutrace.native.ploop", "PL_EINTR"),
    ("F_CONDITIONAL", "emutrace.native.steplib", "CONDITIONAL"),
    ("F_MAYBE_RETURN", "emutrace.native.steplib", "MAYBE_RETURN"),
    ("F_ALT_LINK", "emutrace.native.steplib", "ALT_LINK"),
    ("F_RET_FAST", "emutrace.native.steplib", "RET_FAST"),
    ("PL_HW_SLOTS", "emutrace.native.ploop", "HW_SLOTS"),
    ("PL_HW_CHAIN", "emutrace.native.ploop", "HW_CHAIN"),
    ("CG_CRASHED", "emutrace.native.crashguard", "CG_CRASHED"),
]


@dataclass(frozen=True)
class Field:
    names: tuple[str, ...]  # one name; a union's members: each of them
    array: bool


def _fields(body: str) -> list[Field]:
    """The fields of a struct body in order (declarators split; a union one field)."""
    out: list[Field] = []
    body = body.strip()
    while body:
        if re.match(r"union\b", body):
            inner, _, rest = body[body.index("{") + 1:].partition("}")
            assert rest.lstrip().startswith(";"), "a named union: not in abi.h's style"
            out.append(Field(tuple(n for f in _fields(inner) for n in f.names), False))
            body = rest.lstrip()[1:].strip()
            continue
        decl, _, body = body.partition(";")
        body = body.strip()
        m = re.fullmatch(r"\s*(?:const\s+)?(?:struct\s+)?\w+\s*(.*)", decl, re.S)
        assert m, decl
        for part in m.group(1).split(","):
            name = re.match(r"\s*\**\s*(\w+)", part)
            assert name, decl
            out.append(Field((name.group(1),), "[" in part))
    return out


def header_structs(text: str) -> dict[str, list[Field]]:
    """Each `typedef struct { ... } name;` of abi.h with its fields in order."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        name = re.match(r"\s*(\w+)\s*;", text[i:])
        assert name, text[m.start():i + 40]
        structs[name.group(1)] = _fields(text[m.end():i - 1])
    return structs


def _unicorn_include() -> Path | None:
    spec = importlib.util.find_spec("unicorn")
    if spec is None or spec.origin is None:
        return None
    inc = Path(spec.origin).parent / "include"
    return inc if (inc / "unicorn" / "unicorn.h").is_file() else None


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the compiled program says: per struct its size and per field (offset, size,
    element size); per constant its value."""
    cc = shutil.which("cc")
    inc = _unicorn_include()
    if cc is None or inc is None:
        pytest.skip("needs a C compiler and the unicorn wheel's headers")
    structs = header_structs(ABI_H.read_text())
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "abi.h"',
             "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'printf("S {name} %zu\\n", sizeof({name}));')
        for f in fields:
            m = f.names[0]
            elem = f"(({name} *)0)->{m}" + ("[0]" if f.array else "")
            lines.append(f'printf("F {name} {m} %zu %zu %zu\\n", offsetof({name}, {m}), '
                         f"sizeof((({name} *)0)->{m}), sizeof({elem}));")
    for c_name, _, _ in CONSTANTS + [(f"C_{t.upper()}", "", "") for t in CONDITION_TESTS] \
            + [(f"K_{k.name}", "", "") for k in FlowKind]:
        lines.append(f'printf("C {c_name} %lld\\n", (long long)({c_name}));')
    lines.append("return 0; }")
    tmp = tmp_path_factory.mktemp("abi")
    (tmp / "abi.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{NATIVE}", f"-I{inc}",
                    str(tmp / "abi.c"), "-o", str(tmp / "abi")], check=True)
    out = subprocess.run([str(tmp / "abi")], check=True, capture_output=True, text=True).stdout
    sizes: dict[str, int] = {}
    offsets: dict[str, list[tuple[str, int, int, int]]] = {}
    consts: dict[str, int] = {}
    for row in out.splitlines():
        kind, *rest = row.split()
        if kind == "S":
            sizes[rest[0]] = int(rest[1])
        elif kind == "F":
            offsets.setdefault(rest[0], []).append((rest[1], *map(int, rest[2:])))
        else:
            consts[rest[0]] = int(rest[1])
    return {"structs": structs, "sizes": sizes, "fields": offsets, "consts": consts}


def _mirror(module: str, attr: str) -> Any:
    return getattr(importlib.import_module(module), attr)


def _format_items(fmt: struct.Struct) -> list[tuple[int, int]]:
    """(offset, size) of each item of a struct format (pad bytes skipped)."""
    text = fmt.format
    order = text[0] if text[0] in "@=<>!" else "@"
    items, offset = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", text.lstrip("@=<>!")):
        for _ in range(int(count or 1)):
            size = struct.calcsize(order + code)
            if order == "@":  # native alignment, as C
                offset += -offset % size
            if code != "x":
                items.append((offset, size))
            offset += size
    return items


def _c_items(fields: list[tuple[str, int, int, int]]) -> list[tuple[int, int]]:
    """(offset, size) of each scalar of a C struct, array fields element by element."""
    return [(off + i * elem, elem) for _, off, size, elem in fields for i in range(size // elem)]


def test_every_struct_of_abi_h_has_a_python_mirror(layout: dict[str, Any]) -> None:
    assert sorted(layout["structs"]) == sorted({c for c, _, _ in MIRRORS})


@pytest.mark.parametrize(("c_name", "module", "attr"), MIRRORS,
                         ids=[f"{c}-{a}" for c, _, a in MIRRORS])
def test_python_layout_equals_abi_h(layout: dict[str, Any], c_name: str, module: str,
                                    attr: str) -> None:
    mirror = _mirror(module, attr)
    fields = layout["fields"][c_name]
    if isinstance(mirror, struct.Struct):
        assert _format_items(mirror) == _c_items(fields), f"{module}.{attr} vs {c_name}"
        assert mirror.size == layout["sizes"][c_name]
        return
    assert issubclass(mirror, ctypes.Structure)
    py = [(name, getattr(mirror, name).offset, getattr(mirror, name).size)
          for name, *_ in mirror._fields_]
    c = [(names.names[0], off, size) for names, (_, off, size, _) in
         zip(layout["structs"][c_name], fields, strict=True)]
    assert py == c, f"{module}.{attr} vs {c_name}"
    assert ctypes.sizeof(mirror) == layout["sizes"][c_name]


@pytest.mark.parametrize(("c_name", "module", "attr"), CONSTANTS,
                         ids=[f"{c}-{a}" for c, _, a in CONSTANTS])
def test_python_constant_equals_abi_h(layout: dict[str, Any], c_name: str, module: str,
                                      attr: str) -> None:
    assert _mirror(module, attr) == layout["consts"][c_name]


def test_condition_tests_and_flow_kinds_in_isa_order(layout: dict[str, Any]) -> None:
    """C's condition tests are CONDITION_TESTS' indices (fastpath.py sends the index); its
    flow kinds the codes step_native.py packs."""
    step_native = importlib.import_module("emutrace.backends.step_native")
    for i, test in enumerate(CONDITION_TESTS):
        assert layout["consts"][f"C_{test.upper()}"] == i, test
    for kind in FlowKind:
        assert layout["consts"][f"K_{kind.name}"] == step_native._KIND_CODE[kind], kind


def test_header_parser_reads_fields_unions_and_arrays() -> None:
    """The parser the layout test rests on, on the shapes abi.h uses."""
    structs = header_structs("""
        /* a comment { with braces } */
        typedef struct {
            uint32_t kind;  // a line comment
            union {
                uint32_t nregs;
                uint32_t flags;
            };
            uint64_t time, site;
            int32_t arg_regs[NT_MAX_REGS];
            const uint8_t *bytes;
        } demo;
    """)
    assert structs == {"demo": [
        Field(("kind",), False), Field(("nregs", "flags"), False), Field(("time",), False),
        Field(("site",), False), Field(("arg_regs",), True), Field(("bytes",), False)]}


def test_one_loader_for_every_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every part of the library comes through native.load: one library object, each part
    declared on it; without the library each part says why in one line (or, where a Python
    path takes over, is None)."""
    if native.unavailable_reason() is not None:
        pytest.skip(str(native.unavailable_reason()))
    parts = [native.load, branchlib.load, steplib.load, strictlib.load, ploop.load]
    libs = {id(load()) for load in parts} | {id(replaytext.load())}
    assert libs == {id(native.load())}
    assert all(native._declared[p] is native.load() for p in native._declared)
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_declared", {})
    monkeypatch.setattr(native, "library_path", lambda: None)
    disasmlib._load.cache_clear()
    try:
        for load in parts:
            with pytest.raises(Unsupported, match="native library is not built") as e:
                load()
            assert "\n" not in str(e.value)
        assert replaytext.load() is None and disasmlib._load() is None
        assert not ploop.available()
        reason = native.unavailable_reason("step")
        assert reason is not None and "\n" not in reason
    finally:
        disasmlib._load.cache_clear()


PART_LOADS = {  # a part's module -> how its engine reaches the library
    "branchlib": "branchlib.load()", "steplib": "steplib.load()",
    "strictlib": "strictlib.load()", "ploop": "ploop.load()",
    "replaytext": "replaytext.load()", "disasmlib": "disasmlib._load()",
}


@pytest.mark.parametrize("module", sorted(PART_LOADS))
def test_a_part_loaded_alone_has_hotpath_typed(module: str) -> None:
    """A fresh process that reaches the library through one part only (step's engine, say,
    which also calls the record writer's uw_* functions) finds every hotpath.c and ufwrite.c
    function typed: an untyped pointer result is an int, cut to 32 bits."""
    if native.unavailable_reason() is not None:
        pytest.skip(str(native.unavailable_reason()))
    code = (f"import ctypes\nfrom emutrace import native\n"
            f"from emutrace.native import {module}\n"
            f"lib = {PART_LOADS[module]}\n"
            f"assert lib is not None\n"
            f"for name, (args, res) in native.SIGNATURES.items():\n"
            f"    assert getattr(lib, name).restype == res, name\n"
            f"    assert getattr(lib, name).argtypes == args, name\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=NATIVE.parent.parent)


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
def test_each_native_backend_runs_in_a_fresh_process(backend: str) -> None:
    """`emutrace run --engine native` in a process of its own, where nothing loaded the
    library before the backend's engine did."""
    if native.unavailable_reason(backend) is not None:
        pytest.skip(str(native.unavailable_reason(backend)))
    hello = NATIVE.parent.parent / "testbins" / "x86_64" / "hello_fs"
    done = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", backend,
                           "--engine", "native", "-o", "/dev/null", str(hello)],
                          capture_output=True, cwd=NATIVE.parent.parent, timeout=300)
    assert done.returncode == 7, done.stderr.decode()[-2000:]
