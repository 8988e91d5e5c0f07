"""The parts of `emutrace bench` (see emutrace/cli/bench.py): argument specs, the grid
runner with its agreement check, result records, reports, plots and machine facts."""
