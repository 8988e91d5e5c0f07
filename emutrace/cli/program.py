"""The program of an emulated `run`/`record` command line, found as the kernel would find it:
an absolute PROGRAM with `--root R` names R's file when R has one (`--root R /bin/ls`: R's
`ls`, as a chroot does; otherwise the host file, as qemu-user's `-L` does), and a `#!`
script runs through its interpreter, looked up in the root, with the kernel's arguments
(fs/binfmt_script.c: interpreter, its one optional argument, the script's path, then
ARGS; machine/linux/sys_process.py does the same for the guest's own execve)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from emutrace.errors import EXIT_NO_INPUT, EmutraceError, UsageError
from emutrace.machine.linux.sys_process import BINPRM_BUF_SIZE, MAX_INTERPRETERS
from emutrace.sandbox import Sandbox, SandboxError


@dataclass(frozen=True)
class Program:
    """What the first image runs: `path` (a host path), its arguments, and for a script
    the guest's argv[0] (the interpreter as the `#!` line names it) and AT_EXECFN (the
    script's path as given)."""

    path: str
    args: list[str] = field(default_factory=list)
    argv0: str | None = None
    execfn: str | None = None


def find_program(program: str, args: list[str], root: str) -> Program:
    """PROGRAM and ARGS of the command line as the first image runs them (module
    docstring); a script whose interpreter is missing is one error line."""
    try:
        sandbox = Sandbox(root)
    except ValueError as e:
        raise UsageError(str(e)) from None
    path = in_root(sandbox, program) if root != "/" else program
    argv = [program, *args]
    name = None  # the file being run, as the guest names it (a script's interpreter opens it)
    for _ in range(MAX_INTERPRETERS + 1):
        line = shebang(path)
        if line is None:
            break
        interp, arg = line
        name = guest_name(sandbox, program, path) if name is None else name
        argv = [interp, *([arg] if arg else []), name, *argv[1:]]
        name = interp
        try:
            path = str(sandbox.resolve(os.fsencode(interp)))
        except SandboxError as e:
            raise EmutraceError(f"{program}: its #! interpreter {interp} is not under "
                                f"{root} ({e.errno_name})", EXIT_NO_INPUT) from None
    else:
        raise UsageError(f"{program}: more than {MAX_INTERPRETERS} nested #! interpreters")
    if name is None:
        return Program(path, list(args))
    return Program(path, argv[1:], argv0=argv[0], execfn=program)


def in_root(sandbox: Sandbox, program: str) -> str:
    """An absolute PROGRAM as the root's file when the root has one, else as given."""
    if not program.startswith("/"):
        return program
    try:
        found = sandbox.resolve(os.fsencode(program))
    except SandboxError:
        return program
    return str(found) if found.is_file() else program


def shebang(path: str) -> tuple[str, str | None] | None:
    """(interpreter, optional argument) of a `#!` file, None for any other (or one that
    cannot be read: the loader says why)."""
    try:  # a regular file only: a FIFO would block here (the loader refuses the rest)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, BINPRM_BUF_SIZE, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].replace(b"\t", b" ").strip(b" ")
    if not line:
        raise EmutraceError(f"{path}: an empty #! line (the kernel's ENOEXEC)", EXIT_NO_INPUT)
    name, _, rest = line.partition(b" ")
    rest = rest.strip(b" ")
    return os.fsdecode(name), os.fsdecode(rest) if rest else None


def guest_name(sandbox: Sandbox, given: str, host: str) -> str:
    """The script's path for its interpreter to open, as the guest sees it: as given when
    the root is the host's, else its place under the root."""
    if sandbox.root == sandbox.root.parent:  # the host's /
        return given
    try:
        return sandbox.to_guest(os.path.realpath(host))
    except ValueError:
        raise UsageError(f"{given}: a #! script outside --root {sandbox.root}: its "
                         f"interpreter could not open it there") from None
