"""Backend descriptors (mechanisms/settings.py): every backend module exports one, and the
four places that once spelled each option themselves — argparse (`run`), `RunConfig`,
`BackendSpec` (bench) and `BackendOptions` — read it, so they agree by construction.
These tests check that they do: every setting parses on each path to the same value, a bad
value is refused on each, and the counters a real run reports are the descriptor's."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import fields
from typing import Any

import pytest

from emutrace.backends import BackendOptions
from emutrace.benchgrid.spec import BackendSpec, parse_spec
from emutrace.board_session import BoardConfig
from emutrace.cli.main import UsageExit, build_parser
from emutrace.cost import COUNTED, MAIN_EVENT
from emutrace.errors import UsageError
from emutrace.mechanisms import BACKENDS, all_descriptors, backend_settings, descriptor
from emutrace.mechanisms.settings import (
    BTS_BUFFER,
    CLEANUP,
    HW_SLOTS,
    BackendSettings,
    settings_of,
)
from emutrace.session import Process, RunConfig

from .conftest import bin_path

# (setting, text, value it means, the bench spec naming it): values chosen by hand, not
# taken from the parsers
GOOD = [(CLEANUP, "strict", "strict", "int3:strict"), (CLEANUP, "lazy", "lazy", "int3:lazy"),
        (HW_SLOTS, "3", 3, "hwbp:3"), (HW_SLOTS, "1", 1, "hwbp:1"),
        (BTS_BUFFER, "64", 64, "bts:64")]
BAD = [(CLEANUP, "eager"), (HW_SLOTS, "0"), (HW_SLOTS, "-2"), (HW_SLOTS, "many"),
       (BTS_BUFFER, "0"), (BTS_BUFFER, "x")]


def run_args(*words: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *words, "prog"])


def test_every_backend_module_exports_its_descriptor() -> None:
    assert [d.name for d in all_descriptors()] == list(BACKENDS)
    for d in all_descriptors():
        module = importlib.import_module(f"emutrace.backends.{d.name}")
        assert module.DESCRIPTOR is d
        assert d.help and d.main_event in d.counters, d.name


def test_settings_are_the_fields_of_backend_settings() -> None:
    declared = {s.name for s, _owners in backend_settings()}
    assert declared == {f.name for f in fields(BackendSettings)}
    defaults = {f.name: f.default for f in fields(BackendSettings)}
    assert defaults == {s.name: s.default for s, _owners in backend_settings()}
    assert defaults == {"cleanup": "lazy", "hw_slots": None, "bts_buffer": 4096}


def test_the_four_former_spellings_are_one() -> None:
    """RunConfig, BoardConfig, BackendSpec and BackendOptions inherit the settings, with the
    same defaults as the `run` options."""
    args = run_args()
    for cls in (RunConfig, BoardConfig, BackendSpec, BackendOptions):
        assert issubclass(cls, BackendSettings), cls
    base = settings_of(BackendSettings())
    assert settings_of(RunConfig("prog")) == base
    assert settings_of(BoardConfig("virt", "img")) == base
    assert settings_of(BackendSpec("int3", "int3")) == base
    assert settings_of(BackendOptions()) == base
    assert {name: getattr(args, name) for name in base} == base


@pytest.mark.parametrize(("setting", "text", "value", "spec"), GOOD,
                         ids=[g[3] for g in GOOD])
def test_every_option_parses_the_same_on_every_path(setting: Any, text: str, value: object,
                                                    spec: str) -> None:
    args = run_args(setting.flag, text)
    assert getattr(args, setting.name) == value
    from emutrace.cli.options import settings_from

    config = RunConfig("prog", **settings_from(args))
    assert getattr(config, setting.name) == value
    assert getattr(BackendOptions(**settings_of(config)), setting.name) == value
    assert getattr(parse_spec(spec), setting.name) == value
    assert setting.read(text) == value


@pytest.mark.parametrize(("setting", "text"), BAD, ids=[f"{b[0].name}={b[1]}" for b in BAD])
def test_a_bad_value_is_refused_on_every_path(setting: Any, text: str) -> None:
    with pytest.raises(UsageExit):  # the parser's usage error (exit 64 in main)
        run_args(setting.flag, text)
    with pytest.raises(argparse.ArgumentTypeError):
        setting.read(text)
    owner = next(o for s, o in backend_settings() if s is setting)
    with pytest.raises(UsageError, match="expected"):
        parse_spec(f"{owner}:{text}")


def test_bench_spec_messages_list_the_descriptor_forms() -> None:
    with pytest.raises(UsageError, match=r"expected int3:lazy, int3:strict, int3:native or "
                                         r"int3:record$"):
        parse_spec("int3:eager")
    with pytest.raises(UsageError, match=r"expected hwbp:N \(N ≥ 1 slots\), hwbp:native or "
                                         r"hwbp:record$"):
        parse_spec("hwbp:0")
    with pytest.raises(UsageError, match=r"expected btf:native or btf:record$"):
        parse_spec("btf:3")


def test_cost_model_reads_the_all_descriptors() -> None:
    assert COUNTED == {d.name: d.counters for d in all_descriptors()}
    assert MAIN_EVENT == {"int3": "traps", "hwbp": "hits", "bts": "records", "btf": "traps",
                          "entry": "traps", "step": "steps"}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_run_reports_the_descriptors_counters(backend: str) -> None:
    result = Process(RunConfig(str(bin_path("x86_64", "hello_fs")), [], backend=backend,
                               engine="python", allow_write=()),
                     warn=lambda m: None).run()
    assert set(result.backend_stats) == set(descriptor(backend).counters)
