"""Workload specifications named on the command line (PRODUCT.md §2).

`1k/1k` (ISL 1024 / OSL 1024), `8k/1k`, `ISL/OSL` with plain numbers, and `agentic`
(the synthetic multi-turn profile of METHOD §5, built by `predictor.sim.workloads`).
A fixed-length workload is priced analytically; the others need the DES.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from levers.errors import InputError, did_you_mean
from levers.inputs import quote

ACCEPTED = "1k/1k, 8k/1k, ISL/OSL in tokens (e.g. 2048/256), or agentic"
# The context one sequence is checked at for memory on agentic traffic (long, growing
# prompts: the public coding sessions have a ~104k-token median input; 32k is the
# legality floor, the DES then admits what the KV pool really holds).
AGENTIC_CONTEXT_TOKENS = 32768
_LENGTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$", re.ASCII)
MAX_WORKLOAD_TOKENS = 16_777_216   # ISL or OSL: beyond every model's context (legality refuses the rest)


@dataclass(frozen=True, slots=True)
class Harness:
    """What a measured run's benchmark harness did beyond the lengths and the load
    (METHOD §8): the client and front end the run went through, and how it launched the
    engine where that changes when a request is scheduled. Set from a corpus row
    (`predictor.corpus.formats` reads it from each corpus's recipes); the product's own
    questions have none.

    - ``name``: the harness (a corpus's ``source``: ``inferencex``, ``aiconfigurator``).
      Host time is the front end's and the client's, not the model's (METHOD §3.12), so
      a configuration with no anchor takes that harness's host time for its engine
      (`predictor.step.priors.Priors.host`).
    - ``mixed_prefill``: a prefill-first engine (SGLang) launched with mixed chunked
      prefill: a fixed-length run's rounds stagger as a mixing engine's do
      (`predictor.benchmark.runs_in_waves`).
    - ``recv_interval``: the scheduler takes new requests only every that many decode
      steps (SGLang ``--scheduler-recv-interval``): an arrival waits half of them.
    - ``ahead_steps``: the scheduler plans that many steps ahead of the GPU (vLLM
      ``--async-scheduling``: 1): an arrival joins that many steps later.
    """

    name: str | None = None
    mixed_prefill: bool = False
    recv_interval: int = 1
    ahead_steps: int = 0

    def to_json(self) -> dict:
        """The facts that differ from an engine launched as the product launches it."""
        return {key: value for key, value in (("name", self.name), ("mixed_prefill", self.mixed_prefill),
                                              ("recv_interval", self.recv_interval),
                                              ("ahead_steps", self.ahead_steps))
                if value != getattr(NO_HARNESS, key)}


NO_HARNESS = Harness()


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """``kind`` is "fixed" (isl/osl set) or "agentic".

    ``requests_per_client`` describes a fixed-count benchmark run (all clients start
    together and send that many requests each, e.g. InferenceX's ``num_prompts = 10 x
    concurrency``): the first wave's queued prefills then weigh on the mean TTFT. None
    means the steady state of an endless run. ``harness``: what the measured run's
    harness did (`Harness`).
    """

    kind: str
    isl: int = 0
    osl: int = 0
    requests_per_client: int | None = None
    fixed_lengths: bool = False    # a benchmark whose requests are exactly isl/osl (predictor.benchmark)
    acceptance: tuple[float, ...] | None = None   # L(1..k) of this traffic's speculation (METHOD §3.8)
    harness: Harness = NO_HARNESS

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    @property
    def context_tokens(self) -> int:
        """The per-sequence context the memory check uses (METHOD §3.9)."""
        return self.isl + self.osl if self.is_fixed else AGENTIC_CONTEXT_TOKENS

    @property
    def priced_context_tokens(self) -> float:
        """The mean context a prediction prices at and chooses its anchor by: a fixed
        workload's prompt plus half its output, else the memory check's context."""
        return self.isl + self.osl / 2.0 if self.is_fixed else float(self.context_tokens)

    @property
    def name(self) -> str:
        return f"{_short(self.isl)}/{_short(self.osl)}" if self.is_fixed else self.kind

    def to_json(self) -> dict:
        return {"kind": self.kind, "isl": self.isl, "osl": self.osl, "name": self.name,
                "requests_per_client": self.requests_per_client, "fixed_lengths": self.fixed_lengths,
                "acceptance": list(self.acceptance) if self.acceptance else None,
                **({"harness": self.harness.to_json()} if self.harness != NO_HARNESS else {})}


AGENTIC = WorkloadSpec("agentic")


def _short(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def _tokens(text: str, spec: str) -> int:
    match = _LENGTH.match(text)
    if not match:
        raise InputError("--workload", f"cannot parse {quote(spec)}", ACCEPTED)
    value = float(match.group(1)) * (1024 if match.group(2) else 1)
    if value > MAX_WORKLOAD_TOKENS:     # before int(): past ~1e308 the float is inf
        raise InputError("--workload", f"{quote(spec)} asks for more than {MAX_WORKLOAD_TOKENS:,} tokens",
                         f"at most {MAX_WORKLOAD_TOKENS:,} tokens per side (and a model's own context limit)")
    if value < 1 or value != int(value):
        raise InputError("--workload", f"{quote(spec)} needs whole positive token counts", ACCEPTED)
    return int(value)


PREDICT_WORKLOAD = "1k/1k"      # `predict`'s default: the one `check`, `memory` and `deploy --config` choose
                                #   a configuration's calibrating anchor (and its recipe) at


def parse_workload(text: str | None) -> WorkloadSpec:
    """Parse a workload name; default (None) is agentic (PRODUCT.md §2)."""
    if text is None or text.strip().lower() == "agentic":
        return AGENTIC
    if "/" not in text:
        raise InputError("--workload", f"unknown workload {quote(text)}" + did_you_mean(text, ("agentic", "1k/1k", "8k/1k")),
                         ACCEPTED)
    isl, _, osl = text.partition("/")
    return WorkloadSpec("fixed", _tokens(isl, text), _tokens(osl, text))


# ... as the context the anchor is chosen at (`WorkloadSpec.priced_context_tokens`)
PREDICT_CONTEXT_TOKENS = parse_workload(PREDICT_WORKLOAD).priced_context_tokens
