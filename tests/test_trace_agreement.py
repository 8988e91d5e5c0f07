"""N-version agreement: `int3` (lazy and strict) and `step` give the same canonical trace for
every other program — the freestanding tier, the per-ISA edge cases, the stripped build and
Debian's busybox (stripped: code found by recursive descent) — on every ISA."""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import Image
from emutrace.isa import by_name
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.canonical import canonical_text

from .conftest import BUSYBOX, ISAS, TESTBINS


def namer(image: Image):  # type: ignore[no-untyped-def]
    syms = read_symbols(image)

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


def trace(path: Path, args: list[str], backend: str, cleanup: str = "lazy",
          cwd: Path | None = None) -> tuple[str, RunResult]:
    config = RunConfig(str(path), args, backend=backend, cleanup=cleanup,
                       allow_write=[str(cwd)] if cwd else ())
    result = Process(config, warn=lambda m: None).run()
    return canonical_text(result.records, namer(result.image)), result


def programs() -> list:
    out = []
    for isa in ISAS:
        out.append(pytest.param(isa, "hello_fs", [], id=f"{isa}-hello_fs"))
        out.append(pytest.param(isa, "calls.stripped", ["recursion"],
                                id=f"{isa}-stripped-recursion",
                                marks=gap(isa, "int3_stripped")))
        for p in sorted((TESTBINS / isa).glob("edge_*")):
            marks = []
            if p.name == "edge_exrl":
                cap = by_name(isa).capability("exrl_relative_long")
                marks = [pytest.mark.xfail(not cap.works, reason=cap.reason, strict=True)]
            out.append(pytest.param(isa, p.name, [], id=f"{isa}-{p.name}", marks=marks))
    return out


def gap(isa: str, capability: str) -> list[pytest.MarkDecorator]:
    """An explicit xfail while the ISA's capability table declares the gap (with its reason);
    ISAs that do not declare it must pass."""
    cap = by_name(isa).capabilities.get(capability)
    if cap is None or cap.works:
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


def agree(path: Path, args: list[str], cwd: Path | None = None,
          cleanups: tuple[str, ...] = ("lazy", "strict")) -> None:
    want, ref = trace(path, args, "step", cwd=cwd)
    assert ref.stop.kind == "exit"
    assert want.count("\n") >= 4
    for cleanup in cleanups:
        got, result = trace(path, args, "int3", cleanup, cwd=cwd)
        assert result.exit_code == ref.exit_code
        assert got == want, cleanup
        assert result.backend_stats["traps"] > 0


@pytest.mark.parametrize(("isa", "program", "args"), programs())
def test_int3_agrees_with_step(isa: str, program: str, args: list[str]) -> None:
    agree(TESTBINS / isa / program, args)


# busybox is stripped: the gaps of int3 on stripped code apply
BUSYBOX_CELLS = [pytest.param(isa, cleanup, id=f"{isa}-{cleanup}",
                              marks=(gap(isa, "int3_stripped")
                                     or (gap(isa, "int3_strict_stripped")
                                         if cleanup == "strict" else [])))
                 for isa in ISAS if by_name(isa).capability("busybox").works
                 for cleanup in ("lazy", "strict")]


@pytest.mark.busybox
@pytest.mark.parametrize(("isa", "cleanup"), BUSYBOX_CELLS)
def test_busybox_applet_agrees(isa: str, cleanup: str, tmp_path: Path) -> None:
    bb = BUSYBOX / isa / "busybox"
    if not bb.exists():
        pytest.fail(f"{bb} missing: run `make setup`")
    (tmp_path / "f.txt").write_text("b\na\nc\n")
    agree(bb, ["sort", str(tmp_path / "f.txt")], cwd=tmp_path, cleanups=(cleanup,))
