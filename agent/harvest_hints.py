"""What to measure to verify a rank-only answer (PRODUCT.md §2, METHOD §2/§4).

A rank-only trial was priced in simulate mode (or off its anchor's coverage): its
ranking is meaningful, its absolute numbers — and so its SLO compliance — are not yet.
The fix is one anchor per kernel set and width; these are the exact `inferasim harvest`
command lines that would measure them (one per pool for a disaggregated deployment).
"""

from __future__ import annotations

from typing import Iterable

from agent.trial import Trial
from levers.catalog import LEVERS, LeverKind
from levers.configuration import Configuration, format_value
from predictor.feasibility import pool_configs
from predictor.target import Target

WIDTH_LEVERS = ("tp", "pp", "ep", "attention_dp")
ANCHOR_LEVERS = tuple(lever.name for lever in LEVERS if lever.kind == LeverKind.ANCHOR_DEFINING)
DEFAULTS = Configuration()


def harvest_config_text(config: Configuration) -> str:
    """``k=v,...``: the widths, plus every anchor-defining lever that is set."""
    items = [f"{name}={format_value(getattr(config, name))}" for name in WIDTH_LEVERS]
    for name in ANCHOR_LEVERS:
        value = getattr(config, name)
        if value is not None and value != getattr(DEFAULTS, name):
            items.append(f"{name}={format_value(value)}")
    if config.spec_method != "none":
        items.append(f"spec_depth={config.spec_depth}")
    return ",".join(items)


def harvest_commands(target: Target, config: Configuration) -> list[str]:
    """The command line(s) measuring the anchor(s) ``config`` needs."""
    pools = pool_configs(config)
    replicas = list(pools) if pools is not None else [config]
    return [f"inferasim harvest --engine {target.engine} --model {target.card.name} "
            f"--cluster {target.cluster.spec} --config {harvest_config_text(replica)}"
            for replica in replicas]


def rank_only(trials: Iterable[Trial]) -> list[Trial]:
    return [trial for trial in trials if trial.mode == "rank-only" and trial.config is not None]


def harvest_plan(target: Target, trials: Iterable[Trial]) -> list[str]:
    """Distinct harvest lines for the rank-only trials among ``trials`` (in order)."""
    lines: dict[str, None] = {}
    for trial in rank_only(trials):
        for line in harvest_commands(target, trial.config):
            lines.setdefault(line, None)
    return list(lines)
