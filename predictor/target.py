"""What is being served and where: a model card, a cluster and an engine.

`resolve_target` applies PRODUCT.md §2's defaults (cluster: one node of 8 MI355X;
engine: the first engine with an anchor for the model on that cluster, else vllm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from levers.catalog import ENGINE_VENDORS, ENGINES, Engine, parse_engine
from levers.errors import InputError
from levers.legality import context_reasons, platform_reasons
from predictor.cards.registry import ModelCard, load_card
from predictor.hardware import DEFAULT_CLUSTER, Cluster, parse_cluster
from predictor.harvest.cpu import cpu_cluster, is_cpu_cluster

DEFAULT_ENGINE = Engine.VLLM

# Set by the anchor store once it exists: (card, cluster, engine) -> has an anchor.
AnchorLookup = Callable[[ModelCard, Cluster, Engine], bool]


@dataclass(frozen=True, slots=True)
class Target:
    card: ModelCard
    cluster: Cluster
    engine: Engine

    def to_json(self) -> dict:
        return {"model": self.card.name, "cluster": self.cluster.spec, "engine": str(self.engine)}


def resolve_cluster(text: str | None) -> Cluster:
    """The cluster grammar of PRODUCT.md §2, plus `cpu` (this machine, for engines
    harvested on a CPU such as llama.cpp)."""
    if text and is_cpu_cluster(text):
        return cpu_cluster()
    try:
        return parse_cluster(DEFAULT_CLUSTER if text is None else text)   # "" is an error, not the default
    except InputError as error:
        raise InputError(error.what, error.problem, f"{error.accepted}; or cpu (this machine, for llama.cpp)") from None


def resolve_target(model: str, cluster: str | None = None, engine: str | None = None,
                   has_anchor: AnchorLookup | None = None) -> Target:
    """An engine named for a platform it does not run on is refused here (every
    configuration would be illegal); the default engine runs on the cluster's platform."""
    card = load_card(model)
    parsed_cluster = resolve_cluster(cluster)
    if engine is not None:              # "" is an unknown engine, not the default
        chosen = parse_engine(engine)
        wrong = platform_reasons(chosen, parsed_cluster)
        if wrong:
            raise InputError("--engine", wrong[0], "an engine of this platform: " + ", ".join(
                e for e in ENGINES if parsed_cluster.gpu.vendor in ENGINE_VENDORS[e]))
        return Target(card, parsed_cluster, chosen)
    if has_anchor is not None:
        for candidate in ENGINES:
            if has_anchor(card, parsed_cluster, candidate):
                return Target(card, parsed_cluster, candidate)
    native = [e for e in ENGINES if parsed_cluster.gpu.vendor in ENGINE_VENDORS[e]]
    return Target(card, parsed_cluster, DEFAULT_ENGINE if DEFAULT_ENGINE in native or not native else native[0])


def recorded_target(model: str, cluster: str, engine: str, where: str) -> Target:
    """`resolve_target` of names read from a file (a ledger's question): an error names
    the file's field, not a command-line option the user never gave."""
    try:
        return resolve_target(model, cluster, engine)
    except InputError as error:
        field = error.what.removeprefix("--") if error.what in ("--model", "--cluster", "--engine") else error.what
        raise InputError(f"{where}: {field}", error.problem, error.accepted) from None


def check_workload_context(card: ModelCard, context_tokens: int, workload: str, what: str = "--workload") -> None:
    """A workload whose sequences are longer than the model's maximum context is refused
    before any work (each configuration would be illegal for the same reason)."""
    reasons = context_reasons(context_tokens, card)
    if reasons:
        raise InputError(what, f"{workload}: {reasons[0]}", f"ISL + OSL <= {card.max_context:,} for {card.name}")
