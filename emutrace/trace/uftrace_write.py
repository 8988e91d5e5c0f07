"""Record sinks: where the shadow stack's records go as they are made.

`ListSink` keeps them in memory (the `run` command and the tests).  `UftraceDirSink`
streams them to a uftrace data directory (bounded memory): the layout Debian's uftrace 0.13
reads (`replay`, `report`, `graph`, `info`, `dump --chrome`).  Format facts:
/work/shared/reference/trace-formats.md (uftrace's `uftrace.h`, `utils/data-file.c`).

Time column: uftrace's timestamps are nanoseconds; we write guest instructions executed
(`Entry.time`, deterministic), so "1.000 us" in uftrace's output means 1000 instructions.

Arguments and return values follow a record whose `more` bit is set, laid out per the
function's spec in `info` (trace/uftrace_args.py).  A function's spec is fixed by its first
call with values; a later call whose values have another layout is written without them.

Durability: `task.txt`, the map, the `.sym` file and `info` are written when the sink is
made, so a recorder killed with SIGKILL leaves a directory uftrace reads (every record up to
the last flush; open calls show as entered).  Records are buffered (64 KiB) and `info` is
rewritten (a new file renamed over the old) before a buffer that uses a new spec reaches
`<tid>.dat`, so the data on disk never has values `info` does not describe (each spec's text
is made once: a function's spec never changes, the tables only grow).  `close` flushes
and writes `info` with the exit status.

Threads: one task per guest thread, as uftrace records a threaded program: records of
thread n (`Record.tid`) go to `<TID + n>.dat`; `task.txt` and `info` list every task (both
rewritten when a thread's first records are flushed).

Processes: a forked child (one guest process = one host process) writes into the same
directory, as uftrace records a forking program: `forked` makes the child's copy of the sink
drop the parent's buffered records and write the child's to `<pid>.dat` (pid: the child's
pid as the guest sees it; thread n of the child `<pid + n>.dat`), with a `FORK ... pid=
ppid=` line in `task.txt` (uftrace's line for a task forked without exec).  As in uftrace's
recording, the child's file starts inside its parent's frames: a return from one of them is
an exit without its entry (written), and those still open at the child's end are not
closed in its file (the frames entered before the fork).  Several
processes then rewrite `task.txt` and `info`: each rewrite is made under a lock on the
directory (flock) and keeps what the files already list that this process does not know
(other processes' tasks and lines, the specs of functions only they recorded, the first
process's exit status).

Depth: a record's depth field has 10 bits and uftrace's readers keep 1024 frames
(`MAX_STACK`, as `uftrace record`'s default max-stack); calls deeper than that are not
written (their entry and exit both), counted in `emutrace.txt` (`not_recorded_deep:`).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, NoReturn, Protocol, TextIO

from emutrace.discover.symbols import read_symbols
from emutrace.elf import Image
from emutrace.errors import OutputError
from emutrace.trace.events import Entry, Record
from emutrace.trace.uftrace_args import UNSAFE, pack_values, spec_of, spec_text
from emutrace.trace.uftrace_modules import (
    library_modules,
    map_line,
    module_functions,
    program_module,
    sym_file_name,
    sym_text,
)
from emutrace.trace.uftrace_names import printable, sym_entries, uftrace_symbolizer
from emutrace.trace.values import Value, as_value

if TYPE_CHECKING:
    from emutrace.discover.modules import ModuleMap

MAGIC = 5  # RECORD_MAGIC, uftrace.h
TYPE_ENTRY, TYPE_EXIT = 0, 1
# info header feature bits (uftrace.h enum uftrace_feat_bits)
FEAT_TASK_SESSION = 1 << 1
FEAT_ARGUMENT = 1 << 3
FEAT_RETVAL = 1 << 4
FEAT_SYM_REL_ADDR = 1 << 5  # .sym addresses are relative to the module's base
FEAT_MAX_STACK = 1 << 6
# info mask bits (uftrace.h enum uftrace_info_bits), written in this order
INFO_EXE_NAME, INFO_EXIT_STATUS, INFO_CMDLINE, INFO_TASKINFO = 0, 2, 3, 7
INFO_ARG_SPEC, INFO_PATTERN_TYPE = 10, 12
MAX_STACK = 1024
# a buffer's bytes before it is written: each flush that brings a new spec replaces `info`
# and `emutrace.txt` (a rename over the old file, which ext4 follows with a write-back)
FLUSH_BYTES = 1 << 16  # (a full disk keeps every whole buffer written before it)
EMUTRACE_FILE = "emutrace.txt"  # what uftrace's files do not say: the guest ISA
# which exits did not return by their own return instruction: "<record index> u" (unwound)
# or "<record index> x" (closed at the program's end), in record order; uftrace ignores it
EXITS_FILE = "emutrace-exits.txt"
TID = 1  # the main thread's task id in the directory (uftrace needs a positive tid)


def task_of(thread: int) -> int:
    """A guest thread's task id in the directory: the main thread (0) is TID, the n-th
    thread created TID + n — deterministic, where the guest's own tids follow the pid."""
    return TID + thread


def exits_file(task: int) -> str:
    """The main task's EXITS_FILE, `emutrace-exits.<task>.txt` for a thread's."""
    return EXITS_FILE if task == TID else f"emutrace-exits.{task}.txt"


def timestamp(time: int) -> str:
    """A time (guest instructions, read as nanoseconds) as task.txt's `SEC.NSEC`."""
    return f"{time // 10**9}.{time % 10**9:09d}"


@dataclass
class _TaskStream:
    """One task's `<task>.dat`, its exits file and what is buffered for them."""

    dat: BinaryIO
    exits: TextIO
    buf: bytearray = field(default_factory=bytearray)
    notes: list[str] = field(default_factory=list)
    size: int = 0  # bytes of the .dat on disk
    index: int = 0  # records of this task so far (the exits file counts in them)


class _SpecTexts:
    """One table's (`args` or `rets`) `spec_text` of every function, for `info`'s spec line
    and `emutrace.txt`'s kinds line, made once per function: the table only grows (a
    function's signature is the one of its first record) and keeps its order."""

    def __init__(self, table: dict[str, Signature], retval: bool) -> None:
        self.table, self.retval = table, retval
        self.specs: list[str] = []
        self.kinds: list[str] = []

    def update(self) -> _SpecTexts:
        if len(self.specs) < len(self.table):
            for name, (kinds, specs) in itertools.islice(self.table.items(), len(self.specs),
                                                         None):
                self.specs.append(spec_text(name, specs, self.retval))
                self.kinds.append(spec_text(name, kinds, self.retval))
        return self


class RecordSink(Protocol):
    def write(self, records: Iterable[Record]) -> None: ...

    def close(self, exit_status: int = 0) -> None: ...


class DroppingSink:
    """Records dropped as they come (a forked child of `record`, whose directory is its
    parent's)."""

    def write(self, records: Iterable[Record]) -> None:
        pass

    def close(self, exit_status: int = 0) -> None:
        pass


@dataclass
class ListSink:
    """Records kept in a list (today's behaviour)."""
    records: list[Record] = field(default_factory=list)

    def write(self, records: Iterable[Record]) -> None:
        self.records.extend(records)

    def close(self, exit_status: int = 0) -> None:
        pass


def pack_record(rec: Record, more: bool = False) -> bytes:
    """One 16-byte little-endian record: u64 time; u64 type:2 more:1 magic:3 depth:10
    addr:48 (uftrace.h struct uftrace_record).  Exit records carry their entry's depth."""
    kind = TYPE_ENTRY if isinstance(rec, Entry) else TYPE_EXIT
    word = kind | (int(more) << 2) | (MAGIC << 3) | ((rec.depth & 0x3FF) << 6) \
        | ((rec.func & (2**48 - 1)) << 16)
    return struct.pack("<QQ", rec.time, word)


Signature = tuple[tuple[str, ...], tuple[str, ...]]  # (kinds, specs) of one call's values


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str  # "r-xp"


class UftraceDirSink:
    """Writes `<dir>/<tid>.dat` as records arrive, and from the start `info`, `task.txt`,
    `sid-<id>.map` and `<exe>.sym`.  `functions`: (start, end, name) of the traced program;
    `mappings`: its loaded segments (the map needs them and a `[stack]` line)."""

    SID = "0123456789abcdef"
    # (backends/native_writer.py PackedSink) C writes a `char *` as uftrace's `/s`, and
    # counts the entries deeper than MAX_STACK as `write` does
    string_form = "text"
    deep_records = "count"
    any_thread = True  # C's records of every thread (each to its task's file)

    def __init__(self, path: str, exe: str, cmdline: list[str],
                 functions: list[tuple[int, int, str]], mappings: list[Mapping],
                 stack: tuple[int, int], isa: str = "", word_bits: int = 64,
                 modules: ModuleMap | None = None) -> None:
        self.path = path
        # the directory, opened once before the guest runs: every file of the recording is
        # made in it by descriptor (openat, O_NOFOLLOW), so a guest that swaps the
        # directory or plants a symlink in it redirects nothing of emutrace's
        self.dir_fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        # a dynamic program's modules (ld.so, the libraries): a map line and a `.sym` file
        # each, written again whenever ld.so maps another (uftrace_modules.py)
        self.modules = modules
        self._modules_written = 0
        self.isa = isa
        self.exe = exe
        self.cmdline = cmdline
        # by address; of several names at one address the one `emutrace run` shows first
        # (SymbolTable.containing: the smaller size, then the name sorting last), since
        # uftrace and our reader take the first name in the `.sym` file
        self.functions = sorted(sorted(functions, key=lambda f: f[2], reverse=True),
                                key=lambda f: (f[0], f[1]))
        self.mappings = mappings
        self.stack = stack
        self.word_bits = word_bits
        self.base = min((m.start for m in mappings), default=0)
        self.last_time = 0
        self.count = 0
        self.size = 0  # bytes written to the .dat so far
        self.not_recorded = 0  # calls deeper than MAX_STACK (entries; their exits too)
        # the names uftrace will give the records' addresses: specs are keyed by them
        self.name_of = uftrace_symbolizer((a, n) for a, _k, n in self._sym_lines())
        self.args: dict[str, Signature] = {}
        self.rets: dict[str, Signature] = {}
        self._arg_texts = _SpecTexts(self.args, False)
        self._ret_texts = _SpecTexts(self.rets, True)
        self._names: dict[int, str | None] = {}  # address -> _name (cached)
        self._specs: dict[tuple[str, int], str] = {}  # (kind, bits) -> spec_of (cached)
        self._specs_on_disk = (0, 0)  # len(args), len(rets) that `info` describes
        # one stream per task (a program with threads: one `<task>.dat` per thread)
        self._tasks: dict[int, _TaskStream] = {}
        self._tasks_on_disk = 0  # tasks that task.txt and `info` list
        self._failed = False
        self.records_on_disk = 0
        # the task id of this process's main thread: TID in the first process, the pid in
        # a forked child (`forked`), which also owns no exit status
        self.task_base = TID
        self.first_process = True
        self.fork_time = -1  # in a forked child: the time of its last record before the fork
        self.fork_thread = 0  # in a forked child: the guest thread that forked (its main)
        self._task_lines: list[str] = []  # this process's lines of task.txt
        # why the run stopped before the program's end, when emutrace failed (an emulator
        # crash): `emutrace info` says the recording is cut short, and why
        self.stopped = ""
        try:
            self._stream(TID)
            self._task_lines.append(f'SESS timestamp=0.000000000 pid={TID} sid={self.SID} '
                                    f'exename="{self.exe}"\n')
            self._write_task()
            self._write_map()
            self._write_sym()
            self._write_info(None)
        except OSError as e:
            self._fail(e)

    def _stream(self, task: int) -> _TaskStream:
        stream = self._tasks.get(task)
        if stream is None:
            stream = self._tasks[task] = _TaskStream(
                open(_create(self.dir_fd, f"{task}.dat"), "wb", buffering=0),
                open(_create(self.dir_fd, exits_file(task)), "w"))
        return stream

    def forked(self, pid: int, time: int, thread: int = 0) -> None:
        """In a forked child, at the fork (`pid`: the child's, as the guest sees it; `time`:
        the fork's; `thread`: the guest thread that forked, the child's only one): what is
        buffered is the parent's (it writes it), the files open are the parent's; from here
        the child's records go to `<pid>.dat` (those of a thread n it creates to
        `<pid + n>.dat`) and `task.txt` says the task was forked from the parent's."""
        parent = self.task_base
        for stream in self._tasks.values():
            stream.buf.clear()
            stream.notes.clear()
            stream.dat.close()  # (unbuffered: nothing of the parent's is written here)
            stream.exits.close()  # (flushed with every note written: nothing pending)
        self._tasks = {}
        self._tasks_on_disk = 0
        self.task_base, self.first_process, self.fork_time = pid, False, time
        self.fork_thread = thread
        self._task_lines = [f"FORK timestamp={timestamp(time)} pid={pid} ppid={parent}\n"]
        try:
            self._stream(pid)
            self._write_task()
        except OSError as e:
            self._fail(e)

    def _task(self, thread: int) -> int:
        """The task id of a guest thread's records (`Record.tid`): TID + n in the first
        process; in a forked child its pid for the thread that forked, pid + n for a thread
        n it creates."""
        if thread == self.fork_thread:
            return self.task_base
        return self.task_base + thread

    def _name(self, func: int) -> str | None:
        """The name uftrace will match a spec against, or None where it cannot: an address
        outside every symbol (uftrace then stops at "record missing argument info"), a C++
        name (uftrace shows it demangled), characters that break the spec's syntax."""
        name = self._names.get(func, "")
        if name == "":
            name = self.name_of(func)
            if name.startswith(("<", "_Z")) or UNSAFE.intersection(name):
                name = None
            self._names[func] = name
        return name

    def plan_values(self, func: int, values: list[Value], retval: bool) -> bool | None:
        """May C write `func`'s records (entries, or with `retval` exits) whose values are
        `values` (integers), and with them (backends/native_writer.py PackedSink)?  As
        `_values` writes them: with them when uftrace can name the function and this is
        the layout of its first record written, without them otherwise; not yet (None)
        while no record of a function uftrace can name was written (the first one fixes
        its layout)."""
        table = self.rets if retval else self.args
        name = self._name(func)
        if values and name is not None and name not in table:
            return None
        sig = (tuple(v.kind for v in values), tuple(spec_of(v) for v in values))
        return bool(values) and name is not None and table.get(name) == sig

    def write_packed(self, data: bytes, records: int, last_time: int,
                     not_recorded: int = 0, thread: int = 0) -> None:
        """Records of one thread (`Record.tid`) packed elsewhere, exactly as `write` packs
        them (the native writer, backends/native_writer.py: depth below MAX_STACK, no
        unwound exit, values as `args`/`rets` describe), following everything written so
        far; not_recorded: the entries deeper than MAX_STACK it left out, as `write`
        does."""
        self.not_recorded += not_recorded
        if not records:
            return
        try:
            stream = self._stream(self._task(thread))
        except OSError as e:
            self._fail(e)
        stream.buf += data
        stream.index += records
        self.count += records
        self.last_time = last_time
        if len(stream.buf) >= FLUSH_BYTES:
            self.flush()

    def _values(self, table: dict[str, Signature], func: int, values: tuple) -> bytes:
        """The packed values of a record, or b"" when they are not written (no name uftrace
        can match, a layout other than the function's first)."""
        name = self._name(func)
        if name is None:
            return b""
        vals = [as_value(v, self.word_bits) for v in values]
        specs = self._specs
        sig = (tuple(v.kind for v in vals),
               tuple(specs.get((v.kind, v.bits)) or specs.setdefault((v.kind, v.bits),
                                                                     spec_of(v))
                     for v in vals))
        if table.setdefault(name, sig) != sig:
            return b""
        return pack_values(vals, sig[1])

    def write(self, records: Iterable[Record]) -> None:
        if self.modules is not None and len(self.modules.modules) != self._modules_written:
            try:
                self._write_map()
            except OSError as e:
                self._fail(e)
        fork_time = self.fork_time
        thread, stream = self.fork_thread, self._tasks[self.task_base]
        for rec in records:
            if fork_time >= 0 and not isinstance(rec, Entry) and rec.at_exit \
                    and rec.time - rec.duration <= fork_time:
                continue  # a forked child's end leaves its parent's frames open, as uftrace
            if rec.tid != thread:
                thread = rec.tid
                try:
                    stream = self._stream(self._task(thread))
                except OSError as e:
                    self._fail(e)
            buf = stream.buf
            if rec.depth >= MAX_STACK:
                if isinstance(rec, Entry):
                    self.not_recorded += 1
                continue
            if isinstance(rec, Entry):
                data = self._values(self.args, rec.func, rec.args) if rec.args else b""
            else:
                data = (self._values(self.rets, rec.func, (rec.retval,))
                        if rec.retval is not None and not rec.unwound else b"")
            buf += pack_record(rec, bool(data))
            buf += data
            if not isinstance(rec, Entry) and rec.unwound:
                stream.notes.append(f"{stream.index} {'x' if rec.at_exit else 'u'}\n")
            self.last_time = rec.time
            self.count += 1
            stream.index += 1
        if any(len(t.buf) >= FLUSH_BYTES for t in self._tasks.values()):
            self.flush()

    def flush(self) -> None:
        """`info` first when it lacks a spec the buffer uses, then the buffer.  A write that
        fails (disk full, I/O error) is one `OutputError` (exit 74); the `.dat` is cut back
        to the last whole buffer, so what was written before stays readable (`info` keeps
        no exit status: readers say the recording was cut short)."""
        if self._failed:
            return
        try:
            if len(self._tasks) != self._tasks_on_disk:
                self._write_task()
            if (len(self.args), len(self.rets)) != self._specs_on_disk \
                    or len(self._tasks) != self._tasks_on_disk:
                self._write_info(None)
            for stream in self._tasks.values():
                done = 0
                with memoryview(stream.buf) as view:
                    while done < len(view):  # a raw write may take less than all of it
                        n = stream.dat.write(view[done:])
                        if not n:
                            raise OSError(errno.EIO, "no progress writing", stream.dat.name)
                        done += n
                stream.size += len(stream.buf)
                self.size += len(stream.buf)
                stream.buf.clear()
                if stream.notes:
                    stream.exits.writelines(stream.notes)
                    stream.exits.flush()
                    stream.notes.clear()
        except OSError as e:
            self._fail(e)
        self.records_on_disk = self.count

    def _fail(self, e: OSError) -> NoReturn:
        self._failed = True
        for stream in self._tasks.values():
            try:  # a partly written buffer would end the file mid-record
                os.ftruncate(stream.dat.fileno(), stream.size)
            except OSError:
                pass
            for f in (stream.dat, stream.exits):
                try:
                    f.close()
                except OSError:
                    pass
        raise OutputError(f"{self.path}: cannot write the recording ({e.strerror or e}); "
                          f"stopped after {self.records_on_disk} records, which stay "
                          f"readable") from None

    def close(self, exit_status: int = 0) -> None:
        if self._tasks[self.task_base].dat.closed:
            return
        self.flush()
        if self.modules is not None:  # names qualified since (`libc:free`): the last word
            try:
                self._write_map()
            except OSError as e:
                self._fail(e)
        for stream in self._tasks.values():
            stream.dat.close()
            stream.exits.close()
        self._write_info(exit_status)

    def _sym_lines(self) -> list[tuple[int, str, str]]:
        """(address, kind, name) of the `.sym` file in its order: each function's start and
        a boundary where its code ends before the next (uftrace_names.sym_entries).  A
        name is written as `printable` shows it (a newline as `\\n`, an escape as
        `\\x1b`): one line per symbol, which our reader and uftrace read back as that
        text."""
        return sym_entries((start, end, printable(name)) for start, end, name in self.functions)

    def _emutrace_text(self, argkinds: str, retkinds: str) -> str:
        """What uftrace's files do not say: the ISA, the time unit, the calls left out, and
        the kinds of the values in the argspec's layout (`name@arg1/char,arg2/uint`)."""
        return (f"isa:{self.isa}\ntime:guest-instructions\n"
                f"not_recorded_deep:{self.not_recorded}\n"
                f"argkinds:{argkinds}\nretkinds:{retkinds}\n"
                + (f"stopped:{self.stopped}\n" if self.stopped else ""))

    def _write_info(self, exit_status: int | None) -> None:
        """`info` (and `emutrace.txt`), replaced whole: a new file renamed over the old, so
        a reader (or a kill) never meets half of one.  `exit_status` None: still running (a
        forked child's is never written: the first process's, on disk, is kept)."""
        with _locked(self.dir_fd):
            disk = _key_lines(_read(self.dir_fd, "info"))
            side = _key_lines(_read(self.dir_fd, EMUTRACE_FILE))
            listed = [int(t) for t in disk.get("taskinfo:tids", "").split(",") if t.isdecimal()]
            own = sorted(self._tasks) or [self.task_base]
            tasks = (own + [t for t in listed if t not in own] if self.first_process
                     else listed + [t for t in own if t not in listed])
            argspec = _merged(self._arg_texts.update().specs, disk.get("argspec", ""))
            retspec = _merged(self._ret_texts.update().specs, disk.get("retspec", ""))
            argkinds = _merged(self._arg_texts.kinds, side.get("argkinds", ""))
            retkinds = _merged(self._ret_texts.kinds, side.get("retkinds", ""))
            mask = (1 << INFO_EXE_NAME) | (1 << INFO_CMDLINE) | (1 << INFO_TASKINFO)
            features = FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR | FEAT_MAX_STACK
            cmd = " ".join(self.cmdline).replace("\n", " ")
            text = f"exename:{self.exe}\n"
            status = (str(wait_status(exit_status)) if exit_status is not None else None) \
                if self.first_process else disk.get("exit_status")
            if status is not None:
                mask |= 1 << INFO_EXIT_STATUS
                text += f"exit_status:{status}\n"
            text += (f"cmdline:{cmd}\n"
                     f"taskinfo:lines=2\ntaskinfo:nr_tid={len(tasks)}\n"
                     f"taskinfo:tids={','.join(map(str, tasks))}\n")
            if argspec or retspec:
                # cmds/info.c fill_arg_spec / read_arg_spec; glob patterns match names exactly
                mask |= (1 << INFO_ARG_SPEC) | (1 << INFO_PATTERN_TYPE)
                features |= FEAT_ARGUMENT | FEAT_RETVAL
                text += f"argspec:lines=2\nargspec:{argspec}\nretspec:{retspec}\n"
                text += "pattern_type:glob\n"
            # "Ftrace!\0", version 4, header size 40, little-endian data, 64-bit class
            header = struct.pack("<8sIHBBQQH6x", b"Ftrace!\0", 4, 40, 1, 2, features, mask,
                                 MAX_STACK)
            _replace(self.dir_fd, "info", header + text.encode())
            sidecar = (self._emutrace_text(argkinds, retkinds) if self.first_process or not side
                       else "".join(f"{k}:{argkinds if k == 'argkinds' else retkinds}\n"
                                    if k in ("argkinds", "retkinds") else f"{k}:{v}\n"
                                    for k, v in side.items()))
            _replace(self.dir_fd, EMUTRACE_FILE, sidecar.encode())
        self._specs_on_disk = (len(self.args), len(self.rets))

    def _write_task(self) -> None:
        """This process's lines of `task.txt` (uftrace's SESS and TASK lines; FORK for a
        forked child's main task), added to what the file already holds."""
        own = list(self._task_lines)
        forked_main = None if self.first_process else self.task_base
        pid = self.task_base
        own += [f"TASK timestamp=0.000000000 tid={task} pid={pid}\n"
                for task in sorted(self._tasks) or [pid] if task != forked_main]
        with _locked(self.dir_fd):
            old = _read(self.dir_fd, "task.txt").splitlines(keepends=True)
            text = "".join(old + [line for line in own if line not in old])
            _replace(self.dir_fd, "task.txt", text.encode())
        self._tasks_on_disk = len(self._tasks)

    def _write_map(self) -> None:
        """The map (replaced whole), first the program's line, then a line and a `.sym`
        file per other module of a dynamic program."""
        # one r-xp line over the whole image (measured: uftrace 0.13 resolved no
        # symbol when the image's first line was not executable)
        text = ""
        if self.mappings:
            text += (f"{self.base:08x}-{max(m.end for m in self.mappings):08x} r-xp"
                     f" 00000000 00:00 0          {self.exe}\n")
        if self.modules is not None:
            own = {f"{os.path.basename(self.exe)}.sym"}
            for module in library_modules(self.modules, self.exe):
                name = sym_file_name(module)
                if name in own:  # two modules of one file name: the first is named
                    continue
                own.add(name)
                text += map_line(module)
                _replace(self.dir_fd, name, sym_text(self.modules, module).encode())
            self._modules_written = len(self.modules.modules)
        lo, hi = self.stack
        text += f"{lo:08x}-{hi:08x} rw-p 00000000 00:00 0          [stack]\n"
        _replace(self.dir_fd, f"sid-{self.SID}.map", text.encode())

    def _write_sym(self) -> None:
        """`%016x %c %s` lines relative to the image base (SYM_REL_ADDR); uftrace 0.13
        rejects a size column: boundary lines (`?`) end what a symbol names."""
        lines = self._sym_lines()
        with open(_create(self.dir_fd, f"{os.path.basename(self.exe)}.sym"), "w") as f:
            f.write(f"# symbols: {len(lines)}\n# path name: {self.exe}\n")
            f.writelines(f"{addr - self.base:016x} {kind} {name}\n"
                         for addr, kind, name in lines)


def wait_status(exit_code: int) -> int:
    """`info`'s exit_status is a wait(2) status (uftrace's cmds/info.c print_exit_status
    reads it with WIFEXITED/WTERMSIG): an exit code c < 128 is c << 8; 128 + N, a guest
    killed by signal N (or the recording interrupted by it), is N."""
    return exit_code - 128 if 128 < exit_code < 128 + 65 else (exit_code & 0xFF) << 8


class _locked:
    """The recording's directory locked (flock) against the other processes of the
    recording rewriting `info` or `task.txt` at the same time."""

    def __init__(self, dir_fd: int) -> None:
        self.dir_fd = dir_fd

    def __enter__(self) -> None:
        self.fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.dir_fd)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # (the lock goes with the descriptor)


def _read(dir_fd: int, name: str) -> str:
    """A small file of the recording as text ("" when absent)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return ""
    with open(fd, "rb") as f:
        return f.read().decode(errors="replace")


def _key_lines(text: str) -> dict[str, str]:
    """`key:value` lines (after `info`'s binary header) as a dict; of `argspec:lines=2`
    and `argspec:SPEC` the spec."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        key, sep, value = line.partition(":")
        key = key.rsplit("\0", 1)[-1]  # (the first line follows the header's bytes)
        if key == "taskinfo":  # taskinfo:tids=1,2
            sub, _, value = value.partition("=")
            key = f"taskinfo:{sub}"
        if sep and not value.startswith("lines="):
            out[key] = value
    return out


def _merged(own: list[str], listed: str) -> str:
    """`;`-separated specs (`name@...`): this process's, then those of functions only
    another process of the recording wrote (`listed`, as the file has them)."""
    names = {spec.split("@", 1)[0] for spec in own}
    return ";".join(own + [spec for spec in listed.split(";")
                           if spec and spec.split("@", 1)[0] not in names])


def _create(dir_fd: int, name: str) -> int:
    """A file of the recording, created or truncated in its directory (not through a
    symlink)."""
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o644, dir_fd=dir_fd)


def _replace(dir_fd: int, name: str, data: bytes) -> None:
    """File `name` of the directory replaced whole by `data` (a file renamed over it), or an
    OSError; a short write is written on (a buffered file's write would take it for success
    and drop the rest of a large `.sym` at a full disk, with no error)."""
    tmp = name + ".tmp"
    try:
        with open(_create(dir_fd, tmp), "wb", buffering=0) as f, memoryview(data) as view:
            done = 0
            while done < len(view):
                n = f.write(view[done:])
                if not n:
                    raise OSError(errno.EIO, "no progress writing", tmp)
                done += n
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dir_fd)  # the old file stays whole
        except OSError:
            pass
        raise
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def sink_for_image(path: str, image: Image, cmdline: list[str]) -> UftraceDirSink:
    """A directory sink for a loaded program (`path` must exist and be empty)."""
    funcs = [(s.addr, s.addr + max(s.size, 1), s.name) for s in image.symbols
             if s.kind == "func"]
    # an ELFv2 function is called at its local entry too (ppc64le: global entry + 8): a
    # second line there with the same name, so that a reader naming exact starts names it
    # (uftrace's ranges give the same name either way)
    funcs += [(f.start + f.local_offset, f.start + max(f.size, 1), f.name)
              for f in read_symbols(image).funcs if f.local_offset]
    # a static program's IFUNC stubs, named by the IFUNC they call (`strcmp@plt`:
    # discover/ifunc_stubs.py)
    funcs += [(f.start, f.start + f.size, f.name) for f in read_symbols(image).funcs
              if f.name.endswith("@plt") and image.modules is None]
    modules = image.modules if image.interpreter else None
    program = program_module(modules, image.path) if modules is not None else None
    if modules is not None and program is not None:  # its PLT slots named too (`puts@plt`)
        funcs = module_functions(modules, program)
    maps = [Mapping(g.vaddr & ~0xFFF, (g.vaddr + g.memsz + 0xFFF) & ~0xFFF, "r-xp")
            for g in image.segments]
    # the [stack] line only has to exist (uftrace's kernel/user split); placed above 2^40
    return UftraceDirSink(path, os.path.abspath(image.path), cmdline, funcs, maps,
                          (0x7FF0000000, 0x7FF0100000), image.isa.name,
                          8 * image.isa.identity.word_size,
                          modules)
