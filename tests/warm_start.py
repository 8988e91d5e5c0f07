"""A warm start for the suite's `python -m emutrace` commands (tests/conftest.py
`run_emutrace`): a process that has imported the command line once and forks one child per
command.  The child is a process of its own, as `python -m emutrace` is (its own exit status,
signals, descriptors, children, an interpreter exit with its atexit handlers), spared the
interpreter's start and emutrace's imports (~0.13 s of CPU each, several hundred times per
suite run).

Run as `python tests/warm_start.py FD` with FD one end of an AF_UNIX SOCK_SEQPACKET pair.  A
request is one message, JSON {"argv": [...], "cwd": "..."}, carrying three descriptors
(SCM_RIGHTS): the command's stdin, stdout and stderr.  The replies are two messages: the
child's pid, then its exit status as subprocess reports it (-N: killed by signal N) and the
CPU seconds it used (user + system, its reaped children's included).  The
server ends when the other end closes."""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys

REQUEST_BYTES = 1 << 20


def serve(sock: socket.socket) -> dict:
    """Fork a child per request and report on it; return the request in the child."""
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, REQUEST_BYTES, 3)
        except ConnectionError:
            message, fds = b"", []
        if not message:
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            sock.close()
            request = json.loads(message)
            request["fds"] = fds
            return request
        for fd in fds:  # the child holds them: the caller sees EOF when it is done
            os.close(fd)
        sock.send(str(pid).encode())
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime  # (the child's and its reaped children's)
        sock.send(f"{os.waitstatus_to_exitcode(status)} {cpu:.6f}".encode())


def run_command(request: dict) -> None:
    """In the child: the standard descriptors and working directory given, then what
    `python -m emutrace ARGV` runs (emutrace/__main__.py, sys.argv[0] its path, sys.path[0]
    the working directory)."""
    for number, fd in enumerate(request["fds"]):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *request["argv"]]
    runpy.run_module("emutrace", run_name="__main__", alter_sys=True)


def preload() -> None:
    """What the commands import, imported once: the command line's modules (each
    subcommand imports its own when it runs: `run` the session, Unicorn, discovery, the
    Linux layer), the emulator and decoder bindings and the native library."""
    import importlib
    import pkgutil

    import emutrace.cli

    names = [m.name for m in pkgutil.iter_modules(emutrace.cli.__path__, "emutrace.cli.")]
    for name in (*names, "emutrace.session", "emutrace.tracer", "unicorn", "capstone"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the command meets it again and says so
            pass
    try:
        from emutrace import native

        native.load()
    except Exception:  # noqa: BLE001 - the same: a library not built is the command's to say
        pass


if __name__ == "__main__":
    server = socket.socket(fileno=int(sys.argv[1]))
    preload()
    run_command(serve(server))
