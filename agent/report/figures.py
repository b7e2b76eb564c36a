"""The report's figures, drawn with matplotlib and embedded as inline SVG (text kept as
text, so the page stays small and searchable): the Pareto plot of a search's priced
trials (the same figure `pareto` writes, `predictor.sweep.plot`), the trials over time
by phase with the best so far, rejections by reason, and a plan-mix tier's candidates
against the tier's interactivity floor.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from typing import Any

from agent.cli.render import number
from predictor.sweep.frontier import FrontierRule
from predictor.sweep.plot import build_figure, pyplot
from predictor.sweep.run import SweepPoint

PHASE_COLOURS = {"seed": "#1f77b4", "planner": "#ff7f0e", "investigator": "#2ca02c", "confirm": "#9467bd"}
SMALL_FIGURE_IN = (10.0, 3.6)


def svg(figure: Any) -> str:
    """The figure as inline SVG markup (no XML prolog), then closed."""
    plt = pyplot()
    try:
        buffer = io.StringIO()
        with plt.rc_context({"svg.fonttype": "none"}):
            figure.savefig(buffer, format="svg", bbox_inches="tight")
    finally:
        plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def pareto_svg(points: Sequence[SweepPoint], title: str, rule: FrontierRule) -> str:
    return svg(build_figure(pyplot(), points, title, rule))


def trials_svg(indices: Sequence[int], values: Sequence[float | None], phases: Sequence[str],
               legal: Sequence[bool], slo_met: Sequence[bool | None], direction: str, unit: str) -> str:
    """Objective by trial index, coloured by phase (hollow: missed an SLO), rejected
    trials as crosses at the bottom, and the best SLO-meeting objective so far."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=SMALL_FIGURE_IN, dpi=100)
    priced = [(i, v, p, met is not False) for i, v, p, ok, met in zip(indices, values, phases, legal, slo_met)
              if ok and v is not None]
    for phase, colour in PHASE_COLOURS.items():
        for meets in (True, False):
            chosen = [(i, v) for i, v, p, m in priced if p == phase and m is meets]
            if chosen:
                label = f"{phase} ({len(chosen)})" if meets else f"{phase}, missed an SLO ({len(chosen)})"
                axes.scatter(*zip(*chosen), s=12, edgecolors=colour, facecolors=colour if meets else "none",
                             linewidths=0.8, label=label, zorder=3)
    rejected = [i for i, ok in zip(indices, legal) if not ok]
    if rejected:
        floor = min((v for _, v, _, _ in priced), default=0.0)
        axes.scatter(rejected, [floor] * len(rejected), marker="x", s=14, color="#d62728",
                     label=f"rejected ({len(rejected)})", zorder=2)
    meeting = sorted((i, v) for i, v, _, m in priced if m)
    if meeting:
        best, line = (-math.inf if direction == "max" else math.inf), []
        for index, value in meeting:
            best = max(best, value) if direction == "max" else min(best, value)
            line.append((index, best))
        axes.step(*zip(*line), where="post", color="black", linewidth=1.2, label="best so far (SLOs met)", zorder=4)
    axes.set_xlabel("trial (in the order it was priced)")
    axes.set_ylabel(f"objective ({unit})")
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[1]:     # a search with no trial draws nothing to name
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    _tight(figure)
    return svg(figure)


def rejections_svg(reasons: Sequence[tuple[str, int]]) -> str:
    """Rejected trials per reason, the most common on top."""
    plt = pyplot()
    height = max(1.6, 0.32 * len(reasons) + 0.8)
    figure, axes = plt.subplots(figsize=(10.0, height), dpi=100)
    labels = [_short(reason) for reason, _ in reversed(reasons)]
    counts = [count for _, count in reversed(reasons)]
    axes.barh(labels, counts, color="#d62728", alpha=0.75)
    for y, count in enumerate(counts):
        axes.text(count, y, f" {count}", va="center", fontsize=8)
    axes.set_xlabel("rejected trials")
    axes.tick_params(axis="y", labelsize=8)
    _tight(figure)
    return svg(figure)


def tier_svg(points: Sequence[tuple[float, float, str, bool]], floor: float | None, title: str) -> str:
    """A tier's candidates (interactivity, throughput per GPU, label, is the pick)."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(10.0, 4.2), dpi=100)
    for x, y, label, is_pick in points:
        axes.scatter([x], [y], s=60 if is_pick else 22, marker="*" if is_pick else "o",
                     color="#2ca02c" if is_pick else "#1f77b4", zorder=3)
        axes.annotate(label, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7)
    if floor is not None:
        axes.axvline(floor, color="#d62728", linestyle="--", linewidth=1.0, label=f"floor {number(floor)} tok/s/user")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    axes.set_xlabel("interactivity (tok/s/user, the tier's statistic)")
    axes.set_ylabel("throughput per GPU (tok/s/GPU)")
    axes.set_title(title, fontsize=10)
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    _tight(figure)
    return svg(figure)


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tight(figure) -> None:
    """``tight_layout`` without its warning on stderr when long labels leave it no room
    (the figure keeps its default layout then)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        figure.tight_layout()
