"""Which trial is best (METHOD §6 "Stop ... Return the best legal trial").

Only a *priced* trial (legal, predicted, objective known) can rank. A trial that meets
every SLO beats one that does not; among those that meet them the signed objective
decides; ties go to the earlier trial. When no trial meets the SLOs there is no best:
the nearest misses are ranked by ``objectives.slo.miss_distance`` (then objective).

The *leader* (the best, or while there is none the nearest miss) drives the staleness
stop rule: it orders every priced trial by :func:`leader_key`. Replicated trials (the
confirm step) carry 90% intervals; one whose objective interval overlaps the best's is
a *tie* (:func:`ties_with`): their order is inside the simulator's noise.
"""

from __future__ import annotations

from typing import Iterable

from agent.trial import Trial

NO_SCORE = float("-inf")


def meets_slos(trial: Trial) -> bool:
    return trial.priced and trial.slo_met is True


def leader_key(trial: Trial) -> tuple[int, float, float]:
    """Higher is better: SLO-meeting first, then the smaller miss, then the objective."""
    score = trial.score if trial.score is not None else NO_SCORE
    if meets_slos(trial):
        return (1, 0.0, score)
    return (0, -(trial.miss_distance or 0.0), score)


def is_better(candidate: Trial, incumbent: Trial | None) -> bool:
    """Strictly better for the leader (an equal later trial does not replace it)."""
    if not candidate.priced or candidate.duplicate_of is not None:
        return False
    return incumbent is None or leader_key(candidate) > leader_key(incumbent)


def best_trial(trials: Iterable[Trial]) -> Trial | None:
    """The best SLO-meeting priced trial, or None when no trial meets the SLOs."""
    best: Trial | None = None
    for trial in trials:
        if meets_slos(trial) and is_better(trial, best):
            best = trial
    return best


def top_trials(trials: Iterable[Trial], count: int) -> list[Trial]:
    """The best ``count`` distinct SLO-meeting trials, best first."""
    chosen = [t for t in trials if meets_slos(t) and t.duplicate_of is None]
    return sorted(chosen, key=lambda t: (_neg(leader_key(t)), t.index))[:count]


def nearest_misses(trials: Iterable[Trial], count: int) -> list[Trial]:
    """Priced trials that miss (or cannot show) an SLO, nearest first."""
    misses = [t for t in trials if t.priced and t.slo_met is not True and t.duplicate_of is None]
    return sorted(misses, key=lambda t: (_neg(leader_key(t)), t.index))[:count]


def ties_with(best: Trial, trials: Iterable[Trial], metric: str) -> list[Trial]:
    """Other distinct SLO-meeting trials whose 90% replication interval of ``metric``
    overlaps the best's: the gap between them is inside the simulator's noise, a tie. A
    value no replication spreads (one replication, or a deterministic metric such as the
    GPUs a replica takes) is its own interval: equal values tie (a `cost` search whose
    every trial takes 8 GPUs listed them as best and '-')."""
    band = _band(best, metric)
    if band is None:
        return []
    tied = []
    for trial in trials:
        other = _band(trial, metric)
        if trial is not best and trial.config != best.config and meets_slos(trial) \
                and trial.duplicate_of is None and other is not None and other[0] <= band[1] and band[0] <= other[1]:
            tied.append(trial)
    return tied


def _band(trial: Trial, metric: str) -> tuple[float, float] | None:
    """``metric``'s replication interval, or its value as a point (module docstring of
    `ties_with`); None when the trial has neither."""
    found = trial.interval(metric)
    if found is not None:
        return found
    value = (trial.metrics or {}).get(metric, trial.objective_value)
    return None if value is None else (value, value)


def _neg(key: tuple[int, float, float]) -> tuple[float, ...]:
    return tuple(-value for value in key)
