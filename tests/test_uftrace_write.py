"""The uftrace data directory `UftraceDirSink` writes, read back by Debian's uftrace 0.13
(the independent reader): on every ISA its `replay` call tree equals the program's own
-finstrument-functions record (run under qemu-user), and `dump --chrome` is valid JSON."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.uftrace_write import sink_for_image

from .conftest import ISAS, bin_path, run_qemu
from .test_trace_oracle import namer

UFTRACE = "uftrace"  # Debian's 0.13, installed by scripts/setup.sh
# replay's function column: indentation (2 spaces per depth), then `f(args) {`,
# `f(args) = v;` or `f(args);`, `} = v; /* f */` or `} /* f */`
LINE = re.compile(r"\|( *)(?:(\S+?)\(.*\) \{|(\S+?)\(.*\)(?: = .*)?;|\}(?: = .*;)? /\* (\S+) \*/)$")


def write_dir(out: Path, program: str, scenario: str) -> None:
    """Stream the trace into `out` as it is made (Process.sink)."""
    process = Process(RunConfig(program, [scenario], backend="int3"), warn=lambda m: None)
    out.mkdir()
    sink = sink_for_image(str(out), process.image, [program, scenario])
    process.sink = sink
    try:
        result = process.run()
    finally:
        sink.close(0)
    assert not result.records  # streamed, not kept


def replay_records(text: str) -> tuple[list[Record], list[str]]:
    """uftrace replay's tree as records; func = index into the returned names."""
    names: list[str] = []
    records: list[Record] = []
    for n, line in enumerate(text.splitlines()):
        m = LINE.search(line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        name = m.group(2) or m.group(3) or m.group(4)
        names.append(name)
        func = len(names) - 1
        if m.group(2) or m.group(3):
            records.append(Entry(n, depth, func))
        if m.group(3) or m.group(4):
            records.append(Exit(n, depth, func, None, 0))
    return records, names


@pytest.mark.parametrize("isa", ISAS)
def test_uftrace_replay_equals_self_record(isa: str, tmp_path: Path) -> None:
    scenario = "recursion"
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, program_functions)

    out = tmp_path / "uftrace.data"
    write_dir(out, str(bin_path(isa, "calls")), scenario)
    replay = subprocess.run([UFTRACE, "replay", "--no-pager", "-d", str(out)],
                            capture_output=True, text=True, check=True).stdout
    records, names = replay_records(replay)
    got = canonical_text(records, names.__getitem__, program_functions)
    assert got.count("\n") > 3
    assert got == want

    chrome = subprocess.run([UFTRACE, "dump", "--chrome", "-d", str(out)],
                            capture_output=True, text=True, check=True).stdout
    events = json.loads(chrome)["traceEvents"]
    begins = sum(e.get("ph") == "B" for e in events)
    ends = sum(e.get("ph") == "E" for e in events)
    assert begins == ends > 0
