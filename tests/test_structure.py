"""The package's structure, read from the source with `ast` (tests/import_graph.py; nothing
is imported): no import cycle between modules, no import from a lower layer into a higher
one, no emulator in a pure layer.

Imports inside functions and methods count like those at the top: they run later, but they
run.  Imports under ``if TYPE_CHECKING:`` never run, so they cannot close an import cycle and
the cycle rule leaves them out; they still make the code depend on the module they name, so
the layer rule and the purity rule count them (a type from a higher layer is an upward
dependency; a pure module that names an emulator's type knows the emulator).

The layers, bottom first (DESIGN.md §2 as the code stands):

* leaves: the error type, the guest's environment, ELF tables read with `struct`, the Debian
  root builder, checked quantities (durations, counts, sizes), the guest path sandbox (both
  the Linux layer and the native target's confinement apply it), the standard descriptors
  held closed at start (stdio) — each imports at most the error type;
* isa (one frozen description per ISA) and mechanisms (what is known of each tracing
  mechanism without running it: descriptors, settings, the registry by name);
* the loader and layouts of the package's one C library (native/__init__.py) and its
  disassembler binding (native/disasmlib.py), which discovery decodes with;
* elf and discover: the program image and what is found in it.  They are one layer: an
  Image carries the module map that discovery builds from Images (elf.py names ModuleMap
  as a type only);
* trace and cost: events, shadow stack, sinks and viewers; prices and predictions — two
  pure peers;
* native: the bindings of the library's engines (hot paths, ptrace loop, step, strict,
  branch, replay text), which turn C records into trace events;
* target: execution engines (Unicorn, ptrace) behind one protocol;
* backends: the mechanisms, written against the target protocol;
* tracer: the tracer of a traced run (shadow stacks, record sink, the backend's end), which
  the three wirings share; it knows the backend protocol, no target, machine or wiring;
* machine: the Linux user-mode layer and the boards' devices, over targets and backends;
* session: the wirings of a traced run (Linux user mode, native process, board);
* benchgrid: the benchmark grid, which runs sessions;
* cli: one module per subcommand, at the top.

A module may import its own layer and those below it; within a layer only the cycle rule
applies.

Pure layers (isa, mechanisms, elf, discover, trace, cost) import, of this package, only each
other, the leaves and the disassembler binding (native/disasmlib.py: capstone's C library, a
disassembler, not an emulator).  Of outside packages they import no emulator (unicorn,
qiling) and not ctypes, through which the native engines and ptrace are loaded; capstone
and keystone (a disassembler and an assembler) and pyelftools are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import (
    Graph,
    Layers,
    Source,
    cycles,
    impure,
    read_package,
    unplaced,
    unused,
    upward,
)

ROOT = Path(__file__).resolve().parent.parent

# bottom first; "P.*" covers the package P and all under it, a bare name one module
LAYERS = Layers((
    ("emutrace", "emutrace.errors", "emutrace.environment", "emutrace.elf_tables",
     "emutrace.rootfs", "emutrace.quantities", "emutrace.sandbox", "emutrace.stdio"),
    ("emutrace.isa.*", "emutrace.mechanisms.*"),
    ("emutrace.native", "emutrace.native.disasmlib"),
    ("emutrace.elf", "emutrace.discover.*"),
    ("emutrace.trace.*", "emutrace.cost.*"),
    ("emutrace.native.*",),
    ("emutrace.target.*",),
    ("emutrace.backends.*",),
    ("emutrace.tracer",),
    ("emutrace.machine.*",),
    ("emutrace.session", "emutrace.native_session", "emutrace.gdb_session",
     "emutrace.qiling_session",
     "emutrace.board_session"),
    ("emutrace.benchgrid.*",),
    ("emutrace.cli.*", "emutrace.matrix.*", "emutrace.__main__"),
))

PURE = ("emutrace.isa.*", "emutrace.mechanisms.*", "emutrace.elf", "emutrace.discover.*",
        "emutrace.trace.*", "emutrace.cost.*")
PURE_MAY_IMPORT = ("emutrace", "emutrace.errors", "emutrace.environment", "emutrace.elf_tables",
                   "emutrace.rootfs", "emutrace.quantities", "emutrace.native.disasmlib")
EMULATORS = ("unicorn.*", "qiling.*", "ctypes.*")


# The emulator is reached through the target protocol (target/protocol.py) only: outside
# emutrace.target no module imports unicorn or reads a target's `.uc` / `._uch`.  What is
# left is named here with its reason, so that each one removed is struck and none is added
# silently.
EMULATOR_REACH_LEFT = {
    # the crash guard wraps libunicorn's uc_emu_start in C: it binds the emulator's library
    # itself, as the C engines do through the target's CPort
    "emutrace.native.crashguard: imports unicorn.unicorn_py3",
    # the block hook's first argument annotated with the binding's Uc
    "emutrace.backends.branch: imports unicorn",
}


def emulator_reach(sources: dict[str, Source], inside: str) -> set[str]:
    """"module: imports X" / "module: .uc" for every module outside the package `inside`
    that imports the emulator (unicorn, qiling) or reads a target's Unicorn handle (.uc, ._uch)."""
    found = set()
    for module, source in sources.items():
        if module == inside or module.startswith(inside + "."):
            continue
        for node in ast.walk(ast.parse(source.text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level \
                else []
            for name in names:
                if name.split(".")[0] in ("unicorn", "qiling"):
                    found.add(f"{module}: imports {name}")
            if isinstance(node, ast.Attribute) and node.attr in ("uc", "_uch"):
                found.add(f"{module}: .{node.attr}")
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph.of(read_package(ROOT, "emutrace"))


def test_every_module_has_a_layer(graph: Graph) -> None:
    assert unplaced(graph, LAYERS) == [], "give each new package or module a layer in LAYERS"
    assert unused(graph, LAYERS) == [], "LAYERS names a module that is gone"
    assert unused(graph, Layers((PURE, PURE_MAY_IMPORT))) == []


def test_no_import_cycle(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_upward_import(graph: Graph) -> None:
    found = upward(graph, LAYERS)
    assert not found, "upward imports:\n" + "\n".join(found)


def test_pure_layers_import_no_emulator(graph: Graph) -> None:
    found = impure(graph, PURE, PURE_MAY_IMPORT, EMULATORS)
    assert not found, "pure layers leaving the pure part:\n" + "\n".join(found)


def test_only_the_target_layer_reaches_the_emulator() -> None:
    found = emulator_reach(read_package(ROOT, "emutrace"), "emutrace.target")
    assert found - EMULATOR_REACH_LEFT == set(), \
        "reach the emulator through the target protocol (target/protocol.py)"
    assert EMULATOR_REACH_LEFT - found == set(), "no longer there: strike it"


def test_checker_reports_an_emulator_reached_outside_the_target() -> None:
    sources = {"pkg.target.cpu": Source("import unicorn\nclass C:\n    uc = None\n"),
               "pkg.machine.threads": Source("def f(k):\n    k.cpu.uc.emu_stop()\n"),
               "pkg.board": Source("from unicorn import unicorn_const as ucc\n"),
               "pkg.clean": Source("def f(cpu):\n    cpu.stop()\n")}
    assert emulator_reach(sources, "pkg.target") == {"pkg.machine.threads: .uc",
                                                     "pkg.board: imports unicorn"}


# --- the checker itself, on a made-up package ------------------------------------------

def _made_up(**modules: str) -> Graph:
    """A package `pkg` from module texts; a key ending in `__init__` is a package."""
    sources = {}
    for key, text in modules.items():
        name = key.replace("__", ".").removesuffix(".init")
        sources["pkg." + name if name else "pkg"] = Source(text, key.endswith("init"))
    return Graph.of(sources)


MADE_UP_LAYERS = Layers((("pkg.low",), ("pkg.mid.*",), ("pkg.top",)))


def test_checker_reports_a_cycle_through_a_function_level_import() -> None:
    graph = _made_up(
        low="from pkg.mid import helper\n",
        mid__init="",
        mid__helper="def f():\n    from .. import low\n    return low\n",
        top="")
    found = cycles(graph)
    assert len(found) == 1
    assert found[0].startswith("pkg.low -> pkg.mid.helper -> pkg.low")
    assert "pkg.mid.helper -> pkg.low (line 2)" in found[0]


def test_checker_leaves_type_checking_imports_out_of_cycles_but_not_out_of_layers() -> None:
    graph = _made_up(
        low="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import top\n",
        mid__init="",
        top="import pkg.low\n")
    assert cycles(graph) == []
    assert upward(graph, MADE_UP_LAYERS) == [
        "pkg.low:3 -> pkg.top (TYPE_CHECKING): layer 'pkg.low' imports layer 'pkg.top'"]


def test_checker_reports_an_upward_import() -> None:
    graph = _made_up(
        low="",
        mid__init="",
        mid__a="import importlib\n\ndef g():\n    return importlib.import_module('pkg.top')\n",
        top="from pkg.mid import a\n")
    assert upward(graph, MADE_UP_LAYERS) == [
        "pkg.mid.a:4 -> pkg.top: layer 'pkg.mid.*' imports layer 'pkg.top'"]
    assert cycles(graph) == [
        "pkg.mid.a -> pkg.top -> pkg.mid.a\n"
        "    pkg.mid.a -> pkg.top (line 4)\n    pkg.top -> pkg.mid.a (line 1)"]


def test_checker_reports_an_emulator_and_an_impure_module_in_a_pure_layer() -> None:
    graph = _made_up(
        low="",
        mid__init="",
        mid__a="class A:\n    def run(self):\n        from unicorn import Uc\n        return Uc\n",
        mid__b="from ..top import X\nimport capstone\n",
        top="X = 1\n")
    found = impure(graph, ("pkg.mid.*",), ("pkg.low",), ("unicorn.*",))
    assert found == ["pkg.mid.b:1 -> pkg.top: a pure layer imports a module that is not pure",
                     "pkg.mid.a:3 -> unicorn: a pure layer imports an emulator"]


def test_checker_places_a_module_by_its_most_specific_pattern() -> None:
    layers = Layers((("pkg", "pkg.mid", "pkg.mid.a"), ("pkg.mid.*",)))
    assert [layers.of(m) for m in ("pkg", "pkg.mid", "pkg.mid.a", "pkg.mid.b")] == [0, 0, 0, 1]
    assert layers.of("pkg.low") is None


def test_checker_places_every_module() -> None:
    graph = _made_up(low="", mid__init="", mid__a="", top="", other="")
    assert unplaced(graph, MADE_UP_LAYERS) == ["pkg.other"]
    assert unused(graph, Layers((("pkg.low", "pkg.gone", "pkg.mid.*"),))) == ["pkg.gone"]
