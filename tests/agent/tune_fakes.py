"""Shared fakes for the tuning-agent tests: a deterministic fake predictor (the real
structural/memory check stays), contexts on real model cards, and scripted LMs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils import DummyLM

from agent.lm import LmRuntime
from agent.seed_planner import baseline
from agent.session import SearchSession
from agent.trial import SearchContext
from agent.tune import TuneRequest, build_context
from predictor.feasibility import check_configuration
from predictor.prediction import Prediction, illegal
from predictor.step.cost import Mode

SMALL_MOE = "qwen3-30b-a3b"  # fits one MI355X: many legal layouts, fast checks
REPLICATION_SPREAD = 0.02     # the fake's 90% replication interval: +-2% of each metric


@dataclass
class FakePredictor:
    """Throughput rises with per-replica load (to 64), fp8 KV, fp8 weights and EP;
    TPOT and p90 ITL rise with load. tp=1 without speculation is anchored."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_on: str | None = None  # a lever=value text that makes the fake raise

    def __call__(self, target, config, workload, *, store=None, seed=0, num_requests=None,
                 need_distribution=False, replications=1, stop_rules=()) -> Prediction:
        self.calls.append({"config": config, "seed": seed, "need_distribution": need_distribution,
                           "num_requests": num_requests, "replications": replications})
        if self.fail_on and self.fail_on in config.describe():
            raise RuntimeError("fake predictor failure")
        feasibility = check_configuration(target.card, target.cluster, target.engine, config)
        if not feasibility.legal:
            return illegal(feasibility.reasons, feasibility.memory)
        metrics = metrics_for(config)
        intervals = {k: (v * (1 - REPLICATION_SPREAD), v * (1 + REPLICATION_SPREAD)) for k, v in metrics.items()} \
            if replications > 1 else {}
        return Prediction(legal=True, reasons=(), mode=self.mode(config),
                          anchor_id="fake-anchor" if self.mode(config) is Mode.ANCHORED else None,
                          flags=() if self.mode(config) is Mode.ANCHORED else ("rank-only",),
                          metrics=metrics, memory=feasibility.memory, source="analytical",
                          seed_intervals=intervals)

    @staticmethod
    def mode(config) -> Mode:
        return Mode.ANCHORED if config.tp == 1 and config.spec_method == "none" else Mode.RANK_ONLY


def metrics_for(config) -> dict[str, float]:
    load = config.concurrency / max(1, config.replicas)
    throughput = 1000.0 * min(load, 64.0) / 64.0
    throughput *= 1.25 if config.kv_cache_dtype == "fp8" else 1.0
    throughput *= 1.15 if config.weight_dtype == "fp8" else 1.0
    throughput *= 1.1 if config.ep > 1 else 1.0
    tpot = 10.0 + load / 16.0
    return {"throughput_per_gpu": throughput, "output_throughput_per_gpu": throughput / 2,
            "tpot_ms_mean": tpot, "itl_ms_mean": tpot, "itl_ms_p90": 1.3 * tpot,
            "ttft_ms_mean": 100.0 + load, "interactivity_mean": 1000.0 / tpot,
            "tpot_ms_p50": tpot, "interactivity_p50": 1000.0 / tpot,   # fixed-length: one value per request
            "max_concurrency": 512.0}


def make_context(model: str = SMALL_MOE, *, slos: tuple[str, ...] = (), predictor: FakePredictor | None = None,
                 **options: Any) -> SearchContext:
    request = TuneRequest(model=model, workload=options.pop("workload", "1k/1k"), slos=slos, **options)
    return build_context(request, predict_fn=predictor or FakePredictor(), check_fn=check_configuration)


def make_session(budget: int = 50, **options: Any) -> SearchSession:
    context = make_context(**options)
    return SearchSession(context, budget, baseline(context))


def scripted(answers: list[dict[str, Any]]) -> LmRuntime:
    """A runtime over DummyLM replaying ``answers`` in order (ChatAdapter both sides)."""
    return LmRuntime(DummyLM(answers, adapter=dspy.ChatAdapter()), adapter=dspy.ChatAdapter())


class FailingLM(DummyLM):
    """Every call raises ``error`` (what DSPy raises after its retries)."""

    def __init__(self, error: Exception) -> None:
        super().__init__([])
        self.error = error

    def forward(self, *args, **kwargs):
        raise self.error


def failing(error: Exception) -> LmRuntime:
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*BaseLM.forward.*")
    return LmRuntime(FailingLM(error), adapter=dspy.ChatAdapter())


def plan_answer(configs: list[dict[str, Any]], rationale: str = "load and KV precision limit throughput") -> dict:
    return {"plan": {"rationale": rationale, "hypotheses": ["fp8 KV raises throughput"],
                     "configs": configs, "polish_plan": "tune concurrency around the winner"}}


def step(tool: str, args: dict[str, Any] | None = None, thought: str = "next") -> dict:
    return {"next_thought": thought, "next_tool_name": tool, "next_tool_args": args or {}}


def report(best_config: dict[str, Any] | None = None) -> dict:
    return {"reasoning": "done", "best_config": best_config or {}, "what_worked": "fp8 KV cache",
            "follow_ups": ["try ep=2"]}
