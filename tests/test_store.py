"""discover.store: functions read from symbols kept on disk between runs.  The store is
read (a planted entry is what discovery returns), round-trips exactly, ignores damaged
files, is not used where a guest may write, and a run's trace is the same with a cold
store, a warm one and none."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emutrace.discover import Discovery, memo, store
from emutrace.discover.model import Function
from emutrace.discover.prototypes import (
    ProgramTypes,
    decode_types,
    encode_types,
    read_prototypes,
)
from emutrace.elf import load_image
from tests.conftest import ENV, TESTBINS

CALLS = TESTBINS / "x86_64" / "calls"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EMUTRACE_CACHE", raising=False)
    store.guest_writable([])
    memo._memo.clear()  # the in-process memo would answer before the store
    yield tmp_path / "xdg" / "emutrace"
    memo._memo.clear()


def _decoded(names: list[str], discovery: Discovery | None = None) -> dict[int, Function]:
    discovery = discovery or Discovery(load_image(str(CALLS)))
    return {f.start: f for f in (discovery.function_by_name(n) for n in names)}


def _kept(funcs: dict[int, Function], insns: store.Insns | None = None
          ) -> store.StoredFunctions:
    """funcs as a store holds them, with the instructions of insns."""
    held = store.StoredFunctions({} if insns is None else insns)
    for start, func in funcs.items():
        held[start] = func
    return held


def test_round_trip(cache: Path) -> None:
    discovery = Discovery(load_image(str(CALLS)))
    funcs = _decoded(["main", "run_scenario", "__libc_start_main"], discovery)
    where = store.store_path(str(CALLS), 0)
    assert where is not None and where.parent == cache
    main = discovery.function_by_name("main")
    blocks = {(main.start, 32, False): discovery.decoder.block_count(main.start, 32)}
    stub = Function(None, 0x400000, 0x400004, main.sites[:1], followed=frozenset({0x400002}))
    descents = {(0x400000, False): [(stub, ((0x400010, True), (0x400020, False)))]}
    store.save(where, _kept(funcs, discovery.decoder.instructions), blocks, descents)
    insns: store.Insns = {}
    got, got_blocks, got_descents = store.load(where, insns)
    assert len(got) == len(funcs) and got_blocks == blocks and got_descents == descents
    stub_sites = {(s.addr, s.alt_mode) for s in stub.sites}
    assert set(insns) == stub_sites  # a descent's instructions come with it
    assert {start: got.get(start) for start in funcs} == funcs
    sites = {(s.addr, s.alt_mode) for f in funcs.values() for s in f.sites}
    assert sites and set(insns) == sites  # each function's with it, when it is asked for
    assert all(discovery.decoder.insn_at(*key) == insn for key, insn in insns.items())
    store.save(where, got, got_blocks, got_descents)  # records never parsed: kept as read
    again, _, _ = store.load(where, {})
    assert {start: again.get(start) for start in funcs} == funcs


def test_reading_parses_only_the_functions_asked_for(cache: Path) -> None:
    """A store holds every function any run reached; a run parses the records of those it
    uses, and writes the others back untouched."""
    discovery = Discovery(load_image(str(CALLS)))
    funcs = _decoded(["main", "run_scenario", "__libc_start_main"], discovery)
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    store.save(where, _kept(funcs, discovery.decoder.instructions))
    main = discovery.function_by_name("main")
    got, _, _ = store.load(where, {})
    assert got.get(main.start) == main
    assert set(got._read) == {main.start} and len(got._unread) == len(funcs) - 1


def test_a_stored_function_is_what_discovery_returns(cache: Path) -> None:
    """The store is really read: a planted (wrong) entry for main is used."""
    main = _decoded(["main"])
    (start, real), = main.items()
    store.write_pending()  # what that run decoded is written now, not over the planted file
    planted = Function("main", start, start + 1, ())
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    store.save(where, _kept({start: planted}))
    memo._memo.clear()
    assert Discovery(load_image(str(CALLS))).function_at(start) == planted != real


def test_a_stored_block_count_is_what_the_decoder_returns(cache: Path) -> None:
    """Block counts are read from the store too (a planted, wrong count is used), and a
    store that holds every instruction needed leaves capstone unloaded."""
    main = _decoded(["main"])
    (start, _func), = main.items()
    real = Discovery(load_image(str(CALLS))).decoder.block_count(start, 16)
    store.write_pending()  # those runs' own tables are written now, not over the planted
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    store.save(where, _kept({}), {(start, 16, False): real + 5})
    memo._memo.clear()
    decoder = Discovery(load_image(str(CALLS))).decoder
    assert decoder.block_count(start, 16) == real + 5
    assert decoder._cs is None  # nothing decoded: capstone not set up


F = f'"format": {store.FORMAT}'
# the tables a damaged case below does not damage
REST = '"blocks": [], "descents": []'
GOOD_SITE = '[1, 2, "call", null, null, false, false, false, null, false, false]'
GOOD_INSN = '[1, 2, "call", "0x5", "e800", false]'
GOOD = '["f", 1, 2, false, 0, [' + GOOD_SITE + '], [' + GOOD_INSN + '], [[7, false]]]'


def _file(head: str, *records: str) -> str:
    """A store file: the first line, then the records; `@N` in head is the offset of
    record N in the body."""
    offsets, at = [], 0
    for record in records:
        offsets.append(at)
        at += len(record) + 1
    for n, off in enumerate(offsets):
        head = head.replace(f"@{n}", f"{off}, {len(records[n])}")
    return "{" + head + "}\n" + "".join(r + "\n" for r in records)


def test_the_well_formed_control_loads(cache: Path) -> None:
    """The damaged cases below differ from this one in the one field they name."""
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    where.parent.mkdir(parents=True)
    where.write_text(_file(F + ', "functions": [[1, @0]], "blocks": [[1, 9, false, 3]], '
                           '"descents": [[4, false, [null, 4, 6, false, 0, [], [], []], [5], '
                           '[[9, true]]]]', GOOD))
    insns: store.Insns = {}
    funcs, blocks, descents = store.load(where, insns)
    assert len(funcs) == 1 and blocks == {(1, 9, False): 3}
    assert descents == {(4, False): [(Function(None, 4, 6, (), followed=frozenset({5})),
                                      ((9, True),))]}
    func = funcs.get(1)
    assert func is not None and func.end == 2 and len(func.sites) == 1
    assert list(insns) == [(7, False), (1, False)] and insns[(7, False)] is None


@pytest.mark.parametrize("content", [
    "", "{", "[]", "{" + F + "}\n", '{"format": 99, "functions": [], ' + REST + '}\n',
    _file(F + ', "functions": [[1, 2]], ' + REST),
    _file(F + ', "functions": [[true, @0]], ' + REST, GOOD),
    _file(F + ', "functions": [[1, @0]], "blocks": [[1, 9, 0, 3]], "descents": []', GOOD),
    _file(F + ', "functions": [], "descents": []'),
    _file(F + ', "functions": [], "blocks": [], '
          '"descents": [[4, false, [null, 4, 6, false, 0, [], [], []], [], [[9, 1]]]]'),
    _file(F + ', "functions": [], "blocks": [], '
          '"descents": [[4, false, [null, 4, 6, false, 0, []], [], []]]')],
    ids=["empty", "truncated", "list", "no-functions", "other-format", "short-index",
         "bool-for-int-index", "int-for-bool", "no-blocks", "int-for-bool-answer",
         "old-function-record"])
def test_a_damaged_store_is_ignored(cache: Path, content: str) -> None:
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    where.parent.mkdir(parents=True)
    where.write_text(content)
    funcs, blocks, descents = store.load(where, {})
    assert (len(funcs), blocks, descents) == (0, {}, {})
    want = _decoded(["main"])
    memo._memo.clear()
    (start, func), = want.items()
    assert Discovery(load_image(str(CALLS))).function_at(start) == func


@pytest.mark.parametrize("record", [
    "[1, 2]", '["f", true, 2, false, 0, [], [], []]',
    GOOD.replace('"call"', '"bogus"', 1), GOOD.replace("e800", "zz"),
    GOOD.replace("[[7, false]]", "[[7]]"), GOOD.replace('["f", 1,', '["f", 3,'), "[1, 2",
    "{}", "[" * 100000],
    ids=["short-row", "bool-for-int", "bad-kind", "bad-hex", "short-undecodable",
         "other-start", "truncated", "object", "deep"])
def test_a_damaged_record_is_not_used(cache: Path, record: str) -> None:
    """A record that is not a well-formed function for its start: that function is read
    from the program again; the rest of the store is used."""
    insns: store.Insns = {}
    where = store.store_path(str(CALLS), 0)
    assert where is not None
    where.parent.mkdir(parents=True)
    where.write_text(_file(F + ', "functions": [[1, @0], [5, @1]], ' + REST, record,
                           GOOD.replace('["f", 1, 2,', '["g", 5, 6,')))
    funcs, _, _ = store.load(where, insns)
    assert funcs.get(1) is None and insns == {}
    good = funcs.get(5)
    assert good is not None and good.name == "g"


def test_not_used_inside_a_guest_writable_directory(cache: Path) -> None:
    store.guest_writable([str(cache.parent)])
    try:
        assert store.cache_dir() is None and store.store_path(str(CALLS), 0) is None
    finally:
        store.guest_writable([])


def _trace(tmp_path: Path, name: str, xdg: Path, off: bool = False) -> str:
    """calls traced by int3 in a subprocess; the guest's environment is the same whatever
    the store's settings (they are emutrace's, unset for the guest)."""
    out = tmp_path / name
    work = tmp_path / "cwd"  # the guest may write here (the default), not in xdg
    work.mkdir(exist_ok=True)
    env = {**ENV, "XDG_CACHE_HOME": str(xdg), **({"EMUTRACE_CACHE": "off"} if off else {})}
    got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "int3",
                          "--unset-env", "XDG_CACHE_HOME", "--unset-env", "EMUTRACE_CACHE",
                          "-o", str(out), str(CALLS)], env=env, capture_output=True,
                         timeout=600, cwd=work)
    assert got.returncode == 0, got.stderr
    return out.read_text()


def test_traces_equal_cold_warm_damaged_and_off(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    cold = _trace(tmp_path, "cold", xdg)
    kept = list((xdg / "emutrace").glob("functions-*.jsonl"))
    assert len(kept) == 1  # written at exit by the cold run
    warm = _trace(tmp_path, "warm", xdg)
    kept[0].write_text(json.dumps({"format": store.FORMAT, "functions": "garbage"}) + "\n")
    damaged = _trace(tmp_path, "damaged", xdg)
    head = kept[0].read_text().split("\n", 1)[0]
    assert json.loads(head)["functions"] != "garbage"  # rewritten
    off = _trace(tmp_path, "off", tmp_path / "unused", off=True)
    assert not (tmp_path / "unused").exists()
    assert "main" in cold and cold == warm == damaged == off


def test_a_process_tracing_many_files_keeps_few_pending(cache: Path) -> None:
    """What a run decoded waits for the process's exit, but only for the newest
    PENDING_KEPT files: opening another writes the oldest now (a pytest worker kept every
    run's functions until it ended and grew past 10 GB)."""
    store.write_pending()
    programs = [TESTBINS / "x86_64" / name for name in ("calls", "fib", "typed", "isadep")]
    assert len(programs) > store.PENDING_KEPT
    for program in programs:
        Discovery(load_image(str(program))).function_by_name("main")
        assert len(store._pending) <= store.PENDING_KEPT
    written = {p for p in programs if (w := store.store_path(str(p), 0)) and w.exists()}
    assert written == set(programs[:len(programs) - store.PENDING_KEPT])
    store.write_pending()
    assert not store._pending
    assert all((w := store.store_path(str(p), 0)) and w.exists() for p in programs)


def test_a_warm_run_decodes_nothing(tmp_path: Path) -> None:
    """What a run decodes (functions, site instructions, descent's instructions — static
    glibc's IRELATIVE PLT stubs have no symbol — and block counts) is all in the store:
    the next run of the same program never sets a decoder up (decode.engine: capstone's C
    library through emutrace.native.disasmlib, or capstone's binding)."""
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    script = ("import sys; from emutrace.cli.main import main; "
              "main(['run', '--backend', 'int3', '-o', '/dev/null', sys.argv[1]]); "
              "print(any(m in sys.modules for m in ('capstone', 'emutrace.native.disasmlib')))")
    runs = [subprocess.run([sys.executable, "-c", script, str(CALLS)], env=env, cwd=work,
                           capture_output=True, text=True, timeout=600) for _ in range(2)]
    assert [r.stdout.split()[-1] for r in runs] == ["True", "False"], runs[1].stderr


def test_a_stored_descent_is_used_only_where_its_answers_hold(cache: Path) -> None:
    """A descent (a function without a symbol) depends on which addresses are known
    function entries: a kept one whose entry questions get other answers now is not used."""
    stripped = TESTBINS / "x86_64" / "calls.stripped"
    discovery = Discovery(load_image(str(stripped)))
    entry = discovery.image.entry
    real = discovery.function_at(entry)
    (found, answers), = discovery._descents[(entry, False)]
    assert found == real
    store.write_pending()  # that run's own descents are written now, not over the planted
    planted = Function(None, entry, entry + 1, ())
    where = store.store_path(str(stripped), 0)
    assert where is not None
    for answer, used in ((False, True), (True, False)):
        # one question about an address that is no known entry in a fresh run
        store.save(where, _kept({}), {}, {(entry, False): [(planted, ((entry + 0x10, answer),))]})
        memo._memo.clear()
        got = Discovery(load_image(str(stripped))).function_at(entry)
        assert (got == planted) is used and (got == real) is not used


# ---------------------------------------------------------------- DWARF prototypes
TYPED = TESTBINS / "x86_64" / "typed"  # an enum, a struct by value, char *, _Bool


def _never(path: str, warn: object) -> ProgramTypes:
    raise AssertionError("read from the program, not from the store")


def test_prototypes_round_trip() -> None:
    """What the store writes of a program's DWARF reads back equal, enums and struct
    members included."""
    types = read_prototypes(str(TYPED))
    kinds = {t.kind for p in types.by_name.values() for t in (*p.params, p.ret)}
    assert {"enum", "struct", "str", "bool"} <= kinds
    again = decode_types(json.loads(json.dumps(encode_types(types))))
    assert again == types
    # one Prototype per function, shared by its address and its name, as read
    assert {id(p) for p in again.by_addr.values()} == {id(p) for p in again.by_name.values()}


def test_stored_prototypes_are_read_back(cache: Path) -> None:
    first = store.stored_types(str(TYPED), warn=print)
    assert [p.name for p in cache.glob("types-*.json")] != []
    assert store.stored_types(str(TYPED), _never, print) == first == read_prototypes(str(TYPED))


@pytest.mark.parametrize("content", ["", "{", "[]", '{"prototypes": [[1]]}',
                                     '{"prototypes": [], "by_addr": [[1, 0]], "by_name": [], '
                                     '"own": []}',
                                     '{"prototypes": [[[], ["int", true, "", [], [], false], '
                                     'false, []]], "by_addr": [], "by_name": [], "own": []}'])
def test_damaged_prototypes_are_read_again(cache: Path, content: str) -> None:
    store.stored_types(str(TYPED), warn=print)
    where, = cache.glob("types-*.json")
    where.write_text(content)
    calls = []

    def read(path: str, warn: object) -> ProgramTypes:
        calls.append(1)
        return read_prototypes(path)

    assert store.stored_types(str(TYPED), read, print) == read_prototypes(str(TYPED))
    assert calls == [1]


def test_prototypes_that_warned_are_not_kept(cache: Path) -> None:
    """Garbage DWARF is said on every run: its (empty) prototypes are not kept."""
    said: list[str] = []

    def garbage(path: str, warn: Callable[[str], None]) -> ProgramTypes:
        warn("emutrace: warning: unreadable DWARF")
        return ProgramTypes()

    assert store.stored_types(str(TYPED), garbage, said.append) == ProgramTypes()
    assert said == ["emutrace: warning: unreadable DWARF"]
    assert list(cache.glob("types-*.json")) == []
