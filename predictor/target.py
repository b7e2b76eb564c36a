"""What is being served and where: a model card, a cluster and an engine.

`resolve_target` applies PRODUCT.md §2's defaults (cluster: one node of 8 MI355X;
engine: the first engine with an anchor for the model on that cluster, else vllm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from levers.catalog import ENGINES, Engine, parse_engine
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
    return parse_cluster(text or DEFAULT_CLUSTER)


def resolve_target(model: str, cluster: str | None = None, engine: str | None = None,
                   has_anchor: AnchorLookup | None = None) -> Target:
    card = load_card(model)
    parsed_cluster = resolve_cluster(cluster)
    if engine:
        return Target(card, parsed_cluster, parse_engine(engine))
    if has_anchor is not None:
        for candidate in ENGINES:
            if has_anchor(card, parsed_cluster, candidate):
                return Target(card, parsed_cluster, candidate)
    return Target(card, parsed_cluster, DEFAULT_ENGINE)
