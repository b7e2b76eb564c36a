"""The Pareto plot of a sweep (PRODUCT.md §2 `pareto`, METHOD §8): output throughput
per GPU (output tok/s/GPU) against interactivity (tok/s/user, the median over requests of 1/TPOT).

Drawn for a design review, so each visual channel answers one question:
- colour: the layout family (colocated TP, attention-DP, EP, disaggregated), because the
  first decision is the shape of the deployment;
- marker: the precision (the narrowest of the weight and expert dtypes; `native` is the
  checkpoint's own);
- fill: anchored points are filled, rank-only (simulate-mode or projected) points hollow,
  because rank-only numbers only order candidates (METHOD §2);
- the frontier is joined by a line and each of its points is labelled with a short
  configuration; points the frontier rule excludes (mean TTFT over the cap, a bound
  missed: `predictor.sweep.frontier`) are grey crosses, and interactivity bounds are
  dashed vertical lines;
- the legends sit to the right of the axes, outside the data.

matplotlib is imported when a plot is drawn (not at CLI start-up), always with the
file-only Agg backend. The PNG is written to a temporary name and renamed, so an
interrupted run leaves no half-written file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from levers.configuration import Configuration
from levers.errors import InputError
from predictor.files import atomic_write
from predictor.step.cost import Mode
from predictor.sweep.frontier import LOWER, FrontierRule
from predictor.sweep.run import INTERACTIVITY_KEY, SweepPoint

FIGSIZE_IN = (12.0, 7.0)
DPI = 110
POINT_SIZE = 12
FRONTIER_SIZE = 46
FAINT_ALPHA = 0.28
FRONTIER_WIDTH = 1.6
MAX_LABELS = 16
FAMILIES = {"TP": "#1f77b4", "attention-DP": "#2ca02c", "EP": "#ff7f0e", "disaggregated": "#9467bd"}
FAMILY_TITLES = {"TP": "colocated TP", "attention-DP": "attention-DP", "EP": "EP (+ attention-DP)",
                 "disaggregated": "disaggregated P/D"}
MARKERS = {"native": "o", "bf16": "D", "fp8": "s", "fp4": "^"}
INELIGIBLE_COLOUR = "#9a9a9a"
NARROWEST = ("fp4", "fp8", "bf16")
X_LABEL = "Interactivity (tok/s/user, median over requests of 1/TPOT)"
Y_LABEL = "Output throughput per GPU (output tok/s/GPU)"
PLOT_INSTALL_HINT = "pip install matplotlib (a core dependency of inferasim)"


def layout_family(config: Configuration) -> str:
    """The family a configuration's layout belongs to (the plot's colour)."""
    if config.disaggregated:
        return "disaggregated"
    if config.ep > 1:
        return "EP"
    if config.attention_dp > 1:
        return "attention-DP"
    return "TP"


def precision(config: Configuration) -> str:
    """The narrowest of the weight and routed-expert dtypes, `native` when both are the
    checkpoint's (the plot's marker)."""
    chosen = {config.weight_dtype, config.expert_dtype} - {None}
    return next((dtype for dtype in NARROWEST if dtype in chosen), "native")


def short_label(config: Configuration) -> str:
    """``TP2 DP2 EP2 fp4 c64 mtp:1``: the layout, precision, load and speculation (method:depth)."""
    if config.disaggregated:
        layout = f"P {config.prefill_layout}x{config.prefill_replicas} D {config.decode_layout}x{config.decode_replicas}"
    else:
        parts = [f"TP{config.tp}"] + [f"{name}{width}" for name, width in
                                      (("DP", config.attention_dp), ("EP", config.ep), ("PP", config.pp)) if width > 1]
        layout = " ".join(parts) + (f" x{config.replicas}" if config.replicas > 1 else "")
    spec = f" {config.spec_method}:{config.spec_depth}" if config.spec_method != "none" else ""
    dtype = precision(config)
    return f"{layout}{'' if dtype == 'native' else ' ' + dtype} c{config.concurrency}{spec}"


def plot_frontier(points: Sequence[SweepPoint], path: str | Path, title: str,
                  rule: FrontierRule = FrontierRule()) -> Path:
    """Draw ``points`` (frontier marked by ``on_frontier``) into a PNG at ``path``."""
    plt = pyplot()
    figure = build_figure(plt, points, title, rule)
    try:
        return _save(figure, Path(path))
    finally:
        plt.close(figure)


def build_figure(plt: Any, points: Sequence[SweepPoint], title: str, rule: FrontierRule) -> Any:
    """The figure of :func:`plot_frontier` (the caller closes it)."""
    figure, axes = plt.subplots(figsize=FIGSIZE_IN, dpi=DPI)
    try:
        _draw_ineligible(axes, [p for p in points if not p.is_eligible], rule)
        _draw_points(axes, [p for p in points if p.is_eligible])
        frontier = sorted((p for p in points if p.on_frontier), key=lambda p: (p.interactivity, -p.output_throughput_per_gpu))
        _draw_frontier(axes, frontier)
        _draw_bounds(axes, rule)
        axes.set_xlabel(X_LABEL)
        axes.set_ylabel(Y_LABEL)
        axes.set_title(f"{title}\nfrontier among points with {rule.describe()}", fontsize=10)
        axes.grid(True, alpha=0.3)
        axes.set_xlim(left=0)
        axes.set_ylim(bottom=0)
        if points:
            _legends(axes, points)
        figure.tight_layout()
    except BaseException:
        plt.close(figure)
        raise
    return figure


def _draw_points(axes: Any, points: Sequence[SweepPoint]) -> None:
    groups: dict[tuple[str, str, bool], list[SweepPoint]] = {}
    for point in points:
        key = (layout_family(point.config), precision(point.config), point.mode is Mode.ANCHORED)
        groups.setdefault(key, []).append(point)
    for (family, dtype, anchored), chosen in sorted(groups.items()):
        colour = FAMILIES[family]
        axes.scatter([p.interactivity for p in chosen], [p.output_throughput_per_gpu for p in chosen], s=POINT_SIZE,
                     marker=MARKERS[dtype], alpha=FAINT_ALPHA, linewidths=0.8, edgecolors=colour,
                     facecolors=colour if anchored else "none", zorder=2)


def _draw_ineligible(axes: Any, points: Sequence[SweepPoint], rule: FrontierRule) -> None:
    if points:
        axes.scatter([p.interactivity for p in points], [p.output_throughput_per_gpu for p in points], s=POINT_SIZE,
                     marker="x", color=INELIGIBLE_COLOUR, alpha=0.5, linewidths=0.8, zorder=1,
                     label=f"off the frontier rule ({len(points)})")


def _draw_frontier(axes: Any, frontier: Sequence[SweepPoint]) -> None:
    if not frontier:
        return
    axes.plot([p.interactivity for p in frontier], [p.output_throughput_per_gpu for p in frontier], color="black",
              linewidth=FRONTIER_WIDTH, zorder=3, label=f"frontier ({len(frontier)} points)")
    for point in frontier:
        colour = FAMILIES[layout_family(point.config)]
        anchored = point.mode is Mode.ANCHORED
        axes.scatter([point.interactivity], [point.output_throughput_per_gpu], s=FRONTIER_SIZE, zorder=4,
                     marker=MARKERS[precision(point.config)], edgecolors="black" if anchored else colour,
                     linewidths=1.0 if anchored else 1.8, facecolors=colour if anchored else "white")
    step = max(1, -(-len(frontier) // MAX_LABELS))
    for rank, point in enumerate(frontier[::step]):
        axes.annotate(short_label(point.config), (point.interactivity, point.output_throughput_per_gpu), fontsize=6.5,
                      xytext=(6, 5 if rank % 2 == 0 else -9), textcoords="offset points", zorder=5)


def _draw_bounds(axes: Any, rule: FrontierRule) -> None:
    for bound in rule.bounds:
        if bound.key.startswith(INTERACTIVITY_KEY.rpartition("_")[0]) and bound.op == LOWER:
            axes.axvline(bound.value, color="#d62728", linestyle="--", linewidth=1.0, zorder=1,
                         label=f"SLO {bound.text}")


def _legends(axes: Any, points: Sequence[SweepPoint]) -> None:
    """Layout families, precisions, fill and the lines: all outside the axes, to the right."""
    from matplotlib.lines import Line2D

    families = sorted({layout_family(p.config) for p in points}, key=list(FAMILIES).index)
    dtypes = sorted({precision(p.config) for p in points}, key=list(MARKERS).index)
    handles = [Line2D([], [], linestyle="", marker="o", color=FAMILIES[f], label=FAMILY_TITLES[f]) for f in families]
    handles += [Line2D([], [], linestyle="", marker=MARKERS[d], color="#444444", label=f"precision {d}")
                for d in dtypes]
    handles += [Line2D([], [], linestyle="", marker="o", color="#444444", label="anchored (filled)"),
                Line2D([], [], linestyle="", marker="o", markerfacecolor="none", color="#444444",
                       label="rank-only (hollow)")]
    lines, labels = axes.get_legend_handles_labels()
    axes.legend(handles=handles + lines, labels=[h.get_label() for h in handles] + labels, loc="upper left",
                bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)


def _save(figure: Any, path: Path) -> Path:
    return atomic_write(path, lambda temporary: figure.savefig(temporary, format="png"))


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("pareto.png", "matplotlib is not installed", PLOT_INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
