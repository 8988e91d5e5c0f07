"""How a run ended, told in one line on stderr when it was not the guest's own exit (a
timeout, a budget, a deadlock, Ctrl-C, a fatal signal), with the call stack it ended in."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from emutrace.discover.symbols import read_symbols

if TYPE_CHECKING:
    from emutrace.elf import Image
    from emutrace.session import RunResult


def report(result: RunResult) -> None:
    """One line on stderr for any end that is not the guest's own exit."""
    stop = result.stop
    if stop.kind in ("exit", "exec"):  # the guest's own exit or execve: nothing to report
        return
    symbolize = names_of(result.image)
    where = f"pc {stop.pc:#x} ({symbolize(stop.pc)})"
    if stop.kind == "timeout":
        print(f"emutrace: --timeout reached at {where}", file=sys.stderr)
    elif stop.kind == "max_insns":
        print(f"emutrace: --max-insns budget exhausted at {where}", file=sys.stderr)
    elif stop.kind == "deadlock":
        print(f"emutrace: deadlock: every thread waits and none can wake another "
              f"({stop.detail})", file=sys.stderr)
    elif stop.kind == "crash":  # emutrace's own failure, not the guest's (native/crashguard.py)
        print(f"emutrace: {stop.detail}", file=sys.stderr)
    elif stop.kind == "interrupted":
        print(f"emutrace: interrupted at {where}", file=sys.stderr)
    else:
        detail = f": {stop.detail}" if stop.detail else ""
        print(f"emutrace: guest killed by {stop.signal} at {where}{detail}", file=sys.stderr)
    if result.open_frames:  # the shadow call stack (tracing backends), outermost first
        names = " > ".join(bounded_names(
            [symbolize(f).split("+")[0] for f in result.open_frames]))
        print(f"emutrace: call stack: {names}", file=sys.stderr)


def names_of(image: Image) -> Callable[[int], str]:
    """How the report names an address: by the program's own symbols, or for a dynamic
    program (or one named by --symbols) by every module's, as its trace names them."""
    if image.modules is None:
        return image.symbolize
    return read_symbols(image).namer(image.isa.code_mask, offsets=True)


STACK_SHOWN = 8  # outermost and innermost frames named in the crash report's call stack


def bounded_names(names: list[str]) -> list[str]:
    """At most 2 * STACK_SHOWN names; the middle ones become one `... N frames ...`, so
    the line stays short at any depth."""
    if len(names) <= 2 * STACK_SHOWN:
        return names
    hidden = len(names) - 2 * STACK_SHOWN
    return [*names[:STACK_SHOWN], f"... {hidden} frames ...", *names[-STACK_SHOWN:]]
