"""The search's records (METHOD §6 "Ledger"): what is searched (:class:`SearchContext`)
and one priced or rejected candidate (:class:`Trial`), with the phase that proposed it
and the stage that stopped it.

They sit below every search module (scoring, fidelity, guards, the session, the mix
planner) so none of those has to import another to name them. The predictor is reached
only through the injected ``predict_fn`` / ``check_fn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable

from levers.configuration import Configuration
from objectives.objectives import Objective
from objectives.slo import SLO, needs_distribution

if TYPE_CHECKING:  # the predictor is reached through the injected functions only
    from predictor.feasibility import Feasibility
    from predictor.prediction import Prediction
    from predictor.target import Target
    from predictor.workload import WorkloadSpec

PredictFn = Callable[..., "Prediction"]
CheckFn = Callable[..., "Feasibility"]
METRIC_DIGITS = 6  # rounding of metrics in the ledger (relative precision far below model error)


class Phase(StrEnum):
    SEED = "seed"
    PLANNER = "planner"
    INVESTIGATOR = "investigator"
    CONFIRM = "confirm"        # a search trial re-priced at full DES fidelity (agent.fidelity)


class Stage(StrEnum):
    """Where a rejected candidate was stopped."""

    GUARD = "guard"            # unknown lever, value outside its legal set, unvalidated precision
    STRUCTURE = "structure"    # widths, engine support, fusion rules (levers.legality)
    MEMORY = "memory"          # 90% HBM cap (METHOD §3.9)
    PREDICTION = "prediction"  # the predictor refused or failed


@dataclass(frozen=True)
class SearchContext:
    """What is searched and how a candidate is priced (fixed for one search)."""

    target: "Target"
    workload: "WorkloadSpec"
    objective: Objective
    predict_fn: PredictFn
    check_fn: CheckFn
    slos: tuple[SLO, ...] = ()
    seed: int = 0
    context_tokens: int = 2048          # sequence length of the memory check
    store: Any = None                   # anchor store handed to the predictor (None: its default)
    num_requests: int | None = None     # DES requests per trial (None: the predictor's default)
    precisions: tuple[str, ...] | None = None  # validated weight/expert precisions (None: all)
    guidance: str | None = None
    bounded_fidelity: bool = False      # search trials replay fewer DES requests; confirm re-prices

    @property
    def need_distribution(self) -> bool:
        """Percentile SLOs (or a distribution objective) need the DES (METHOD §5)."""
        return needs_distribution(self.slos) or self.objective.needs_distribution


@dataclass(frozen=True)
class Trial:
    """One priced (or rejected) candidate of the search."""

    phase: Phase
    config: Configuration | None
    proposed: dict[str, Any] | None
    legal: bool
    reasons: tuple[str, ...] = ()
    stage: Stage | None = None
    mode: str | None = None
    anchor_id: str | None = None
    flags: tuple[str, ...] = ()
    source: str | None = None
    metrics: dict[str, float | None] | None = None
    objective_value: float | None = None
    slo_met: bool | None = None
    slo_checks: tuple[dict[str, Any], ...] = ()
    miss_distance: float | None = None
    fusion_opportunities: tuple[dict[str, Any], ...] = ()
    wall_ms: float = 0.0
    duplicate_of: int | None = None
    score: float | None = None          # signed objective, higher is better
    index: int = -1
    des_requests: int | None = None     # DES requests it was priced with (None: analytical)
    confirm_of: int | None = None       # the search trial a confirm trial re-prices
    replications: int = 1               # DES replications its metrics are the mean of
    seed_intervals: dict[str, tuple[float, float]] | None = None   # 90% over replications, per metric
    intervals: dict[str, tuple[float, float]] | None = None        # 80% from the transfer kind's measured error
    transfer: str | None = None                                     # the prediction's primary transfer kind

    @property
    def priced(self) -> bool:
        """Legal, predicted, and the objective has a value: eligible to be the best."""
        return self.legal and self.metrics is not None and self.objective_value is not None

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) if self.reasons else None

    def to_json(self) -> dict[str, Any]:
        """The ledger record (``ledgers.model.TrialRecord``)."""
        return {
            "index": self.index, "phase": str(self.phase),
            "configuration": self.config.to_dict() if self.config else None,
            "proposed": self.proposed, "legal": self.legal, "reason": self.reason,
            "reasons": list(self.reasons), "rejected_by": str(self.stage) if self.stage else None,
            "mode": self.mode, "anchor_id": self.anchor_id, "flags": list(self.flags),
            "source": self.source, "metrics": self.metrics, "objective_value": self.objective_value,
            "slo_met": self.slo_met, "slo_checks": list(self.slo_checks),
            "miss_distance": self.miss_distance,
            "fusion_opportunities": list(self.fusion_opportunities),
            "wall_ms": round(self.wall_ms, 3), "duplicate_of": self.duplicate_of,
            "des_requests": self.des_requests, "confirm_of": self.confirm_of,
            "replications": self.replications,
            "seed_intervals": None if self.seed_intervals is None else
            {key: [lo, hi] for key, (lo, hi) in self.seed_intervals.items()},
            "intervals": None if self.intervals is None else
            {key: [lo, hi] for key, (lo, hi) in self.intervals.items()},
            "transfer": self.transfer,
        }

    def interval(self, key: str) -> tuple[float, float] | None:
        """The 90% replication interval of metric ``key`` (None: one replication)."""
        return None if self.seed_intervals is None else self.seed_intervals.get(key)

    def error_interval(self, key: str) -> tuple[float, float] | None:
        """The 80% interval of metric ``key`` from its transfer kind's measured error."""
        return None if self.intervals is None else self.intervals.get(key)
