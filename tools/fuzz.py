"""emutrace's fuzz harness: bad input must end in one line and a documented exit
code, never a traceback, an internal error (70), a hang past the budget or a crash of Python.

Three kinds of cases, each cheap enough for 10^5 runs:

* ``syscalls``: one loaded x86_64 process (in-process, no emulation); each case is a system
  call number the ABI table knows and six arguments drawn from the values that break
  things (0, -1, 2^31, 2^63, 2^64-1, page-boundary and unmapped addresses, pointers to
  paths and to a buffer the previous calls filled).  The kernel layer must return an int
  (a result or -errno) or end the guest (exit, a fatal signal); anything else is a finding.
  Guest stdio is /dev/null, writes are allowed only in a scratch directory, sleeping calls
  are woken at once (the run's stop event is set).
* ``elf``: a committed static program with 1..8 random byte edits (header-weighted), run
  with `emutrace run` in a forked child under an instruction, time and memory budget, with a
  backend drawn per case from `none`, every tracing backend, and int3 with `--cleanup
  strict`.  The exit code must not be 70 and stderr must hold no traceback, at most one
  `emutrace:` line of emutrace's own per run; the child must not die of a signal.

* ``recordings``: a real recording (`emutrace record` of `calls qsort`) with 1..4 edits —
  bytes changed, files cut, grown, removed or swapped for a FIFO, a link to /dev/zero, a
  directory or a sparse file past its cap, hostile lines, records nesting thousands deep —
  through every viewer and `diff` in a forked child under a time and memory budget: exit 0,
  1 (diff), 65 or 66 with at most one line on stderr (tools/fuzz_recordings.py).

The generators are shared with tests/test_fuzz.py (hypothesis drives them there, a short
slice in CI); this script runs the long campaign and prints the counts:

    make fuzz                       # the README's long run
    python tools/fuzz.py syscalls --cases 100000 --seed 1
    python tools/fuzz.py elf --cases 2000 --seed 1
    python tools/fuzz.py elf --seed 5 --case 1432 --keep /tmp/m   # one case, its mutant kept
    python tools/fuzz.py recordings --cases 100000 --seed 1 --jobs 2
    python tools/fuzz.py recordings --seed 1 --case 77 --keep /tmp/rec  # the mutant directory

Exit status: 0 when every case held, 1 when any finding (each printed with its seed).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import random
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: the emutrace of this checkout
    sys.path.insert(0, str(REPO))
PROGRAM = REPO / "testbins" / "x86_64" / "hello_fs"


def program_of(isa: str) -> Path:
    """The static program a campaign loads (syscalls) or mutates (elf) for an ISA."""
    return REPO / "testbins" / isa / "hello_fs"

HANG_SECONDS = 5.0  # a case taking longer is a hang
RECORDING_SECONDS = 30.0  # CPU for every viewer over one mutated recording (deep ones: ~6 s)
RECORDING_MEMORY = 1 << 30  # address space the viewers may add (the caps keep them far below)
RUN_SECONDS = 3  # the --timeout each mutant runs with
GUEST_MEMORY = 256 << 20  # --max-memory of each mutant
CHILD_MEMORY = 3 << 30  # address space a forked child may add: emutrace's memory stays bounded
# a mutant's backend: every mechanism, int3 under both cleanup policies
BACKENDS = ("none", "int3", "int3:strict", "hwbp", "bts", "btf", "entry", "step")
INTERESTING = (0, 1, 2, 3, 7, 8, 16, 0xFF, 0x1000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               1 << 32, 1 << 40, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
               (1 << 64) - 4096, 0xDEAD0000)
# calls left out: they would block on the host (read of an empty pipe we made ourselves;
# the guest's stdio is /dev/null) or end the whole fuzzing process's stdio
SKIPPED = frozenset({"pipe", "pipe2", "exit", "exit_group", "pause", "wait4", "waitid"})


class Finding(Exception):
    pass


# ---------------------------------------------------------------- syscalls
class SyscallTarget:
    """One loaded process whose kernel layer takes the fuzzed calls."""

    def __init__(self, scratch: Path, isa: str = "x86_64") -> None:
        from emutrace.machine.linux.kernel import FileDesc
        from emutrace.session import Process, RunConfig

        self.scratch = scratch
        os.chdir(scratch)
        self.proc = Process(RunConfig(str(program_of(isa)), allow_write=[str(scratch)],
                                      max_memory=64 << 20), warn=lambda m: None)
        k = self.kernel = self.proc.kernel
        for n in (0, 1, 2):
            os.close(k.fds[n].host_fd)
            k.fds[n] = FileDesc(os.open(os.devnull, os.O_RDWR), "/dev/null")
        self.proc.cpu.stop_requested.set()  # every sleep returns at once
        found = self.proc.space.find_free(0x4000)
        assert found is not None
        self.buf = found
        self.proc.space.map(self.buf, 0x4000, 3)
        paths = b"\0".join([os.fsencode(scratch / "f"), b".", b"/proc/self/exe", b"/",
                            os.fsencode(scratch / "d"), b"/etc/hostname", b""])
        k.write(self.buf, paths)
        self.names = sorted(n for n, nr in k.abi.syscalls.items()
                            if nr in k._dispatch and n not in SKIPPED)

    def pointers(self) -> tuple[int, ...]:
        b = self.buf
        return (b, b + 0x1000, b + 0x3FF8, b + 0x4000 - 1, b + 0x4000, self.proc.entry,
                self.proc.space.layout.stack_top - 64)

    def case(self, rng: random.Random) -> tuple[str, tuple[int, ...]]:
        name = rng.choice(self.names)
        pool = INTERESTING + self.pointers()
        args = tuple(rng.choice(pool) if rng.random() < 0.8 else rng.getrandbits(64)
                     for _ in range(6))
        return name, args

    def run(self, name: str, args: tuple[int, ...]) -> None:
        from emutrace.machine.linux.kernel import GuestExit
        from emutrace.machine.linux.sys_proc import GuestKilled

        k = self.kernel
        nr = k.abi.syscalls[name]
        start = time.monotonic()
        try:
            got = k.call(nr, tuple(a & k.mask for a in args))
        except (GuestExit, GuestKilled):
            return
        except Exception as e:  # noqa: BLE001 - a finding
            raise Finding(f"{name}{args}: {type(e).__name__}: {e}\n"
                          f"{traceback.format_exc(limit=4)}") from None
        if not isinstance(got, int):
            raise Finding(f"{name}{args}: returned {got!r}")
        if time.monotonic() - start > HANG_SECONDS:
            raise Finding(f"{name}{args}: took {time.monotonic() - start:.1f} s")
        if len(k.fds) > 200:  # keep the descriptor table small: close what cases opened
            for n in [n for n in k.fds if n > 2]:
                os.close(k.fds.pop(n).host_fd)

    def close(self) -> None:
        self.kernel.close_all()


# ---------------------------------------------------------------- ELF files
def mutate(blob: bytes, rng: random.Random) -> bytes:
    out = bytearray(blob)
    for _ in range(rng.randint(1, 8)):
        # the headers (ELF, program, section headers) are where a loader goes wrong
        where = rng.choice((rng.randrange(0, 64), rng.randrange(64, 64 + 56 * 12),
                            rng.randrange(len(out) - 64 * 40, len(out)),
                            rng.randrange(len(out))))
        if rng.random() < 0.5:
            out[where] = rng.getrandbits(8)
        else:  # a whole little-endian word set to an interesting value
            value = rng.choice(INTERESTING)
            out[where:where + 8] = value.to_bytes(8, "little")[:len(out) - where]
    return bytes(out)


@contextlib.contextmanager
def quiet_stdio() -> Iterator[io.StringIO]:
    """The guest writes to descriptors 1 and 2: /dev/null; emutrace's own lines: captured."""
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    err, old_out, old_err = io.StringIO(), sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        yield err
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def run_elf(blob: bytes, backend: str, scratch: Path) -> tuple[int, str]:
    from emutrace.cli.main import main

    path = scratch / "mutant"
    path.write_bytes(blob)
    name, _, cleanup = backend.partition(":")
    with quiet_stdio() as err:
        code = main(["run", "--backend", name, "--cleanup", cleanup or "lazy",
                     "--max-insns", "100000", "--timeout", str(RUN_SECONDS),
                     "--max-memory", str(GUEST_MEMORY), "--allow-write", str(scratch),
                     "-o", str(scratch / "trace.txt"), str(path)])
    return code, err.getvalue()


def inherited_address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def warm_up(base: bytes, scratch: Path, backends: tuple[str, ...]) -> None:
    """Run the unmutated program once per backend in this process, so that every forked
    child starts with emutrace, Unicorn, Capstone and their lazy imports loaded: a case then
    costs its own emulation (tens of ms), not an interpreter's start (~0.5 s)."""
    for backend in backends:
        run_elf(base, backend, scratch)
    gc.collect()
    gc.freeze()  # the warm heap: never scanned again (each case's gc.collect stays cheap)


def isolated(fn: Callable[[], None], budget: float, wall: float | None = None,
             memory: int = CHILD_MEMORY) -> None:
    """Run one case in a forked child: a crash of Python (a signal), a hang past the budget
    and a finding all come back as a Finding; the campaign itself never dies.

    The budget is the child's CPU time (user + system): on a shared, loaded machine wall
    time measures the other jobs.  A child still running after ``wall`` seconds of wall
    time (default 4 × budget) is killed and reported as a hang all the same.  ``memory``:
    the address space the child may add to what it inherits (MemoryError is a finding)."""
    wall = 4 * budget if wall is None else wall
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        # on top of what the child inherits (a parent holding several Unicorn instances
        # already has gigabytes of address space reserved: their code buffers)
        limit = inherited_address_space() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            fn()
            message = b""
        except Finding as e:
            message = str(e).encode()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            message = f"harness: {type(e).__name__}: {e}".encode()
        os.write(w, message[:4000])
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + wall
    chunks = []
    while True:  # the pipe reaches end-of-file when the child exits (or dies)
        left = deadline - time.monotonic()
        ready = select.select([r], [], [], max(left, 0))[0] if left > 0 else []
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            raise Finding(f"hang: still running after {wall:.0f} s")
        chunk = os.read(r, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    message = b"".join(chunks).decode(errors="replace")
    os.close(r)
    if os.WIFSIGNALED(status):
        raise Finding(f"crash: Python killed by signal {os.WTERMSIG(status)}")
    if message:
        raise Finding(message)
    cpu = usage.ru_utime + usage.ru_stime
    if cpu > budget:
        raise Finding(f"hang: {cpu:.1f} s of CPU (budget {budget:.0f} s)")


def check_elf(blob: bytes, backend: str, scratch: Path) -> None:
    start = time.monotonic()
    code, err = run_elf(blob, backend, scratch)
    took = time.monotonic() - start
    own = [line for line in err.splitlines() if line.startswith("emutrace:")
           and "call stack:" not in line and "unsupported syscall" not in line]
    if code == 70 or "Traceback" in err or "internal error" in err:
        raise Finding(f"{backend}: exit {code}: {err.strip()[:500]}")
    if took > 4 * (RUN_SECONDS + HANG_SECONDS):
        raise Finding(f"{backend}: took {took:.1f} s (budget {RUN_SECONDS} s)")
    if len(own) > 2:
        raise Finding(f"{backend}: {len(own)} lines: {own[:3]}")


# ---------------------------------------------------------------- campaign
def elf_case(seed: int, i: int, base: bytes,
             backends: tuple[str, ...] = BACKENDS) -> tuple[bytes, str]:
    """Case i of a seeded ELF campaign: the mutant and the backend it runs with."""
    rng = random.Random(f"{seed}:{i}")
    return mutate(base, rng), rng.choice(backends)


CASES_PER_WORKER = 200  # a fresh worker after this many cases: nothing piles up across cases


class CaseServer:
    """A forked worker that runs ELF cases one after another (a fork server): the warm
    process forks once per 200 cases, not once per case, so a case costs its own run
    (~25 ms) and no interpreter start-up or fork.  The parent holds the budgets: a worker
    that stops answering within 4 × the budget is killed (a hang), one that dies of a signal
    is a crash of Python; either way the next case gets a fresh worker.  The worker measures
    each case's CPU time (a case over the budget is a hang even when the machine is loaded
    and wall time says nothing); ``wall`` defaults to 4 × the budget."""

    def __init__(self, seed: int, base: bytes, backends: tuple[str, ...], scratch: Path,
                 budget: float = RUN_SECONDS + HANG_SECONDS, wall: float | None = None) -> None:
        self.seed, self.base, self.backends, self.scratch = seed, base, backends, scratch
        self.budget = budget
        self.wall = 4 * budget if wall is None else wall
        self.pid = 0
        self.served = 0
        self.requests = self.answers = -1
        self.pending = b""

    def _serve(self, requests: int, answers: int) -> None:
        limit = inherited_address_space() + CHILD_MEMORY
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        with os.fdopen(requests, "r") as lines:
            for line in lines:
                blob, backend = elf_case(self.seed, int(line), self.base, self.backends)
                before = resource.getrusage(resource.RUSAGE_SELF)
                try:
                    check_elf(blob, backend, self.scratch)
                    message = ""
                except Finding as e:
                    message = str(e)
                except BaseException as e:  # noqa: BLE001 - reported to the parent
                    message = f"harness: {type(e).__name__}: {e}"
                # the case's Unicorn instance is freed now, not when the cycle collector
                # next runs: each reserves ~1 GiB of code buffer, and QEMU exits when the
                # next one cannot (RLIMIT_AS)
                gc.collect()
                after = resource.getrusage(resource.RUSAGE_SELF)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                if not message and cpu > self.budget:
                    message = f"hang: {cpu:.1f} s of CPU (budget {self.budget:.0f} s)"
                answer = json.dumps(f"[{backend}] {message[:4000]}" if message else "")
                os.write(answers, answer.encode() + b"\n")

    def _spawn(self) -> None:
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(requests_w)
            os.close(answers_r)
            try:
                self._serve(requests_r, answers_w)
            finally:
                os._exit(0)
        os.close(requests_r)
        os.close(answers_w)
        self.pid, self.requests, self.answers = pid, requests_w, answers_r
        self.served, self.pending = 0, b""

    def _reap(self, kill: bool) -> int:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        else:
            os.close(self.requests)  # end of requests: the worker exits
            self.requests = -1
        _, status = os.waitpid(self.pid, 0)
        for fd in (self.requests, self.answers):
            if fd >= 0:
                os.close(fd)
        self.pid, self.requests, self.answers = 0, -1, -1
        return status

    def run(self, i: int) -> None:
        """Case i of the seed; a Finding when it does not hold."""
        if self.pid and self.served >= CASES_PER_WORKER:
            self._reap(kill=False)
        if not self.pid:
            self._spawn()
        self.served += 1
        try:
            os.write(self.requests, f"{i}\n".encode())
        except BrokenPipeError:  # the worker died between cases
            status = self._reap(kill=True)
            raise Finding(f"crash: the worker died before the case (status {status})") from None
        deadline = time.monotonic() + self.wall
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                self._reap(kill=True)
                raise Finding(f"hang: still running after {self.wall:.0f} s")
            chunk = os.read(self.answers, 65536)
            if not chunk:  # the worker died in this case
                status = self._reap(kill=False)
                if os.WIFSIGNALED(status):
                    raise Finding(f"crash: Python killed by signal {os.WTERMSIG(status)}")
                raise Finding(f"crash: the worker exited with status {status}")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        message = json.loads(line)
        if message:
            raise Finding(message)

    def close(self) -> None:
        if self.pid:
            self._reap(kill=False)


def campaign(kind: str, cases: int, seed: int, backends: tuple[str, ...] = BACKENDS,
             only: int | None = None, keep: Path | None = None, isa: str = "x86_64",
             jobs: int = 1, first: int = 0) -> int:
    """Run the cases of a seed (every ``jobs``-th one in each of ``jobs`` forked
    campaigns); print each finding and a summary; 1 when anything was found."""
    started = time.monotonic()
    indices = range(first, first + cases) if only is None else range(only, only + 1)
    if jobs > 1 and only is None:
        found = run_sharded(kind, seed, backends, isa, indices, jobs)
    else:
        found = run_slice(kind, seed, backends, isa, indices, keep)
    print(f"{kind} ({isa}): {len(indices)} cases ({indices.start}..{indices.stop - 1}), "
          f"{found} findings (tracebacks, internal "
          f"errors, hangs past the budget, crashes), {time.monotonic() - started:.0f} s, "
          f"seed {seed}", flush=True)
    return 1 if found else 0


def run_sharded(kind: str, seed: int, backends: tuple[str, ...], isa: str,
                indices: range, jobs: int) -> int:
    """``jobs`` forked campaigns, shard k taking cases k, k + jobs, …; their findings
    summed (each child reports its count through a pipe)."""
    children = []
    for k in range(jobs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                n = run_slice(kind, seed, backends, isa, indices[k::jobs], None)
                os.write(w, str(n).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        children.append((pid, r))
    found = 0
    for pid, r in children:
        answer = b""
        while chunk := os.read(r, 64):
            answer += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if not answer or status:
            print(f"finding: shard {pid} ended with status {status}", flush=True)
            found += 1
        else:
            found += int(answer)
    return found


def run_slice(kind: str, seed: int, backends: tuple[str, ...], isa: str,
              indices: range, keep: Path | None) -> int:
    findings = 0
    started = time.monotonic()
    if kind == "recordings":
        return recordings_slice(seed, indices, keep)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        target = SyscallTarget(scratch, isa) if kind == "syscalls" else None
        base = program_of(isa).read_bytes()
        server = None
        if target is None:
            warm_up(base, scratch, backends)
            server = CaseServer(seed, base, backends, scratch)
        for n, i in enumerate(indices, 1):
            try:
                if target is not None:
                    target.run(*target.case(random.Random(f"{seed}:{i}")))
                else:
                    assert server is not None
                    if keep is not None:
                        blob, backend = elf_case(seed, i, base, backends)
                        keep.write_bytes(blob)
                        print(f"case {i}: {keep}, backend {backend}")
                    server.run(i)
            except Finding as e:
                findings += 1
                print(f"finding (seed {seed}, case {i}): {e}", flush=True)
            if n % 10_000 == 0 or (kind == "elf" and n % 2_000 == 0):
                print(f"{kind}: case {i}, {n} cases here, {findings} findings, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
        if server is not None:
            server.close()
        if target is not None:
            target.close()
    return findings


def recordings_slice(seed: int, indices: range, keep: Path | None) -> int:
    """The ``recordings`` cases of `indices`, each in a forked child (`isolated`)."""
    from tools import fuzz_recordings as fr

    findings = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        base = fr.record_base(scratch / "base")
        fr.check_viewers(base, base, scratch)  # warm: every viewer imported once, here
        gc.collect()
        gc.freeze()
        for n, i in enumerate(indices, 1):
            data = fr.mutant(base, keep or scratch / "case", random.Random(f"{seed}:{i}"))
            if keep is not None:
                print(f"case {i}: {keep}")
            try:
                isolated(lambda d=data: fr.check_viewers(d, base, scratch), RECORDING_SECONDS,
                         memory=RECORDING_MEMORY)
            except Finding as e:
                findings += 1
                print(f"finding (seed {seed}, case {i}): {e}", flush=True)
            if n % 1_000 == 0:
                print(f"recordings: case {i}, {n} cases here, {findings} findings, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
    return findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("syscalls", "elf", "recordings"))
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="elf: backends to run the mutants with (comma-separated; "
                             "int3:strict is int3 --cleanup strict)")
    parser.add_argument("--case", type=int, help="run only this case of the seed")
    parser.add_argument("--isa", default="x86_64",
                        help="the ISA whose hello_fs is loaded or mutated (default x86_64)")
    parser.add_argument("--keep", type=Path, help="elf: write each mutant to this file; "
                        "recordings: make each mutant directory here")
    parser.add_argument("--first", type=int, default=0,
                        help="the first case index (split one seed's campaign in parts)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="run the cases in this many forked campaigns (default 1)")
    args = parser.parse_args()
    return campaign(args.kind, args.cases, args.seed, tuple(args.backends.split(",")),
                    args.case, args.keep, args.isa, max(1, args.jobs), args.first)


if __name__ == "__main__":
    sys.exit(main())
