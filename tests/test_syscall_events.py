"""`--syscalls`: the guest's system calls as events of its trace — their names and results in
the order the program made them equal what the independent oracles see: `strace -f` of the
same x86_64 program run natively on this host, and qemu-user's `-strace` for the other ISAs.
The recording keeps them as uftrace's external data (uftrace's replay shows them); `run`'s
text and emutrace's replay show each as a call of `linux:NAME` where it was made."""

from __future__ import annotations

import errno
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import bin_path, run_emutrace

# results that are addresses or process ids: they differ between any two runs
VOLATILE = frozenset({"brk", "mmap", "mmap2", "mremap", "set_tid_address", "getpid",
                      "gettid", "getppid", "clone"})
# rseq: emutrace refuses the registration (ENOSYS, as qemu-user: "Unknown syscall 293");
# a native kernel accepts it.  glibc runs on without it.
REFUSED = frozenset({"rseq"})
# set_robust_list: qemu-user does not implement it (ENOSYS); emutrace accepts it as Linux
# does (the x86_64 comparison with strace checks its result)
QEMU_REFUSES = frozenset({"set_robust_list"})
PROGRAMS = [("fib", ["5"]), ("hello_fs", [])]


def ours(data: Path) -> list[tuple[str, str]]:
    """(name, result) of each line of the recording's extern.dat: `-1 ENOENT`, `?`, or the
    number in decimal."""
    calls = []
    for line in (data / "extern.dat").read_text().splitlines():
        m = re.fullmatch(r"\d+\.\d{9} linux:(\w+)\(.*\) = (.*)", line)
        assert m, line
        name, result = m.groups()
        calls.append((name, result if not re.fullmatch(r"0x[0-9a-f]+|-?\d+", result)
                      else str(int(result, 0))))
    return calls


def strace(program: Path, args: list[str], tmp: Path) -> list[tuple[str, str]]:
    """(name, result) of `strace -f` of the program run natively (stdout a pipe)."""
    log = tmp / "strace.txt"
    subprocess.run(["strace", "-f", "-qq", "-o", log, program, *args], capture_output=True)
    calls = []
    for line in log.read_text().splitlines():
        m = re.fullmatch(r"(?:\d+ +)?(\w+)\(.*\)\s+= (\?|-1 (E\w+)|0x[0-9a-f]+|-?\d+).*", line)
        assert m, line
        name, result, error = m.groups()
        if name == "execve":  # the host's start of the program (emutrace loads it itself)
            continue
        calls.append((name, f"-1 {error}" if error else result if result == "?"
                      else str(int(result, 0))))
    return calls


def qemu_strace(isa: str, program: Path, args: list[str]) -> list[tuple[str, str]]:
    """(name, result) of `qemu-ISA-static -strace` (its log on stderr, stdout a pipe)."""
    done = subprocess.run([f"qemu-{isa}-static", "-strace", program, *args],
                          capture_output=True, text=True)
    calls = []
    for line in done.stderr.splitlines():
        m = re.fullmatch(r"\d+ (\w+)\(.*?\)(?: = (-1 errno=(\d+).*|0x[0-9a-f]+|-?\d+))?\s*",
                         line)
        if m is None:  # "Unknown syscall 293" (rseq), a write's output inside its line
            continue
        name, result, code = m.groups()
        if result is None:  # qemu prints no result for a call that does not return
            calls.append((name, "?"))
            continue
        calls.append((name, f"-1 {errno.errorcode[int(code)]}" if code
                      else str(int(result, 0))))
    return calls


def comparable(calls: list[tuple[str, str]], drop: frozenset[str] = frozenset(),
               unsure: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """The calls but those in `drop`, without the results that cannot agree."""
    return [(n, "" if n in VOLATILE | REFUSED | unsure else r) for n, r in calls
            if n not in drop]


@pytest.mark.parametrize(("program", "args"), PROGRAMS, ids=[p for p, _a in PROGRAMS])
def test_x86_64_syscalls_as_strace_sees_them(tmp_path: Path, program: str,
                                              args: list[str]) -> None:
    path = bin_path("x86_64", program)
    data = tmp_path / "data"
    done = run_emutrace("record", "--syscalls", "-d", data, path, *args)
    assert done.returncode in (0, 7), done.stderr.decode()
    expected = comparable(strace(path, args, tmp_path))
    assert len(expected) > 5
    assert comparable(ours(data)) == expected


@pytest.mark.parametrize("isa", ["aarch64", "s390x", "riscv64", "arm"])
@pytest.mark.parametrize(("program", "args"), PROGRAMS, ids=[p for p, _a in PROGRAMS])
def test_syscalls_as_qemu_sees_them(tmp_path: Path, isa: str, program: str,
                                    args: list[str]) -> None:
    path = bin_path(isa, program)
    data = tmp_path / "data"
    done = run_emutrace("record", "--syscalls", "-d", data, path, *args)
    assert done.returncode in (0, 7), done.stderr.decode()
    expected = comparable(qemu_strace(isa, path, args), unsure=QEMU_REFUSES)
    assert len(expected) > 5
    private = frozenset(n for n, _r in ours(data) if n.startswith("ARM_"))  # (qemu: unnamed)
    assert comparable(ours(data), drop=REFUSED | private, unsure=QEMU_REFUSES) == expected


def test_run_shows_each_call_where_it_was_made(tmp_path: Path) -> None:
    done = run_emutrace("run", "--backend", "int3", "--syscalls", "-o", tmp_path / "t",
                        bin_path("x86_64", "fib"), "5")
    assert done.returncode == 0, done.stderr.decode()
    lines = (tmp_path / "t").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "linux:write(1, " in line)
    # inside libc's write(), one level deeper, taking no time, with write's result
    assert re.search(r"\|( *)write\(1, 0x[0-9a-f]+, 11\) \{$", lines[at - 1])
    assert re.fullmatch(r" +0 \| +linux:write\(1, 0x[0-9a-f]+, 11\) = 11;", lines[at])
    indent = [len(s) - len(s.lstrip()) for s in (lines[at - 1].split("|")[1],
                                                  lines[at].split("|")[1])]
    assert indent[1] == indent[0] + 2
    assert lines[-1].endswith("linux:exit_group(0);")


def test_replays_show_the_recorded_calls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_emutrace("record", "--syscalls", "-d", data, bin_path("aarch64", "fib"), "5")
    assert done.returncode == 0, done.stderr.decode()
    theirs = subprocess.run(["uftrace", "replay", "-d", data], capture_output=True,
                            text=True, check=True).stdout
    shown = re.findall(r"/\* external-data: (linux:.*) \*/", theirs)
    kept = ["linux:" + line.split(" linux:", 1)[1]
            for line in (data / "extern.dat").read_text().splitlines()]
    # uftrace reads external data while a task has records: exit_group, made after the
    # last record, is not shown
    assert shown == kept[:-1] and kept[-1] == "linux:exit_group(0) = ?"
    replay = run_emutrace("replay", "-d", data, "--start", "_start")
    assert replay.returncode == 0, replay.stderr.decode()
    calls = re.findall(r"\| +(linux:\w+\(.*\)(?: = .*)?);", replay.stdout.decode())
    assert calls == [s.removesuffix(" = ?") for s in kept]  # (no return: no value)


@pytest.mark.parametrize("option", [["run", "--backend", "int3", "--target", "native"],
                                    ["run", "--backend", "none"],
                                    ["record", "--target", "native"]])
def test_syscalls_refused_where_there_is_no_trace_of_them(tmp_path: Path,
                                                          option: list[str]) -> None:
    done = run_emutrace(*option, "--syscalls", bin_path("x86_64", "fib"), "5", cwd=tmp_path)
    assert done.returncode == 64, done.stderr.decode()
    assert done.stderr.decode().count("\n") == 1


def test_a_threads_calls_are_replayed_in_its_task(tmp_path: Path) -> None:
    """extern.dat marks a thread's calls (`[thread N]`); emutrace's replay shows each in
    that thread's task (uftrace's reader shows external data in the task read last)."""
    data = tmp_path / "data"
    done = run_emutrace("record", "--syscalls", "-d", data, bin_path("x86_64", "threads"))
    assert done.returncode == 0, done.stderr.decode()
    marked: dict[int, int] = {}
    for line in (data / "extern.dat").read_text().splitlines():
        m = re.search(r" \[thread (\d+)\]$", line)
        marked[int(m.group(1)) if m else 0] = marked.get(int(m.group(1)) if m else 0, 0) + 1
    assert len(marked) == 4  # the main thread and its three
    replay = run_emutrace("replay", "-d", data, "--start", "_start")
    assert replay.returncode == 0, replay.stderr.decode()
    shown: dict[int, int] = {}
    for task in re.findall(r"\[ *(\d+)\] \| +linux:", replay.stdout.decode()):
        shown[int(task) - 1] = shown.get(int(task) - 1, 0) + 1  # task 1 + N: thread N
    assert shown == marked
