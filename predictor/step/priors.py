"""Cross-model priors (METHOD §2): the calibration factors typical of a GPU, engine and
dtype class, learned from every anchor that has been fitted, in two tables.

- For a model with no anchor (`Priors.lookup`): the calibration that best reproduces
  the measured points of every anchor under one key together (one MAP fit over their
  points, at most `POINTS_PER_ANCHOR` of each so that no anchor outweighs the others).
  The median of the anchors' own factors is not that: one anchor's decode is
  bandwidth-bound and sets its bandwidth factor, another's compute, and the median of
  each factor over both priced every member slow (AIConfigurator, no anchor: TensorRT-LLM
  on Blackwell 15-23% slow for each of Llama-3.1-70B, DeepSeek-R1 and gpt-oss-120b from
  the others' median). Fitted records without points (tests) fall back to the median.
  The fit is robust to a stack unlike the others: each anchor's points are weighted by
  a Cauchy weight of that anchor's median log error under the pooled fit, relative to the
  best-fitted anchor's (`ROBUST_SCALE_LOG`, `ROBUST_ROUNDS` reweightings), so a key's
  prior describes what its anchors share. Without it a stack unlike the others sets the prior for every model:
  gpt-oss-120b on H100 under TensorRT-LLM decodes 42-51 ms at 160-368 requests whatever
  the batch (its own fit: 40 us per kernel), which no factors shared with the Qwen3 anchors
  reproduce, and with two Qwen3-235B anchors (own compute 3.6-4.1) it set the key's
  compute factor at 4.0 where the other seven anchors' own fits are 0.9-1.6 (robust: 0.8);
  that priced Llama-3.1-8B's prefill-laden decode steps 55% slow with no anchor.
- Each key's fit is then shrunk toward its parent's (`parent_key`: a GPU's engine toward
  the engine on every GPU, a dtype class toward its engine) as if the parent were
  `SHRINK_ANCHORS` more anchors (`_shrunk`): a key of two or four anchors describes those
  models, and a model with no anchor is a new one (B300 under vLLM, FP8: four anchors
  pooled a compute factor of 3.9 where the engine's on that GPU was 1.2; shrunk, 3.1).
  AIConfigurator no anchor TPOT 14.0 -> 13.5%, leave-model-out 14.9 -> 14.4%
  (docs/SCORES.md, choices).
- For an anchor's own fit to start from (`Priors.seed`): that median, the typical value
  of each efficiency on its own.

Lookup falls back from
the most specific key to the least: (GPU, engine, dtype class) -> (GPU, engine) ->
(engine, dtype class) -> (GPU) -> (engine) -> every anchor -> the physics defaults of
`predictor.step.operators`. A key needs at least `MIN_ANCHORS` anchors.

A third table holds the per-request host time (METHOD §3.12) by the *harness* an anchor
was measured through (its provenance source: the benchmark client and the engine's front
end) and engine: the median of the anchors' fitted ``host_ms`` and ``host_us_per_token``
(`Priors.host`). Host time is the front end's and
the client's, not the model's: AIConfigurator's silicon runs carry TTFT floors of
100-300 ms that InferenceX's runs of the same engines do not (gpt-oss-120b on B200 under
TensorRT-LLM: 35-45 ms measured by both, priced 210 ms by a prior pooled over both), so
a pooled fit's host time prices one harness with the other's. A prediction whose workload
names its harness (`WorkloadSpec.harness`: a corpus row's source) takes that harness's
host time for its engine when no anchor calibrates it; otherwise the pooled prior's when
its key names the engine, and the documented default (METHOD §3.12) when the lookup fell
back to a key pooled over engines ("*" or a GPU alone): leaving gpt-oss-120b out of
InferenceX, such a key priced its vLLM rows with a 29.6 ms host time fitted over
DeepSeek-R1's SGLang and TensorRT-LLM anchors (leave-model-out TTFT 49.0 -> 34.2%).
Measured with `score --protocol none` (priors of the other models only): mean TTFT
43.2 -> 34.9% on AIConfigurator, 37.8 -> 36.5% on InferenceX (docs/SCORES.md).

The shipped priors (`predictor/data/calibration_priors.json`, built by
`scripts/build_priors.py` from the embedded anchors) serve the product; `inferasim score`
learns its own from the anchors of each run (never from the rows it scores), and
leave-one-model-out excludes the scored model.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Callable, Iterable

import numpy as np

from predictor.anchors.anchor import Anchor
from predictor.cards.model_card import ModelCard
from predictor.hardware import has_gpu_profile, load_gpu
from predictor.step.anchored import calibrate, fit_inputs
from predictor.step.calibration import PHYSICS, Calibration
from predictor.step.fit import SIGMA_SERVED_PREFILL_POINT, Point, fit_points, log_errors

MIN_ANCHORS = 2
POINTS_PER_ANCHOR = 8
# The pooled fit's robust reweighting (module docstring): an anchor whose median log error
# under the pooled fit is e weighs 1 / (1 + (e / ROBUST_SCALE_LOG)^2), relative to the
# best-fitted anchor's weight. Scale measured with `score --protocol none,leave-model-out`
# (docs/SCORES.md, 0.05 / 0.1 / 0.2 of the unnormalised form; 0.05 moved the fewest medians
# the wrong way).
ROBUST_SCALE_LOG = 0.05
ROBUST_ROUNDS = 4
# `_shrunk`: a key's pooled prior counts its parent's as this many more anchors. Measured
# with `score --protocol none,leave-model-out` on both dev corpora at 0 / 1 / 2 / 4
# (docs/SCORES.md, choices): 1 moved every AIConfigurator median and p90 the right way and
# left InferenceX's no-anchor rows within 0.2 points; 2 and 4 gained more medians on
# AIConfigurator and lost p90 there and pairs on InferenceX.
SHRINK_ANCHORS = 1.0
SHRINK_FACTORS = ("bandwidth", "compute", "moe", "comm", "launch_us", "fixed_us")   # host time: `_hosts`
TEACHING_MAX_BANDWIDTH = 2.5     # `teaches_other_models`: HBM-bound terms at 40% of the datasheet rate
PRIOR_FACTORS = ("bandwidth", "compute", "moe", "comm", "launch_us", "fixed_us", "host_ms", "host_us_per_token")
ADDITIVE_FLOOR = {"launch_us": 0.05, "fixed_us": 1.0, "host_ms": 0.01}
LEVELS = ("gpu,engine,dtype", "gpu,engine", "engine,dtype", "gpu", "engine", "all")


def dtype_class(weight_dtype: str | None, expert_dtype: str | None) -> str:
    """The precision that dominates a step: routed experts' when the model has them."""
    return str(expert_dtype or weight_dtype or "bf16").lower()


def prior_keys(gpu: str, engine: str, dtype: str) -> tuple[str, ...]:
    """The lookup chain, most specific first (module docstring)."""
    gpu, engine, dtype = gpu.lower(), str(engine).lower(), dtype.lower()
    return (f"{gpu}/{engine}/{dtype}", f"{gpu}/{engine}", f"*/{engine}/{dtype}", f"{gpu}", f"*/{engine}", "*")


def host_key(harness: str, engine: str) -> str:
    """The host-time table's key of a harness and engine (module docstring)."""
    return f"{harness.lower()}/{str(engine).lower()}"


@dataclass(frozen=True, slots=True)
class Fitted:
    """One fitted anchor, as the priors see it."""

    gpu: str
    engine: str
    dtype: str
    model: str
    calibration: Calibration
    points: tuple[Point, ...] = ()          # what the anchor measured (a pooled prior fits them)
    prefill_sigma: float = SIGMA_SERVED_PREFILL_POINT
    source: str = ""                        # the harness it was measured through (provenance)


@dataclass(frozen=True)
class Priors:
    """Prior calibrations by key (module docstring)."""

    by_key: dict[str, Calibration] = field(default_factory=dict)     # prices a model with no anchor
    counts: dict[str, int] = field(default_factory=dict)
    seeds: dict[str, Calibration] = field(default_factory=dict)      # starts an anchor's own fit
    hosts: dict[str, tuple[float, float, int]] = field(default_factory=dict)   # harness keys: (ms, us/token, anchors)
    seed_counts: dict[str, int] = field(default_factory=dict)       # anchors behind each seed (`counts`: each prior)

    def lookup(self, gpu: str, engine: str, dtype: str, harness: str | None = None) -> Calibration:
        """The calibration that prices a model with no anchor (module docstring), with
        ``harness``'s host time when its anchors teach one."""
        key, found = _first(self.by_key, gpu, engine, dtype)
        host = self.host(harness, engine) if harness else None
        if host is None:
            return found if _names_engine(key) else _default_host(found)
        key, (host_ms, per_token, _) = host
        return replace(found, host_ms=host_ms, host_us_per_token=per_token, source=f"{found.source}+host:{key}")

    def host(self, harness: str, engine: str) -> tuple[str, tuple[float, float, int]] | None:
        """(key, (host ms, us per prompt token, anchors)) of ``harness`` and ``engine``,
        or None when fewer than `MIN_ANCHORS` of its anchors teach one."""
        key = host_key(harness, engine)
        found = self.hosts.get(key)
        return None if found is None else (key, found)

    def seed(self, gpu: str, engine: str, dtype: str) -> Calibration:
        """The prior an anchor's own fit starts from and is pulled toward: the median of
        the anchors' factors, each the typical value of its own efficiency (a pooled fit's
        trade-offs between factors held as a MAP prior pull every anchor's fit toward
        them: cross-width TPOT 3.3 -> 7.3% on InferenceX, 9.9 -> 12.8% on AIConfigurator)."""
        return _first(self.seeds or self.by_key, gpu, engine, dtype)[1]

    def to_json(self) -> dict:
        table = lambda by_key, counts: {k: {**{n: _round(getattr(c, n)) for n in PRIOR_FACTORS},  # noqa: E731
                                            "anchors": counts.get(k, 0)} for k, c in sorted(by_key.items())}
        hosts = {k: {"host_ms": _round(ms), "host_us_per_token": _round(per_token), "anchors": n}
                 for k, (ms, per_token, n) in sorted(self.hosts.items())}
        return {"levels": list(LEVELS), "min_anchors": MIN_ANCHORS, "priors": table(self.by_key, self.counts),
                "seeds": table(self.seeds, self.seed_counts or self.counts), "hosts": hosts}

    @classmethod
    def from_json(cls, data: dict) -> Priors:
        counts = {key: int(item.get("anchors", 0)) for key, item in data.get("priors", {}).items()}
        seed_counts = {key: int(item.get("anchors", 0)) for key, item in data.get("seeds", {}).items()}
        table = lambda items: {key: Calibration(**{n: item[n] for n in PRIOR_FACTORS}, source=f"prior:{key}")  # noqa: E731
                               for key, item in items.items()}
        hosts = {key: (float(item["host_ms"]), float(item["host_us_per_token"]), int(item.get("anchors", 0)))
                 for key, item in data.get("hosts", {}).items()}
        return cls(table(data.get("priors", {})), counts, table(data.get("seeds", {})), hosts, seed_counts)


def _first(by_key: dict[str, Calibration], gpu: str, engine: str, dtype: str) -> tuple[str | None, Calibration]:
    """(key, calibration) of the most specific key present; (None, the physics defaults)."""
    for key in prior_keys(gpu, engine, dtype):
        found = by_key.get(key)
        if found is not None:
            return key, found
    return None, PHYSICS


def _names_engine(key: str | None) -> bool:
    """Whether a prior key names an engine (`prior_keys`: every key with a "/"): host time
    is the engine's front end's and the client's (METHOD §3.12), so a key pooled over
    engines ("*" or a GPU alone) does not teach one."""
    return key is not None and "/" in key


def _default_host(found: Calibration) -> Calibration:
    """``found`` with the documented host time of a model with no anchor (METHOD §3.12)."""
    return replace(found, host_ms=PHYSICS.host_ms, host_us_per_token=PHYSICS.host_us_per_token)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def _log(name: str, value: float) -> float:
    return math.log(max(value, 0.0) + ADDITIVE_FLOOR.get(name, 0.0))


def _exp(name: str, value: float) -> float:
    return math.exp(value) - ADDITIVE_FLOOR.get(name, 0.0)


def _median_calibration(key: str, members: list[Calibration], default_launch_us: float) -> Calibration:
    values = {}
    for name in PRIOR_FACTORS:
        logs = [_log(name, default_launch_us if getattr(c, name) is None else getattr(c, name)) for c in members]
        values[name] = _exp(name, statistics.median(logs))
    return Calibration(**values, source=f"prior:{key}")


def learn(fitted: Iterable[Fitted], *, default_launch_us: dict[str, float], exclude_model: str | None = None,
          pooled: bool = True) -> Priors:
    """Priors from fitted anchors (``exclude_model``: leave that model out): the seeds
    (medians) always, the pooled fits when ``pooled``."""
    fitted = list(fitted)
    groups: dict[str, list[Fitted]] = defaultdict(list)
    launch: dict[str, float] = {}
    for item in fitted:
        if exclude_model is not None and item.model.lower() == exclude_model.lower():
            continue
        for key in prior_keys(item.gpu, item.engine, item.dtype):
            groups[key].append(item)
            launch.setdefault(key, default_launch_us.get(item.gpu.lower(), 5.0))
    by_key, counts, seeds, seed_counts = {}, {}, {}, {}
    for key, members in groups.items():
        if len(members) >= MIN_ANCHORS:
            seeds[key] = _median_calibration(key, [m.calibration for m in members], launch[key])
            seed_counts[key] = len(members)
        teaching = [m for m in members if teaches_other_models(m.calibration)] if pooled else members
        if len(teaching) >= MIN_ANCHORS:
            by_key[key] = _pooled_calibration(key, teaching, launch[key]) if pooled else seeds[key]
            counts[key] = len(teaching)
    if pooled:
        by_key = _shrunk(by_key, counts)
    return Priors(by_key, counts, seeds, _hosts(fitted, exclude_model), seed_counts)


def parent_key(key: str) -> str | None:
    """The key a prior is shrunk toward (`_shrunk`): a GPU's engine toward the engine on
    every GPU, a dtype class toward its engine (on that GPU or every GPU), a GPU or an
    engine toward every anchor."""
    parts = key.split("/")
    if key == "*":
        return None
    if len(parts) == 1 or (len(parts) == 2 and parts[0] == "*"):
        return "*"
    if len(parts) == 2:
        return f"*/{parts[1]}"
    return f"{parts[0]}/{parts[1]}"


def _shrunk(by_key: dict[str, Calibration], counts: dict[str, int]) -> dict[str, Calibration]:
    """Each key's efficiencies pulled toward its parent's in log space by the weight
    ``n / (n + SHRINK_ANCHORS)`` of its ``n`` anchors (empirical Bayes: a model with no
    anchor is a new draw from the key's models, and a key of few anchors says little
    about the next one), parents first so that shrinkage compounds down the tree. A
    parent's anchors include its children's, so every key but "*" has its parent here;
    a pooled prior sets every factor (its per-kernel cost too)."""
    out: dict[str, Calibration] = {}
    for key in sorted(by_key, key=_depth):
        found, parent = by_key[key], out.get(parent_key(key) or "")
        if parent is None:
            out[key] = found
            continue
        weight = counts[key] / (counts[key] + SHRINK_ANCHORS)
        out[key] = replace(found, **{name: _exp(name, weight * _log(name, getattr(found, name))
                                                 + (1 - weight) * _log(name, getattr(parent, name)))
                                     for name in SHRINK_FACTORS})
    return out


def _depth(key: str) -> int:
    """Hops from ``key`` to the root of `parent_key`'s tree: parents sort first."""
    up = parent_key(key)
    return 0 if up is None else 1 + _depth(up)


def teaches_other_models(calibration: Calibration) -> bool:
    """Whether an anchor's own fit describes its GPU and engine, so that it may price
    models with no anchor (module docstring). Not when the fit left the physical range to
    reproduce its rows: a bandwidth-bound part slower than `TEACHING_MAX_BANDWIDTH` times
    its prior (under 40% of HBM's datasheet rate, where decode kernels reach 60-90%; the
    95th percentile of the 258 embedded anchors' own fits is 1.5). Such an anchor still
    prices its own stack; as a prior it priced every model like it: three AIConfigurator
    anchors of Qwen3-32B fp8 on H100 under SGLang, each one decode point of a split run
    (TPOT 112-560 ms, queued KV), fitted bandwidth 3.2-14.6 and, with a fourth at its host
    bound, pooled H100/SGLang/fp8 into 4.0: Llama-3.1-8B fp8 on one H100 under SGLang
    decoded 2.8x slower than at bf16 (19.4 against 6.8 ms). An anchor at its host-time
    bound (`host-time-at-bound`) still teaches: leaving those out too moved InferenceX's no
    anchor TPOT 10.0 -> 12.0%, pairs 93.0 -> 92.3% (docs/SCORES.md, choices)."""
    return calibration.bandwidth <= TEACHING_MAX_BANDWIDTH


def _hosts(fitted: Iterable[Fitted], exclude_model: str | None) -> dict[str, tuple[float, float, int]]:
    """The host-time table by harness (module docstring): medians of the fitted host
    time per (harness, engine), over keys with `MIN_ANCHORS` anchors."""
    groups: dict[str, list[Calibration]] = defaultdict(list)
    for item in fitted:
        if item.source and (exclude_model is None or item.model.lower() != exclude_model.lower()):
            groups[host_key(item.source, item.engine)].append(item.calibration)
    return {key: (statistics.median(c.host_ms for c in members),
                  statistics.median(c.host_us_per_token for c in members), len(members))
            for key, members in groups.items() if len(members) >= MIN_ANCHORS}


def _pooled_calibration(key: str, members: list[Fitted], default_launch_us: float) -> Calibration:
    """One robust fit over the members' points (module docstring); the median without points.

    Its collective factor stays within the range the middle half of the members' own fits
    span (their interquartile range): collectives are priced from measured timings of the
    GPU's links, and a pooled ``comm`` outside what most members measured is the fit
    trading it against a factor held at its bound, or following the one member whose
    points are sensitive to it. B200 SGLang FP4 with DeepSeek-R1 left out pooled seven
    anchors into comm 2.99 with bandwidth at its 0.8 floor, where the members' own fits
    span 0.7-1.7, and priced DeepSeek-R1's InferenceX TP4 and TP8 decode 26% slow; held
    within the range, InferenceX no anchor TPOT 12.2 -> 10.5%. H200 TensorRT-LLM FP8
    pooled six DeepSeek anchors into comm 4.3, where five of them fit 0.5-0.8 and one
    attention-DP anchor 4.65, and priced Llama-3.1-70B's TP8 all-reduces 4.3x; held within
    the middle half, no anchor TPOT 10.5 -> 9.4% (InferenceX), 14.5 -> 14.4%
    (AIConfigurator) and pair accuracy up on both (docs/SCORES.md)."""
    if not all(m.points for m in members):
        return _median_calibration(key, [m.calibration for m in members], default_launch_us)
    spread = [_spread(m.points, POINTS_PER_ANCHOR) for m in members]
    points = [p for chosen in spread for p in chosen]
    owner = np.repeat(np.arange(len(members)), [len(chosen) for chosen in spread])
    sigma = max(m.prefill_sigma for m in members)
    fitted = fit_points(points, PHYSICS, default_launch_us, source=f"prior:{key}", prefill_sigma=sigma)
    for _ in range(ROBUST_ROUNDS):
        errors = log_errors(points, fitted, default_launch_us)
        typical = np.array([np.median(errors[owner == i]) for i in range(len(members))])
        weight = 1.0 / (1.0 + (typical / ROBUST_SCALE_LOG) ** 2)
        scale = np.sqrt(weight.max() / weight)[owner]     # the best-fitted anchor keeps its own noise
        fitted = fit_points(points, PHYSICS, default_launch_us, source=f"prior:{key}", prefill_sigma=sigma,
                            point_scale=scale)
    values = {n: getattr(fitted, n) for n in PRIOR_FACTORS}
    low, high = np.quantile([m.calibration.comm for m in members], [0.25, 0.75])
    values["comm"] = min(max(values["comm"], float(low)), float(high))
    return Calibration(**values, source=f"prior:{key}")


def _spread(points: tuple[Point, ...], limit: int) -> tuple[Point, ...]:
    """At most ``limit`` of ``points``, evenly spaced, every prefill point kept first."""
    prefill = [p for p in points if p.kind == "prefill"][:limit]
    decode = [p for p in points if p.kind != "prefill"]
    room = max(0, limit - len(prefill))
    if len(decode) > room:
        decode = [decode[round(i * (len(decode) - 1) / max(1, room - 1))] for i in range(room)] if room else []
    return (*prefill, *decode)


@lru_cache(maxsize=1)
def shipped_priors() -> Priors:
    """The priors learned from the embedded anchors (package data)."""
    path = resources.files("predictor") / "data" / "calibration_priors.json"
    try:
        return Priors.from_json(json.loads(path.read_text("utf-8")))
    except FileNotFoundError:
        return Priors()


def fitted_anchor(anchor: Anchor, card: ModelCard, prior: Calibration = PHYSICS) -> Fitted:
    """One anchor fitted around ``prior``, as the priors see it."""
    sig = anchor.signature
    points, prefill_sigma = fit_inputs(anchor, card, sig.engine)
    return Fitted(sig.accelerator, sig.engine, dtype_class(sig.weight_dtype, sig.expert_dtype), card.name,
                  calibrate(anchor, card, sig.engine, prior), tuple(points), prefill_sigma, anchor.provenance.source)


EM_ROUNDS = 1   # refits of every anchor around the priors of the round before


def learn_from_anchors(anchors: Iterable[Anchor], cards: Callable[[str], ModelCard], *,
                       exclude_model: str | None = None, rounds: int = EM_ROUNDS) -> Priors:
    """Priors from a set of anchors: the seeds (each anchor fitted around the physics
    defaults, the medians learned, every anchor refitted around its own group's seed and
    the medians learned again, `rounds` times), then one fit per key over the anchors'
    points for models with no anchor (module docstring). What one anchor cannot tell
    apart (a per-kernel cost from a weight read that does not change with batch) the
    anchors of other models on the same GPU and engine can, since they share the
    efficiencies but not the weights."""
    # A CPU harvest (llama.cpp) has no registry profile (it is measured on its own
    # machine) and teaches nothing about a GPU's efficiencies: it calibrates only itself.
    anchors = [a for a in anchors if has_gpu_profile(a.signature.accelerator)]
    launch = {a.signature.accelerator.lower(): load_gpu(a.signature.accelerator).kernel_launch_us for a in anchors}
    fitted = [fitted_anchor(a, cards(a.signature.model)) for a in anchors]
    priors = learn(fitted, default_launch_us=launch, exclude_model=exclude_model, pooled=rounds == 0)
    for round_ in range(rounds):
        fitted = [fitted_anchor(a, cards(a.signature.model), _own_prior(priors, a)) for a in anchors]
        priors = learn(fitted, default_launch_us=launch, exclude_model=exclude_model, pooled=round_ == rounds - 1)
    return priors


def _own_prior(priors: Priors, anchor: Anchor) -> Calibration:
    sig = anchor.signature
    return priors.seed(sig.accelerator, sig.engine, dtype_class(sig.weight_dtype, sig.expert_dtype))
