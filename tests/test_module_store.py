"""discover.module_store: what discovery learnt about each module of a dynamic program, kept
on disk per module file at module-relative addresses.  The oracle is a run with no store
(EMUTRACE_CACHE=off): a dynamic program's trace is the same with the store off, cold, warm,
written by a run that loaded the libraries elsewhere (LD_PRELOAD moves libc down: the
store's addresses are relocated and its instructions, whose text holds absolute targets,
are decoded again) and damaged; in one process, the functions and descents a store gives
back at another load bias are those a run without the store decodes there; a tampered
record is not used."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from emutrace.discover import Discovery, memo, module_store, store
from emutrace.discover.modules import ModuleMap, short_name
from emutrace.elf import load_image
from tests.conftest import ENV, REPO, TESTBINS

AARCH64_ROOT = Path("/usr/aarch64-linux-gnu")
ARM_ROOT = REPO / ".cache" / "system-roots" / "arm"
# (program, root, argv after the program, a library that maps before libc when preloaded)
CASES = {
    "aarch64-calls.dyn": (TESTBINS / "aarch64" / "calls.dyn", AARCH64_ROOT, ["recursion"],
                          "/lib/libm.so.6"),
    "aarch64-calls.dynpie": (TESTBINS / "aarch64" / "calls.dynpie", AARCH64_ROOT,
                             ["recursion"], "/lib/libm.so.6"),
    "x86_64-calls.dyn": (TESTBINS / "x86_64" / "calls.dyn", Path("/"), ["recursion"],
                         "/lib/x86_64-linux-gnu/libm.so.6"),
    # Debian's stripped ARM libraries: Thumb code, functions found by descent
    "arm-debian-cksum": (Path("usr/bin/cksum"), ARM_ROOT, ["etc/debian_version"],
                         "/lib/arm-linux-gnueabihf/libm.so.6"),
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EMUTRACE_CACHE", raising=False)
    store.guest_writable([])
    memo._memo.clear()
    module_store.write_all()
    yield tmp_path / "xdg" / "emutrace"
    module_store.write_all()
    memo._memo.clear()


def _trace(case: str, out: Path, xdg: Path | None, preload: bool = False) -> str:
    """The case's program traced by `run -o` in a subprocess; xdg None: no store."""
    program, root, args, lib = CASES[case]
    relative = not program.is_absolute()
    env = {**ENV, **({"XDG_CACHE_HOME": str(xdg)} if xdg else {"EMUTRACE_CACHE": "off"})}
    argv = [sys.executable, "-m", "emutrace", "run", "-o", str(out),
            "--root", "." if relative else str(root),
            "--unset-env", "XDG_CACHE_HOME", "--unset-env", "EMUTRACE_CACHE",
            *([f"--env=LD_PRELOAD={lib}"] if preload else []),
            f"./{program}" if relative else str(program), *args]
    work = out.parent / "cwd"  # the guest may write into its current directory: not xdg's
    work.mkdir(exist_ok=True)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=root if relative else work)
    _stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr.decode()
    # the guest's process id is emutrace's (set_tid_address returns it): not the store's
    return out.read_text().replace(f" = {proc.pid};", " = <pid>;")


def _libc_biases(xdg: Path) -> set[int]:
    """The load biases libc's kept records were written at (each record's last field)."""
    biases: set[int] = set()
    for path in (xdg / "emutrace").glob("module-*.jsonl"):
        data = path.read_bytes()
        head = json.loads(data[:data.index(b"\n")])
        body = data[data.index(b"\n") + 1:]
        for _start, off, length in head["functions"]:
            record = json.loads(body[off:off + length])
            if record[0] in ("__libc_start_main", "exit", "__libc_start_call_main"):
                biases.add(record[-1])
    return biases


def _damage(xdg: Path) -> int:
    """Every module file's function and descent records overwritten with garbage of the
    same length (the first lines, which say where they are, stay)."""
    n = 0
    for path in (xdg / "emutrace").glob("module-*.jsonl"):
        data = bytearray(path.read_bytes())
        head_end = data.index(b"\n") + 1
        head = json.loads(data[:head_end])
        places = [(off, length) for _start, off, length in head["functions"]]
        places += [(off, length) for _entry, _alt, off, length in head["descents"]]
        for off, length in places:
            data[head_end + off:head_end + off + length] = b"x" * length
            n += 1
        path.write_bytes(bytes(data))
    return n


@pytest.mark.parametrize("case", list(CASES))
def test_traces_equal_off_cold_warm_moved_and_damaged(case: str, tmp_path: Path) -> None:
    program, root, _args, _lib = CASES[case]
    if not (root / ".emutrace-rootfs").exists() and not root.joinpath("lib").exists():
        pytest.skip(f"{root}: no such root (scripts/setup.sh makes the system roots)")
    off = _trace(case, tmp_path / "off.txt", None)
    xdg = tmp_path / "xdg"
    cold = _trace(case, tmp_path / "cold.txt", xdg)
    files = list((xdg / "emutrace").glob("module-*.jsonl"))
    assert len(files) >= 3  # the program, ld.so, libc (and more): written at exit
    warm = _trace(case, tmp_path / "warm.txt", xdg)
    moved_xdg = tmp_path / "moved"
    _trace(case, tmp_path / "preloaded.txt", moved_xdg, preload=True)
    here, there = _libc_biases(xdg), _libc_biases(moved_xdg)
    assert len(here) == len(there) == 1 and here != there  # libc was elsewhere
    moved = _trace(case, tmp_path / "moved.txt", moved_xdg)
    assert _damage(xdg) > 10
    damaged = _trace(case, tmp_path / "damaged.txt", xdg)
    assert len(off.splitlines()) > 50
    assert off == cold == warm == moved == damaged


def _process(isa_root: Path, program: Path, libc_bias: int) -> tuple[Discovery, ModuleMap]:
    """A dynamic process's module map as the Linux layer would make it: the program, ld.so
    and libc, libc at libc_bias."""
    image = load_image(str(program), dynamic=True)
    modules = ModuleMap(image.isa, str(isa_root))
    modules.add(image, 0)
    libc = load_image(str(isa_root / "lib" / "libc.so.6"), dynamic=True)
    discovery = Discovery(replace(image, modules=modules))
    modules.add(libc, libc_bias)
    return discovery, modules


LIBC_NAMES = ("printf", "malloc", "free", "puts", "qsort", "__libc_start_main", "exit")


def _decoded(discovery: Discovery) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for name in LIBC_NAMES:
        f = discovery.function_by_name(name)
        out[name] = (f.start, f.end, f.sites)
    return out


@pytest.mark.skipif(not AARCH64_ROOT.exists(), reason="no aarch64 cross root")
def test_functions_come_back_relocated(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run at one libc bias kept is what a run without the store finds at another."""
    program = TESTBINS / "aarch64" / "calls.dyn"
    first, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    _decoded(first)
    module_store.write_all()
    assert any(cache.glob("module-*.jsonl"))
    moved = 0x7000000000 + 0x5430000
    monkeypatch.setenv("EMUTRACE_CACHE", "off")
    want = _decoded(_process(AARCH64_ROOT, program, moved)[0])
    monkeypatch.delenv("EMUTRACE_CACHE")
    warm, modules = _process(AARCH64_ROOT, program, moved)
    stores = warm._module_stores
    assert stores is not None
    libc = next(m for m in modules.modules if short_name(m.path) == "libc")
    kept = stores.files[libc.start]
    assert len(stores.functions._kept) >= len(LIBC_NAMES)  # from the file, not decoded
    assert _decoded(warm) == want
    assert all(stores.functions.new.count(warm.symbols.by_name(n).start) == 0  # type: ignore[union-attr]
               for n in LIBC_NAMES)
    assert kept.module.bias == moved


@pytest.mark.skipif(not AARCH64_ROOT.exists(), reason="no aarch64 cross root")
def test_a_tampered_record_is_not_used(cache: Path) -> None:
    """A record whose function, sites or instruction bytes do not fit its module is read
    again from the module (the store is untrusted input)."""
    program = TESTBINS / "aarch64" / "calls.dyn"
    first, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    want = _decoded(first)
    module_store.write_all()
    for path in cache.glob("module-*.jsonl"):
        data = path.read_bytes()
        head_end = data.index(b"\n") + 1
        head = json.loads(data[:head_end])
        records = [json.loads(data[head_end + off:head_end + off + n])
                   for _s, off, n in head["functions"]]
        for record in records:
            if record[0] == "printf":
                record[5][0][0] += 0x10000000  # a site far outside libc
            elif record[0] == "malloc" and record[6]:
                record[6][0][4] = "00" * record[6][0][1]  # instruction bytes not the file's
            elif record[0] == "puts":
                record[1] -= 0x10000000  # the function outside libc
        body = [json.dumps(r, separators=(",", ":")).encode() for r in records]
        index, offset = [], 0
        for (start, _off, _n), raw in zip(head["functions"], body, strict=True):
            index.append([start, offset, len(raw)])
            offset += len(raw) + 1
        head["functions"] = index
        path.write_bytes(json.dumps(head).encode() + b"\n" + b"".join(r + b"\n" for r in body))
    again, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    stores = again._module_stores
    assert stores is not None
    assert _decoded(again) == want
    new = {again.symbols.by_name(n).start for n in ("printf", "puts")}  # type: ignore[union-attr]
    assert new <= set(stores.functions.new)  # read again from libc
    assert again.symbols.by_name("free").start not in stores.functions.new  # type: ignore[union-attr]


@pytest.mark.parametrize("content", [b"", b"garbage\n", b'{"format": 2}\n',
                                     b'{"format": 2, "functions": [[1, -5, 10]], '
                                     b'"descents": [], "blocks": []}\n',
                                     b'{"format": 2, "functions": [], "descents": [], '
                                     b'"blocks": [1, 2, 3]}\n'])
@pytest.mark.skipif(not AARCH64_ROOT.exists(), reason="no aarch64 cross root")
def test_a_damaged_file_is_ignored(cache: Path, content: bytes) -> None:
    program = TESTBINS / "aarch64" / "calls.dyn"
    first, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    want = _decoded(first)
    module_store.write_all()
    for path in cache.glob("module-*.jsonl"):
        path.write_bytes(content)
    again, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    assert _decoded(again) == want


def test_too_large_a_file_is_not_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module_store, "MAX_BYTES", 100)
    if not AARCH64_ROOT.exists():
        pytest.skip("no aarch64 cross root")
    program = TESTBINS / "aarch64" / "calls.dyn"
    first, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    _decoded(first)
    module_store.write_all()
    again, _ = _process(AARCH64_ROOT, program, 0x7000000000)
    stores = again._module_stores
    assert stores is not None and not stores.functions._kept


def test_not_used_with_names_from_the_command_line(cache: Path) -> None:
    """--symbols adds names to the table: what discovery finds is not the module's alone."""
    if not AARCH64_ROOT.exists():
        pytest.skip("no aarch64 cross root")
    image = load_image(str(TESTBINS / "aarch64" / "calls.dyn"), dynamic=True)
    modules = ModuleMap(image.isa, str(AARCH64_ROOT))
    modules.add(image, 0)
    modules.add_listed(list(modules.table.funcs)[:1])
    assert Discovery(replace(image, modules=modules))._module_stores is None
