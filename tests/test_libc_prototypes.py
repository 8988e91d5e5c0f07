"""The bundled libc table (emutrace/discover/libc_prototypes.txt) against two oracles:
glibc's own declarations in this host's /usr/include (every function of the table that a
header declares takes as many fixed parameters as the table says, variadic where it is),
and `posixcalls`, which calls common POSIX functions and prints each call with the values
it passed and got, as a tracer with their prototypes shows them (testbins/src/
posixcalls.c); its static glibc has no DWARF, so only the table types them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from emutrace.discover import prototypes

from .conftest import ISAS, bin_path, run_emutrace

HEADERS = Path("/usr/include")
TABLE = Path(prototypes.__file__).with_name("libc_prototypes.txt")
# what the table shows on purpose otherwise than glibc declares it: open/openat's mode is
# declared `...` (it is read only with O_CREAT), the table shows it as a third octal word
SHOWN_OTHERWISE = {"open", "openat"}


def table_entries() -> list[tuple[list[str], int, bool]]:
    """(names, fixed parameters, variadic) of each line of the table."""
    out = []
    for line in TABLE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        names, _, params = line.split(" ", 1)[1].partition("(")
        words = [w.strip() for w in params.rstrip(")").split(",") if w.strip()]
        variadic = bool(words) and words[-1] == "..."
        out.append((names.split("|"), len(words) - variadic, variadic))
    return out


def declared(name: str) -> tuple[int, bool] | None:
    """(fixed parameters, variadic) of `extern ... name (...)` in glibc's headers here, or
    None when no header declares it."""
    pattern = re.compile(r"extern [^;{}()]*?[\s*]" + re.escape(name) + r" \(([^;{}]*?)\)\s*"
                         r"(?:__THROW|__wur|__nonnull|__attribute|__attr|__asm|;|__THROWNL)",
                         re.S)
    for header in ("stdio.h", "stdlib.h", "string.h", "strings.h", "unistd.h", "signal.h",
                   "fcntl.h", "sys/stat.h", "sys/wait.h", "sys/mman.h", "sys/time.h",
                   "sys/socket.h", "sys/ioctl.h", "pthread.h", "time.h", "dirent.h", "poll.h",
                   "sys/select.h", "math.h", "x86_64-linux-gnu/bits/mathcalls.h",
                   "x86_64-linux-gnu/sys/stat.h", "x86_64-linux-gnu/sys/ioctl.h"):
        path = HEADERS / header
        if not path.exists():
            continue
        m = pattern.search(path.read_text(errors="replace"))
        if m is None:
            continue
        params = re.sub(r"\([^()]*\)", "F", m.group(1))  # function-pointer parameters
        parts = [p.strip() for p in params.split(",")]
        if parts in ([""], ["void"]):
            return 0, False
        variadic = parts[-1] == "..."
        return len(parts) - variadic, variadic
    return None


@pytest.mark.skipif(not (HEADERS / "unistd.h").exists(), reason="no glibc headers")
def test_table_agrees_with_glibc_headers() -> None:
    checked, wrong = 0, []
    for names, count, variadic in table_entries():
        name = names[0]
        if name.endswith("*") or name in SHOWN_OTHERWISE:
            continue
        found = declared(name)
        if found is None:
            continue
        checked += 1
        if found != (count, variadic):
            wrong.append(f"{name}: table {(count, variadic)}, glibc {found}")
    assert not wrong
    assert checked >= 150  # the headers were found and read


def aliases() -> dict[str, str]:
    """Every name of the table -> the first name of its line."""
    return {n: names[0] for names, _, _ in table_entries() for n in names}


CALL = re.compile(r"^(\w+)\((.*)\) = (.*)$")
TRACED = re.compile(r"^\s*\d* \|   (\w+)\((.*)\) = (.*);$")


@pytest.mark.parametrize("isa", ISAS)
def test_posix_calls_typed_as_the_program_prints_them(isa: str, tmp_path: Path) -> None:
    """Each call the program makes and prints (`creat("posix-a", 0640) = 3`) is the line
    the trace shows for it under `-F main -D 2`: kill, creat, chmod, umask, link, rename,
    rmdir... typed by the table (strings, octal modes, signed results)."""
    got = run_emutrace("run", "--backend", "int3", "-F", "main", "-D", "2",
                       bin_path(isa, "posixcalls"), cwd=tmp_path)
    assert got.returncode == 0, got.stderr.decode()
    canon = aliases()
    printed = [CALL.match(line).groups()  # type: ignore[union-attr]
               for line in got.stdout.decode().splitlines()]
    traced = [(canon.get(m.group(1), m.group(1)), m.group(2), m.group(3))
              for line in got.stderr.decode().splitlines()
              if (m := TRACED.match(line)) and m.group(1) not in ("printf", "getpid")]
    assert len(printed) == 22
    assert traced == printed
