"""The native cost model: hand-computed predictions, and the price list's completeness and
honesty (every price has a source; VM measurements and bare-metal figures are kept apart;
a figure borrowed from another ISA says so)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from emutrace.cost import COUNTED, ISAS, SETTINGS, cost_table, predict, price
from emutrace.cost.markdown import cost_table_markdown
from emutrace.isa import MODULES
from emutrace.mechanisms import BACKENDS


def test_int3_vm_by_hand() -> None:
    stats = {"traps": 1000, "patches": 200, "cache_removals": 200, "simulated": 1000,
             "fallbacks": 10}
    p = predict("x86_64", "int3", stats, guest_insns=1_000_000, setting="vm")
    # native: 1e6 insns × 0.3 ns                              =   300_000 ns
    # traps:      1000 × 6400 ns (ptrace stop+cont)           = 6_400_000
    # patches:     200 ×  522 ns (PTRACE_POKETEXT, measured)  =   104_400
    # simulated:  1000 ×  125 ns (PTRACE_SETREGS ≈ a syscall) =   125_000
    # fallbacks:    10 × 23300 ns (29.7 µs step-over − 6.4)   =   233_000
    # cache_removals: 0 (emulator artefact)
    # slowdown = (300_000 + 6_862_400) / 300_000 = 23.87467
    assert p.tracing_ns == pytest.approx(6_862_400)
    assert p.slowdown == pytest.approx(23.87467)
    assert p.breakdown["traps"].total_ns == pytest.approx(6_400_000)
    assert p.breakdown["cache_removals"].total_ns == 0


def test_int3_bare_metal_by_hand() -> None:
    stats = {"traps": 1000, "patches": 200, "simulated": 1000, "fallbacks": 10}
    p = predict("x86_64", "int3:strict", stats, guest_insns=1_000_000, setting="bare-metal")
    # traps 1000 × 300 ns (uprobe hit) + patches 200 × 90 ns (syscall) + simulated 0
    # + fallbacks 10 × 300 ns (one more trap) = 300_000 + 18_000 + 3_000 = 321_000 ns
    # slowdown = (300_000 + 321_000) / 300_000 = 2.07
    assert p.backend == "int3"
    assert p.slowdown == pytest.approx(2.07)


def test_btf_in_the_vm_stops_on_every_instruction() -> None:
    stats = {"traps": 5000, "calls": 40, "returns": 40}
    vm = predict("x86_64", "btf", stats, guest_insns=10_000, setting="vm")
    # KVM drops BTF: 10_000 stops (one per instruction) × 31_700 ns = 317_000_000 ns
    # native 10_000 × 0.3 = 3_000 ns → (3_000 + 317e6) / 3_000 = 105_667.67
    assert vm.breakdown["traps"].count == 10_000
    assert vm.slowdown == pytest.approx(105_667.67, rel=1e-6)
    assert any("per guest instruction" in a for a in vm.assumptions)
    bare = predict("x86_64", "btf", stats, guest_insns=10_000, setting="bare-metal")
    # bare metal: 5_000 taken-branch traps × 300 ns = 1_500_000 → 1_503_000 / 3_000 = 501
    assert bare.breakdown["traps"].count == 5000
    assert bare.slowdown == pytest.approx(501)


def test_entry_on_aarch64_with_another_native_speed() -> None:
    p = predict("aarch64", "entry", {"patches": 100, "traps": 2000}, guest_insns=1_000_000,
                setting="bare-metal", ns_per_insn=0.5)
    # native 1e6 × 0.5 = 500_000 ns; patches 100 × 90 = 9_000; traps 2000 × 1100 (arm64
    # uprobe) = 2_200_000 → (500_000 + 2_209_000) / 500_000 = 5.418
    assert p.slowdown == pytest.approx(5.418)
    assert any("0.5 ns" in a for a in p.assumptions)


def test_hwbp_vm_by_hand() -> None:
    p = predict("x86_64", "hwbp", {"hits": 100, "slot_writes": 50, "stepped": 10,
                                   "fallbacks": 1, "max_slots": 4}, guest_insns=100_000)
    # native 30_000 ns; hits 100 × 23_000 = 2_300_000; slot writes 50 × 934 (POKEUSER of
    # DR0 and DR7, measured) = 46_700; stepped 10 × 16_800 = 168_000
    # → (30_000 + 2_514_700) / 30_000 = 84.82333
    assert p.slowdown == pytest.approx(84.82333)


def test_entry_vm_is_the_ptrace_tracer() -> None:
    p = predict("x86_64", "entry", {"patches": 100, "traps": 50, "stepovers": 20,
                                    "simulated": 30}, guest_insns=100_000)
    # native 30_000 ns; patches 100 × 522 = 52_200; traps 50 × 6_400 (int3 stop) = 320_000;
    # stepovers 20 × 16_800 (PTRACE_SINGLESTEP) = 336_000; simulated 30 × 125 = 3_750
    # → (30_000 + 711_950) / 30_000 = 24.73167
    assert p.slowdown == pytest.approx(24.73167)


def test_missing_keys_count_zero_and_unknown_keys_are_named() -> None:
    assert predict("s390x", "step", {}, guest_insns=1000).slowdown == 1.0
    p = predict("x86_64", "bts", {"records": 1000, "new_counter": 7}, guest_insns=1000)
    # 1000 records × 1.5 ns = 1500 ns over 300 ns native → 6.0
    assert p.slowdown == pytest.approx(6.0)
    assert p.breakdown["new_counter"].price is None
    assert any("new_counter" in a and "priced 0" in a for a in p.assumptions)


def test_bad_prediction_arguments() -> None:
    with pytest.raises(ValueError):
        predict("x86_64", "int3", {}, guest_insns=0)
    with pytest.raises(ValueError):
        predict("x86_64", "int3", {}, guest_insns=10, setting="cloud")
    with pytest.raises(KeyError):
        predict("x86_64", "teleport", {}, guest_insns=10)


def test_every_isa_backend_setting_has_a_price_for_each_counted_event() -> None:
    assert set(ISAS) == set(MODULES)
    assert set(BACKENDS) <= set(COUNTED), "a registered backend has no prices"
    for isa in ISAS:
        for backend, events in COUNTED.items():
            for setting in SETTINGS:
                for event in events:
                    p = price(isa, backend, setting, event)
                    assert p is not None, (isa, backend, setting, event)
                    assert p.ns >= 0


def test_every_price_has_a_source_and_a_label() -> None:
    table = cost_table()
    assert len(table) == len(ISAS) * len(SETTINGS) * sum(len(e) for e in COUNTED.values())
    for p in table:
        assert p.source.strip(), p
        assert p.label in ("vm", "bare-metal"), p
        assert p.basis in ("event", "guest_insn"), p


def test_vm_and_bare_metal_are_kept_apart() -> None:
    for p in cost_table():
        if p.setting == "bare-metal":
            # bare-metal predictions use published figures only, never this VM's measurements
            assert p.label == "bare-metal", p
            assert "[M]" not in p.source, p
        elif p.label == "bare-metal" and p.ns:
            # a bare-metal figure in the VM setting only where the VM cannot run it, said so
            assert "cannot run in this VM" in p.assumption, p
        elif p.ns:
            assert "[M]" in p.source, p
    vm = price("x86_64", "int3", "vm", "traps")
    bare = price("x86_64", "int3", "bare-metal", "traps")
    assert vm is not None and bare is not None
    assert (vm.ns, bare.ns) == (6400, 300)


def test_borrowed_figures_are_assumptions() -> None:
    for p in cost_table():
        if p.setting == "vm" and p.isa != "x86_64" and p.ns and p.label == "vm":
            assert f"no measurement for {p.isa}" in p.assumption, p
    s390 = price("s390x", "int3", "bare-metal", "traps")
    assert s390 is not None and "no published figure for s390x" in s390.assumption


def test_cost_model_imports_no_emulator() -> None:
    code = ("import sys, emutrace.cost, emutrace.cost.markdown; "
            "assert 'unicorn' not in sys.modules and 'capstone' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_markdown_table_names_every_isa_and_source() -> None:
    text = cost_table_markdown(["x86_64", "riscv64"])
    assert "| int3 | traps | 6.4 µs [" in text
    assert "31.7 µs/insn" in text
    assert "reference/unicorn-and-hardware-facts.md §2.1 [M]" in text
    assert "riscv64" in text.split("Assumptions", 1)[1]
