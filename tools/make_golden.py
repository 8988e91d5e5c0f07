"""Regenerate tests/golden/: the canonical call trace of each `calls` scenario, taken from
the program's own -finstrument-functions record (testbins/x86_64/calls.instr under
qemu-x86_64-static) — an oracle independent of emutrace's backends.  The tests check that
every ISA's own record gives the same text, and that every backend's trace equals it.  A
long one (10 000-deep recursion: 200 MB of indentation) is kept as its digest, `.key`
(emutrace/trace/canonical.py trace_key).

    python tools/make_golden.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.trace.canonical import canonical_from_instr, parse_instr_record, trace_key

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp", "tail",
             "exit42", "float", "deep")


def golden_text(isa: str, qemu: str, scenario: str) -> str:
    instr = ROOT / "testbins" / isa / "calls.instr"
    record = subprocess.run([qemu, str(instr), scenario], capture_output=True,
                            check=False).stderr.decode()
    syms = read_symbols(load_image(str(instr)))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)

    keep = {name(addr) for _, addr in parse_instr_record(record)}
    return canonical_from_instr(record, name, keep)


def main() -> None:
    out = ROOT / "tests" / "golden"
    out.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        key = trace_key(golden_text("x86_64", "qemu-x86_64-static", scenario))
        for stale in out.glob(f"calls-{scenario}.*"):
            stale.unlink()
        name = f"calls-{scenario}.key" if key.startswith("sha256:") else f"calls-{scenario}.txt"
        (out / name).write_text(key)


if __name__ == "__main__":
    main()
