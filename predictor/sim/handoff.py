"""KV hand-off between a disaggregated deployment's pools, as the DES sees it (METHOD §3.11).

The per-backend law lives in `predictor.step.handoff` (shared with the analytical predictor):
floor + exposed bytes over each prefill GPU's link; MoRI 120 us + 47.9 GB/s with only
the last layer exposed (it streams layer by layer during prefill), NIXL 5 us + 400 GB/s
and Mooncake 10 us + 200 GB/s with the whole cache after prefill; every rate capped by
the link crossed (the scale-up fabric when both pools sit in one scale-up domain, else
the NIC). Here each prefill rank's link is a FIFO: hand-offs leaving one rank together
queue, so a burst of prompts finishing at once is not handed off in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

from predictor.step.handoff import BACKENDS, handoff_us


@dataclass(frozen=True, slots=True)
class HandoffLaw:
    backend: str
    link_gbps: float
    kv_bytes_per_token: float       # per prefill GPU
    state_bytes_per_sequence: float
    num_layers: int

    def duration_us(self, prompt_tokens: int) -> float:
        num_bytes = prompt_tokens * self.kv_bytes_per_token + self.state_bytes_per_sequence
        return handoff_us(self.backend, num_bytes, self.num_layers, self.link_gbps)

    @property
    def floor_us(self) -> float:
        """The part of a hand-off that does not hold the link (it overlaps the previous transfer)."""
        return BACKENDS[self.backend].floor_us


class HandoffLinks:
    """One FIFO per prefill rank."""

    def __init__(self, law: HandoffLaw, num_units: int) -> None:
        self.law = law
        self.free_at_us = [0.0] * num_units

    def schedule(self, unit: int, now_us: float, prompt_tokens: int) -> float:
        """Queue a hand-off from prefill rank ``unit``; return when the KV has arrived."""
        start = max(now_us, self.free_at_us[unit])
        duration = self.law.duration_us(prompt_tokens)
        self.free_at_us[unit] = start + (duration - self.law.floor_us)
        return start + duration
