"""Fakes for the DES tests: a deterministic step model (the predictor/step/cost.py protocol),
a fixed KV capacity, and a target on a real cluster profile."""

from __future__ import annotations

from dataclasses import dataclass

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.sim import PoolCapacity
from predictor.step.cost import Mode, StepCost

KV_BYTES_PER_TOKEN = 131072.0       # Llama-3.1-8B bf16 per GPU at TP1
NUM_LAYERS = 32


class FakeStepModel:
    """decode = 5000 + 20 b + 0.001 b ctx us; prefill = 1000 + 0.2 n us; a mixed step is
    the decode step plus 0.2 us per prefill token (linear, so averages are exact)."""

    mode = Mode.RANK_ONLY
    anchor_id = None
    flags = ("fake",)
    attention_dp = 1

    def __init__(self, tokens_per_step: float = 1.0, host_time_ms: float = 0.0) -> None:
        self.tokens_per_step = tokens_per_step
        self.host_time_ms = host_time_ms
        self.host_us_per_prompt_token = 0.0
        self.calls = 0

    def decode_us(self, batch: int, context_tokens: float) -> float:
        self.calls += 1
        return 5000.0 + 20.0 * batch + 0.001 * batch * context_tokens

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float:
        self.calls += 1
        return 1000.0 + 0.2 * num_tokens

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0, *, prompts: int = 0) -> float:
        return self.decode_us(decode_batch, context_tokens) + 0.2 * prefill_tokens

    def decode(self, batch: int, context_tokens: float) -> StepCost:
        return StepCost.of(other=self.decode_us(batch, context_tokens))

    def prefill(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> StepCost:
        return StepCost.of(other=self.prefill_us(num_tokens, num_seqs, context_tokens))

    def mixed(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
              prefill_context_tokens: float = 0.0, *, prompts: int = 0) -> StepCost:
        return StepCost.of(other=self.mixed_us(prefill_tokens, decode_batch, context_tokens))


@dataclass(frozen=True)
class FakeTarget:
    cluster: object
    engine: Engine
    card: object = None


def fixed_capacity(tokens: int, state_bytes: float = 0.0):
    def capacity(config: Configuration) -> PoolCapacity:
        return PoolCapacity(tokens, KV_BYTES_PER_TOKEN, state_bytes, NUM_LAYERS)
    return capacity


def fake_factory(tokens_per_step: float = 1.0, host_time_ms: float = 0.0):
    models: dict = {}

    def factory(config: Configuration) -> FakeStepModel:
        return models.setdefault(config, FakeStepModel(tokens_per_step, host_time_ms))
    factory.models = models
    return factory
