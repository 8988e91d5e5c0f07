"""`emutrace bench --machine BOARD`: a row per image on a board (kernel images, firmware),
timed from building the board to its stop (`--until` text, power-off, idle, budget), so a
firmware's row is its boot-to-prompt cost per backend.  The console goes to a buffer."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass

from emutrace.benchgrid.spec import BackendSpec, Program
from emutrace.board_session import BoardConfig, BoardMachine
from emutrace.errors import UsageError
from emutrace.mechanisms.settings import settings_of
from emutrace.session import RunResult


@dataclass(frozen=True)
class BoardRun:
    """The board options of `bench --machine`, as `run --machine` takes them."""

    board: str
    dtb: str | None = None
    bios: str | None = None
    until: bytes = b""
    typed: bytes = b""
    input_after: bytes = b""


def run_on_board(run: BoardRun, program: Program, spec: BackendSpec,
                 timeout: float) -> tuple[float, RunResult, None]:
    if spec.record:
        raise UsageError(f"bench --machine: {spec.label}: recording cells are not supported")
    if len(program.argv) > 1:
        raise UsageError(f"bench --machine: {program.template!r}: an image takes no "
                         f"arguments")
    config = BoardConfig(run.board, program.path, dtb=run.dtb, bios=run.bios,
                         until=run.until, typed=run.typed, input_after=run.input_after,
                         timeout=timeout, backend=spec.backend, engine=spec.engine,
                         **settings_of(spec),
                         console_out=io.BytesIO())
    start = time.perf_counter()
    result = BoardMachine(config).run()
    return time.perf_counter() - start, result, None
