"""`emutrace info`: the ISA × capability matrix and the debug hardware `hwbp` models,
straight from the ISA modules; `emutrace info -d DIR`: what a recording holds."""

from __future__ import annotations

import argparse
from itertools import chain

from emutrace.isa import all_isas
from emutrace.isa.base import CAPABILITIES


class InfoCommand:
    name = "info"
    help = "show the supported ISAs and what works on each (with the reason for each gap)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--machines", action="store_true",
                       help="list the boards of `run --machine` instead")
        p.add_argument("--native", action="store_true",
                       help="probe what this host's native mechanisms do (ptrace, debug "
                            "registers, PTRACE_SINGLEBLOCK, branch-record PMUs)")
        p.add_argument("-d", "--data", metavar="DIR",
                       help="describe the recording in DIR instead (see `emutrace record`)")

    def __call__(self, args: argparse.Namespace) -> int:
        if args.machines:
            print(render_machines())
            return 0
        if args.native:
            from emutrace.target.native_probe import render

            print(render())
            return 0
        if args.data is not None:
            from emutrace.trace.recording_info import describe
            from emutrace.trace.uftrace_read import load_tasks

            # the tasks one after another (counts need no time order; any number of tasks)
            streams, _symbolize, isa = load_tasks(args.data, side_by_side=False)
            records = chain.from_iterable(records for _task, records in streams)
            print("\n".join(describe(args.data, isa, records)))
            return 0
        print(render_matrix())
        print()
        print(render_engines())
        print()
        print(render_qiling())
        print()
        print(render_debug_hardware())
        return 0


def render_engines() -> str:
    """The engines (`run --target`) that run each ISA's programs here: emulation, native
    and gdb where the capability table says so and, for gdb, qemu-user for it is
    installed (target/gdb_remote.py); else why not."""
    from emutrace.isa.base import Cap
    from emutrace.target.gdb_remote import qemu_user

    lines = ["Engines (run --target)"]
    for isa in all_isas():
        emulated = isa.capability(Cap.RUN_STATIC)
        engines = ["emulation" if emulated.works else f"emulation not: {emulated.reason}"]
        if isa.capability(Cap.NATIVE_TARGET).works:
            engines.append("native")
        gdb = isa.capability(Cap.GDB_TARGET)
        qemu = qemu_user(isa)
        engines.append(f"gdb not: {gdb.reason}" if not gdb.works else
                       f"gdb ({qemu.rsplit('/', 1)[-1]})" if qemu is not None else
                       f"gdb not: no qemu-{isa.identity.qemu}-static on PATH")
        lines.append(f"  {isa.name:<10}{', '.join(engines)}")
    return "\n".join(lines)


def render_qiling() -> str:
    """`run --target qiling`: each Qiling OS × ISA (target/qiling_table.py)."""
    from emutrace.target.qiling_os import missing_reason
    from emutrace.target.qiling_table import render

    return render([isa.name for isa in all_isas()], missing_reason())


def render_matrix() -> str:
    isas = all_isas()
    width = max(len(c.value) for c in CAPABILITIES) + 2
    lines = ["ISA".ljust(10) + "".join(c.value.ljust(width) for c in CAPABILITIES)]
    notes: list[str] = []
    for isa in isas:
        cells = []
        for cap in CAPABILITIES:
            c = isa.capability(cap)
            if c.works:
                cells.append("yes".ljust(width))
            else:
                if c.reason not in notes:
                    notes.append(c.reason)
                cells.append(f"no [{notes.index(c.reason) + 1}]".ljust(width))
        lines.append(isa.name.ljust(10) + "".join(cells))
    lines.append("")
    lines += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    # the ISA-specific keys: only their gaps (a key declared as working everywhere it is
    # declared says nothing a user needs)
    gaps = [(isa.name, key, cap) for isa in isas for key, cap in isa.capabilities.items()
            if key not in CAPABILITIES and not cap.works]
    if gaps:
        lines += ["", "ISA-specific gaps:"]
        lines += [f"  {name} {key.value}: no: {cap.reason}" for name, key, cap in gaps]
    return "\n".join(lines)


def render_debug_hardware() -> str:
    """What `hwbp` models per ISA (override with `run --hw-slots`), with the source."""
    lines = ["hardware instruction breakpoints (hwbp; --hw-slots overrides):"]
    for isa in all_isas():
        hw = isa.debug_hardware
        lines.append(f"  {isa.name:<9} {hw.slots} {hw.kind:<8} {hw.registers:<22} {hw.source}")
    return "\n".join(lines)


def render_machines() -> str:
    """The boards of `run --machine`: memory, devices and the QEMU command they stand for."""
    from emutrace.isa import by_name
    from emutrace.isa.kernel import kernel_support
    from emutrace.machine.board.presets import BOARDS

    lines = []
    for board in BOARDS.values():
        lines.append(f"{board.name} ({board.isa}): {board.description}")
        lines.append(f"  like:    {' '.join(board.qemu)}")
        lines.append("  memory:  " + ", ".join(
            f"{r.name} {r.base:#x}+{r.size >> 20}M" for r in board.ram))
        lines.append(f"  -bios:   a raw image loads at {board.bios_at:#x}")
        support = kernel_support(by_name(board.isa))
        if board.kernel_at is not None and support is not None \
                and support.linux_image is not None:
            lines.append(f"  -kernel: a Linux image the ISA recognises loads at "
                         f"{board.kernel_at:#x}; with --symbols naming its _text (System.map) "
                         f"it is traced at its link address")
        if board.tree is not None and board.dtb_at is not None:
            lines.append(f"  dtb:     the board's own (QEMU's virt tree) at {board.dtb_at:#x}; "
                         f"--dtb replaces it, --append/--initrd fill /chosen")
        lines.append(f"  engine:  {board.native_engine()}")
        lines.append("  devices: " + ", ".join(
            f"{d.name} {d.base:#x}" + ("" if d.kind == "const" else f" ({d.kind})")
            for d in board.devices))
    return "\n".join(lines)
