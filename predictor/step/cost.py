"""The step cost model's interface (METHOD §2): one protocol, two modes.

A step cost is a breakdown, not a float (STYLE.md rule 4): a frozen record of named
terms in microseconds whose total is derived. Anchored mode (calibrated by a measured
anchor, METHOD §3) and simulate mode (rebuilt per operator, rank-only) both implement
:class:`StepModel`. The DES calls the `*_us` fast paths thousands of times per run;
the breakdown methods say *why* a step costs what it costs.

Batch convention: every method takes the *replica's* batch (all attention-DP ranks of
the replica together, assumed balanced; a step costs its slowest rank); a pipeline
layout's decode step is the time for every running request to advance one verify step
(METHOD §3.6, Eq. 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Protocol, runtime_checkable

from predictor.units import US_PER_MS


class Mode(StrEnum):
    ANCHORED = "anchored"
    RANK_ONLY = "rank-only"


@dataclass(frozen=True, slots=True)
class StepCost:
    """Named terms (microseconds) of one engine step; ``total_us`` is their sum."""

    terms: tuple[tuple[str, float], ...]

    @property
    def total_us(self) -> float:
        return sum(value for _, value in self.terms)

    @property
    def total_ms(self) -> float:
        return self.total_us / US_PER_MS

    def get(self, name: str) -> float:
        return sum(value for key, value in self.terms if key == name)

    def to_json(self) -> dict[str, float]:
        data: dict[str, float] = {}
        for key, value in self.terms:
            data[key] = round(data.get(key, 0.0) + value, 3)
        data["total_us"] = round(self.total_us, 3)
        return data

    @staticmethod
    def of(**terms_us: float) -> "StepCost":
        return StepCost(tuple((k, float(v)) for k, v in terms_us.items()))

    def plus(self, **terms_us: float) -> "StepCost":
        return StepCost(self.terms + tuple((k, float(v)) for k, v in terms_us.items()))

    def scaled(self, factor: float, names: Iterable[str] | None = None) -> "StepCost":
        """Scale the named terms (all when ``names`` is None)."""
        chosen = None if names is None else set(names)
        return StepCost(tuple((k, v * factor if chosen is None or k in chosen else v) for k, v in self.terms))


@runtime_checkable
class StepModel(Protocol):
    """Prices prefill, decode and mixed steps of one replica layout on one engine."""

    mode: Mode
    anchor_id: str | None
    flags: tuple[str, ...]
    tokens_per_step: float  # tokens committed per decode step per request: L(k) (Eq. 2), 1 without speculation
    attention_dp: int       # attention-DP ranks a mixed step's ``prompts`` are placed on

    def decode(self, batch: int, context_tokens: float) -> StepCost: ...

    def prefill(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> StepCost: ...

    def mixed(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
              prefill_context_tokens: float = 0.0, *, prompts: int = 0, rank_prompts: int = 0) -> StepCost: ...

    def decode_us(self, batch: int, context_tokens: float) -> float: ...

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float: ...

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0, *, prompts: int = 0, rank_prompts: int = 0) -> float: ...
