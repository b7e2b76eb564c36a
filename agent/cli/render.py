"""How numbers, ids, configurations and tables are shown to people (every command).

Rules, so that every table reads at 80 columns and nothing printed is a Python repr:
- numbers: thousands separators, about three significant digits, never scientific
  notation (`number`); a missing value is `-`; an interval is `value [lo-hi]`;
- headers carry their unit and statistic (`TTFT mean\\nms`) and never wrap inside a
  word: a column is at least as wide as the longest word of its header, and long
  headers are written on two lines;
- configurations are `lever=value` pairs separated by `, ` so they wrap between
  pairs, never inside one;
- ids (ledgers, anchors) are printed whole on a line of their own (`id_line`), never
  folded, so they can be copied; `--wide` puts them in the table instead.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

MISSING = "-"
WIDE_LIMIT = 1000  # columns a --wide table may take at most
DISTRIBUTION_NAMES = {"ttft_ms": ("TTFT", "ms"), "ttft_admission_ms": ("TTFT adm.", "ms"),
                      "tpot_ms": ("TPOT", "ms"), "itl_ms": ("ITL", "ms"), "e2e_ms": ("E2E", "ms"),
                      "interactivity": ("tok/s/user", "")}
SCALAR_HEADERS = {
    "throughput_per_gpu": "tok/s\nper GPU", "output_throughput_per_gpu": "out tok/s\nper GPU",
    "input_throughput_per_gpu": "in tok/s\nper GPU", "throughput_fleet": "tok/s\nfleet",
    "output_throughput_fleet": "out tok/s\nfleet", "input_throughput_fleet": "in tok/s\nfleet",
    "max_concurrency": "max\nseqs", "memory_per_gpu_gb": "memory\nGB/GPU", "gpus_per_replica": "GPUs per\nreplica",
}


HUGE = 1e15    # from here a number is shown in scientific notation


def number(value: float | int | None, digits: int = 3) -> str:
    """``12,345``, ``123``, ``12.3``, ``1.23``, ``0.0123``: about ``digits`` significant
    digits in fixed notation; None or NaN -> ``-``."""
    if value is None or isinstance(value, bool):
        return MISSING if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    value = float(value)
    if not math.isfinite(value):
        return MISSING if math.isnan(value) else ("inf" if value > 0 else "-inf")
    magnitude = abs(value)
    if magnitude >= HUGE:                       # no column holds a 300-digit number
        return f"{value:.{digits - 1}e}"
    if magnitude >= 10 ** (digits - 1) or value == 0:
        return f"{value:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(magnitude))
    text = f"{value:,.{min(decimals, 8)}f}"
    return text if float(text.replace(",", "")) != 0 else "0"


def metric_header(key: str) -> str:
    """A metrics key as a two-line header with its statistic and unit:
    ``itl_ms_p90`` -> ``ITL\\np90 ms``, ``interactivity_p50`` -> ``tok/s/user\\np50``."""
    if key in SCALAR_HEADERS:
        return SCALAR_HEADERS[key]
    base, _, stat = key.rpartition("_")
    if base in DISTRIBUTION_NAMES:
        name, unit = DISTRIBUTION_NAMES[base]
        return f"{name}\n{stat} {unit}".rstrip()
    return key.replace("_", " ")


def percent(share: float | None, signed: bool = False) -> str:
    """A share as a percentage: 0.123 -> ``12%`` (``+12%`` when signed)."""
    if share is None or not math.isfinite(share):
        return MISSING
    if abs(share) * 100 >= HUGE:
        return f"{share * 100:{'+' if signed else ''}.2e}%"
    return f"{share:+.0%}" if signed else f"{share:.0%}"


def with_interval(value: float | None, interval: Sequence[float] | None = None) -> str:
    """``value [lo-hi]`` when an interval exists (the contract of issue 12), else the value."""
    if value is None or not interval:
        return number(value)
    low, high = interval
    return f"{number(value)} [{number(low)}-{number(high)}]"


def config_text(config: Any) -> str:
    """A configuration (or its `describe()` text) as ``tp=8, ep=8, concurrency=64``."""
    text = config if isinstance(config, str) else config.describe()
    return ", ".join(part for part in text.split(",") if part)


def mapping_text(items: Mapping[str, Any]) -> str:
    """``seed 177, planner 12`` instead of ``{'seed': 177, 'planner': 12}``."""
    return ", ".join(f"{key} {number(value) if isinstance(value, (int, float)) else value}"
                     for key, value in items.items()) or "none"


def list_text(items: Iterable[Any], limit: int = 12) -> str:
    """``1,024, 4,096`` instead of ``[1024, 4096]``; a long list keeps its ends and count."""
    shown = [number(item) if isinstance(item, (int, float)) else str(item) for item in items]
    if len(shown) > limit:
        shown = [*shown[:4], "...", *shown[-2:], f"({len(shown)} in all)"]
    return ", ".join(shown) or "none"


def table(title: str | None, columns: Sequence[tuple[str, str]], *, wrap_last: bool = False,
          wrap: Collection[int] = ()) -> Table:
    """A table whose headers never wrap inside a word.

    ``columns`` are (header, justify) pairs; the header may hold a ``\\n``. Columns in
    ``wrap`` (indices; ``wrap_last`` adds the last one) hold text (a configuration, a
    reason): they share the remaining width and wrap between words (a header word stays
    whole); the others never wrap and are at least as wide as each header line."""
    wrapping = set(wrap) | ({len(columns) - 1} if wrap_last else set())
    grid = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for position, (header, justify) in enumerate(columns):
        text = position in wrapping
        widest = max((len(part) for part in (header.split() if text else header.splitlines())), default=1)
        grid.add_column(header, justify=justify, min_width=widest, no_wrap=not text,
                        overflow="fold" if text else "ellipsis", ratio=1 if text else None)
    return grid


def objective_header(goal: Any) -> str:
    """``objective`` over its unit, per GPU or per user when the metric is (an
    :class:`objectives.objectives.Objective`)."""
    unit = goal.unit or "value"
    if goal.metric.endswith("_per_gpu") and unit == "tok/s":
        unit = "tok/s/GPU"
    elif goal.metric.startswith("interactivity") or goal.metric == "generation_rate":
        unit = "tok/s/user"
    return f"objective\n{unit}"


def print_wide(console: Console, renderable: Any) -> None:
    """Print at the renderable's natural width (``--wide``), wider than the terminal if
    need be, so no cell is folded or cut; colours follow ``console``."""
    natural = Measurement.get(console, console.options.update(width=WIDE_LIMIT), renderable).maximum
    wide = Console(file=console.file, width=max(console.width, natural), force_terminal=console.is_terminal,
                   color_system=console.color_system, no_color=console.no_color, highlight=False)
    wide.print(renderable, crop=False)


def id_line(console: Console, text: str, style: str = "bold") -> None:
    """An id (with an optional tail) on a line of its own, never wrapped or cut."""
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def paragraph(console: Console, text: str, indent: int = 2, first: str | None = None) -> None:
    """Text wrapped at the console width between words, with a hanging indent."""
    width = max(40, console.width)
    lead = " " * indent if first is None else first
    console.print(textwrap.fill(text, width=width, initial_indent=lead, subsequent_indent=" " * (len(lead) + 2),
                                break_long_words=False, break_on_hyphens=False),
                  markup=False, highlight=False, soft_wrap=True)


def does_not_fit(console: Console, title: str, reasons: Iterable[str]) -> None:
    """A configuration that does not fit or is illegal, as predict and simulate report it
    (PRODUCT.md §2: the reasons, `metrics: null`; the caller exits 1)."""
    console.print(f"[red]does not fit / illegal[/red]: {escape(title)}", soft_wrap=True)
    for reason in reasons:
        paragraph(console, reason, first="  - ")
    console.print("metrics: null")


def say(console: Console, text: str) -> None:
    """One plain line (no markup, no highlighting), wrapped by words at the console width."""
    paragraph(console, text, indent=0)
