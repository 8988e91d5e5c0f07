"""The price list: for every ISA, tracing backend, setting and event kind a backend counts,
what one event costs natively, where that number comes from, and whether it is an
assumption.

Decisions (each is repeated in the ``assumption`` text of the prices it affects):

* **The VM setting is this project's x86_64 KVM guest.**  Only x86_64 was measured; for the
  other nine ISAs the x86_64 figure is applied and marked as an assumption.  All VM prices
  model a ptrace tracer (what was measured).
* **The bare-metal setting models an in-kernel tracer** (uprobes / kprobes figures), because
  those are the published per-hit numbers; no current bare-metal ptrace stop figure exists
  in the reference (the only one, ptrace single-step on a 1.66 GHz Atom, 62 µs, is from
  another era).  Debug traps other than a breakpoint (#DB: a hardware-breakpoint hit, a
  single step, a branch trap) are priced like the ISA's breakpoint hit: the reference's
  inference that "on bare metal, DR and TF costs should sit close to int3 costs" ([U]).
* **Code writes** (arming or disarming a breakpoint, whether the emulator patches bytes or
  adds a site hook): in the VM one PTRACE_POKETEXT and a debug-register update one
  PTRACE_POKEUSER of the address and of the control register, both as measured by
  bench/bench_ptrace_prices.py (0.52 and 0.93 µs: 4-7 system calls, the kernel maps the
  page or re-registers a perf event); on bare metal one and two system calls, a lower bound.
* **entry in the VM is the ptrace tracer the native target is** (`--target native`): a hit
  is an int3 stop and each step-over a PTRACE_SINGLESTEP; on bare metal it is a uprobe
  (the published in-kernel figure).
* **Emulator artefacts are free natively**: dropping Unicorn's translated code after a write
  (``cache_removals``) has no native counterpart, and counts a backend derives offline
  (``calls``, ``returns``, ``tail_calls`` decoded from branch records) cost nothing at run
  time.
* **BTF in the VM stops on every instruction** (KVM drops DEBUGCTL.BTF): that price has the
  basis ``guest_insn``, so the prediction multiplies it by the instructions executed, not by
  the taken branches the backend counted.
* **BTS cannot run in this VM** (no ``cpu`` PMU); its VM prices are the bare-metal ones,
  labelled ``bare-metal`` and marked.
"""

from __future__ import annotations

from dataclasses import dataclass

from emutrace.cost import anchors as a
from emutrace.cost.anchors import REF, Anchor
from emutrace.isa import MODULES, by_name
from emutrace.mechanisms import all_descriptors

ISAS = MODULES
VM_ISA = "x86_64"  # the ISA of this project's measured VM (anchors.py)
SETTINGS = ("vm", "bare-metal")

# What each backend counts in RunResult.backend_stats (a missing key counts 0), and the
# counter that says how often its mechanism fired (plots, tables): its descriptor's
COUNTED: dict[str, tuple[str, ...]] = {d.name: d.counters for d in all_descriptors()}
MAIN_EVENT: dict[str, str] = {d.name: d.main_event for d in all_descriptors()}


@dataclass(frozen=True)
class Price:
    isa: str
    backend: str
    setting: str  # "vm" or "bare-metal": the setting this price is used for
    event: str
    ns: float  # per event (basis "event") or per guest instruction (basis "guest_insn")
    label: str  # where the number was taken: "vm" (measured here) or "bare-metal" (published)
    source: str
    assumption: str = ""  # non-empty: this price is an estimate or a substitute, and why
    basis: str = "event"


# ---------------------------------------------------------------- per-ISA trap figures
def bare_trap(isa: str) -> tuple[Anchor, str]:
    """The published in-kernel breakpoint-hit cost for the ISA (its NativeTracing data in
    isa/), and the assumption made."""
    facts = by_name(isa).native_tracing
    return a.BARE_BREAKPOINT_HIT[facts.breakpoint_figure], facts.borrowed.format(isa=isa)


def vm_substitute(isa: str) -> str:
    if isa == VM_ISA:
        return ""
    return (f"x86_64 VM figure applied; no measurement for {isa} (the project VM is an "
            "x86_64 host)")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


BTS_RECORD_NS = 1.5
BTS_RECORD_BASIS = (
    f"estimate {BTS_RECORD_NS} ns per branch record: BTS costs 20%–100% overall and a taken "
    "branch comes every ~5 instructions (~1.5 ns at 0.3 ns/insn), so 0.3–1.5 ns a record; "
    "the upper end is used (the '40x' claim would mean ~60 ns)")
FREE_DERIVED = "derived offline from what the mechanism recorded: no run-time cost"
CACHE_FREE = (f"emulator artefact: Unicorn does not see host writes to code ({REF} §1.3); "
              "native code writes need no separate step")


def _prices_for(isa: str, setting: str) -> list[Price]:
    vm = setting == "vm"
    trap, trap_note = bare_trap(isa)
    sub = vm_substitute(isa) if vm else ""
    syscall = a.VM_SYSCALL if vm else a.BM_SYSCALL
    out: list[Price] = []

    def put(backend: str, event: str, anchor: Anchor, assumption: str = "",
            ns: float | None = None, source: str = "", basis: str = "event") -> None:
        out.append(Price(isa, backend, setting, event, anchor.ns if ns is None else ns,
                         anchor.label, source or anchor.source, assumption, basis))

    free = a.Anchor(0, setting, FREE_DERIVED)
    patch_note = ("a code write = one PTRACE_POKETEXT, measured" if vm else
                  "a code write ≈ one system call (PTRACE_POKETEXT); a lower bound")
    code_write = a.VM_POKETEXT if vm else syscall
    # a debug trap other than a breakpoint, on bare metal: priced as the breakpoint hit
    db_bare = _join(trap_note, "a #DB trap priced as a breakpoint hit (on bare metal DR and "
                               f"TF costs sit close to int3 costs, {REF} §2.1 [U])")

    # int3: lazy breakpoints on call sites, returns and exits (fctrace)
    if vm:
        put("int3", "traps", a.VM_PTRACE_INT3_STOP, sub)
        put("int3", "simulated", syscall, _join(
            sub, "simulating the displaced call/return = one PTRACE_SETREGS ≈ one system call"))
        put("int3", "fallbacks", a.VM_PTRACE_STEP_OVER, _join(
            sub, "a step-over costs the full step-over minus the stop already priced as a "
                 "trap: 29.7 − 6.4 µs"), ns=a.VM_PTRACE_STEP_OVER.ns - a.VM_PTRACE_INT3_STOP.ns)
    else:
        put("int3", "traps", trap, trap_note)
        put("int3", "simulated", trap, _join(
            trap_note, "uprobes simulate the displaced instruction inside the measured hit"),
            ns=0)
        put("int3", "fallbacks", trap, _join(
            db_bare, "executing the displaced instruction out of line = one more trap"))
    for event in ("patches", "hooks_added"):
        what = "" if event == "patches" else (
            "a site hook (MIPS/RISC-V delivery, code without a symbol) arms or disarms a "
            "breakpoint: natively a code write")
        put("int3", event, code_write, _join(sub, patch_note, what))
    put("int3", "cache_removals", a.Anchor(0, setting, CACHE_FREE))
    put("int3", "functions", a.Anchor(0, setting, "a function decoded by the tracer"),
        "tracer-side decoding, not a mechanism cost: not priced")

    # hwbp: N hardware instruction breakpoints, the same lazy algorithm
    if vm:
        put("hwbp", "hits", a.VM_DR0_HIT, sub)
        put("hwbp", "stepped", a.VM_SINGLESTEP, sub)
    else:
        put("hwbp", "hits", trap, db_bare)
        put("hwbp", "stepped", trap, db_bare)
    if vm:
        put("hwbp", "slot_writes", a.VM_DR_WRITE, _join(
            sub, "a slot write = PTRACE_POKEUSER of the address and the control register "
                 "(DR0, DR7), measured together"))
    else:
        put("hwbp", "slot_writes", syscall, _join(
            sub, "a slot write = two system calls (PTRACE_POKEUSER of the address register "
                 "and of the control register, e.g. DR0 and DR7)"), ns=2 * syscall.ns)
    put("hwbp", "fallbacks", a.Anchor(0, setting, "switching a function to stepping"),
        "the steps themselves are counted and priced as 'stepped'")
    put("hwbp", "functions", a.Anchor(0, setting, "a function decoded by the tracer"),
        "tracer-side decoding, not a mechanism cost: not priced")
    put("hwbp", "max_slots", a.Anchor(0, setting, "the most slots armed at once: a gauge, "
                                                  "not an event"))

    # bts: branch records into a memory buffer, an interrupt when it fills
    no_pmu = (f"BTS cannot run in this VM (no cpu PMU, {REF} §0): bare-metal figure "
              "applied") if vm else ""
    put("bts", "records", a.BM_BTS_OVERALL, _join(no_pmu, BTS_RECORD_BASIS), ns=BTS_RECORD_NS)
    put("bts", "interrupts", trap, _join(
        no_pmu, trap_note, "a buffer-full interrupt priced as one breakpoint hit (a kernel "
                           "entry and exit)"))
    put("bts", "drained", a.Anchor(0, "bare-metal", "records decoded from the last, partial "
                                                    "buffer when the run ends"),
        _join(no_pmu, "reading the buffer after the run: not priced"))

    # btf: a trap on every taken branch (PTRACE_SINGLEBLOCK)
    if vm:
        put("btf", "traps", a.VM_SINGLEBLOCK, _join(
            sub, "BTF is ignored in this VM: a stop per guest instruction, whatever the "
                 "backend counted"), basis="guest_insn")
    else:
        put("btf", "traps", trap, db_bare)

    # entry: eager probes on every entry and return (uprobes, DTrace fbt)
    put("entry", "patches", code_write, _join(sub, patch_note))
    put("entry", "probes", a.Anchor(0, setting, "probes set at start-up"),
        "the same writes as 'patches' (priced there)")
    put("entry", "functions", a.Anchor(0, setting, "a function decoded by the tracer"),
        "tracer-side decoding, not a mechanism cost: not priced")
    if vm:  # the ptrace tracer of --target native: a stop, then a step over or a SETREGS
        put("entry", "traps", a.VM_PTRACE_INT3_STOP, _join(
            sub, "the VM models the ptrace tracer (--target native), not uprobes"))
        put("entry", "stepovers", a.VM_SINGLESTEP, _join(
            sub, "the displaced instruction single-stepped with its byte put back"))
        put("entry", "simulated", syscall, _join(
            sub, "simulating the displaced instruction = one PTRACE_SETREGS ≈ one system "
                 "call"))
    else:
        put("entry", "traps", trap, trap_note)
        # a uprobe hit, as measured, already includes running the displaced instruction
        # (out of line, or simulated): neither is priced again
        for event in ("stepovers", "simulated"):
            put("entry", event, a.Anchor(0, setting, "included in the measured uprobe hit"),
                "uprobes execute or simulate the displaced instruction inside the hit that "
                "was measured")

    # step: a trap on every instruction
    if vm:
        put("step", "steps", a.VM_SINGLESTEP, sub)
    else:
        put("step", "steps", trap, db_bare)

    for backend in ("bts", "btf", "step"):
        for event in ("calls", "returns", "tail_calls"):
            put(backend, event, free)
    return out


def _build() -> dict[tuple[str, str, str, str], Price]:
    table = {}
    for isa in ISAS:
        for setting in SETTINGS:
            for p in _prices_for(isa, setting):
                table[(p.isa, p.backend, p.setting, p.event)] = p
    return table


PRICES = _build()


def price(isa: str, backend: str, setting: str, event: str) -> Price | None:
    return PRICES.get((isa, backend, setting, event))


def cost_table() -> list[Price]:
    """Every price, in ISA, setting, backend, event order."""
    return list(PRICES.values())


# What native hardware each backend would need, per ISA, where it is missing or different
# (reference §3.1, §3.2, §4; the ISA modules' NativeTracing.notes).  Printed with a
# prediction: the price is then hypothetical.
HARDWARE_NOTES: dict[tuple[str, str], str] = {
    (backend, isa): note.format(isa=isa)
    for isa in ISAS for backend, note in by_name(isa).native_tracing.notes.items()
}
