"""The ledger of one search (PRODUCT.md §5), as a pydantic boundary schema.

A ledger records what the search did: the question (model, cluster, engine, objective,
SLOs, workload, budget, seed, LM), every trial (configuration full and as proposed,
legality and reason, mode and anchor, flags, metrics, objective value, fusion
opportunities, prediction wall time, the phase that proposed it, the DES requests it
replayed), the confirm trials that re-priced the best at full fidelity, the best trial (or
none, with the nearest misses), why the search stopped, and the LLM's notes and call
records. The shipped JSON Schema (``ledgers/ledger.schema.json``) is generated from
:class:`Ledger` by ``scripts/build_ledger_schema.py``; a test keeps it up to date.

The writer (``ledgers.store``) assembles the file from plain JSON for speed; readers
validate it here (``extra="forbid"`` everywhere: a ledger that does not match is an
error, not a guess).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

PhaseName = Literal["seed", "planner", "investigator", "confirm"]
StageName = Literal["guard", "structure", "memory", "prediction"]
ModeName = Literal["anchored", "rank-only"]
OutcomeName = Literal["ok", "parse_error", "timeout", "lm_error", "error", "stopped"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SloCheckRecord(_Strict):
    slo: str = Field(description="the SLO as text, e.g. mean-ttft<=2000ms")
    key: str = Field(description="metrics key it bounds, e.g. itl_ms_p90")
    met: bool | None = Field(description="None: the prediction does not carry the metric")
    actual: float | None
    slack: float | None = Field(description="relative margin; negative is the miss")


class TrialRecord(_Strict):
    index: int = Field(ge=0)
    phase: PhaseName
    configuration: dict[str, Any] | None = Field(description="all 36 levers; null when a guard refused the proposal")
    proposed: Any = Field(None, description="what the phase proposed (a partial configuration, raw for the LLM)")
    legal: bool
    reason: str | None = Field(description="why it was rejected or missed an SLO, joined")
    reasons: list[str]
    rejected_by: StageName | None
    mode: ModeName | None
    anchor_id: str | None
    flags: list[str]
    source: str | None = Field(description="analytical or des")
    metrics: dict[str, float | None] | None
    objective_value: float | None
    slo_met: bool | None
    slo_checks: list[SloCheckRecord]
    miss_distance: float | None
    fusion_opportunities: list[dict[str, Any]]
    wall_ms: float = Field(ge=0, description="wall time of the check and prediction")
    duplicate_of: int | None = Field(description="index of the earlier identical trial (not re-priced)")
    des_requests: int | None = Field(None, description="DES requests the trial was priced with (null: analytical)")
    confirm_of: int | None = Field(None, description="confirm phase: the search trial re-priced at full fidelity")
    replications: int = Field(1, ge=1, description="DES replications the metrics are the mean of")
    seed_intervals: dict[str, list[float]] | None = Field(
        None, description="90% interval of each metric's mean over the replications, [lo, hi] (null: one)")
    intervals: dict[str, list[float]] | None = Field(
        None, description="80% interval of each metric from the measured error of its transfer kind, [lo, hi]")
    transfer: str | None = Field(None, description="the prediction's transfer kind (in-ladder, width, length, load, "
                                                   "load-down, split, precision, cross-model, none, harness)")


class TrialSummary(_Strict):
    index: int = Field(ge=0)
    phase: PhaseName
    configuration: dict[str, Any]
    objective_value: float | None
    slo_met: bool | None
    miss_distance: float | None
    mode: ModeName | None
    anchor_id: str | None
    flags: list[str]


class LmInfo(_Strict):
    model: str = Field(description="LiteLLM model string")
    base_url: str | None = Field(description="endpoint, credentials masked")
    timeout_s: float
    num_retries: int
    json_schema: bool = Field(description="response_format json_object with the schema sent")


class LmCallRecord(_Strict):
    role: str = Field(description="planner, investigator or subquestion")
    outcome: OutcomeName
    message: str | None = Field(description="error text, secrets masked")
    started_at: str
    wall_ms: float
    num_requests: int = Field(ge=0)


class LlmNotes(_Strict):
    rationale: str | None = None
    hypotheses: list[str] = []
    polish_plan: str | None = None
    scratchpad: list[str] = []
    what_worked: list[str] = []
    follow_ups: list[str] = []
    calls: list[LmCallRecord] = []
    phase_end_reason: str | None = None


class Stats(_Strict):
    num_trials: int
    num_legal: int
    num_priced: int
    num_rejected: int
    num_duplicates: int
    wall_s: float
    trials_per_s: float
    predict_wall_ms: float = Field(description="sum of trial wall times")


class SearchFidelity(_Strict):
    """How DES trials were bounded during the search (agent.fidelity)."""

    rule: str = Field(description="the search-time DES length and the confirm step, as text")
    max_requests: int = Field(ge=1, description="DES requests per search trial, at most ...")
    requests_per_client: int = Field(ge=1, description="... but at least this many per client")
    confirm_top: int = Field(ge=0, description="best trials re-priced at the default DES length")
    confirm_max: int = Field(ge=0, description="confirmations at most while none meets the SLOs")
    replications: int = Field(1, ge=1, description="independent workload draws per confirm trial")


class Ledger(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    search_id: str
    created_at: str
    updated_at: str
    status: Literal["running", "finished"]
    command_line: list[str]
    model: str
    cluster: str
    engine: str
    objective: str
    objective_metric: str
    direction: Literal["max", "min"]
    slos: list[str]
    workload: str
    budget: int = Field(ge=1)
    seed: int
    lm: LmInfo | None
    no_llm: bool
    guidance: str | None
    precisions: list[str] | None
    num_requests: int | None
    search_fidelity: SearchFidelity | None = Field(
        None, description="bounded DES trials during the search, then a confirm step (null: one fidelity)")
    baseline: dict[str, Any]
    trials: list[TrialRecord]
    best: TrialSummary | None
    ties: list[int] = Field([], description="trials whose objective interval overlaps the best's: a tie")
    nearest_misses: list[TrialSummary]
    stop_reason: str | None
    llm: LlmNotes
    stats: Stats
