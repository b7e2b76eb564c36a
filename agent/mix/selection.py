"""Which candidate serves one model in one latency tier (METHOD §7).

Throughput is output tokens/s per GPU over every GPU of the deployment (total tokens/s
is reported beside it); every metric is a mean over replications with its 90% interval,
and a short-listed candidate whose throughput interval overlaps the pick's is marked as
tying it. A candidate qualifies when every bound of the tier is met: interactivity at
or above the floor and predicted TTFT at most *half* the cap (`agent.mix.config.Tier.slos`; the
halving covers TTFT prediction error). A statistic the prediction does not carry is
unknown, and an unknown never qualifies. Among qualifiers within 5% of the best
predicted throughput per GPU the pick is the one with the most headroom, the smallest
relative slack over the tier's bounds (``objectives.slo`` slack: ``interactivity /
floor - 1`` and ``1 - TTFT / (cap / 2)``); a tier without bounds (bulk) picks the best
throughput. The short list is the pick then the next best qualifiers by throughput
(five in all): in published validation it held the measured best far more often than
the single pick. When nothing qualifies the slot reports its nearest miss (smallest
``objectives.slo.miss_distance``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.mix.candidates import CandidateTask
from agent.mix.config import Tier
from agent.trial import Trial
from objectives.slo import SloCheck, check_all, miss_distance
from predictor.units import MS_PER_S

BAND_SHARE = 0.05       # qualifiers within 5% of the best throughput per GPU compete on headroom
SHORT_LIST_SIZE = 5
THROUGHPUT_KEY = "output_throughput_per_gpu"     # output tok/s over every GPU (the field's agentic convention)
TOTAL_THROUGHPUT_KEY = "throughput_per_gpu"
NO_HEADROOM = float("-inf")


@dataclass(frozen=True, slots=True)
class Scored:
    """One priced candidate against one tier; ``order`` is its place in the entry's list."""

    task: CandidateTask
    trial: Trial
    checks: tuple[SloCheck, ...]
    qualifies: bool
    headroom: float | None      # None: the tier has no bound
    miss: float                 # sum of relative misses (0 when qualifying)
    order: int

    @property
    def throughput_per_gpu(self) -> float:
        return float(self.trial.metrics[THROUGHPUT_KEY])

    def ties(self, other: Scored) -> bool:
        """Whether the two throughput intervals overlap (their order is inside the noise)."""
        mine, theirs = self.trial.interval(THROUGHPUT_KEY), other.trial.interval(THROUGHPUT_KEY)
        return mine is not None and theirs is not None and mine[0] <= theirs[1] and theirs[0] <= mine[1]

    def value_of(self, metric: str) -> float | None:
        return next((c.actual for c in self.checks if c.slo.metric == metric), None)

    def to_json(self, tier: Tier, pick: Scored | None = None) -> dict[str, Any]:
        """The slot's record; ``pick``: the slot's pick, to say whether this one ties it."""
        metrics = self.trial.metrics or {}
        ttft_key, interactivity_key = f"ttft_ms_{tier.ttft_stat}", f"interactivity_{tier.interactivity_stat}"
        ttft_ms = metrics.get(ttft_key)
        ttft_interval = self.trial.interval(ttft_key)
        config = self.task.config
        return {
            "model": self.task.model, "engine": self.task.engine, "cluster": self.task.cluster,
            "origin": self.task.origin, "workload": self.task.workload, "configuration": config.to_dict(), "configuration_text": config.describe(),
            "total_gpus": config.total_gpus, "disaggregated": config.disaggregated,
            "output_throughput_per_gpu": metrics.get(THROUGHPUT_KEY),
            "total_throughput_per_gpu": metrics.get(TOTAL_THROUGHPUT_KEY),
            "interactivity": metrics.get(interactivity_key),
            "ttft_s": None if ttft_ms is None else ttft_ms / MS_PER_S,
            "intervals": {name: list(interval) for name, interval in (
                ("output_throughput_per_gpu", self.trial.interval(THROUGHPUT_KEY)),
                ("total_throughput_per_gpu", self.trial.interval(TOTAL_THROUGHPUT_KEY)),
                ("interactivity", self.trial.interval(interactivity_key)),
                ("ttft_s", None if ttft_interval is None else (ttft_interval[0] / MS_PER_S,
                                                               ttft_interval[1] / MS_PER_S))) if interval},
            "replications": self.trial.replications,
            "ties_pick": pick is not None and pick is not self and self.ties(pick),
            "headroom": self.headroom, "qualifies": self.qualifies, "miss_distance": self.miss,
            "misses": [str(c) for c in self.checks if c.met is not True],
            "mode": self.trial.mode, "anchor_id": self.trial.anchor_id, "flags": list(self.trial.flags),
            "source": self.trial.source,
        }


@dataclass(frozen=True, slots=True)
class SlotChoice:
    pick: Scored | None
    short_list: tuple[Scored, ...]
    nearest_miss: Scored | None
    num_priced: int
    num_qualified: int

    @property
    def met(self) -> bool:
        return self.pick is not None


def score(tier: Tier, task: CandidateTask, trial: Trial, order: int = 0) -> Scored:
    """Check one priced trial against the tier's bounds."""
    met, checks = check_all(tier.slos, trial.metrics or {})
    slacks = [c.slack for c in checks if c.slack is not None]
    headroom = min(slacks) if slacks and len(slacks) == len(checks) else None
    return Scored(task, trial, tuple(checks), met is True, headroom, miss_distance(checks), order)


def is_priced(trial: Trial) -> bool:
    return trial.priced and trial.metrics is not None and trial.metrics.get(THROUGHPUT_KEY) is not None


def choose(tier: Tier, candidates: Iterable[tuple[CandidateTask, Trial]]) -> SlotChoice:
    """Score every priced candidate and pick (see the module docstring)."""
    scored = [score(tier, task, trial, order) for order, (task, trial) in enumerate(candidates)
              if is_priced(trial)]
    qualifiers = [s for s in scored if s.qualifies]
    if not qualifiers:
        return SlotChoice(None, (), nearest_miss(scored), len(scored), 0)
    pick = pick_from(qualifiers)
    rest = sorted((s for s in qualifiers if s is not pick), key=_by_throughput)
    return SlotChoice(pick, (pick, *rest[: SHORT_LIST_SIZE - 1]), None, len(scored), len(qualifiers))


def pick_from(qualifiers: list[Scored]) -> Scored:
    """Most headroom inside the 5% throughput band (best throughput when unbounded)."""
    best = max(s.throughput_per_gpu for s in qualifiers)
    band = [s for s in qualifiers if s.throughput_per_gpu >= (1.0 - BAND_SHARE) * best]
    return max(band, key=lambda s: (NO_HEADROOM if s.headroom is None else s.headroom,
                                    s.throughput_per_gpu, -s.order))


def nearest_miss(scored: list[Scored]) -> Scored | None:
    """Fewest unknown statistics, then the smallest relative miss, then throughput."""
    if not scored:
        return None
    return min(scored, key=lambda s: (sum(c.met is None for c in s.checks), s.miss,
                                      -s.throughput_per_gpu, s.order))


def _by_throughput(s: Scored) -> tuple[float, int]:
    return (-s.throughput_per_gpu, s.order)
