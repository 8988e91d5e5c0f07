"""The modules of a dynamic program run natively (`--target native`), learnt without a Linux
layer: after every system call the tracee completes, the executable file mappings of
/proc/PID/maps (proc(5): `start-end perms offset dev inode path`) are compared with those
already seen, and each new one goes to the same `ModuleMap.exec_mapped` the emulated Linux
layer calls from its mmap (discover/modules.py): a mapping whose offset is the page of an
executable PT_LOAD of an ELF object of the program's ISA is a module.

Why after system calls, and not at ld.so's debugger hook (`_dl_debug_state`, r_brk): glibc
calls that hook with RT_CONSISTENT only after relocating every object, and relocation
already runs library code (libc's IFUNC resolvers, called by `_dl_relocate_object`); a
library must be known when its first instruction runs, as it is under emulation.  glibc's
`_dl_map_segments` maps each object's code with mmap(PROT_EXEC) from ld.so, so the mmap's
return is the first moment the code exists and the last before any of it runs.

How the run loop reports system-call ends (target/ptrace_run.py, `PtraceTarget.
syscall_hooks`): while the tracee runs freely it is resumed with PTRACE_SYSCALL instead of
PTRACE_CONT (ptrace(2): a stop at each system-call entry and exit); while it is
single-stepped or block-stepped, the step trap after a `syscall`/`int $0x80` instruction
is taken with the system call's number still in orig_rax (an exception's trap has -1
there: arch/x86/entry, `ORIG_RAX: no syscall to restart`)."""

from __future__ import annotations

from emutrace.discover.modules import ModuleMap
from emutrace.target.ptrace import PtraceTarget


def exec_mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, file offset, path) of every executable file mapping of process pid."""
    with open(f"/proc/{pid}/maps", "rb") as f:
        raw = f.read()
    out = []
    for line in raw.decode(errors="surrogateescape").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[1][2:3] != "x" or not fields[5].startswith("/"):
            continue  # not executable, or anonymous / [vdso] / [vsyscall]
        start = int(fields[0].partition("-")[0], 16)
        out.append((start, int(fields[2], 16), fields[5]))
    return out


class ModuleWatch:
    """Feeds a native tracee's new code mappings to its module map."""

    def __init__(self, target: PtraceTarget, modules: ModuleMap) -> None:
        self.target = target
        self.modules = modules
        self.seen: set[tuple[int, int, str]] = set()
        self.refreshes = 0  # /proc/PID/maps reads (a system call ended)

    def install(self) -> None:
        """The mappings present now (the program and ld.so, mapped by the kernel) are
        taken as seen; the loop calls `refresh` after each system call from here on."""
        self.seen.update(exec_mappings(self.target.pid))
        self.target.syscall_hooks.append(self.refresh)

    def refresh(self) -> None:
        added = False
        for mapping in exec_mappings(self.target.pid):
            if mapping in self.seen:
                continue
            self.seen.add(mapping)
            start, offset, path = mapping
            if self.modules.exec_mapped(path, start, offset) is not None:
                added = True
        self.refreshes += 1
        if added:  # backends that probe modules when they appear look at the next block
            self.target.want_blocks()  # (backends/entry_python.py `_on_block`)
