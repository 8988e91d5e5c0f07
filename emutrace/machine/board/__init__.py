"""Boards for kernel images (`emutrace run --machine BOARD IMAGE`): a board is data
(`spec.Board`, presets in `presets.py`), its devices are small MMIO models (`devices.py`),
`machine.py` builds the CPU, memory and devices from a board, loads the image and runs it."""
