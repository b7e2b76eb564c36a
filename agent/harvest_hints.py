"""What to measure to verify a rank-only answer (PRODUCT.md §2, METHOD §2/§4/§3.14).

A rank-only trial was priced in simulate mode (or off its anchor's coverage): its
ranking is meaningful, its absolute numbers — and so its SLO compliance — are not yet.
The fix is one anchor per kernel set and width, so the hints are grouped that way:
trials (as priced: an unset precision at the calibrating anchor's recipe) that differ
only in transferable levers (spec depth given the method, load, scheduler limits,
replicas) share one harvest, whose depth is the first (best-ranked) trial's. A
disaggregated deployment gets one harvest per pool layout (one for both when the pools
share a layout); a layout wider than one node is reduced (drop PP, narrow EP and TP) and
says so. Every command line printed has passed `plan_harvest`, which is what
`inferasim harvest --dry-run` runs; a layout no launch can measure gets a comment line
with the reason instead.

The lines are shell-ready: notes start with ``#``.
"""

from __future__ import annotations

from typing import Iterable

from agent.trial import Trial
from predictor.anchors.anchoring import as_priced
from predictor.anchors.store import signature_for
from predictor.harvest.layouts import ReducedHarvest, reduced_harvests
from predictor.target import Target


def _group_key(target: Target, harvest: ReducedHarvest) -> tuple:
    """One anchor: the kernel set and the widths of the harvested layout (METHOD §2)."""
    config = harvest.reduction.config
    signature = signature_for(target.card, target.cluster, target.engine, config)
    return signature.kernel_set() + (config.tp, config.ep, config.attention_dp)


def rank_only(trials: Iterable[Trial]) -> list[Trial]:
    return [trial for trial in trials if trial.mode == "rank-only" and trial.config is not None]


def harvest_hints(target: Target, trials: Iterable[Trial], context_tokens: float | None = None) -> list[ReducedHarvest]:
    """One harvest per anchor the rank-only trials among ``trials`` need, in order
    (``context_tokens``: the context their workload was priced at)."""
    chosen: dict[tuple, ReducedHarvest] = {}
    for trial in rank_only(trials):
        priced = as_priced(target, trial.config, context_tokens=context_tokens)[0]   # as priced, not the bare levers
        for harvest in reduced_harvests(target.engine, target.card.name, target.card, target.cluster, priced):
            chosen.setdefault(_group_key(target, harvest), harvest)
    return list(chosen.values())


def harvest_plan(target: Target, trials: Iterable[Trial], context_tokens: float | None = None) -> list[str]:
    """The hints as printable, shell-ready lines (module docstring)."""
    return [line for hint in harvest_hints(target, trials, context_tokens) for line in hint.lines()]
