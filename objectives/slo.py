"""Service-level objectives: the ``--slo`` grammar of PRODUCT.md §2, printed and checked.

Grammar (case-insensitive, whitespace between tokens ignored)::

    [STAT-]METRIC OP VALUE [UNIT]
    STAT   = mean | p50 | p90 | p95 | p99 | p999          (default mean)
    METRIC = ttft | tpot | itl | e2e                      upper bounds, UNIT ms (default) or s
           | interactivity                                lower bound, UNIT tok/s (optional)
    OP     = '<=' | '>=' | '='                            '=' is the metric's natural bound

Latencies are upper bounds: ``=`` means ``<=`` and ``>=`` is rejected. Interactivity
(tok/s per user) is a lower bound: ``=`` means ``>=`` and ``<=`` is rejected. A bound
the wrong way round is almost always a typo, and PRODUCT.md §2 wants a malformed SLO
rejected before any work. Values are stored canonically (ms, tok/s) and ``str(slo)``
prints text that parses back to an equal SLO.

Checking reads the metrics record of ``objectives.objectives``; a key the prediction
does not carry (an analytical prediction has no p99) gives ``met=None``, never a guess.
Slack is relative, the convention of METHOD §7's headroom: ``1 - actual / cap`` for
upper bounds, ``actual / floor - 1`` for lower bounds; negative slack is the miss.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from levers.errors import InputError
from levers.inputs import quote
from objectives.objectives import LATENCY_STATS, MEAN_STAT, latency_key, metric_value

Op = Literal["<=", ">="]
UPPER: Op = "<="
LOWER: Op = ">="

#: SLO metric name -> latency metric of the record (``objectives.LATENCY_METRICS``).
SLO_METRICS: dict[str, str] = {
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "itl": "itl_ms",
    "e2e": "e2e_ms",
    "interactivity": "interactivity",
}
LOWER_BOUND_METRICS = frozenset({"interactivity"})
_LATENCY_UNITS = {"": 1, "ms": 1, "s": 1000}
_RATE_UNITS = {"": 1, "tok/s": 1}

ACCEPTED_FORMS = (
    "[STAT-]METRIC(<=|=)VALUE[ms|s] for METRIC in ttft, tpot, itl, e2e; "
    "[STAT-]interactivity(>=|=)VALUE[tok/s]; STAT in mean (default), p50, p90, p95, "
    "p99, p999; e.g. p90-itl=25, ttft<=2s, p99-tpot<=40ms, interactivity>=70, "
    "p999-e2e<=30s, mean-ttft=500"
)

_OPERATOR = re.compile(r"[<>=]+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?", re.ASCII)


def _bound_of(metric: str) -> Op:
    return LOWER if metric in LOWER_BOUND_METRICS else UPPER


def _units_of(metric: str) -> dict[str, int]:
    return _RATE_UNITS if metric in LOWER_BOUND_METRICS else _LATENCY_UNITS


def _format_number(value: float) -> str:
    """Shortest text that parses back to exactly ``value``."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True, slots=True)
class SLO:
    """One bound on one statistic of one latency metric; ``value`` in ms or tok/s."""

    metric: str
    stat: str
    op: Op
    value: float

    def __post_init__(self) -> None:
        if self.metric not in SLO_METRICS:
            raise ValueError(f"unknown SLO metric {self.metric!r}")
        if self.stat not in LATENCY_STATS:
            raise ValueError(f"unknown SLO statistic {self.stat!r}")
        if self.op != _bound_of(self.metric):
            raise ValueError(f"{self.metric} takes {_bound_of(self.metric)!r}, not {self.op!r}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"SLO value must be positive and finite, not {self.value!r}")

    @property
    def key(self) -> str:
        """The metrics-record key this SLO bounds (``itl_ms_p90``, ``interactivity_mean``)."""
        return latency_key(SLO_METRICS[self.metric], self.stat)

    @property
    def unit(self) -> str:
        return "tok/s" if self.metric in LOWER_BOUND_METRICS else "ms"

    @property
    def needs_distribution(self) -> bool:
        """True when only a distribution (the DES) can predict the bounded statistic."""
        return self.stat != MEAN_STAT

    def __str__(self) -> str:
        return f"{self.stat}-{self.metric}{self.op}{_format_number(self.value)}{self.unit}"

    def check(self, metrics: Mapping[str, float]) -> SloCheck:
        """Compare the record against this bound; ``met`` is None when the key is absent."""
        actual = metric_value(metrics, self.key)
        if actual is None:
            return SloCheck(self, met=None, actual=None, slack=None)
        if self.op == UPPER:
            return SloCheck(self, met=actual <= self.value, actual=actual,
                            slack=1.0 - actual / self.value)
        return SloCheck(self, met=actual >= self.value, actual=actual,
                        slack=actual / self.value - 1.0)


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One SLO against one record: ``slack`` > 0 is margin, < 0 the relative miss."""

    slo: SLO
    met: bool | None
    actual: float | None
    slack: float | None

    def __str__(self) -> str:
        if self.actual is None:
            return f"{self.slo}: not predicted"
        verdict = "met" if self.met else "missed"
        return f"{self.slo}: {self.actual:.4g} {self.slo.unit} ({verdict}, slack {self.slack:+.1%})"


# -- parsing ----------------------------------------------------------------------


def _fail(text: str, reason: str) -> InputError:
    return InputError("--slo", f"cannot parse {quote(text)}: {reason}", ACCEPTED_FORMS)


def _parse_subject(text: str, left: str) -> tuple[str, str]:
    """``[STAT-]METRIC`` -> (metric, stat)."""
    if not left:
        raise _fail(text, "missing metric before the operator")
    stat, sep, metric = left.partition("-")
    if not sep:
        stat, metric = MEAN_STAT, left
        for glued in LATENCY_STATS:
            rest = left[len(glued):].strip()
            if left.startswith(glued) and rest in SLO_METRICS:
                hyphenated = f"{glued}-{rest}"
                raise _fail(text, f"a percentile prefix needs a hyphen ('{hyphenated}')")
    stat, metric = stat.strip(), metric.strip()
    if stat not in LATENCY_STATS:
        raise _fail(text, f"unknown percentile '{stat}'")
    if metric not in SLO_METRICS:
        raise _fail(text, f"unknown metric '{metric}'")
    return metric, stat


def _parse_op(text: str, metric: str, op_text: str) -> Op:
    if op_text not in ("=", "<=", ">="):
        raise _fail(text, f"unknown operator '{op_text}' (use <=, >= or =)")
    bound = _bound_of(metric)
    if op_text not in ("=", bound):
        kind = "a lower" if bound == LOWER else "an upper"
        raise _fail(text, f"{metric} takes {kind} bound: use '{bound}' or '='")
    return bound


def _parse_value(text: str, metric: str, right: str) -> float:
    """``VALUE[UNIT]`` -> the value in ms (latencies) or tok/s (interactivity)."""
    number = _NUMBER.match(right)
    if number is None:
        raise _fail(text, f"value {quote(right)} is not a number")
    unit = re.sub(r"\s+", "", right[number.end():])
    units = _units_of(metric)
    if unit not in units:
        allowed = " or ".join(u for u in units if u)
        raise _fail(text, f"unit {quote(unit)} does not apply to {metric} (use {allowed})")
    value = float(Decimal(number.group()) * units[unit])  # exact: '0.7s' is 700 ms
    if not (math.isfinite(value) and value > 0):
        raise _fail(text, f"value {quote(right)} must be a positive, finite number")
    return value


def parse_slo(text: str) -> SLO:
    """Parse one SLO of PRODUCT.md §2 (``p90-itl=25``, ``ttft<=2s``); InputError if malformed."""
    source = str(text)
    lowered = source.strip().lower()
    if not lowered:
        raise _fail(source, "empty SLO")
    operator = _OPERATOR.search(lowered)
    if operator is None:
        raise _fail(source, "no operator (<=, >= or =) between metric and value")
    metric, stat = _parse_subject(source, lowered[: operator.start()].strip())
    op = _parse_op(source, metric, operator.group())
    value = _parse_value(source, metric, lowered[operator.end():].strip())
    return SLO(metric=metric, stat=stat, op=op, value=value)


def parse_slos(texts: Iterable[str] | str | None) -> tuple[SLO, ...]:
    """Parse every ``--slo`` (each may hold several, comma-separated); one bound per key."""
    if texts is None:
        return ()
    if isinstance(texts, str):
        texts = (texts,)
    slos: dict[str, SLO] = {}
    for text in texts:
        pieces = [p for p in str(text).split(",") if p.strip()] or [str(text)]
        for piece in pieces:
            slo = parse_slo(piece)
            if slo.key in slos:
                raise InputError("--slo", f"'{slos[slo.key]}' and '{piece.strip()}' both "
                                 f"bound {slo.key}", "one SLO per metric and statistic")
            slos[slo.key] = slo
    return tuple(slos.values())


# -- checking ---------------------------------------------------------------------


def check_all(
    slos: Iterable[SLO], metrics: Mapping[str, float]
) -> tuple[bool | None, list[SloCheck]]:
    """Check every SLO: all met -> True; any missed -> False; else (some unknown) None."""
    checks = [slo.check(metrics) for slo in slos]
    verdicts = [c.met for c in checks]
    if False in verdicts:
        return False, checks
    if None in verdicts:
        return None, checks
    return True, checks


def miss_distance(checks: Iterable[SloCheck]) -> float:
    """Sum of relative misses, 0 when nothing is missed; ranks the "nearest misses".

    An unpredicted metric adds nothing: it is unknown, not missed (``check_all`` says None).
    """
    return sum(-c.slack for c in checks if c.slack is not None and c.slack < 0)


def needs_distribution(slos: Iterable[SLO]) -> bool:
    """True when any SLO bounds a percentile, which only a distribution can answer."""
    return any(slo.needs_distribution for slo in slos)
