"""One way to price a candidate, used by every phase of the search (METHOD §6 "Guards",
"Scoring").

A seed, a planner proposal and an investigator proposal all go through :func:`evaluate`:
guard (validated precisions) -> structural check -> memory cap (90% of HBM) ->
prediction (the anchor of the configuration's parallel shape, else simulate mode,
flagged rank-only — the predictor decides and says which) -> SLO check -> objective
value. The DES runs when the workload is agentic (the predictor's rule) or an SLO bounds
a percentile (``need_distribution``); a search trial's replay stops once it has clearly
missed an SLO (`predictor.sim.stop`). The LLM never prices anything: it only proposes.

The predictor is injected (:class:`SearchContext` holds ``predict_fn`` and ``check_fn``)
so unit tests run against a fake and the real search against
``predictor.predict.predict``. A :class:`Trial` is a frozen record; the session numbers
it and the ledger stores :meth:`Trial.to_json`. How many DES requests a trial replays
(bounded during the search, the default in the confirm step) is :mod:`agent.fidelity`'s
rule; the trial records the count it was priced with.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from agent.fidelity import full_requests, trial_requests, uses_des
from agent.guards import config_guard_reasons
from agent.sustainable import METRIC as SUSTAINABLE_METRIC
from agent.sustainable import sustainable
from agent.trial import METRIC_DIGITS, Phase, SearchContext, Stage, Trial
from levers.configuration import Configuration
from levers.errors import InputError
from objectives.slo import UPPER, check_all, miss_distance
from predictor.sim.stop import StopRule
from predictor.units import MS_PER_S

if TYPE_CHECKING:  # the predictor is reached through the injected functions only
    from predictor.prediction import Prediction

def rejected(phase: Phase, config: Configuration | None, proposed: Mapping[str, Any] | None,
             reasons: list[str] | tuple[str, ...], stage: Stage, wall_ms: float = 0.0) -> Trial:
    """A candidate stopped before (or by) the predictor, with its reasons."""
    return Trial(phase=phase, config=config, proposed=json_safe(proposed), legal=False,
                 reasons=tuple(reasons), stage=stage, wall_ms=wall_ms)


def evaluate(context: SearchContext, config: Configuration, *, phase: Phase,
             proposed: Mapping[str, Any] | None = None, full_fidelity: bool = False,
             replications: int = 1) -> Trial:
    """Guard, check, predict, SLO-check and score one configuration (METHOD §6);
    ``full_fidelity``: the DES at its default length even on a bounded search. For the
    max-sustainable-concurrency objective the candidate is then re-priced at the largest
    concurrency that meets the SLOs (`agent.sustainable`)."""
    started = time.perf_counter()
    trial = _evaluate(context, config, phase, proposed, full_fidelity, replications)
    if context.objective.metric != SUSTAINABLE_METRIC or trial.metrics is None:
        return trial
    found = sustainable(trial, lambda c: _evaluate(context, c, phase, proposed, full_fidelity, replications))
    return replace(found, wall_ms=_ms_since(started))


def _evaluate(context: SearchContext, config: Configuration, phase: Phase,
              proposed: Mapping[str, Any] | None, full_fidelity: bool, replications: int = 1) -> Trial:
    started = time.perf_counter()
    guard = config_guard_reasons(context, config)
    if guard:
        return rejected(phase, config, proposed, guard, Stage.GUARD)
    target = context.target
    feasibility = context.check_fn(target.card, target.cluster, target.engine, config,
                                   context.context_tokens)
    if not feasibility.legal:
        stage = Stage.STRUCTURE if feasibility.memory is None else Stage.MEMORY
        return rejected(phase, config, proposed, feasibility.reasons, stage, _ms_since(started))
    requests = trial_requests(context, config, full=full_fidelity)
    extra: dict[str, Any] = {"replications": replications} if replications > 1 else {}
    if not full_fidelity and replications == 1 and context.slos and uses_des(context):
        extra["stop_rules"] = stop_rules(context)
    try:
        prediction = context.predict_fn(
            target, config, context.workload, store=context.store, seed=context.seed,
            num_requests=requests, need_distribution=context.need_distribution, **extra)
    except InputError as error:     # the configuration cannot serve the workload (a request its KV pool cannot hold)
        reason = f"cannot serve the workload: {error.problem}"
        return rejected(phase, config, proposed, [reason], Stage.PREDICTION, _ms_since(started))
    except Exception as error:  # noqa: BLE001 - a predictor failure must not lose the search
        reason = f"prediction failed: {type(error).__name__}: {error}"
        return rejected(phase, config, proposed, [reason], Stage.PREDICTION, _ms_since(started))
    if not prediction.legal or prediction.metrics is None:
        stage = Stage.MEMORY if any("memory" in r for r in prediction.reasons) else Stage.PREDICTION
        return rejected(phase, config, proposed, prediction.reasons or ("no metrics",), stage,
                        _ms_since(started))
    if prediction.source == "des" and requests is None:
        requests = full_requests(context, config)
    return _priced(context, config, phase, proposed, prediction, _ms_since(started),
                   requests if prediction.source == "des" else None, replications)


def _priced(context: SearchContext, config: Configuration, phase: Phase,
            proposed: Mapping[str, Any] | None, prediction: "Prediction", wall_ms: float,
            des_requests: int | None = None, replications: int = 1) -> Trial:
    metrics = clean_metrics(prediction.metrics)
    met, checks = check_all(context.slos, metrics)
    reasons = tuple(f"SLO missed: {c}" for c in checks if c.met is False)
    reasons += tuple(f"SLO not predicted: {c.slo}" for c in checks if c.met is None)
    objective = context.objective
    return Trial(
        phase=phase, config=config, proposed=json_safe(proposed), legal=True, reasons=reasons,
        mode=str(prediction.mode) if prediction.mode else None, anchor_id=prediction.anchor_id,
        flags=tuple(prediction.flags), source=prediction.source, metrics=metrics,
        objective_value=objective.value(metrics), slo_met=met,
        slo_checks=tuple(_check_json(c) for c in checks),
        miss_distance=round(miss_distance(checks), METRIC_DIGITS),
        fusion_opportunities=tuple(json_safe(dict(f)) for f in prediction.fusion_opportunities),
        wall_ms=wall_ms, score=objective.signed_score(metrics), des_requests=des_requests,
        replications=max(1, replications) if prediction.seed_intervals else 1,
        seed_intervals=_intervals(prediction.seed_intervals),
        intervals=_intervals(getattr(prediction, "intervals", None)), transfer=getattr(prediction, "transfer", None),
    )


def stop_rules(context: SearchContext) -> tuple[StopRule, ...]:
    """The SLOs as rules that end a search trial's DES replay once clearly missed."""
    return tuple(StopRule(slo.key, slo.value, slo.op == UPPER) for slo in context.slos)


def _intervals(intervals: Mapping[str, tuple[float, float]] | None) -> dict[str, tuple[float, float]] | None:
    """Rounded, finite replication intervals (None: the prediction has none)."""
    if not intervals:
        return None
    return {key: (round(lo, METRIC_DIGITS), round(hi, METRIC_DIGITS)) for key, (lo, hi) in intervals.items()
            if math.isfinite(lo) and math.isfinite(hi)}


def with_index(trial: Trial, index: int) -> Trial:
    return replace(trial, index=index)


def duplicate(trial: Trial, phase: Phase, proposed: Mapping[str, Any] | None) -> Trial:
    """A re-proposal of an already-priced configuration: same result, no new prediction."""
    return replace(trial, phase=phase, proposed=json_safe(proposed), duplicate_of=trial.index,
                   wall_ms=0.0, confirm_of=None)


def confirmed(trial: Trial, repriced: Trial) -> Trial:
    """The confirm-step record of search ``trial``: ``repriced`` at full DES fidelity."""
    return replace(repriced, phase=Phase.CONFIRM, proposed=trial.proposed, duplicate_of=None,
                   confirm_of=trial.index)


def clean_metrics(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """Rounded, JSON-safe metrics: a non-finite value is "not predicted" (None)."""
    cleaned: dict[str, float | None] = {}
    for key, value in metrics.items():
        number = float(value)
        cleaned[key] = round(number, METRIC_DIGITS) if math.isfinite(number) else None
    return cleaned


def json_safe(value: Any) -> Any:
    """Untrusted (LLM) input made JSON-serialisable for the ledger."""
    if value is None:
        return None
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except (TypeError, ValueError):
        return json.loads(json.dumps(str(value)))


def _check_json(check: Any) -> dict[str, Any]:
    return {"slo": str(check.slo), "key": check.slo.key, "met": check.met,
            "actual": None if check.actual is None else round(check.actual, METRIC_DIGITS),
            "slack": None if check.slack is None else round(check.slack, METRIC_DIGITS)}


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * MS_PER_S
