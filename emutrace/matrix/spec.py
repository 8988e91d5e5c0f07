"""The matrix file of `emutrace ci` (TOML), read and checked before anything runs, and its
cells.  A bad file is a `MatrixError`: one line naming the file and the key, exit 65.

    [matrix]
    isas = ["x86_64", "aarch64", "riscv64", "m68k"]   # or "all"
    backends = ["int3"]                        # `emutrace bench` specs: "int3:strict", "hwbp:2"
    baselines = "baselines"                    # directory, relative to this file
    timeout = 300                              # seconds per cell (0: none)
    target = { m68k = "gdb" }                  # where an ISA's cells run (default: emulation)

    [[program]]
    name = "fib"
    command = "testbins/{isa}/fib 5"           # a command line with {isa}, as `diff` takes

Every key of `[matrix]` but `baselines` may be given again in a `[[program]]` table for that
program alone.  Commands run with the matrix file's directory as their working directory, or
a program's `directory` (relative to that, `{isa}` replaced: a program that writes files where
it runs gets a directory per ISA, so that cells running side by side do not share them).

`target` is one target for every ISA ("emulation": Unicorn; "gdb": qemu-user's gdb stub, as
`run --target gdb`) or a table of ISA = target (the ISAs it does not name: emulation).  A gdb
cell is refused here as `run --target gdb` refuses its run: by the ISA's capability table, a
backend without a gdb-remote port, a max_insns (only emulation counts instructions).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from emutrace.benchgrid.spec import expand, parse_arches, parse_spec
from emutrace.errors import EXIT_BAD_ELF, EXIT_NO_INPUT, EmutraceError, Unsupported, UsageError
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.mechanisms import runs_on
from emutrace.mechanisms.settings import GDB_PYTHON, settings_of

EXIT_BAD_MATRIX = EXIT_BAD_ELF  # 65, EX_DATAERR: the matrix file is not what it must be


class MatrixError(EmutraceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_BAD_MATRIX)


@dataclass(frozen=True)
class Options:
    """What a cell's run and comparison take besides program, ISA and backend."""

    timeout: float = 300.0
    max_insns: int = 0
    start: str = "main"  # nothing before this function's first entry is compared
    values: bool = True  # arguments and return values compared (diff's --no-values: False)
    keep: str | None = None  # regex: functions compared besides the program's own
    drop: str | None = None  # regex: functions not compared (wins over keep)
    all_functions: bool = False
    compare_isas: bool = True  # the ISAs' traces must be equal (False: baselines only)


# key -> the types it takes (bool is an int in Python: checked apart)
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "timeout": (int, float), "max_insns": (int,), "start": (str,), "values": (bool,),
    "keep": (str,), "drop": (str,), "all_functions": (bool,), "compare_isas": (bool,),
}
_LIST_KEYS = ("isas", "backends")
MATRIX_KEYS = frozenset({*_OPTION_TYPES, *_LIST_KEYS, "target", "baselines"})
PROGRAM_KEYS = frozenset({*_OPTION_TYPES, *_LIST_KEYS, "target", "name", "command",
                          "directory"})
# where a cell runs: Unicorn (session.Process, confined), or qemu-user's gdb stub
# (gdb_session.GdbProcess: QEMU's Linux layer runs the system calls, unconfined)
EMULATION, GDB = "emulation", "gdb"
TARGETS = (EMULATION, GDB)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class Cell:
    """One traced run of the matrix: a program's command for one ISA under one backend."""

    program: str  # the program's name in the matrix file
    isa: str
    backend: str  # the backend spec as written: "int3", "int3:strict"
    argv: tuple[str, ...]  # the command for this ISA
    cwd: str  # where it runs: the matrix file's directory, or the program's `directory`
    options: Options
    backend_name: str = "int3"  # the registry name
    engine: str = "auto"  # "native" when the spec names it
    settings: Mapping[str, Any] = field(default_factory=dict)  # the backend's settings
    env: Mapping[str, str] = field(default_factory=dict)  # the guest's environment
    target: str = EMULATION  # where it runs (TARGETS)

    @property
    def key(self) -> str:
        return f"{self.program}/{self.backend}/{self.isa}"

    @property
    def group(self) -> tuple[str, str]:
        """The cells whose traces are compared across ISAs share their group."""
        return self.program, self.backend


@dataclass(frozen=True)
class Program:
    name: str
    command: str
    isas: tuple[str, ...]
    backends: tuple[str, ...]
    options: Options
    directory: str = "."  # the working directory, relative to the matrix file's; {isa}
    targets: Mapping[str, str] = field(default_factory=dict)  # ISA -> target; others: EMULATION
    default_target: str = EMULATION

    def target(self, isa: str) -> str:
        return self.targets.get(isa, self.default_target)


@dataclass(frozen=True)
class Matrix:
    path: Path
    programs: tuple[Program, ...]
    baselines: Path | None  # None: no baselines kept

    @property
    def directory(self) -> Path:
        return self.path.parent

    def cells(self, env: Mapping[str, str]) -> list[Cell]:
        """Every cell, program by program, backend by backend, ISA by ISA; each guest gets
        env (the coordinating process's, so that every worker runs the same guest)."""
        out = []
        for program in self.programs:
            for backend in program.backends:
                spec = parse_spec(backend)
                for isa in program.isas:
                    out.append(Cell(
                        program.name, isa, backend, expand(program.command, isa).argv,
                        str(self.directory / program.directory.replace("{isa}", isa)),
                        program.options, spec.backend,
                        "native" if spec.engine == "native" else "auto", settings_of(spec),
                        dict(env), program.target(isa)))
        return out


def _bad(path: Path, where: str, what: str) -> MatrixError:
    return MatrixError(f"{path}: {where}: {what}")


def _of_type(value: Any, types: tuple[type, ...]) -> bool:
    """isinstance, but a TOML boolean is not a number (Python's bool is an int)."""
    return isinstance(value, bool) == (bool in types) and isinstance(value, types)


def _options(path: Path, where: str, table: Mapping[str, Any], base: Options) -> Options:
    values: dict[str, Any] = {}
    for key, types in _OPTION_TYPES.items():
        if key not in table:
            continue
        value: Any = table[key]
        if not _of_type(value, types):
            kind = " or ".join(t.__name__ for t in types).replace("int or float", "number")
            raise _bad(path, f"{where} {key}", f"expected a {kind}, got {value!r}")
        if key in ("keep", "drop"):
            try:
                re.compile(value)
            except re.error as e:
                raise _bad(path, f"{where} {key}", f"bad regex {value!r}: {e}") from None
        if key in ("timeout", "max_insns") and not (0 <= value < float("inf")):
            raise _bad(path, f"{where} {key}", f"expected a number >= 0, got {value!r}")
        values[key] = float(value) if key == "timeout" else value
    return Options(**{**base.__dict__, **values})


def _word_list(path: Path, where: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _bad(path, where, f"expected a non-empty list of names, got {value!r}")
    return value


def _isas(path: Path, where: str, value: Any) -> tuple[str, ...]:
    try:
        return tuple(parse_arches(",".join(_word_list(path, where, value))))
    except UsageError as e:
        raise _bad(path, where, e.message.partition(": ")[2]) from None


def _backends(path: Path, where: str, value: Any) -> tuple[str, ...]:
    out = []
    for word in _word_list(path, where, value):
        try:
            spec = parse_spec(word)
        except UsageError as e:
            raise _bad(path, where, e.message.partition(": ")[2]) from None
        if not spec.traces or spec.record:
            raise _bad(path, where, f"{word!r} writes no compared trace")
        if spec.label not in out:
            out.append(spec.label)
    return tuple(out)


def _targets(path: Path, where: str, value: Any) -> tuple[str, dict[str, str]]:
    """`target`: one target for every ISA, or a table of ISA = target (the others:
    emulation); (the default, {ISA: target})."""
    def known(where: str, word: Any) -> str:
        if word not in TARGETS:
            raise _bad(path, where, f"expected one of {', '.join(TARGETS)}, got {word!r}")
        return str(word)
    if isinstance(value, str):
        return known(where, value), {}
    if not isinstance(value, dict):
        raise _bad(path, where, f"expected a target or a table of ISA = target, got {value!r}")
    out = {}
    for isa, word in value.items():
        name = _isas(path, f"{where} {isa}", isa)
        out[name[0]] = known(f"{where} {isa}", word)
    return EMULATION, out


GDB_BACKENDS = runs_on(GDB_PYTHON)


def _check_gdb(path: Path, where: str, program: Program) -> None:
    """The refusals of `run --target gdb` (gdb_session.py, cli/run_gdb.py) for every gdb
    cell of program, before anything runs."""
    for isa in program.isas:
        if program.target(isa) != GDB:
            continue
        gdb = by_name(isa).capability(Cap.GDB_TARGET)
        if not gdb.works:
            raise _bad(path, where, f"{isa}: {gdb.reason}")
        for backend in program.backends:
            spec = parse_spec(backend)
            if spec.backend not in GDB_BACKENDS or spec.engine == "native":
                raise _bad(path, where, f"{isa}: backend {backend!r} has no gdb-remote port "
                                        f"(gdb: {', '.join(GDB_BACKENDS)})")
        if program.options.max_insns:
            raise _bad(path, where, f"{isa}: max_insns counts emulated instructions; the gdb "
                                    f"target does not count them")


def _unknown(path: Path, where: str, table: Mapping[str, Any], known: frozenset[str]) -> None:
    for key in table:
        if key not in known:
            raise _bad(path, where, f"unknown key {key!r}; known: {', '.join(sorted(known))}")


def toml_reader() -> ModuleType:
    """The TOML parser: the standard library's tomllib (Python 3.11 on), else the tomli
    package (a dependency of emutrace on Python 3.10).  Imported only when a matrix file is
    read, so that every other subcommand (and `--help`) works without it."""
    try:
        import tomllib
        return tomllib
    except ImportError:
        pass
    try:
        import tomli
        return tomli
    except ImportError:
        raise Unsupported("ci: reading the matrix file needs the package tomli on Python "
                          "before 3.11 (pip install tomli)") from None


def read_matrix(path: Path) -> Matrix:
    """The matrix file at path, checked (see the module docstring)."""
    tomllib = toml_reader()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise EmutraceError(f"{path}: no such file", EXIT_NO_INPUT) from None
    except (OSError, UnicodeDecodeError) as e:
        raise EmutraceError(f"{path}: {getattr(e, 'strerror', None) or e}",
                            EXIT_NO_INPUT) from None
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{path}: not TOML: {e}") from None
    _unknown(path, "top level", data, frozenset({"matrix", "program"}))
    head = data.get("matrix", {})
    if not isinstance(head, dict):
        raise _bad(path, "matrix", "expected a table [matrix]")
    _unknown(path, "[matrix]", head, MATRIX_KEYS)
    options = _options(path, "[matrix]", head, Options())
    isas = _isas(path, "[matrix] isas", head.get("isas", "all"))
    backends = _backends(path, "[matrix] backends", head.get("backends", "int3"))
    target = _targets(path, "[matrix] target", head.get("target", EMULATION))
    baselines = None
    if "baselines" in head:
        if not isinstance(head["baselines"], str) or not head["baselines"]:
            raise _bad(path, "[matrix] baselines", "expected a directory name")
        baselines = path.parent / head["baselines"]
    tables = data.get("program")
    if not isinstance(tables, list) or not tables:
        raise _bad(path, "program", "no [[program]] table: the matrix has no program")
    programs: list[Program] = []
    for number, table in enumerate(tables, 1):
        where = f"[[program]] #{number}"
        if not isinstance(table, dict):
            raise _bad(path, where, "expected a table")
        _unknown(path, where, table, PROGRAM_KEYS)
        name, command = table.get("name"), table.get("command")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise _bad(path, f"{where} name", f"expected a name of letters, digits, '._+-', "
                                              f"got {name!r}")
        if any(p.name == name for p in programs):
            raise _bad(path, f"{where} name", f"{name!r} named twice")
        directory = table.get("directory", ".")
        if not isinstance(directory, str) or not directory:
            raise _bad(path, f"{where} directory", f"expected a directory name, got "
                                                   f"{directory!r}")
        # each ISA's program: named by the command or found in the ISA's directory
        if not isinstance(command, str) or "{isa}" not in command + directory:
            raise _bad(path, f"{where} command", f"expected a command line with {{isa}} "
                                                 f"(or a directory with it), got {command!r}")
        try:
            expand(command, isas[0])
        except UsageError as e:
            raise _bad(path, f"{where} command", e.message) from None
        default_target, targets = _targets(path, f"{where} target", table["target"]) \
            if "target" in table else target
        program = Program(
            name, command,
            _isas(path, f"{where} isas", table["isas"]) if "isas" in table else isas,
            _backends(path, f"{where} backends", table["backends"]) if "backends" in table
            else backends,
            _options(path, where, table, options), directory, targets, default_target)
        _check_gdb(path, f"{where} ({name}) target", program)
        programs.append(program)
    return Matrix(path, tuple(programs), baselines)
