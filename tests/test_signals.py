"""Signals reach guest handlers on all ten ISAs, as under qemu-user —
`testbins/<isa>/signals` (src/signals.c): a handler run by raise and kill (returning to the
interrupted code with its locals), SA_SIGINFO's siginfo, blocking and sigpending,
SA_RESETHAND, sigsuspend woken by SIGCHLD from a forked child, alarm + pause, a child
killed by SIGPIPE and one killed by kill(), a SIGSEGV handler on a sigaltstack that
recovers with siglongjmp (twice: the mask comes back), and at the end the default action
of SIGUSR1 (the process is killed by it)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa.base import Cap

from .conftest import ENV, bin_path, isa_params, qemu_binary, shell_status


def params() -> list:
    return isa_params(Cap.SIGNAL_HANDLERS)


@pytest.mark.oracle
@pytest.mark.parametrize("isa", params())
def test_signals_as_qemu(isa: str, tmp_path: Path) -> None:
    program = str(bin_path(isa, "signals"))
    ref = subprocess.run([qemu_binary(isa), program], cwd=tmp_path, env=ENV,
                         capture_output=True, timeout=60)
    ours = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    assert shell_status(ref.returncode) == 128 + signal.SIGUSR1
    assert b"paused child: killed by TERM" in ref.stdout  # the whole program ran
    # (s390x reports a fault's page as si_addr: "si_addr ok=0" there, under both)
    assert b"recovered from SIGSEGV 1: si_addr ok=" in ref.stdout
    assert b"on altstack=1" in ref.stdout
    assert ours.stdout.decode() == ref.stdout.decode()
    # emutrace's own report of the end: one line, the signal the guest died of
    assert ours.stderr.decode().startswith("emutrace: guest killed by SIGUSR1")
    assert ours.returncode == 128 + signal.SIGUSR1


def test_each_child_writes_its_own_trace(tmp_path: Path) -> None:
    """-o FILE: a forked child's trace goes to FILE.<pid>, starting from its parent's past
    and showing fork() returning 0 (src/signals.c forks five children: they _exit(7), die of
    SIGPIPE in write, are killed by SIGTERM from their parent — a child killed by a host
    signal leaves no trace, README —, _exit(3), and raise SIGUSR1)."""
    program = bin_path("x86_64", "signals")
    got = subprocess.run([sys.executable, "-m", "emutrace", "run", "-o", "t.txt", program],
                         cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    assert got.returncode == 128 + signal.SIGUSR1
    # (the killed child's FILE.<pid> may exist, empty: it is opened at the fork)
    children = [p for p in sorted(tmp_path.glob("t.txt.*")) if p.stat().st_size]
    assert len(children) == 4
    texts = [p.read_text() for p in children]
    assert all("} = 0; /* fork */" in t for t in texts)
    assert sum("_exit(7); /* at exit */" in t for t in texts) == 1
    assert sum("_exit(3); /* at exit */" in t for t in texts) == 1
    assert sum("write(" in t.splitlines()[-2] for t in texts) == 1  # the SIGPIPE writer
    assert "} = 0; /* fork */" not in (tmp_path / "t.txt").read_text()  # the parent's
