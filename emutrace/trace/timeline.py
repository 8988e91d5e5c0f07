"""A call trace as a timeline other tools open (`emutrace dump --chrome/--perfetto`; pure: no
emulator), written as a stream (memory does not grow with the trace).

* Chrome trace JSON (`{"traceEvents": [...]}`): a `B` event per entry and an `E` event per
  exit on its task's thread (`tid`: the recording's task id), nested as the calls are,
  after metadata events naming the process and each thread — the layout uftrace 0.13's
  `dump --chrome` writes (cmds/dump.c).  `ts` is in
  microseconds in that format; we write guest instructions / 1000, so a viewer shows one
  instruction as 1 ns (as uftrace shows our recordings).  Perfetto UI and chrome://tracing
  open it.  Arguments and return values, when recorded, go in `args` as uftrace puts them
  (`"arguments"`, `"retval"`).
* Perfetto TrackEvent protobuf (Perfetto's own format, trace.proto): a process and a thread
  `TrackDescriptor` per task, then one `TYPE_SLICE_BEGIN` / `TYPE_SLICE_END` packet per
  entry / exit, timestamps in guest instructions (shown as ns), arguments as debug
  annotations.  Written offline with the PyPI `perfetto` package's streaming builder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.values import Value, as_value, render

PID = TID = 1  # the guest process and its main task (uftrace_write.TID)


@dataclass(frozen=True)
class Track:
    process_name: str
    word_bits: int = 64
    show_args: bool = True
    task_ids: tuple[int, ...] = (TID,)  # the thread of a record: task_ids[Record.tid]


def _ts(insns: int) -> str:
    return f"{insns // 1000}.{insns % 1000:03d}"


def _values(values: Iterable[int | Value], bits: int) -> str:
    return ", ".join(render(as_value(v, bits)) for v in values)


def _note(rec: Exit) -> str | None:
    return ("at exit" if rec.at_exit else "unwound") if rec.unwound else None


def chrome_json(records: Iterable[Record], symbolize: Callable[[int], str],
                track: Track) -> Iterator[str]:
    """The JSON document in pieces; concatenated they are one valid JSON object."""
    head = f'"pid":{PID}'
    threads = [f'{head},"tid":{tid}' for tid in track.task_ids]
    name = json.dumps(f"[{PID}] {track.process_name}")
    yield '{"traceEvents":[\n'
    yield f'{{"ts":0,"ph":"M",{head},"name":"process_name","args":{{"name":{name}}}}}'
    for tid, thread in zip(track.task_ids, threads, strict=True):
        thread_name = json.dumps(f"[{tid}] {track.process_name}")
        yield (f',\n{{"ts":0,"ph":"M",{thread},"name":"thread_name",'
               f'"args":{{"name":{thread_name}}}}}')
    for rec in records:
        thread = threads[rec.tid]
        fn = json.dumps(symbolize(rec.func))
        args = ""
        if isinstance(rec, Entry):
            if track.show_args and rec.args:
                text = json.dumps(f"({_values(rec.args, track.word_bits)})")
                args = f',"args":{{"arguments":{text}}}'
            yield f',\n{{"ts":{_ts(rec.time)},"ph":"B",{thread},"name":{fn}{args}}}'
        else:
            note = _note(rec)
            if note is not None:
                args = f',"args":{{"note":"{note}"}}'
            elif track.show_args and rec.retval is not None:
                text = json.dumps(_values([rec.retval], track.word_bits))
                args = f',"args":{{"retval":{text}}}'
            yield f',\n{{"ts":{_ts(rec.time)},"ph":"E",{thread},"name":{fn}{args}}}'
    other = json.dumps({"time_unit": "1 us shown = 1000 guest instructions",
                        "producer": "emutrace"})
    yield f'\n],"displayTimeUnit":"ns","otherData":{other}}}\n'


def write_perfetto(records: Iterable[Record], symbolize: Callable[[int], str], track: Track,
                   out: IO[bytes]) -> None:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    builder = StreamingTraceProtoBuilder(out)
    process_uuid = 1 + PID
    thread_uuids = [(1 << 32) + tid for tid in track.task_ids]
    sequence = 1
    packet = builder.create_packet()
    packet.track_descriptor.uuid = process_uuid
    packet.track_descriptor.process.pid = PID
    packet.track_descriptor.process.process_name = track.process_name
    builder.write_packet(packet)
    for tid, thread_uuid in zip(track.task_ids, thread_uuids, strict=True):
        packet = builder.create_packet()
        packet.track_descriptor.uuid = thread_uuid
        packet.track_descriptor.parent_uuid = process_uuid
        packet.track_descriptor.thread.pid = PID
        packet.track_descriptor.thread.tid = tid
        packet.track_descriptor.thread.thread_name = track.process_name
        builder.write_packet(packet)
    for rec in records:
        packet = builder.create_packet()
        packet.timestamp = rec.time
        packet.trusted_packet_sequence_id = sequence
        event = packet.track_event
        event.track_uuid = thread_uuids[rec.tid]
        if isinstance(rec, Entry):
            event.type = TrackEvent.TYPE_SLICE_BEGIN
            event.name = symbolize(rec.func)
            if track.show_args and rec.args:
                ann = event.debug_annotations.add()
                ann.name = "arguments"
                ann.string_value = f"({_values(rec.args, track.word_bits)})"
        else:
            event.type = TrackEvent.TYPE_SLICE_END
            note = _note(rec)
            value = note if note is not None else (
                _values([rec.retval], track.word_bits)
                if track.show_args and rec.retval is not None else None)
            if value is not None:
                ann = event.debug_annotations.add()
                ann.name = "note" if note is not None else "retval"
                ann.string_value = value
        builder.write_packet(packet)
