"""The libraries of a dynamic program in a uftrace data directory (pure): one map line and
one `<file name>.sym` per module other than the program (ld.so, libc…), so uftrace names
calls into them.  uftrace 0.13 (utils/session.c, utils/symbol.c) takes a module's base from
its first map line and, with FEAT_SYM_REL_ADDR, reads `<dir>/<basename of the mapped
path>.sym` with addresses relative to that base.  The names are the ones `emutrace run`
shows (discover/modules.py: one alias per address, `libc:free` where two modules define a
name, `func@plt` for PLT slots)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from emutrace.trace.uftrace_names import printable, sym_entries

if TYPE_CHECKING:
    from emutrace.discover.modules import Module, ModuleMap

PAGE = 4096


def library_modules(modules: ModuleMap, exe: str) -> list[Module]:
    """The modules other than the program `exe` (a host path)."""
    exe = os.path.abspath(exe)
    return [m for m in modules.modules if os.path.abspath(m.path) != exe]


def base_of(module: Module) -> int:
    return module.start & ~(PAGE - 1)  # where its first PT_LOAD page is mapped


def sym_file_name(module: Module) -> str:
    return f"{os.path.basename(module.path)}.sym"


def map_line(module: Module) -> str:
    """One r-xp line over the whole module, as the program's (uftrace_write._write_map)."""
    end = (module.end + PAGE - 1) & ~(PAGE - 1)
    return (f"{base_of(module):08x}-{end:08x} r-xp 00000000 00:00 0          "
            f"{os.path.abspath(module.path)}\n")


def module_functions(modules: ModuleMap, module: Module) -> list[tuple[int, int, str]]:
    """(start, end, name) of a module's functions in address order, one name per address:
    the one `run` shows.  An ELFv2 function (ppc64le) is called at its local entry too
    (global entry + st_other's offset, ELFv2 ABI §3.4.1): a second line there with the same
    name, so that a reader naming exact starts (`emutrace replay`) names such calls."""
    table = modules.table
    ends: dict[int, int] = {}
    for f in table.funcs:
        if module.start <= f.start < module.end and f.part_of is None:
            ends[f.start] = max(ends.get(f.start, 0), f.start + f.extent)
    funcs = []
    for start in sorted(ends):
        shown = table.containing(start)
        if shown is not None and shown.start == start:
            funcs.append((start, ends[start], shown.name))
            local = start + shown.local_offset
            if shown.local_offset and local not in ends:
                funcs.append((local, ends[start], shown.name))
    return sorted(funcs)


def program_module(modules: ModuleMap, exe: str) -> Module | None:
    exe = os.path.abspath(exe)
    return next((m for m in modules.modules if os.path.abspath(m.path) == exe), None)


def sym_text(modules: ModuleMap, module: Module) -> str:
    """The `.sym` file of one module: `%016x K name` relative to its base, in address
    order, with a boundary wherever its named code ends (uftrace_names.sym_entries)."""
    base = base_of(module)
    lines = [f"{addr - base:016x} {kind} {printable(name)}\n"
             for addr, kind, name in sym_entries(module_functions(modules, module))]
    return (f"# symbols: {len(lines)}\n# path name: {os.path.abspath(module.path)}\n"
            + "".join(lines))
