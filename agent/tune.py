"""`inferasim tune` as one library call (PRODUCT.md §2, METHOD §6).

:func:`tune` validates every input before any work (model, cluster, engine, workload,
objective, SLOs, precisions, LM string), builds the search context on the real
predictor (or injected functions, for tests), finds the safe baseline, opens or resumes
the ledger, runs the two-phase search and returns what the CLI shows: the best trial
(or none, with the nearest misses), the top configurations, the ledger path, and — when
the answer is rank-only — the harvest command lines that would verify it.

Seed rounds and the confirm step are priced on ``workers`` local cores (default: all, at most 8;
:mod:`agent.pricing`) when the search runs on the real predictor; each worker rebuilds
the context from this request's names. DES trials replay a bounded number of requests
during the search and the best are confirmed at full fidelity (:mod:`agent.fidelity`)
unless ``num_requests`` fixes the length of every trial.

Resuming (``--resume LEDGER``) takes the question from the ledger but the LM from this
command line: ``--lm`` / ``$INFERASIM_LM`` as configured now. The LM a ledger names is
used only with ``--lm-from-ledger``, and then it is sent no key from the environment
unless the user names the endpoint again with ``--lm-base-url`` (a shared ledger must not
be able to collect keys). An unused ledger LM is said in :attr:`TuneResult.warnings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from agent.harvest_hints import harvest_plan
from agent.lm import DEFAULT_TIMEOUT_S, LmRuntime, LmSettings, resolve_lm_settings
from agent.pricing import Pricer, resolve_workers
from agent.question import DEFAULT_OBJECTIVE, DEFAULT_TOP, TuneRequest, build_context  # noqa: F401
from agent.recorder import LedgerRecorder, ledger_header, new_search_id, resume_header, trial_from_record
from agent.resume import Replay, ReplayPricer
from agent.search import DEFAULT_BUDGET, SearchOutcome, SearchSettings, run_search
from agent.seed_planner import baseline
from agent.session import LlmNotes, SearchSession
from agent.trial import CheckFn, PredictFn, SearchContext, Trial
from ledgers.model import Ledger
from ledgers.lock import LedgerLock
from ledgers.store import LedgerWriter, load_ledger, resolve_ledger
from levers.configuration import configuration_from_dict
from levers.errors import InputError
from levers.inputs import quote
from objectives.objectives import resolve_objective
from objectives.slo import parse_slos
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.workload import parse_workload

MAX_BUDGET = 100_000

TrialListener = Callable[[SearchSession, Trial], None]


@dataclass(frozen=True)
class TuneResult:
    context: SearchContext
    outcome: SearchOutcome
    ledger_path: Path
    num_trials: int
    lm: LmSettings | None
    harvest: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    num_confirmed: int | None = None   # confirm trials of a bounded search (None: one fidelity)
    warnings: tuple[str, ...] = ()

    @property
    def best(self) -> Trial | None:
        return self.outcome.best

    @property
    def rank_only_best(self) -> bool:
        return any(t.mode == "rank-only" for t in ([self.best] if self.best else self.outcome.nearest_misses[:1]))


def _settings(request: TuneRequest, budget: int) -> SearchSettings:
    base = SearchSettings(budget=budget, no_llm=request.no_llm)
    return replace(base, max_cycles=request.max_cycles or base.max_cycles,
                   max_steps=request.max_steps or base.max_steps)


def _check_budget(budget: int) -> int:
    if not 1 <= budget <= MAX_BUDGET:
        raise InputError("--budget", f"{budget} is out of range", f"1 to {MAX_BUDGET} trials")
    return budget


@dataclass(frozen=True)
class _Search:
    """A search ready to run: new, or resumed from its ledger (then with its replay)."""

    session: SearchSession
    recorder: LedgerRecorder
    budget: int
    lm: LmSettings | None
    request: TuneRequest          # the options, with the ledger's --no-llm when resumed
    question: TuneRequest         # what the pricing workers rebuild the context from
    replay: Replay | None = None
    warnings: tuple[str, ...] = ()


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a search: its ledger holds every trial priced so far (written after
    each), still marked running; ``--resume`` continues it."""

    def __init__(self, path: Path, num_trials: int) -> None:
        super().__init__(f"interrupted after {num_trials} trials")
        self.path, self.num_trials = path, num_trials


def tune(request: TuneRequest, *, predict_fn: PredictFn | None = None, check_fn: CheckFn | None = None,
         runtime: LmRuntime | None = None, listeners: list[TrialListener] | None = None,
         ledger_dir: Path | None = None, store=None) -> TuneResult:
    """Run (or resume) a search and persist its ledger; the ledger is locked meanwhile
    (:mod:`ledgers.lock`), so a second resume of it stops before any work."""
    lm = resolve_lm_settings(request.lm, request.lm_base_url, json_schema=request.lm_json_schema,
                             timeout_s=request.lm_timeout_s)
    workers = resolve_workers(request.workers)
    injected = predict_fn is not None or check_fn is not None or store is not None
    if request.resume:
        path = resolve_ledger(request.resume)
        with LedgerLock(path):
            search = _resumed(path, request, lm, predict_fn, check_fn, store)
            return _run(search, runtime, listeners, workers, injected)
    search = _new_search(request, lm, predict_fn, check_fn, store, ledger_dir)
    with LedgerLock(search.recorder.path):
        return _run(search, runtime, listeners, workers, injected)


def _new_search(request: TuneRequest, lm: LmSettings | None, predict_fn, check_fn, store,
                ledger_dir: Path | None) -> _Search:
    budget = _check_budget(DEFAULT_BUDGET if request.budget is None else request.budget)
    context = build_context(request, predict_fn=predict_fn, check_fn=check_fn, store=store)
    start = baseline(context)
    header = ledger_header(context, search_id=new_search_id(context.target.card.name),
                           command_line=list(request.command_line), budget=budget,
                           lm=None if request.no_llm else lm, no_llm=request.no_llm, baseline=start)
    return _Search(SearchSession(context, budget, start), LedgerRecorder.create(header, ledger_dir), budget, lm,
                   request, request)


def _run(search: _Search, runtime: LmRuntime | None, listeners: list[TrialListener] | None, workers: int,
         injected: bool) -> TuneResult:
    session, recorder, request, lm = search.session, search.recorder, search.request, search.lm
    session.listeners = [recorder, *(listeners or [])]
    if runtime is None and lm is not None and not request.no_llm:
        runtime = LmRuntime.from_settings(lm)
    try:
        with Pricer(session.context, None if injected else search.question, workers) as live:
            pricer = live if search.replay is None else ReplayPricer(live, search.replay, session)
            outcome = run_search(session, _settings(request, search.budget), runtime, top=request.top,
                                 pricer=pricer, replay=search.replay)
    except KeyboardInterrupt:
        raise SearchInterrupted(recorder.path, len(session.trials)) from None
    recorder.finish(session, outcome.stop_reason)
    context = session.context
    shown = [outcome.best, *outcome.top] if outcome.best else outcome.nearest_misses
    return TuneResult(context=context, outcome=outcome, ledger_path=recorder.path,
                      num_trials=len(session.trials), lm=lm if runtime is not None else None,
                      harvest=harvest_plan(context.target, [t for t in shown if t is not None],
                                           context.workload.priced_context_tokens),
                      stats=recorder.stats(session),
                      num_confirmed=len(session.confirmed) if session.bounded else None, warnings=search.warnings)


def _resumed(path: Path, request: TuneRequest, lm: LmSettings | None, predict_fn, check_fn, store) -> _Search:
    """The search of a ledger, to be replayed (:mod:`agent.resume`); the ledger's question
    wins over new options."""
    ledger: Ledger = load_ledger(path)
    lm, warnings = _resumed_lm(request, lm, ledger)
    warnings += _overridden(request, ledger)
    requested = ledger.budget if request.budget is None else _check_budget(request.budget)
    searched = sum(1 for record in ledger.trials if record.phase != "confirm")
    budget = _check_budget(max(requested, searched))
    if requested < searched:
        warnings += (f"--budget {requested} is below the {searched} trials the ledger already spent: "
                     f"the search continues at {searched}",)
    question = TuneRequest(
        model=ledger.model, cluster=ledger.cluster, engine=ledger.engine, workload=ledger.workload,
        objective=ledger.objective, slos=tuple(ledger.slos), seed=ledger.seed, guidance=ledger.guidance,
        precisions=",".join(ledger.precisions) if ledger.precisions else None,
        num_requests=ledger.num_requests, search_fidelity=ledger.search_fidelity is not None)
    context = build_context(question, predict_fn=predict_fn, check_fn=check_fn, store=store)
    session = SearchSession(context, budget, configuration_from_dict(ledger.baseline))
    session.notes = LlmNotes.from_json(ledger.llm.model_dump(mode="json"))
    trials = [trial_from_record(record, context) for record in ledger.trials]
    planner_calls = sum(1 for call in ledger.llm.calls if call.role == "planner")
    replay = Replay(trials, ledger.llm.phase_end_reason, planner_calls)
    writer = LedgerWriter(path, resume_header(ledger, budget, lm),
                          [record.model_dump(mode="json") for record in ledger.trials])
    recorder = LedgerRecorder(writer, previous_wall_s=ledger.stats.wall_s, replayed=len(trials),
                              finished=ledger.status == "finished")
    return _Search(session, recorder, budget, lm, replace(request, no_llm=request.no_llm or ledger.no_llm),
                   question, replay, warnings)


def _overridden(request: TuneRequest, ledger: Ledger) -> tuple[str, ...]:
    """The question options given with ``--resume`` that differ from the ledger's, which
    wins (module docstring): said, not silently dropped."""
    objective = None if request.objective is None else resolve_objective(request.objective).name
    given = {"--model": (request.model, ledger.model), "--cluster": (request.cluster, ledger.cluster),
             "--engine": (request.engine, ledger.engine), "--workload": (request.workload, ledger.workload),
             "--objective": (objective, ledger.objective),
             "--slo": (",".join(str(slo) for slo in parse_slos(list(request.slos))) or None, ",".join(ledger.slos)),
             "--guidance": (request.guidance, ledger.guidance),
             "--precisions": (request.precisions, ",".join(ledger.precisions) if ledger.precisions else None),
             "--seed": (request.seed or None, ledger.seed),      # 0 is the default: not told apart from unset
             "--des-requests": (request.num_requests, ledger.num_requests)}
    ignored = [f"{flag} {quote(asked)} (the ledger's: {quote('none' if kept in (None, '') else kept)})" for flag, (asked, kept) in given.items()
               if asked is not None and str(asked).lower() != str(kept).lower() and not _same_question(flag, asked, kept)]
    if not ignored:
        return ()
    return (f"--resume continues the ledger's question; ignored: {'; '.join(ignored)}",)


def _same_question(flag: str, asked: str, kept: str | None) -> bool:
    """Another spelling of the ledger's value is the same question: a model alias
    (``kimi-k3`` for Kimi-K3), a cluster's full form (``h100x8`` for ``h100``), a workload
    in tokens (``1024/1024`` for ``1k/1k``)."""
    same = {"--model": lambda a, k: load_card(a).name == k,
            "--cluster": lambda a, k: parse_cluster(a) == parse_cluster(k),
            "--workload": lambda a, k: parse_workload(a).name == parse_workload(k).name}.get(flag)
    if same is None or kept is None:
        return False
    try:
        return same(asked, kept)
    except InputError:
        return False


def _resumed_lm(request: TuneRequest, configured: LmSettings | None,
                ledger: Ledger) -> tuple[LmSettings | None, tuple[str, ...]]:
    """The LM of a resumed search (module docstring): the one configured now, else the
    ledger's with ``--lm-from-ledger`` (no environment key unless ``--lm-base-url``)."""
    if configured is not None or request.no_llm or ledger.lm is None:
        return configured, ()
    named = f"{ledger.lm.model}" + (f" at {ledger.lm.base_url}" if ledger.lm.base_url else "")
    if not request.lm_from_ledger:
        return None, (f"the ledger's LM ({named}) is not used: pass --lm, or --lm-from-ledger to use it "
                      "(it gets no key from the environment unless you also pass --lm-base-url)",)
    base_url = request.lm_base_url or ledger.lm.base_url
    if base_url and "***" in base_url:
        raise InputError("--lm-from-ledger", f"the ledger's LM endpoint {base_url} had credentials, masked "
                         "when the ledger was written", "--lm-base-url URL to name the endpoint again")
    timeout_s = request.lm_timeout_s if request.lm_timeout_s != DEFAULT_TIMEOUT_S else ledger.lm.timeout_s
    settings = LmSettings(ledger.lm.model, base_url, timeout_s, ledger.lm.num_retries, ledger.lm.json_schema,
                          use_env_key=request.lm_base_url is not None)
    return settings, ()
