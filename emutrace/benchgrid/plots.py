"""The grid's plots, each as PNG and SVG (matplotlib, Agg: no display needed):

* slowdown.{png,svg}: emulated slowdown vs `none`, per backend per ISA (grouped bars, log y);
* events.{png,svg}: each backend's main event counter per ISA (log y);
* predicted.{png,svg}: predicted native slowdown, two panels: `vm` and `bare-metal`.

With several programs a bar is the geometric mean over them (the title says so); cells
without a value (error, missing program, FAIL is still drawn) leave a gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen first
from matplotlib.axes import Axes  # noqa: E402

from emutrace.benchgrid.results import per_isa  # noqa: E402


def _bars(ax: Axes, values: dict[str, dict[str, float | None]], isas: Sequence[str],
          backends: Sequence[str], ylabel: str, title: str) -> None:
    """Grouped bars on a log axis that starts below 1 (a bar's height is its ratio to 1)."""
    width = 0.8 / max(len(backends), 1)
    shown = [v for b in backends for v in values.get(b, {}).values() if v is not None and v > 0]
    ax.set_yscale("log")
    ax.set_ylim(bottom=min([0.8, *(0.8 * v for v in shown)]),
                top=max([10.0, *(3 * v for v in shown)]))
    for i, backend in enumerate(backends):
        heights = [values.get(backend, {}).get(isa) for isa in isas]
        xs = [n + (i - (len(backends) - 1) / 2) * width for n in range(len(isas))]
        ax.bar(xs, [h if h is not None and h > 0 else float("nan") for h in heights], width,
               label=backend)
    ax.set_xticks(range(len(isas)))
    ax.set_xticklabels(isas, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    if backends:
        ax.legend(fontsize=7, ncols=min(len(backends), 4), loc="upper left")


def _save(fig: plt.Figure, out: Path, stem: str) -> list[Path]:
    fig.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    plt.close(fig)
    return paths


def plot_all(recs: Sequence[dict[str, Any]], out: Path, revision: str) -> list[Path]:
    recs = list(recs)
    isas = list(dict.fromkeys(r["isa"] for r in recs))
    backends = [b for b in dict.fromkeys(r["backend"] for r in recs) if b != "none"]
    programs = list(dict.fromkeys(r["program"] for r in recs))
    agg = (f"\ngeometric mean over the (up to {len(programs)}) programs each ISA ran"
           if len(programs) > 1
           else f"\n{programs[0]}" if programs else "")
    size = (max(6.0, 1.1 * len(isas) + 2), 4.5)
    paths: list[Path] = []

    fig, ax = plt.subplots(figsize=size)
    _bars(ax, per_isa(recs, "slowdown"), isas, backends, "slowdown vs none (×)",
          f"Emulated tracing slowdown vs none (emutrace {revision}){agg}")
    paths += _save(fig, out, "slowdown")

    fig, ax = plt.subplots(figsize=size)
    _bars(ax, per_isa(recs, "main_events"), isas, backends,
          "events (main counter)",
          f"Mechanism events per run (int3/btf/entry traps, hwbp hits, bts records, steps){agg}")
    paths += _save(fig, out, "events")

    fig, axes = plt.subplots(2, 1, figsize=(size[0], 8.5), sharex=True)
    _bars(axes[0], per_isa(recs, "predicted_vm"), isas, backends, "predicted slowdown (×)",
          f"Predicted NATIVE slowdown — setting VM\n(x86_64 KVM guest, measured){agg}")
    _bars(axes[1], per_isa(recs, "predicted_bare_metal"), isas, backends,
          "predicted slowdown (×)",
          f"Predicted NATIVE slowdown — setting BARE METAL\n(published figures){agg}")
    paths += _save(fig, out, "predicted")
    return paths
