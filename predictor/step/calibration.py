"""The calibration of the step model (METHOD §2, §3): a handful of physically meaningful
factors that scale the operator breakdown of `predictor.step.simulate`, with where they
came from.

One structure serves both modes. Simulate mode prices a step with a *prior* calibration
(the documented efficiencies of `predictor.step.operators`, or the cross-model priors of
`predictor.step.priors` learned from every embedded anchor of the same GPU, engine and
dtype class); anchored mode with factors *fitted* to an anchor's measured points
(`predictor.step.fit`). Transfer to another width, EP, context, batch, precision or pool
then happens through the same physics with the same factors: nothing is extrapolated from
a curve.

Factors are time multipliers relative to the prior's term (1.0 = the prior):
- ``bandwidth``: every bandwidth-bound part (weights and activations a GEMM streams,
  routed experts, elementwise passes, KV reads). At least the prior efficiency of the
  fastest of those terms (0.8): no term gets faster than HBM's datasheet rate.
- ``compute``: every compute-bound part (GEMMs, attention). At least 0.8 (the prior GEMM
  peak efficiency): no term beats the datasheet FLOP rate.
- ``moe``: the routed-expert term on top of the two above (grouped GEMMs over many small
  experts, routing skew beyond the uniform model); at least 1.
- ``comm``: collectives (`predictor.step.comm_cost`, ``m / B`` of measured fits); at least 0.5.
- ``launch_us``: cost per kernel of a forward (graph replay or eager issue), the
  per-layer fixed cost: at least 2 us (a kernel's launch, ramp and tail; METHOD §3.15
  measures 4.98 us on MI355X), so the fixed cost of a layer cannot vanish into the weight
  reads, which TP shards; ``fixed_us``: per-step cost independent of the kernels
  (sampling, scheduler, CPU-GPU sync), non-negative.
- ``host_ms`` and ``host_us_per_token``: per-request host time on TTFT and end-to-end only
  (METHOD §3.12), 0-1000 ms and 5-11 us per prompt token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

# Bounds (METHOD §3: no term below its roofline; host time in its physical range, §3.12).
BANDWIDTH_MIN = 0.8
COMPUTE_MIN = 0.8
MOE_MIN = 1.0
COMM_MIN = 0.5
SCALE_MAX = 100.0    # a sanity bound, not physics: llama.cpp on a CPU reaches ~3% of its peak FLOP/s
LAUNCH_MIN_US, LAUNCH_MAX_US = 2.0, 100.0
FIXED_MAX_US = 100_000.0
HOST_MAX_MS = 1000.0
HOST_PER_TOKEN_MIN_US, HOST_PER_TOKEN_MAX_US = 5.0, 11.0
HOST_PER_TOKEN_DEFAULT_US = 8.0     # METHOD §3.12: 5-11 us per prompt token (midpoint)
HOST_DEFAULT_MS = 1.0               # HTTP + scheduling + detokenisation with no anchor

FACTORS = ("bandwidth", "compute", "moe", "comm", "launch_us", "fixed_us")
BOUNDS: dict[str, tuple[float, float]] = {
    "bandwidth": (BANDWIDTH_MIN, SCALE_MAX), "compute": (COMPUTE_MIN, SCALE_MAX), "moe": (MOE_MIN, SCALE_MAX),
    "comm": (COMM_MIN, SCALE_MAX), "launch_us": (LAUNCH_MIN_US, LAUNCH_MAX_US), "fixed_us": (0.0, FIXED_MAX_US),
    "host_ms": (0.0, HOST_MAX_MS), "host_us_per_token": (HOST_PER_TOKEN_MIN_US, HOST_PER_TOKEN_MAX_US),
}


@dataclass(frozen=True, slots=True)
class Residuals:
    """How well the factors reproduce the points they were fitted to (log ratio
    predicted/measured): median and largest absolute value, per kind of point."""

    num_decode_points: int = 0
    num_prefill_points: int = 0
    decode_median_abs: float = 0.0
    decode_max_abs: float = 0.0
    prefill_median_abs: float = 0.0
    prefill_max_abs: float = 0.0

    def to_json(self) -> dict:
        return {f.name: round(getattr(self, f.name), 4) if isinstance(getattr(self, f.name), float)
                else getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted (or prior) factors of the step model and their provenance."""

    bandwidth: float = 1.0
    compute: float = 1.0
    moe: float = 1.0
    comm: float = 1.0
    launch_us: float | None = None          # None: the GPU profile's per-kernel cost
    fixed_us: float = 0.0
    host_ms: float = HOST_DEFAULT_MS
    host_us_per_token: float = HOST_PER_TOKEN_DEFAULT_US
    source: str = "physics"                 # "physics" | "prior:<key>" | "anchor:<id>"
    prior: str | None = None                # the prior the fit started from (anchor fits)
    points: tuple[str, ...] = field(default=())   # "decode b=.. ctx=.." / "prefill n=..": what it rests on
    residuals: Residuals = field(default_factory=Residuals)

    @property
    def is_fitted(self) -> bool:
        return self.source.startswith("anchor:")

    def clamped(self) -> Calibration:
        """Every factor inside its physical bounds (module docstring)."""
        values = {}
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if value is not None:
                values[name] = min(max(float(value), low), high)
        return replace(self, **values)

    def factors(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in (*FACTORS, "host_ms", "host_us_per_token")}

    def to_json(self) -> dict:
        data = {k: (None if v is None else round(v, 4)) for k, v in self.factors().items()}
        data.update(source=self.source, prior=self.prior, points=list(self.points),
                    residuals=self.residuals.to_json())
        return data


PHYSICS = Calibration()
