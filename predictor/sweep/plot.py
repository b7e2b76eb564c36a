"""The Pareto plot of a sweep (PRODUCT.md §2 `pareto`, METHOD §8): throughput per GPU
(tok/s/GPU) against interactivity (tok/s/user).

Every point is drawn faint; the frontier is drawn bold and joined in interactivity
order. Anchored points are filled circles, rank-only (simulate-mode or projected)
points are hollow, because rank-only numbers only order candidates (METHOD §2) and a
reader must see which part of the frontier is measured-backed.

matplotlib is an optional extra (`inferasim[plot]`), imported when a plot is drawn and
always with the file-only Agg backend (no display needed). The PNG is written to a
temporary name and renamed, so an interrupted run leaves no half-written file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from levers.errors import InputError
from predictor.files import atomic_write
from predictor.step.cost import Mode
from predictor.sweep.run import SweepPoint

FIGSIZE_IN = (9.0, 6.0)
DPI = 120
FAINT_ALPHA = {Mode.RANK_ONLY: 0.18, Mode.ANCHORED: 0.45}   # anchored points are rare: keep them visible
FAINT_SIZE = {Mode.RANK_ONLY: 7, Mode.ANCHORED: 14}
FRONTIER_SIZE = 36
FRONTIER_WIDTH = 2.2
COLOURS = {Mode.ANCHORED: "#1f77b4", Mode.RANK_ONLY: "#d62728"}
LABELS = {Mode.ANCHORED: "anchored", Mode.RANK_ONLY: "rank-only"}
X_LABEL = "Interactivity (tok/s/user)"
Y_LABEL = "Throughput per GPU (tok/s/GPU)"
PLOT_INSTALL_HINT = "pip install 'inferasim[plot]'"


def plot_frontier(points: Sequence[SweepPoint], path: str | Path, title: str) -> Path:
    """Draw ``points`` (frontier marked by ``on_frontier``) into a PNG at ``path``."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGSIZE_IN, dpi=DPI)
    try:
        _draw_points(axes, points)
        _draw_frontier(axes, [p for p in points if p.on_frontier])
        axes.set_xlabel(X_LABEL)
        axes.set_ylabel(Y_LABEL)
        axes.set_title(title, fontsize=10)
        axes.grid(True, alpha=0.3)
        axes.set_xlim(left=0)
        axes.set_ylim(bottom=0)
        if points:
            legend = axes.legend(loc="upper right", fontsize=8)
            for handle in legend.legend_handles:
                handle.set_alpha(1.0)
        figure.tight_layout()
        return _save(figure, Path(path))
    finally:
        plt.close(figure)


def _draw_points(axes: Any, points: Sequence[SweepPoint]) -> None:
    for mode in (Mode.RANK_ONLY, Mode.ANCHORED):
        chosen = [p for p in points if p.mode is mode]
        if chosen:
            axes.scatter([p.interactivity for p in chosen], [p.throughput_per_gpu for p in chosen],
                         s=FAINT_SIZE[mode], alpha=FAINT_ALPHA[mode], color=COLOURS[mode], linewidths=0,
                         label=f"{LABELS[mode]} points ({len(chosen)})")


def _draw_frontier(axes: Any, frontier: Sequence[SweepPoint]) -> None:
    if not frontier:
        return
    ordered = sorted(frontier, key=lambda p: (p.interactivity, -p.throughput_per_gpu))
    axes.plot([p.interactivity for p in ordered], [p.throughput_per_gpu for p in ordered],
              color="black", linewidth=FRONTIER_WIDTH, label=f"frontier ({len(ordered)})", zorder=3)
    for mode in (Mode.ANCHORED, Mode.RANK_ONLY):
        chosen = [p for p in ordered if p.mode is mode]
        if chosen:
            filled = mode is Mode.ANCHORED
            axes.scatter([p.interactivity for p in chosen], [p.throughput_per_gpu for p in chosen],
                         s=FRONTIER_SIZE, zorder=4, edgecolors=COLOURS[mode], linewidths=1.5,
                         facecolors=COLOURS[mode] if filled else "white",
                         label=f"frontier, {LABELS[mode]}")


def _save(figure: Any, path: Path) -> Path:
    return atomic_write(path, lambda temporary: figure.savefig(temporary, format="png"))


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("pareto.png", "matplotlib is not installed", PLOT_INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
