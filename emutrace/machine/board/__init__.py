"""Boards for kernel images (`emutrace run --machine BOARD IMAGE`): a board is data
(`spec.Board`, presets in `presets.py`), its devices are small MMIO models (`devices.py`),
and emutrace/board_session.py, the board's traced run beside the Linux and native ones,
builds the CPU, memory and devices from a board, loads the image and runs it."""
