"""The report page of one search (a ledger): the question, the outcome, the best trials
with their intervals and modes, the Pareto plot of every priced trial, the trials over
time by phase, rejections by reason, the harvest hints a rank-only answer needs, the
deploy lines of the best, and the LLM's notes.

Intervals: a metric shows as `value [lo-hi]` with its 80% interval from the measured
error of the prediction's transfer kind (`intervals`; the kind is shown beside the mode);
the objective's 90% interval over the DES replications (`seed_intervals`) has its own
column. The Pareto plot marks the frontier among trials that
meet the search's SLOs with a mean TTFT under 10 s (`predictor.sweep.frontier`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime, timezone

from agent.cli.app import package_version
from agent.cli.render import config_text, metric_header, number, objective_header, percent, with_interval
from agent.deploy.plan import try_plan
from agent.harvest_hints import harvest_plan
from agent.report import figures
from agent.report.page import Cell, definitions, document, figure, paragraph, pre, section, table
from agent.trial import Phase, Trial
from ledgers.model import Ledger, TrialRecord
from ledgers.review import ranked, status_of
from levers.configuration import configuration_from_dict
from objectives.objectives import resolve_objective
from objectives.slo import parse_slos
from predictor.step.cost import Mode
from predictor.sweep.frontier import Bound, FrontierRule, pareto_indices
from predictor.sweep.run import INTERACTIVITY_KEY, THROUGHPUT_KEY, SweepPoint
from predictor.target import Target, recorded_target
from predictor.workload import parse_workload

TOP = 15
METRIC_KEYS = ("ttft_ms_mean", "tpot_ms_p50", "interactivity_p50")
MAX_REASON_CHARS = 160
NUMBERS = re.compile(r"\d[\d,.]*")     # `_rejections`: reasons that differ in numbers alone


def search_page(ledger: Ledger, top: int = TOP, reference: str | None = None) -> str:
    """The whole page (module docstring; ``reference``: where the ledger was read, for its
    status, `ledgers.review.status_of`)."""
    target = recorded_target(ledger.model, ledger.cluster, ledger.engine, f"ledger {ledger.search_id}")
    goal = resolve_objective(ledger.objective)
    unit = objective_header(goal).split("\n")[-1]
    best_trials = ranked(ledger)[:top]
    context = parse_workload(ledger.workload).priced_context_tokens    # what the trials were priced at
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        section("The question", _question(ledger)),
        section("The outcome", _outcome(ledger, unit, reference)),
        section(f"Best trials (top {len(best_trials)} of {len(ledger.trials)})",
                _best_table(ledger, best_trials, unit),
                paragraph("value [lo-hi]: the 80% interval from the measured error of the prediction's transfer "
                          "kind (in brackets beside the mode); the 90% column is the spread of the objective over "
                          "the trial's DES replications. TPOT and tok/s/user are the median over requests "
                          "(tok/s/user = 1000 / TPOT, per request). Rank-only numbers only order candidates "
                          "(METHOD §2).", "note")),
        section("Deploy the best", _deploy(ledger, target, context)),
        section("Pareto frontier of the priced trials", _pareto(ledger, target)),
        section("Trials over time", _over_time(ledger, unit)),
        section("Rejections by reason", _rejections(ledger)),
        section("Harvest hints", _hints(target, best_trials, context, ledger.best is not None)),
    ]
    notes = _llm(ledger)
    if notes:
        body.append(section("LLM notes", notes))
    return document(f"inferasim report: {ledger.search_id}",
                    f"{ledger.model} on {ledger.cluster} ({ledger.engine}), {ledger.workload}; "
                    f"generated {stamp} by inferasim {package_version()}", body)


def _question(ledger: Ledger) -> str:
    return definitions([
        ("model", ledger.model), ("cluster", ledger.cluster), ("engine", ledger.engine),
        ("workload", ledger.workload), ("objective", f"{ledger.objective} ({ledger.direction})"),
        ("SLOs", ", ".join(ledger.slos) or "none"), ("budget", f"{ledger.budget} trials"),
        ("seed", ledger.seed), ("LM", ledger.lm.model if ledger.lm else "none (seed planner only)"),
        ("command", " ".join(ledger.command_line)),
    ])


def _outcome(ledger: Ledger, unit: str, reference: str | None = None) -> str:
    best = ledger.best
    stats = ledger.stats
    shown = (f"trial #{best.index} ({best.phase}, {best.mode}): {with_interval(best.objective_value)} {unit}"
             if best else "no trial met the SLOs (the nearest misses are in the table)")
    return definitions([
        ("best", shown), ("stopped", ledger.stop_reason or status_of(ledger, reference)),
        ("trials", f"{stats.num_trials} ({stats.num_priced} priced, {stats.num_rejected} rejected, "
                   f"{stats.num_duplicates} duplicates)"),
        ("wall time", f"{stats.wall_s:.1f} s ({stats.trials_per_s:.1f} trials/s)"),
        ("ties with the best", ", ".join(f"#{i}" for i in ledger.ties) or "none"),
    ])


def _best_table(ledger: Ledger, trials: list[TrialRecord], unit: str) -> str:
    slo_keys = [slo.key for slo in parse_slos(ledger.slos) if slo.key not in METRIC_KEYS]
    keys = (*METRIC_KEYS, *slo_keys)
    headers = ["rank", "trial", "phase", f"objective {unit}", "objective 90% over DES runs",
               *(metric_header(k).replace("\n", " ") for k in keys), "SLOs", "mode (transfer)", "configuration"]
    objective_key = resolve_objective(ledger.objective).metric
    rows, classes = [], []
    for rank, record in enumerate(trials, start=1):
        metrics, intervals = record.metrics or {}, record.intervals or {}
        replicated = (record.seed_intervals or {}).get(objective_key)
        rows.append([
            rank, f"#{record.index}", record.phase,
            Cell.of(record.objective_value, with_interval(record.objective_value, intervals.get(objective_key))),
            Cell.of(replicated[0] if replicated else None,
                    f"{number(replicated[0])}-{number(replicated[1])}" if replicated else "-"),
            *(Cell.of(metrics.get(k), with_interval(metrics.get(k), intervals.get(k))) for k in keys),
            _slo_text(record), f"{record.mode or '-'} ({record.transfer or '-'})",
            config_text(configuration_from_dict(record.configuration)) if record.configuration else "-",
        ])
        classes.append("best" if ledger.best and record.index == ledger.best.index else "")
    return table(headers, rows, row_classes=classes)


def _slo_text(record: TrialRecord) -> str:
    if record.slo_met is None:
        return "unverified"
    return "met" if record.slo_met else f"missed by {percent(record.miss_distance)}"


def _deploy(ledger: Ledger, target: Target, context_tokens: float | None) -> str:
    if ledger.best is None:
        return paragraph("No best trial, so nothing to deploy (inferasim deploy LEDGER --trial N deploys any trial).")
    plan, problem = try_plan(target, configuration_from_dict(ledger.best.configuration), context_tokens)
    if plan is None:
        return paragraph(f"Not expressible on the {ledger.engine} command line: {problem}")
    return ("".join(paragraph(line, "note") for line in plan.recipe_lines()) + pre(plan.lines()) + paragraph(f"inferasim deploy {ledger.search_id} writes these with the engine's "
                                          "option files, and a Dynamo graph and llm-d manifests for a split.", "note"))


def sweep_points(ledger: Ledger) -> list[SweepPoint]:
    """Every priced, distinct trial as a point of the Pareto figure (the frontier marked)."""
    chosen = [t for t in ledger.trials if t.legal and t.metrics and t.configuration and t.duplicate_of is None
              and _finite(t.metrics.get(THROUGHPUT_KEY)) and _finite(t.metrics.get(INTERACTIVITY_KEY))]
    bounds = tuple(Bound(s.key, s.op, s.value, str(s)) for s in parse_slos(ledger.slos))
    rule = FrontierRule(bounds=bounds)
    eligible = [rule.admits(t.metrics) for t in chosen]
    on = set(pareto_indices([t.metrics[THROUGHPUT_KEY] if ok else math.nan for t, ok in zip(chosen, eligible)],
                            [t.metrics[INTERACTIVITY_KEY] for t in chosen],
                            [t.metrics.get("ttft_ms_mean") or math.inf for t in chosen]))
    return [SweepPoint(t.index, configuration_from_dict(t.configuration), Mode(t.mode or Mode.RANK_ONLY),
                       t.source or "", {k: v for k, v in t.metrics.items() if v is not None}, i in on, eligible[i])
            for i, t in enumerate(chosen)]


def _pareto(ledger: Ledger, target: Target) -> str:
    points = sweep_points(ledger)
    if not points:
        return paragraph("No priced trial carries throughput and interactivity.")
    bounds = tuple(Bound(s.key, s.op, s.value, str(s)) for s in parse_slos(ledger.slos))
    title = f"{ledger.model} on {ledger.cluster} ({ledger.engine}), {ledger.workload}: {len(points)} priced trials"
    svg = figures.pareto_svg(points, title, FrontierRule(bounds=bounds))
    return figure(svg, "Colour: layout family; marker: precision; filled: anchored, hollow: rank-only; the line "
                       "joins the frontier, labelled with each configuration; grey crosses are off the frontier "
                       "rule (an SLO missed or a mean TTFT over 10 s).")


def _over_time(ledger: Ledger, unit: str) -> str:
    trials = ledger.trials
    svg = figures.trials_svg([t.index for t in trials], [t.objective_value for t in trials],
                             [t.phase for t in trials], [t.legal for t in trials], [t.slo_met for t in trials],
                             ledger.direction, unit)
    counts = Counter(t.phase for t in trials)
    return figure(svg, "Trials by phase: " + ", ".join(f"{p} {n}" for p, n in counts.items())
                  + "; hollow points missed an SLO; the line is the best SLO-meeting objective so far.")


def _rejections(ledger: Ledger) -> str:
    """Rejections counted by reason, reasons that differ only in their numbers as one (the
    first one's text shown): sixteen KV-capacity rows of one search differed in token
    counts alone."""
    groups: dict[str, list[str]] = {}
    for t in ledger.trials:
        if not t.legal:
            text = f"{t.rejected_by or 'prediction'}: {t.reason or 'no reason given'}"
            groups.setdefault(NUMBERS.sub("#", text), []).append(text)
    reasons = sorted(((_clipped(texts[0]) + (" (numbers vary)" if len(set(texts)) > 1 else ""), len(texts))
                      for texts in groups.values()), key=lambda item: -item[1])
    if not reasons:
        return paragraph("No trial was rejected.")
    return (figure(figures.rejections_svg(reasons), "Rejected trials per stage and reason.")
            + table(["stage: reason", "trials"], reasons))


def _clipped(text: str) -> str:
    """At most `MAX_REASON_CHARS`, cut at a word with an ellipsis."""
    if len(text) <= MAX_REASON_CHARS:
        return text
    return text[:MAX_REASON_CHARS].rsplit(" ", 1)[0] + " ..."


def _hints(target: Target, trials: list[TrialRecord], context_tokens: float | None, has_best: bool) -> str:
    """``has_best``: a trial met the SLOs (else the trials shown are the nearest misses)."""
    shown = [Trial(Phase(t.phase), configuration_from_dict(t.configuration), None, t.legal, mode=t.mode)
             for t in trials if t.configuration]
    lines = harvest_plan(target, shown, context_tokens)
    which = "best trials" if has_best else "trials shown (no trial met the SLOs)"
    if not lines:
        return paragraph(f"The {which} are anchored: no harvest is needed to verify them.")
    rank_only = sum(t.mode == "rank-only" for t in trials if t.configuration)
    if trials and trials[0].mode != "rank-only":   # the first is anchored: say which of the rest are not
        first = "The best trial is anchored" if has_best else "No trial met the SLOs; the first shown is anchored"
        lead = (f"{first}; {rank_only} of the {len(shown)} shown are rank-only: these harvests "
                "measure the anchors that would verify theirs.")
    else:
        lead = f"The {which} are rank-only: these harvests measure the anchors that would verify their SLO compliance."
    return paragraph(lead) + pre(lines)


def _llm(ledger: Ledger) -> str:
    notes = ledger.llm
    if not (notes.calls or notes.rationale or notes.hypotheses):
        return ""
    calls = [[c.role, c.outcome, f"{c.wall_ms / 1000:.1f} s", c.message or ""] for c in notes.calls]
    return (definitions([("rationale", notes.rationale or "-"), ("phase end", notes.phase_end_reason or "-")])
            + pre(f"- {h}" for h in notes.hypotheses) + table(["role", "outcome", "wall", "message"], calls))


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
