"""The closed loop of the method, end to end on one engine: a configuration the anchor
did not measure is predicted (the analytical steady state and the DES, METHOD §2, §5),
then run for real with the harvester's client, and the two are compared.

A `LoopPoint` is a closed loop of `clients` clients with zero think time, each sending
`requests_per_client` unique prompts of `prompt_tokens` tokens for `output_tokens`
tokens, every client starting at once. What is compared follows the simulator's
steady-state semantics (`predictor.sim.api`): each client's first request is warm-up,
so TTFT (from send, queueing included) is the mean over the other requests and TPOT
the median of their inter-token gaps (as the harvester's decode sweep takes it, METHOD
§4: on a shared machine a preempted step is a spike that a mean would carry; without
spikes, one request decoding alone has every gap equal to its mean); output throughput
is every output token over the whole run (first send to last token). `measure_loop` runs it against any
`StreamClient`; `predict_loop` prices it with `predictor.predict` on one anchor (a
store holding only it, and the physics defaults as the prior the fit starts from: one
anchor has no other models to learn a cross-model prior from), analytically or in the
DES (`need_distribution`).
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass
from itertools import pairwise

from levers.configuration import Configuration
from predictor.anchors.anchor import Anchor
from predictor.anchors.store import AnchorStore
from predictor.harvest.client import RequestTrace, StreamClient, failed
from predictor.harvest.prompts import PromptFactory
from predictor.predict import predict
from predictor.step.priors import Priors
from predictor.target import Target
from predictor.units import S_PER_MS
from predictor.workload import WorkloadSpec


@dataclass(frozen=True, slots=True)
class LoopPoint:
    name: str
    clients: int
    requests_per_client: int
    prompt_tokens: int
    output_tokens: int

    @property
    def num_requests(self) -> int:
        return self.clients * self.requests_per_client

    def to_json(self) -> dict:
        return {"name": self.name, "clients": self.clients, "requests_per_client": self.requests_per_client,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True, slots=True)
class LoopFigures:
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    mode: str = "measured"          # measured | anchored | rank-only

    def to_json(self) -> dict:
        return {"ttft_ms": round(self.ttft_ms, 3), "tpot_ms": round(self.tpot_ms, 4),
                "output_tokens_per_s": round(self.output_tokens_per_s, 4), "mode": self.mode}


def _client_loop(client: StreamClient, prompts: list[str], output_tokens: int, start: threading.Barrier,
                 out: list[RequestTrace]) -> None:
    start.wait()
    for prompt in prompts:
        out.append(client.stream(prompt, output_tokens))


def run_loop(client: StreamClient, factory: PromptFactory, point: LoopPoint) -> list[list[RequestTrace]]:
    """Every client's traces, in order (prompts are made up front: the factory is not
    shared across threads)."""
    prompts = [[p.text for p in factory.batch(point.prompt_tokens, point.requests_per_client)]
               for _ in range(point.clients)]
    start = threading.Barrier(point.clients)
    traces: list[list[RequestTrace]] = [[] for _ in range(point.clients)]
    threads = [threading.Thread(target=_client_loop, args=(client, prompts[i], point.output_tokens, start, traces[i]),
                                daemon=True) for i in range(point.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed([t for per_client in traces for t in per_client] or [RequestTrace(0.0, (), error="no request ran")],
           f"the closed loop '{point.name}'")
    return traces


def loop_figures(traces: list[list[RequestTrace]]) -> LoopFigures:
    """Steady-state figures of a run (module docstring)."""
    every = [t for per_client in traces for t in per_client]
    steady = [t for per_client in traces for t in per_client[1:]] or every
    gaps = [b - a for t in steady for a, b in pairwise(t.token_times_s)]
    tokens = sum(t.completion_tokens or len(t.token_times_s) for t in every)
    span_s = max(t.last_token_s for t in every) - min(t.sent_s for t in every)
    return LoopFigures(ttft_ms=statistics.fmean(t.ttft_ms for t in steady),
                       tpot_ms=statistics.median(gaps) / S_PER_MS, output_tokens_per_s=tokens / span_s)


def measure_loop(client: StreamClient, factory: PromptFactory, point: LoopPoint) -> LoopFigures:
    return loop_figures(run_loop(client, factory, point))


def predict_loop(target: Target, config: Configuration, anchor: Anchor, point: LoopPoint, *,
                 des: bool, seed: int = 0) -> LoopFigures:
    """The point priced on ``anchor`` alone (module docstring)."""
    workload = WorkloadSpec("fixed", point.prompt_tokens, point.output_tokens)
    prediction = predict(target, config.with_changes({"concurrency": point.clients}), workload,
                         store=AnchorStore.from_anchors([anchor]), priors=Priors(), need_distribution=des, seed=seed,
                         num_requests=point.num_requests if des else None)
    if prediction.metrics is None:
        raise ValueError(f"the point '{point.name}' is not predictable: {'; '.join(prediction.reasons)}")
    metrics = prediction.metrics
    return LoopFigures(metrics["ttft_ms_mean"], metrics["tpot_ms_mean"],
                       metrics["output_throughput_per_gpu"] * config.replica_gpus, str(prediction.mode))
