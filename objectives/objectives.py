"""The 24 objectives of PRODUCT.md §4 and the metrics record they read.

A prediction (anchored, simulated or DES) yields a flat ``Mapping[str, float]`` whose
keys are listed in :data:`METRIC_KEYS`; a missing key means "not predicted". An
objective is nothing more than one of those keys plus a direction, so the search
(METHOD §6) can compare any two trials with :meth:`Objective.signed_score` without
knowing what the number means. Latency objectives read the ``_mean`` key; percentiles
enter a search only through SLOs (``objectives.slo``), which is why
:attr:`Objective.needs_distribution` is always False.

Aliases (PRODUCT.md §4): ``throughput`` -> ``output_throughput_per_gpu`` (output tokens/s
over every GPU of the deployment, the convention agentic benchmarks report; total
input + output tokens/s, which on agentic traffic is mostly cached prompt tokens, is
its own objective ``throughput_per_gpu``, alias ``total_throughput``); ``interactivity``,
``ttft`` and ``tpot`` are objective names; ``capacity`` -> ``max_concurrency`` (what the
KV cache holds, defined for every configuration; ``max_sustainable_concurrency`` is the
largest concurrency at which the configuration meets the search's SLOs, found by the
search: ``agent.sustainable``); ``cost`` -> ``gpus_per_replica``;
``e2e`` -> ``e2e_latency``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from levers.errors import InputError, accepted_list
from levers.inputs import quote

# -- the metrics record -----------------------------------------------------------

#: Latency-like distributions a prediction may carry, keyed ``f"{metric}_{stat}"``.
#: ``interactivity`` is tok/s per user (1000 / tpot_ms, per request).
LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "interactivity")
#: Statistics over requests; analytical predictions may carry only ``mean`` (and ``p50``).
LATENCY_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "p999")
MEAN_STAT = "mean"

SCALAR_METRICS: tuple[str, ...] = (
    "throughput_per_gpu",
    "throughput_fleet",
    "output_throughput_per_gpu",
    "output_throughput_fleet",
    "input_throughput_per_gpu",
    "input_throughput_fleet",
    "uncontended_step_ms",
    "generation_rate",
    "max_concurrency",
    "max_sustainable_concurrency",
    "memory_per_gpu_gb",
    "kv_cache_per_gpu_gb",
    "weights_per_gpu_gb",
    "activations_per_gpu_gb",
    "mixed_step_fraction",
    "tpot_pollution",
    "mixed_decode_step_ms",
    "prefill_comm_ms",
    "decode_comm_ms",
    "gpus_per_replica",
)


def latency_key(metric: str, stat: str = MEAN_STAT) -> str:
    """The record key of one statistic of a latency distribution (``itl_ms_p90``)."""
    if metric not in LATENCY_METRICS or stat not in LATENCY_STATS:
        raise ValueError(f"no latency key for metric {metric!r}, stat {stat!r}")
    return f"{metric}_{stat}"


LATENCY_KEYS: tuple[str, ...] = tuple(
    latency_key(m, s) for m in LATENCY_METRICS for s in LATENCY_STATS
)
#: Every key a metrics record may carry.
METRIC_KEYS: tuple[str, ...] = LATENCY_KEYS + SCALAR_METRICS


def metric_value(metrics: Mapping[str, float], key: str) -> float | None:
    """The value of ``key`` in a record, or None when it was not predicted (absent or NaN)."""
    raw = metrics.get(key)
    if raw is None:
        return None
    value = float(raw)
    return None if math.isnan(value) else value


# -- objectives -------------------------------------------------------------------


class Direction(StrEnum):
    MAX = "max"
    MIN = "min"


class Group(StrEnum):
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    CAPACITY = "capacity"
    MEMORY = "memory"
    INTERFERENCE = "interference"
    COMMUNICATION = "communication"
    COST = "cost"


@dataclass(frozen=True, slots=True)
class Objective:
    """One optimisable quantity: a metrics-record key and whether more is better."""

    name: str
    group: Group
    metric: str
    direction: Direction
    description: str
    aliases: tuple[str, ...] = ()
    unit: str = ""

    def __post_init__(self) -> None:
        assert self.metric in METRIC_KEYS, f"{self.name}: unknown metric {self.metric!r}"

    @property
    def needs_distribution(self) -> bool:
        """Objectives read means or scalars; only SLOs may need percentiles."""
        return False

    def value(self, metrics: Mapping[str, float]) -> float | None:
        """The objective's raw value, or None when the record does not carry it."""
        return metric_value(metrics, self.metric)

    def signed_score(self, metrics: Mapping[str, float]) -> float | None:
        """Higher is better: the value for MAX objectives, its negation for MIN ones."""
        value = self.value(metrics)
        if value is None:
            return None
        return value if self.direction is Direction.MAX else -value

    def better(self, a: float | None, b: float | None) -> bool:
        """True when raw value ``a`` is strictly better than ``b``; None (unknown) loses."""
        if a is None:
            return False
        if b is None:
            return True
        return a > b if self.direction is Direction.MAX else a < b


def _objective(name, group, metric, direction, unit, description, aliases=()) -> Objective:
    return Objective(name, group, metric, direction, description, tuple(aliases), unit)


_G, _D = Group, Direction
_ALL: tuple[Objective, ...] = (
    _objective("throughput_per_gpu", _G.THROUGHPUT, "throughput_per_gpu", _D.MAX, "tok/s",
               "total (input + output) tokens/s per GPU", ["total_throughput"]),
    _objective("throughput_fleet", _G.THROUGHPUT, "throughput_fleet", _D.MAX, "tok/s",
               "total tokens/s of the whole deployment"),
    _objective("output_throughput_per_gpu", _G.THROUGHPUT, "output_throughput_per_gpu",
               _D.MAX, "tok/s", "output (decode) tokens/s per GPU, every GPU of the deployment",
               ["throughput"]),
    _objective("output_throughput_fleet", _G.THROUGHPUT, "output_throughput_fleet", _D.MAX,
               "tok/s", "decode (output) tokens/s of the whole deployment"),
    _objective("input_throughput_per_gpu", _G.THROUGHPUT, "input_throughput_per_gpu",
               _D.MAX, "tok/s", "prefill (input) tokens/s per GPU"),
    _objective("input_throughput_fleet", _G.THROUGHPUT, "input_throughput_fleet", _D.MAX,
               "tok/s", "prefill (input) tokens/s of the whole deployment"),
    _objective("ttft", _G.LATENCY, "ttft_ms_mean", _D.MIN, "ms",
               "mean time to first token, from arrival"),
    _objective("tpot", _G.LATENCY, "tpot_ms_mean", _D.MIN, "ms",
               "mean time per output token after the first"),
    _objective("e2e_latency", _G.LATENCY, "e2e_ms_mean", _D.MIN, "ms",
               "mean end-to-end request latency", ["e2e"]),
    _objective("uncontended_decode_step", _G.LATENCY, "uncontended_step_ms", _D.MIN, "ms",
               "decode step of one request alone (batch 1, no prefill in the batch): the latency floor"),
    _objective("interactivity", _G.LATENCY, "interactivity_mean", _D.MAX, "tok/s",
               "mean per-user output tokens/s (1000 / TPOT per request)"),
    _objective("generation_rate", _G.LATENCY, "generation_rate", _D.MAX, "tok/s",
               "per-request generation rate"),
    _objective("max_concurrency", _G.CAPACITY, "max_concurrency", _D.MAX, "seqs",
               "maximum concurrent sequences the KV cache holds", ["capacity"]),
    _objective("max_sustainable_concurrency", _G.CAPACITY, "max_sustainable_concurrency",
               _D.MAX, "seqs", "maximum concurrency that still meets the SLOs"),
    _objective("memory_per_gpu", _G.MEMORY, "memory_per_gpu_gb", _D.MIN, "GB",
               "HBM used per GPU (weights + activations + KV cache)"),
    _objective("kv_cache_per_gpu", _G.MEMORY, "kv_cache_per_gpu_gb", _D.MIN, "GB",
               "KV cache pool per GPU"),
    _objective("weights_per_gpu", _G.MEMORY, "weights_per_gpu_gb", _D.MIN, "GB",
               "model weights per GPU"),
    _objective("activations_per_gpu", _G.MEMORY, "activations_per_gpu_gb", _D.MIN, "GB",
               "activation workspace per GPU"),
    _objective("mixed_step_fraction", _G.INTERFERENCE, "mixed_step_fraction", _D.MIN, "",
               "share of decode steps that also carry prefill work"),
    _objective("tpot_pollution", _G.INTERFERENCE, "tpot_pollution", _D.MIN, "x",
               "TPOT over the uncontended decode step at the same batch (no prefill in it): prefill's toll"),
    _objective("mixed_decode_step", _G.INTERFERENCE, "mixed_decode_step_ms", _D.MIN, "ms",
               "decode step time when prefill shares the batch"),
    _objective("prefill_comm_time", _G.COMMUNICATION, "prefill_comm_ms", _D.MIN, "ms",
               "communication time per prefill step"),
    _objective("decode_comm_time", _G.COMMUNICATION, "decode_comm_ms", _D.MIN, "ms",
               "communication time per decode step"),
    _objective("gpus_per_replica", _G.COST, "gpus_per_replica", _D.MIN, "GPUs",
               "GPUs one replica uses", ["cost"]),
)
del _G, _D

#: The 24 objectives by name, in PRODUCT.md §4 order.
OBJECTIVES: dict[str, Objective] = {o.name: o for o in _ALL}
_BY_NAME_OR_ALIAS: dict[str, Objective] = {
    **OBJECTIVES,
    **{alias: o for o in _ALL for alias in o.aliases},
}


def list_objectives() -> list[Objective]:
    """All objectives in PRODUCT.md §4 order."""
    return list(OBJECTIVES.values())


def objective_names() -> list[str]:
    """Every name and alias ``resolve_objective`` accepts."""
    return list(_BY_NAME_OR_ALIAS)


def resolve_objective(name: str | Objective) -> Objective:
    """The objective named ``name`` or one of its aliases (case-insensitive, ``-`` = ``_``)."""
    if isinstance(name, Objective):
        return name
    key = str(name).strip().lower().replace("-", "_")
    objective = _BY_NAME_OR_ALIAS.get(key)
    if objective is not None:
        return objective
    problem = f"unknown objective {quote(name)}"
    close = difflib.get_close_matches(key, _BY_NAME_OR_ALIAS, n=1)
    if close:
        problem += f"; did you mean '{close[0]}'?"
    names = objective_names()
    raise InputError("--objective", problem, accepted_list(names, limit=len(names)))
