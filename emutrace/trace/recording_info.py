"""What `emutrace info -d DIR` says about a recording (pure: no emulator): the program and
its command line, the guest ISA, how it ended, the tasks, and counts read from the records
themselves (every record is read, so a damaged `.dat` is reported as `replay` reports it)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from emutrace.trace.events import Entry, Record
from emutrace.trace.uftrace_write import TID


def info_fields(path: str) -> dict[str, str]:
    """The `key:value` text lines after the 40-byte header of uftrace's `info` file
    (cmds/info.c); `taskinfo:nr_tid=N` is kept as `taskinfo.nr_tid`."""
    try:
        with open(os.path.join(path, "info"), "rb") as f:
            text = f.read()[40:].decode(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if key == "taskinfo" and "=" in value:
            sub, _, value = value.partition("=")
            key = f"taskinfo.{sub}"
        if sep:
            fields[key] = value
    return fields


def describe(path: str, isa: str, records: Iterable[Record]) -> list[str]:
    fields = info_fields(path)
    calls = 0
    functions: set[int] = set()
    last = 0
    for rec in records:
        last = rec.time
        if isinstance(rec, Entry):
            calls += 1
            functions.add(rec.func)
    size = os.path.getsize(os.path.join(path, f"{TID}.dat"))
    status = fields.get("exit_status", "?")
    return [
        f"recording:   {path}",
        f"program:     {fields.get('exename', '?')}",
        f"command:     {fields.get('cmdline', '?')}",
        f"ISA:         {isa or '? (no emutrace.txt: not recorded by emutrace)'}",
        f"exit status: {status}",
        f"tasks:       {fields.get('taskinfo.nr_tid', '?')} "
        f"(tids {fields.get('taskinfo.tids', '?')})",
        f"calls:       {calls} to {len(functions)} functions",
        f"data:        {size} bytes in {TID}.dat ({size // 16} records of 16 bytes)",
        f"time:        guest instructions; the last record at {last}; uftrace's time column "
        f"shows 1 instruction as 1 ns",
    ]
