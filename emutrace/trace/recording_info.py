"""What `emutrace info -d DIR` says about a recording (pure: no emulator): the program and
its command line, the guest ISA, how it ended, the tasks, and counts read from the records
of every task (every record is read, so a damaged `.dat` is reported as `replay` reports it)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from emutrace.trace.events import Entry, Record
from emutrace.trace.recording_files import file_size
from emutrace.trace.uftrace_names import printable
from emutrace.trace.uftrace_read import info_text, recording_tasks, sidecar_text
from emutrace.trace.uftrace_write import MAX_STACK


def info_fields(path: str) -> dict[str, str]:
    """The `key:value` text lines after the 40-byte header of uftrace's `info` file
    (cmds/info.c); `taskinfo:nr_tid=N` is kept as `taskinfo.nr_tid`.  Values are shown
    escaped (`printable`): they come from the recording."""
    fields: dict[str, str] = {}
    for line in (info_text(path) or "").split("\n"):
        key, sep, value = line.partition(":")
        if key == "taskinfo" and "=" in value:
            sub, _, value = value.partition("=")
            key = f"taskinfo.{sub}"
        if sep:
            fields[key] = printable(value)
    return fields


def sidecar_fields(path: str) -> dict[str, str]:
    """`emutrace.txt`'s `key:value` lines (empty when uftrace wrote the directory)."""
    return dict((k, v) for k, _, v in (line.partition(":") for line in
                                       sidecar_text(path).split("\n")))


def describe(path: str, isa: str, records: Iterable[Record]) -> list[str]:
    fields = info_fields(path)
    extra = sidecar_fields(path)
    calls = 0
    functions: set[int] = set()
    last = 0
    for rec in records:
        last = max(last, rec.time)  # the tasks may come one after another
        if isinstance(rec, Entry):
            calls += 1
            functions.add(rec.func)
    tasks = recording_tasks(path)
    size = sum(file_size(os.path.join(path, f"{task}.dat")) for task in tasks)
    status = fields.get("exit_status")
    stopped = extra.get("stopped", "").strip()
    if stopped:  # emutrace's own failure ended the run (uftrace_write's `stopped`)
        state = f"cut short: {stopped}; open calls end at the last record"
    elif status is None:
        state = ("cut short: the recorder was killed (or is still running); open calls end "
                 "at the last record")
    elif not status.isdecimal() or len(status) > 20:
        state = f"complete, exit status {status}"
    elif int(status) & 0x7F:  # a wait(2) status (uftrace_write.wait_status)
        state = f"complete, ended by signal {int(status) & 0x7F} (exit status " \
                f"{128 + (int(status) & 0x7F)})"
    else:
        state = f"complete, exit status {int(status) >> 8}"
    lines = [
        f"recording:   {path}",
        f"program:     {fields.get('exename', '?')}",
        f"command:     {fields.get('cmdline', '?')}",
        f"ISA:         {isa or '? (no emutrace.txt: not recorded by emutrace)'}",
        f"state:       {state}",
        f"tasks:       {len(tasks)} (tids {_listed(tasks)})",
        f"calls:       {calls} to {len(functions)} functions",
        f"data:        {size} bytes in {_dat_files(tasks)} ({size / max(calls, 1):.1f} bytes "
        f"per call: two 16-byte records and the values)",
        f"time:        guest instructions; the last record at {last}; uftrace's time column "
        f"shows 1 instruction as 1 ns",
    ]
    deep_text = extra.get("not_recorded_deep", "0").strip()
    deep = int(deep_text) if deep_text.isdecimal() and len(deep_text) < 20 else 0
    if deep:
        lines.append(f"not recorded: {deep} calls deeper than {MAX_STACK} levels "
                     f"(uftrace's depth limit)")
    return lines


def _dat_files(tasks: tuple[int, ...]) -> str:
    if len(tasks) == 1:
        return f"{tasks[0]}.dat"
    return f"{len(tasks)} task files ({tasks[0]}.dat ... {tasks[-1]}.dat)"


def _listed(tasks: tuple[int, ...]) -> str:
    shown = ",".join(map(str, tasks[:16]))
    return shown if len(tasks) <= 16 else f"{shown},... ({len(tasks) - 16} more)"
