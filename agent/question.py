"""The question of a search (PRODUCT.md §2 `tune`): the options as given
(:class:`TuneRequest`, names only, so it crosses process boundaries) and
:func:`build_context`, which validates them before any work and binds them to the
predictor.

It sits below both :mod:`agent.tune` (one search) and :mod:`agent.pricing` (whose
worker processes rebuild the context from the same names).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.guards import parse_precisions
from agent.lm import DEFAULT_TIMEOUT_S
from agent.trial import CheckFn, PredictFn, SearchContext
from levers.errors import InputError
from objectives.objectives import resolve_objective
from objectives.slo import parse_slos
from predictor.anchors.anchoring import PricedCheck
from predictor.predict import default_store, predict
from predictor.target import check_workload_context, resolve_target
from predictor.workload import parse_workload

DEFAULT_OBJECTIVE = "throughput"
DEFAULT_TOP = 10


@dataclass(frozen=True)
class TuneRequest:
    """The options of `inferasim tune` (None: the PRODUCT.md §2 default)."""

    model: str | None = None
    cluster: str | None = None
    engine: str | None = None
    workload: str | None = None
    objective: str | None = None             # None: DEFAULT_OBJECTIVE (told apart from a given one on --resume)
    slos: tuple[str, ...] = ()
    lm: str | None = None
    lm_base_url: str | None = None
    lm_json_schema: bool = False
    lm_timeout_s: float = DEFAULT_TIMEOUT_S
    budget: int | None = None
    seed: int = 0
    no_llm: bool = False
    guidance: str | None = None
    precisions: str | None = None
    resume: str | None = None
    lm_from_ledger: bool = False        # --resume: use the ledger's LM (without environment keys)
    top: int = DEFAULT_TOP
    num_requests: int | None = None
    command_line: tuple[str, ...] = ()
    max_cycles: int | None = None
    max_steps: int | None = None
    workers: int | None = None          # processes pricing seed rounds (None: all cores, at most 8)
    search_fidelity: bool = True        # bounded DES trials + confirm step (agent.fidelity)



DECODE_METRICS = ("tpot", "itl", "interactivity", "generation_rate")   # undefined at one output token


def _check_decodes(workload, objective, slos) -> None:
    """A workload of one output token has no decode step: an objective or SLO on decode
    speed could never be computed (every trial would miss it)."""
    if not (workload.is_fixed and workload.osl <= 1):
        return
    if objective.metric.startswith(DECODE_METRICS):
        raise InputError("--objective", f"{objective.name} reads decode speed, which {workload.name} (one output "
                         "token) does not have", "a throughput or TTFT objective, or a workload with more output")
    for slo in slos:
        if slo.metric.startswith(DECODE_METRICS):
            raise InputError("--slo", f"{slo} bounds decode speed, which {workload.name} (one output token) does "
                             "not have", "a TTFT or E2E bound, or a workload with more output")


def build_context(request: TuneRequest, *, predict_fn: PredictFn | None = None,
                  check_fn: CheckFn | None = None, store=None) -> SearchContext:
    """Validate the question and bind it to the predictor."""
    if not request.model:
        raise InputError("--model", "a model is required (or --resume LEDGER)", "a model name, e.g. kimi-k3")
    slos = parse_slos(list(request.slos))
    objective = resolve_objective(request.objective or DEFAULT_OBJECTIVE)
    workload = parse_workload(request.workload)
    precisions = parse_precisions(request.precisions)
    store = store if store is not None else (default_store() if predict_fn is None else None)
    has_anchor = store.has_anchor if store is not None and hasattr(store, "has_anchor") else None
    target = resolve_target(request.model, request.cluster, request.engine, has_anchor=has_anchor)
    check_workload_context(target.card, workload.context_tokens, workload.name)
    _check_decodes(workload, objective, slos)
    return SearchContext(
        target=target, workload=workload, objective=objective, predict_fn=predict_fn or predict,
        check_fn=check_fn or PricedCheck(store, workload.priced_context_tokens), slos=slos, seed=request.seed,
        context_tokens=workload.context_tokens, store=store, num_requests=request.num_requests,
        precisions=precisions, guidance=(request.guidance or "").strip() or None,
        bounded_fidelity=request.search_fidelity and request.num_requests is None)
