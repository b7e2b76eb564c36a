"""A frontier drawn in text, for the terminal (`inferasim pareto`): each frontier point is
a letter at its (interactivity, throughput) cell, and the table below it uses the same
letters, so the shape of the trade-off is visible without opening the PNG.

Plain characters only (no braille or colour), so it survives logs and 80 columns; axes
are linear from zero, like the PNG.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

KEYS = string.ascii_uppercase + string.ascii_lowercase + string.digits
PLOT_HEIGHT = 12
Y_TICK_WIDTH = 9     # "1,234,567" fits


def key_of(index: int) -> str:
    """The letter of the ``index``-th frontier point (``?`` past the last key)."""
    return KEYS[index] if index < len(KEYS) else "?"


def frontier_chart(xy: Sequence[tuple[float, float]], width: int, x_label: str, y_label: str,
                   height: int = PLOT_HEIGHT) -> list[str]:
    """Lines of a text scatter of ``xy`` (points in order get ``key_of(i)``), ``width``
    columns wide including the y ticks."""
    if not xy:
        return []
    columns = max(20, width - Y_TICK_WIDTH - 2)
    x_max = max(x for x, _ in xy) or 1.0
    y_max = max(y for _, y in xy) or 1.0
    grid = [[" "] * columns for _ in range(height)]
    for index, (x, y) in enumerate(xy):
        column = min(columns - 1, int(round(x / x_max * (columns - 1))))
        row = height - 1 - min(height - 1, int(round(y / y_max * (height - 1))))
        grid[row][column] = key_of(index) if grid[row][column] == " " else "+"
    lines = [y_label]
    for row, cells in enumerate(grid):
        tick = _tick(y_max) if row == 0 else (_tick(0) if row == height - 1 else "")
        lines.append(f"{tick:>{Y_TICK_WIDTH}} |{''.join(cells).rstrip()}")
    lines.append(" " * Y_TICK_WIDTH + " +" + "-" * columns)
    right = _tick(x_max)
    lines.append(" " * (Y_TICK_WIDTH + 2) + "0" + right.rjust(columns - 1))
    lines.append(" " * (Y_TICK_WIDTH + 2) + x_label.center(columns).rstrip())
    return lines


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
