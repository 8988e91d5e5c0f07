"""emutrace's fuzz harness (issue 10): bad input must end in one line and a documented exit
code, never a traceback, an internal error (70), a hang past the budget or a crash of Python.

Two kinds of cases, both cheap enough for 10^5 runs:

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

The generators are shared with tests/test_fuzz.py (hypothesis drives them there, a short
slice in CI); this script runs the long campaign and prints the counts:

    make fuzz                       # the README's long run
    python tools/fuzz.py syscalls --cases 100000 --seed 1
    python tools/fuzz.py elf --cases 2000 --seed 1
    python tools/fuzz.py elf --seed 5 --case 1432 --keep /tmp/m   # one case, its mutant kept

Exit status: 0 when every case held, 1 when any finding (each printed with its seed).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import random
import resource
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


def isolated(fn: Callable[[], None], budget: float) -> None:
    """Run one case in a forked child: a crash of Python (a signal), a hang past the budget
    and a finding all come back as a Finding; the campaign itself never dies."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        # on top of what the child inherits (a parent holding several Unicorn instances
        # already has gigabytes of address space reserved: their code buffers)
        limit = inherited_address_space() + CHILD_MEMORY
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
    deadline = time.monotonic() + budget
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            raise Finding(f"hang: still running after {budget:.0f} s")
        time.sleep(0.002)
    message = os.read(r, 4096).decode(errors="replace")
    os.close(r)
    if os.WIFSIGNALED(status):
        raise Finding(f"crash: Python killed by signal {os.WTERMSIG(status)}")
    if message:
        raise Finding(message)


def check_elf(blob: bytes, backend: str, scratch: Path) -> None:
    start = time.monotonic()
    code, err = run_elf(blob, backend, scratch)
    took = time.monotonic() - start
    own = [line for line in err.splitlines() if line.startswith("emutrace:")
           and "call stack:" not in line and "unsupported syscall" not in line]
    if code == 70 or "Traceback" in err or "internal error" in err:
        raise Finding(f"{backend}: exit {code}: {err.strip()[:500]}")
    if took > RUN_SECONDS + HANG_SECONDS:
        raise Finding(f"{backend}: took {took:.1f} s (budget {RUN_SECONDS} s)")
    if len(own) > 2:
        raise Finding(f"{backend}: {len(own)} lines: {own[:3]}")


# ---------------------------------------------------------------- campaign
def elf_case(seed: int, i: int, base: bytes,
             backends: tuple[str, ...] = BACKENDS) -> tuple[bytes, str]:
    """Case i of a seeded ELF campaign: the mutant and the backend it runs with."""
    rng = random.Random(f"{seed}:{i}")
    return mutate(base, rng), rng.choice(backends)


def campaign(kind: str, cases: int, seed: int, backends: tuple[str, ...] = BACKENDS,
             only: int | None = None, keep: Path | None = None, isa: str = "x86_64") -> int:
    findings = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        target = SyscallTarget(scratch, isa) if kind == "syscalls" else None
        base = program_of(isa).read_bytes()
        for i in range(cases) if only is None else (only,):
            try:
                if target is not None:
                    target.run(*target.case(random.Random(f"{seed}:{i}")))
                else:
                    blob, backend = elf_case(seed, i, base, backends)
                    if keep is not None:
                        keep.write_bytes(blob)
                        print(f"case {i}: {keep}, backend {backend}")
                    try:
                        isolated(functools.partial(check_elf, blob, backend, scratch),
                                 RUN_SECONDS + HANG_SECONDS)
                    except Finding as e:
                        raise Finding(f"[{backend}] {e}") from None
            except Finding as e:
                findings += 1
                print(f"finding (seed {seed}, case {i}): {e}", flush=True)
            if (i + 1) % 10_000 == 0 or (kind == "elf" and (i + 1) % 500 == 0):
                print(f"{kind}: {i + 1} cases, {findings} findings, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
        if target is not None:
            target.close()
    ran = cases if only is None else 1
    print(f"{kind} ({isa}): {ran} cases, {findings} findings (tracebacks, internal errors, hangs "
          f"past {HANG_SECONDS:.0f} s), {time.monotonic() - started:.0f} s, seed {seed}",
          flush=True)
    return 1 if findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("syscalls", "elf"))
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="elf: backends to run the mutants with (comma-separated; "
                             "int3:strict is int3 --cleanup strict)")
    parser.add_argument("--case", type=int, help="run only this case of the seed")
    parser.add_argument("--isa", default="x86_64",
                        help="the ISA whose hello_fs is loaded or mutated (default x86_64)")
    parser.add_argument("--keep", type=Path, help="elf: write each mutant to this file")
    args = parser.parse_args()
    return campaign(args.kind, args.cases, args.seed, tuple(args.backends.split(",")),
                    args.case, args.keep, args.isa)


if __name__ == "__main__":
    sys.exit(main())
