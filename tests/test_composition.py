"""Mechanisms are composed, not subclassed per engine, and reach engines only through the
target protocol (ARCHITECTURE.md "The tracer"), read from the source with `ast`:

* no class in emutrace/backends overrides a method of a class defined in another module
  (an engine as a subclass of the reference, overriding its private methods, is what this
  forbids; the cases still left are named in `REMAINING`, so each one removed must be
  struck here and none can be added silently);
* no backend reaches into Unicorn (`.uc`, `._uch`, libunicorn's functions): C engines take
  the target's `CPort`;
* no backend tests a target's or hook set's concrete class with `isinstance`: the registry's
  recipe picks the engine port (`backends.create`);
* every port a recipe names has its function in the mechanism's module, and the
  "what runs where" tables are the registry's;
* the site tracer calls its cleanup policy (backends/cleanup.py) and tests no `strict`
  flag of its own.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from emutrace.mechanisms import BACKENDS, all_descriptors, runs_on
from emutrace.mechanisms.settings import PORTS, PTRACE_C, PTRACE_PYTHON, UNICORN_C

BACKENDS_DIR = Path(__file__).resolve().parent.parent / "emutrace" / "backends"

# overrides still allowed: none (the set stays, so that an addition is a visible change)
REMAINING: set[str] = set()

TARGET_CLASSES = {"UnicornCpu", "PtraceTarget", "HookSet", "NativeTrapHooks", "PtraceLoop"}


def _modules() -> dict[str, ast.Module]:
    return {f.stem: ast.parse(f.read_text(), str(f)) for f in sorted(BACKENDS_DIR.glob("*.py"))}


def _methods(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def overrides_across_modules(modules: dict[str, ast.Module]) -> set[str]:
    """"module.Class(base_module.Base).method" for every method a class defines that a base
    class from another backends module defines too (protocols aside: they only declare)."""
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for name, tree in modules.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (name, node)
    found = set()
    for name, tree in modules.items():
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                base_name = base.id if isinstance(base, ast.Name) else \
                    base.attr if isinstance(base, ast.Attribute) else None
                if base_name not in classes:
                    continue
                base_module, base_node = classes[base_name]
                declared = {b.id for b in base_node.bases if isinstance(b, ast.Name)}
                if base_module == name or "Protocol" in declared:
                    continue
                for method in sorted((_methods(node) & _methods(base_node)) - {"__init__"}):
                    found.add(f"{name}.{node.name}({base_module}.{base_name}).{method}")
    return found


def test_no_engine_subclass_overrides_the_reference() -> None:
    found = overrides_across_modules(_modules())
    assert found - REMAINING == set(), "compose (an engine, a placement, an addon), do not subclass"
    assert REMAINING - found == set(), "no longer there: strike it from REMAINING"


def test_the_checker_sees_an_override_across_modules() -> None:
    modules = {"base": ast.parse("class Ref:\n    def _arm(self): ...\n"),
               "fast": ast.parse("from base import Ref\nclass Fast(Ref):\n"
                                 "    def _arm(self): ...\n")}
    assert overrides_across_modules(modules) == {"fast.Fast(base.Ref)._arm"}


def test_backends_reach_the_emulator_only_through_the_target() -> None:
    found = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("uc", "_uch"):
                found.append(f"{name}.py:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "unicorn.unicorn_py3"):
                found.append(f"{name}.py:{node.lineno}: imports {node.module}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "isinstance" and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & TARGET_CLASSES:
                    found.append(f"{name}.py:{node.lineno}: isinstance on {names}")
    assert found == [], "\n".join(found)


def test_every_port_of_a_recipe_has_its_function() -> None:
    for d in all_descriptors():
        module = importlib.import_module(f"emutrace.backends.{d.name}")
        assert module.DESCRIPTOR is d
        for port, function in d.recipe.ports:
            assert port in PORTS, (d.name, port)
            assert callable(getattr(module, function, None)), (d.name, port, function)


def test_what_runs_where_is_the_registrys() -> None:
    from emutrace.backends import NATIVE_BACKENDS
    from emutrace.native_session import C_LOOP_BACKENDS, NATIVE_TARGET_BACKENDS

    assert NATIVE_BACKENDS == runs_on(UNICORN_C) == tuple(BACKENDS)
    assert NATIVE_TARGET_BACKENDS == runs_on(PTRACE_PYTHON)
    assert C_LOOP_BACKENDS == runs_on(PTRACE_C)
    # bts records branches in a buffer the native target has no delivery for
    assert "bts" not in NATIVE_TARGET_BACKENDS and "bts" in NATIVE_BACKENDS


def flag_tests(tree: ast.Module, flag: str) -> list[int]:
    """Lines where a method reads self.<flag> (a policy's own attribute, self.policy.flag,
    is not one)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == flag
            and isinstance(node.value, ast.Name) and node.value.id == "self"]


def test_the_site_tracer_calls_its_cleanup_policy() -> None:
    tree = _modules()["int3_python"]
    assert flag_tests(tree, "strict") == [], "call the cleanup policy (cleanup.py)"


def test_the_checker_sees_a_flag_test() -> None:
    tree = ast.parse("class T:\n    def f(self):\n        if self.strict:\n            pass\n"
                     "    def g(self):\n        return self.cleanup.strict\n")
    assert flag_tests(tree, "strict") == [3]
