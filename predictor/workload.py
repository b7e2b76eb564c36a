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
class WorkloadSpec:
    """``kind`` is "fixed" (isl/osl set) or "agentic".

    ``requests_per_client`` describes a fixed-count benchmark run (all clients start
    together and send that many requests each, e.g. InferenceX's ``num_prompts = 10 x
    concurrency``): the first wave's queued prefills then weigh on the mean TTFT. None
    means the steady state of an endless run. ``harness`` names the benchmark client and
    front end a measured run went through (a corpus's ``source``: ``inferencex``,
    ``aiconfigurator``): its per-request host time is theirs (METHOD §3.12), so a
    configuration with no anchor takes the host time of that harness's anchors
    (`predictor.step.priors.Priors.host`); None for the product's own questions.
    ``mixed_prefill``: the harness deployed a prefill-first engine (SGLang) with mixed
    chunked prefill, so a fixed-length run staggers as a mixing engine's does
    (`predictor.benchmark.runs_in_waves`). ``recv_interval``: the harness launched the
    engine to take new requests only every that many decode steps (SGLang
    ``--scheduler-recv-interval``), so an arrival waits half of them on average;
    ``ahead_steps``: it plans that many steps ahead of the GPU (vLLM
    ``--async-scheduling``: 1), so an arrival joins that many steps later.
    """

    kind: str
    isl: int = 0
    osl: int = 0
    requests_per_client: int | None = None
    fixed_lengths: bool = False    # a benchmark whose requests are exactly isl/osl (predictor.benchmark)
    acceptance: tuple[float, ...] | None = None   # L(1..k) of this traffic's speculation (METHOD §3.8)
    harness: str | None = None     # the benchmark client and front end of a measured run (docstring)
    mixed_prefill: bool = False    # the run's prefill-first engine mixed prefill into decode steps
    recv_interval: int = 1         # decode steps between the scheduler's polls for new requests
    ahead_steps: int = 0           # steps the scheduler plans ahead of the GPU (admission that much later)

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    @property
    def context_tokens(self) -> int:
        """The per-sequence context the memory check uses (METHOD §3.9)."""
        return self.isl + self.osl if self.is_fixed else AGENTIC_CONTEXT_TOKENS

    @property
    def name(self) -> str:
        return f"{_short(self.isl)}/{_short(self.osl)}" if self.is_fixed else self.kind

    def to_json(self) -> dict:
        return {"kind": self.kind, "isl": self.isl, "osl": self.osl, "name": self.name,
                "requests_per_client": self.requests_per_client, "fixed_lengths": self.fixed_lengths,
                "acceptance": list(self.acceptance) if self.acceptance else None,
                **({"harness": self.harness} if self.harness else {}),
                **({"mixed_prefill": True} if self.mixed_prefill else {}),
                **({"recv_interval": self.recv_interval} if self.recv_interval != 1 else {}),
                **({"ahead_steps": self.ahead_steps} if self.ahead_steps else {})}


AGENTIC = WorkloadSpec("agentic")


def _short(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def _tokens(text: str, spec: str) -> int:
    match = _LENGTH.match(text)
    if not match:
        raise InputError("--workload", f"cannot parse {quote(spec)}", ACCEPTED)
    value = float(match.group(1)) * (1024 if match.group(2) else 1)
    if value < 1 or value != int(value):
        raise InputError("--workload", f"{quote(spec)} needs whole positive token counts", ACCEPTED)
    if value > MAX_WORKLOAD_TOKENS:
        raise InputError("--workload", f"{quote(spec)} asks for {value:,.0f} tokens",
                         f"at most {MAX_WORKLOAD_TOKENS:,} tokens per side (and a model's own context limit)")
    return int(value)


def parse_workload(text: str | None) -> WorkloadSpec:
    """Parse a workload name; default (None) is agentic (PRODUCT.md §2)."""
    if text is None or text.strip().lower() == "agentic":
        return AGENTIC
    if "/" not in text:
        raise InputError("--workload", f"unknown workload {quote(text)}" + did_you_mean(text, ("agentic", "1k/1k", "8k/1k")),
                         ACCEPTED)
    isl, _, osl = text.partition("/")
    return WorkloadSpec("fixed", _tokens(isl, text), _tokens(osl, text))
