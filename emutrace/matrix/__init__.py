"""`emutrace ci`'s matrix run: programs × ISAs × backends, each cell one traced run whose
compared trace (`trace/diff.py`) is checked against its stored baseline and against the
other ISAs' (docs/ci.md).

* `spec`: the matrix file (TOML) read and checked, expanded into `Cell`s;
* `tracefile`: a compared trace as text (baselines, the run's traces) and packed for transfer;
* `outcome`: what a cell returns — its trace packed, or one line of error;
* `cell`: one cell traced in the calling process (`python -m emutrace.matrix.cell` runs one
  in a process of its own: `isolated`);
* `engine`: the cells run in this process or on Dask (a local cluster or a scheduler);
* `verdict`: baselines and the cross-ISA comparison, a verdict per cell;
* `junit`, `summary`: the JUnit XML and the Markdown report.

Only `cell` runs the emulator; the others import none.
"""
