"""Fitting a calibration to an anchor (METHOD §2-§4): the factors of
`predictor.step.calibration` that make the step model reproduce every point the anchor
measured, kept physical and close to their prior.

The model fitted is the model that prices: each point is the step model's raw parts
(`SimulateStepModel.decode_raw` / `prefill_raw`, at the anchor's own layout, batch and
context) priced by `predictor.step.roofline` under candidate factors. The objective is a
maximum-a-posteriori fit in log space:

    sum_points ((log model - log measured) / sigma_point)^2
      + sum_factors ((log factor - log prior) / sigma_prior)^2

solved by a coarse search (each factor in turn over a grid of multiples of its value:
a roofline's max() has no gradient on its losing side, so a factor whose term is not yet
the bound one would never move) followed by damped Gauss-Newton on the log factors, every
factor clipped to its physical bounds (`calibration.BOUNDS`). A prefill point is a concurrency-1 TTFT: the
prompt's prefill steps (in chunks of the anchor's chunk size) plus the host time
``host_ms + host_us_per_token * n``. Few factors, many points: an anchor teaches the
engine's efficiencies, not its curve.

Vectorised over the points' parts (numpy): one evaluation of every point is a handful of
array operations, so a fit takes milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from predictor.step.calibration import BOUNDS, Calibration, Residuals
from predictor.step.roofline import EAGER_CPU_US_PER_KERNEL, MOE, RawStep
from predictor.units import US_PER_MS

# Parameters of the fit, in this order; log-space priors' widths.
PARAMS = ("bandwidth", "compute", "moe", "comm", "launch_us", "fixed_us", "host_ms", "host_us_per_token")
SIGMA_PRIOR = {"bandwidth": 0.35, "compute": 0.35, "moe": 0.35, "comm": 0.5, "launch_us": 0.6, "fixed_us": 1.5,
               "host_ms": 1.5, "host_us_per_token": 0.3}
SIGMA_DECODE_POINT = 0.03      # log: run-to-run noise of a measured step
SIGMA_PREFILL_POINT = 0.08     # log: a measured prefill sweep's TTFT carries host jitter
SIGMA_SERVED_PREFILL_POINT = 0.25   # log: a TTFT read from a served run (corpus anchors) also
#   carries queueing the wave model only approximates; trusted like a sweep, it pinned compute
#   at 4x the roofline on AIConfigurator's Qwen3-32B/H100 TTFTs while the same runs' TPOT growth
#   with load (prefill riding the decode steps) measures ~1.1x (load protocol TPOT 10.6% -> 8.4%)
FLOOR = {"launch_us": 0.05, "fixed_us": 1.0, "host_ms": 0.01}   # log-space floors of additive factors
ITERATIONS = 30
STEP_LIMIT = 1.0               # largest change of one log factor per iteration
TOLERANCE = 1e-6
JACOBIAN_STEP = 1e-5
COARSE_GRID = tuple(np.log([1 / 8, 1 / 4, 1 / 2, 2, 4, 8, 32]))
COARSE_SWEEPS = 1
# Factors a roofline's max() can hide (a losing side has no gradient); the others start moving.
COARSE_FACTORS = np.array([n in ("bandwidth", "compute", "moe", "launch_us") for n in PARAMS])


@dataclass(frozen=True, slots=True)
class Point:
    """One measured point: its raw parts and what was measured (us)."""

    label: str
    kind: str                  # "decode" | "prefill"
    parts: tuple[RawStep, ...]
    measured_us: float
    prompt_tokens: int = 0     # prefill: the prompt (host time per token)


class _Arrays:
    """The points' parts flattened for vectorised pricing."""

    def __init__(self, points: list[Point]) -> None:
        parts = [(i, part) for i, point in enumerate(points) for part in point.parts]
        self.num_points, self.num_parts = len(points), len(parts)
        self.part_point = np.array([i for i, _ in parts], dtype=int)
        roofs = [(j, r) for j, (_, part) in enumerate(parts) for r in part.rooflines]
        self.roof_part = np.array([j for j, _ in roofs], dtype=int)
        self.roof_memory = np.array([r.memory_us for _, r in roofs], dtype=float)
        self.roof_compute = np.array([r.compute_us for _, r in roofs], dtype=float)
        self.roof_weight = np.array([r.weight for _, r in roofs], dtype=float)
        self.roof_moe = np.array([r.term == MOE for _, r in roofs], dtype=bool)
        column = lambda name: np.array([getattr(part, name) for _, part in parts], dtype=float)  # noqa: E731
        self.elementwise, self.moe_elementwise = column("elementwise_us"), column("moe_elementwise_us")
        self.comm, self.kernels, self.issued = column("comm_us"), column("kernels"), column("issued")
        self.fixed_steps, self.pipeline = column("fixed_steps"), column("pipeline_us")
        self.is_prefill = np.array([p.kind == "prefill" for p in points], dtype=bool)
        self.prompt_tokens = np.array([p.prompt_tokens for p in points], dtype=float)
        self.measured = np.array([p.measured_us for p in points], dtype=float)
        self.roof_to_part = np.zeros((len(roofs), self.num_parts))
        self.roof_to_part[np.arange(len(roofs)), self.roof_part] = 1.0
        self.part_to_point = np.zeros((self.num_parts, self.num_points))
        self.part_to_point[np.arange(self.num_parts), self.part_point] = 1.0

    def total_us(self, v: dict[str, np.ndarray | float]) -> np.ndarray:
        """Every point's modelled time (us) under factor values ``v``: scalars give shape
        ``(points,)``, arrays of ``K`` candidate values give ``(K, points)``."""
        col = {k: np.asarray(x, dtype=float).reshape(-1, 1) for k, x in v.items()}
        roof = self.roof_weight * np.maximum(col["bandwidth"] * self.roof_memory, col["compute"] * self.roof_compute)
        roof = np.where(self.roof_moe, roof * col["moe"], roof)
        body = roof @ self.roof_to_part
        busy = (body + col["moe"] * col["bandwidth"] * self.moe_elementwise + col["bandwidth"] * self.elementwise
                + col["comm"] * self.comm)
        floor = self.kernels * col["launch_us"]
        launch = floor + np.maximum(0.0, self.issued * EAGER_CPU_US_PER_KERNEL - (busy + floor))
        part = busy + launch + col["fixed_us"] * self.fixed_steps + self.pipeline
        total = part @ self.part_to_point
        host = (col["host_ms"] * US_PER_MS + col["host_us_per_token"] * self.prompt_tokens) * self.is_prefill
        out = total + host
        return out[0] if all(np.ndim(x) == 0 for x in v.values()) else out


def _to_values(z: np.ndarray) -> dict[str, float]:
    return {name: float(math.exp(z[i])) - FLOOR.get(name, 0.0) for i, name in enumerate(PARAMS)}


def _to_value_arrays(zs: np.ndarray) -> dict[str, np.ndarray]:
    """``K`` candidate log-factor vectors (rows) as arrays of factor values."""
    return {name: np.exp(zs[:, i]) - FLOOR.get(name, 0.0) for i, name in enumerate(PARAMS)}


def _to_z(values: dict[str, float]) -> np.ndarray:
    return np.array([math.log(max(values[name], 0.0) + FLOOR.get(name, 0.0)) for name in PARAMS])


def _z_bounds() -> tuple[np.ndarray, np.ndarray]:
    low = np.array([math.log(BOUNDS[n][0] + FLOOR.get(n, 0.0)) for n in PARAMS])
    high = np.array([math.log(BOUNDS[n][1] + FLOOR.get(n, 0.0)) for n in PARAMS])
    return low, high


def prior_values(prior: Calibration, default_launch_us: float) -> dict[str, float]:
    values = {name: getattr(prior, name) for name in PARAMS}
    if values["launch_us"] is None:
        values["launch_us"] = default_launch_us
    return values


def fit_points(points: list[Point], prior: Calibration, default_launch_us: float, *,
               source: str, sigma_scale: float = 1.0, frozen: tuple[str, ...] = (),
               prefill_sigma: float = SIGMA_PREFILL_POINT, prior_sigma: dict[str, float] | None = None,
               point_scale: np.ndarray | None = None) -> Calibration:
    """The MAP calibration for ``points`` around ``prior`` (module docstring).
    ``frozen`` factors stay at the prior (e.g. the host time of a decode-only anchor);
    ``prefill_sigma``: the log noise of the prefill points (`SIGMA_SERVED_PREFILL_POINT`
    for TTFTs read from served runs); ``prior_sigma``: prior widths that replace
    `SIGMA_PRIOR`'s (a factor the points measure apart from the others); ``point_scale``:
    a multiplier of each point's log noise (a robust fit's weights)."""
    arrays = _Arrays(points)
    sigma_points = np.where(arrays.is_prefill, prefill_sigma, SIGMA_DECODE_POINT)
    if point_scale is not None:
        sigma_points = sigma_points * point_scale
    start = prior_values(prior, default_launch_us)
    z0 = _to_z(start)
    widths = {**SIGMA_PRIOR, **(prior_sigma or {})}
    sigma = np.array([widths[n] * sigma_scale for n in PARAMS])
    free = np.array([n not in frozen for n in PARAMS])
    low, high = _z_bounds()
    log_measured = np.log(np.maximum(arrays.measured, 1e-9))

    def residuals(zs: np.ndarray) -> np.ndarray:
        """Residual vectors of ``K`` candidates (rows of ``zs``), shape ``(K, n)``."""
        model = np.log(np.maximum(arrays.total_us(_to_value_arrays(zs)), 1e-9))
        return np.concatenate([(model - log_measured) / sigma_points, ((zs - z0) / sigma)[:, free]], axis=1)

    z = _coarse_search(np.clip(z0.copy(), low, high), residuals, free, low, high)
    r = residuals(z[None, :])[0]
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(ITERATIONS):
        shifted = residuals(np.vstack([z[None, :], z[None, :] + np.diag(np.where(free, JACOBIAN_STEP, 0.0))]))
        r = shifted[0]
        jac = ((shifted[1:] - r) / JACOBIAN_STEP).T
        normal, gradient = jac.T @ jac, jac.T @ r
        improved = converged = False
        for _attempt in range(8):
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), -gradient)
            candidate = np.clip(z + np.clip(step, -STEP_LIMIT, STEP_LIMIT) * free, low, high)
            r_new = residuals(candidate[None, :])[0]
            new_cost = float(r_new @ r_new)
            if new_cost < cost:
                improved, converged = True, cost - new_cost < TOLERANCE * max(1.0, cost)
                z, r, cost = candidate, r_new, new_cost
                damping = max(damping / 3.0, 1e-7)
                break
            damping *= 10.0
        if not improved or converged:
            break
    values = _to_values(z)
    modelled = arrays.total_us(values)
    return _calibration(values, prior, source, points, modelled, arrays)


def log_errors(points: list[Point], calibration: Calibration, default_launch_us: float) -> np.ndarray:
    """|log(modelled / measured)| of every point under ``calibration``."""
    arrays = _Arrays(points)
    return _abs_log_ratio(arrays.total_us(prior_values(calibration, default_launch_us)), arrays.measured)


def _abs_log_ratio(modelled: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(np.log(np.maximum(modelled, 1e-9) / np.maximum(measured, 1e-9)))


def _coarse_search(z: np.ndarray, residuals, free: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Each factor a max() can hide, in turn over `COARSE_GRID` multiples of its value,
    every candidate of one factor priced in one batch."""
    best = float(np.sum(residuals(z[None, :]) ** 2))
    for _ in range(COARSE_SWEEPS):
        for k in np.flatnonzero(free & COARSE_FACTORS):
            candidates = np.repeat(z[None, :], len(COARSE_GRID), axis=0)
            candidates[:, k] = np.clip(z[k] + np.asarray(COARSE_GRID), low[k], high[k])
            costs = np.sum(residuals(candidates) ** 2, axis=1)
            pick = int(np.argmin(costs))
            if costs[pick] < best:
                best, z = float(costs[pick]), candidates[pick]
    return z


def _calibration(values: dict[str, float], prior: Calibration, source: str, points: list[Point],
                 modelled: np.ndarray, arrays: _Arrays) -> Calibration:
    logs = _abs_log_ratio(modelled, arrays.measured)
    decode, prefill = logs[~arrays.is_prefill], logs[arrays.is_prefill]
    residuals = Residuals(
        num_decode_points=int(decode.size), num_prefill_points=int(prefill.size),
        decode_median_abs=float(np.median(decode)) if decode.size else 0.0,
        decode_max_abs=float(decode.max()) if decode.size else 0.0,
        prefill_median_abs=float(np.median(prefill)) if prefill.size else 0.0,
        prefill_max_abs=float(prefill.max()) if prefill.size else 0.0)
    fitted = replace(prior, **values, source=source, prior=prior.source, points=tuple(p.label for p in points),
                     residuals=residuals)
    return fitted.clamped()
