"""Anchored mode (METHOD §2-§4): an anchor calibrates the step model, and the calibrated
model prices the target through the same physics.

`calibrate` fits the factors of `predictor.step.calibration` to every point the anchor
holds (`predictor.step.fit`), at the anchor's own layout and kernel choices
(`anchor_config`): each decode-sweep point at its batch and context (a second prompt
length adds its points), each prefill-sweep point as a concurrency-1 TTFT (prefill in the
anchor's chunks plus host time). The result is a frozen record with its provenance:
the anchor id, the prior it started from, the points used and their residuals.

`anchored_model` then builds the target's step model (`SimulateStepModel`) with those
factors: another TP, EP, attention DP, PP, context, batch, precision or pool is priced by
the physics of that layout, never by extrapolating the anchor's curve. Eq. 1 (only the
excess above the fixed cost shrinks with TP), the staircase and Eq. 4 are what the
physics does; EP imbalance is evaluated at both widths (the anchor's is inside the fit,
the target's in its own breakdown). On the anchor's own layout and kernel set, its
measured decode steps correct the calibrated physics between them and fade outside them
(`predictor.step.residual`; flagged `measured-steps`).

Off the anchor's own widths, its fitted host time above its engine's front-end constant
(`predictor.corpus.host.host_for`) is carried in proportion to the decode step
(`carried_host`): one width's TTFTs cannot tell host time from engine work, and what the
front end does not explain runs on the GPUs and shrinks with them.

An anchor built from a public benchmark's runs (`BENCHMARK_HARNESSES`) fits the host
time of that benchmark's client and front end: AIConfigurator's silicon runs carry TTFT
floors of 100-950 ms that no serving front end adds (Llama-3.1-8B on H100 under
TensorRT-LLM: 286 ms fitted, so a 100-token prompt at one client was priced 309 ms). A
question about the user's own deployment (a workload with no harness) is priced with its
engine's front-end host time (`predictor.corpus.host.host_for`) instead
(``engine_host``); a corpus row names its harness and keeps its anchor's, so `score` is
unchanged.

Fits are cached per (anchor, prior): a search asks for the same anchor thousands of times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.analytical import chunks, host_time_ms, single_ttft_ms
from predictor.anchors.anchor import DECODE_CARRIED, HOST_PER_ENGINE, PREFILL_CARRIED, Anchor
from predictor.anchors.coverage import same_widths
from predictor.cards.model_card import ModelCard
from predictor.corpus.host import host_for
from predictor.hardware import Cluster, GpuProfile, load_gpu
from predictor.sim.scheduler import rank_chunk_tokens
from predictor.step.calibration import PHYSICS, Calibration
from predictor.step.cost import Mode
from predictor.step.fit import SIGMA_PREFILL_POINT, SIGMA_SERVED_PREFILL_POINT, Point, fit_points
from predictor.step.residual import MEASURED_STEPS, DecodeResidual, PrefillResidual
from predictor.step.simulate import CarriedHost, SimulateStepModel
from predictor.units import US_PER_MS

# An anchor flagged `HOST_PER_ENGINE` holds its engine's measured host time as a prior of
# this log width (its fit moves it ~30% at most unless its points insist, where the
# default width, 1.5, let a TP1 anchor's prefill error pass for 2x the host time), and its
# prefill points weigh like a harvest's sweep (`SIGMA_PREFILL_POINT`): the host time no
# longer absorbs their misfit, the prefill's compute does. Measured on InferenceX dev (1
# refine round, against the free host time): cross-width TTFT 26.3 -> 18.5%, TP4 -> TP8
# 11.5 -> 10.2%, load 23.6 -> 23.0%, in-ladder 14.7 -> 14.4%; cross-width TPOT 3.3 -> 3.9%.
ENGINE_HOST_SIGMA = 0.3

# The decode step (batch, context) an anchor's host time beyond its engine's front end
# scales with off its own widths (`carried_host`). In AIConfigurator's TensorRT-LLM
# ladders the lowest-load TTFT is a near-constant multiple of the TPOT across TP1-TP8
# (H100 Qwen3-32B fp8 4k/128: 40 / 38 / 41 / 39; B200 Llama-3.1-70B fp8 8k/1k: 35 / 35 /
# 35 / 34), far more than the modelled prefill. Scaled with the batch-1 step: AIConfigurator
# cross-width TTFT 20.8 -> 20.0% (absurd 53 -> 43), split 37.6 -> 34.6%, InferenceX
# cross-width 19.6 -> 19.7%, TP4 -> TP8 10.4 -> 10.6%; with the 1k prefill instead (it
# shards almost as 1 / TP): 20.5%; with a 32-request step at 2k context: 20.4%
# (docs/SCORES.md, choices measured).
HOST_STEP = (1, 1024)

# The public benchmarks whose anchors fit their own harness's host time (module docstring).
BENCHMARK_HARNESSES = frozenset({"inferencex", "aiconfigurator"})

NO_SPECULATION = "none"
AUTO = "auto"


def anchor_config(anchor: Anchor, base: Configuration | None = None) -> Configuration:
    """The configuration the anchor measured: its widths and kernel choices, every
    scheduler lever at its default (or ``base``'s, for what the signature does not say)."""
    sig = anchor.signature
    config = base if base is not None else Configuration()
    backend = lambda value: None if value in (AUTO, None) else value  # noqa: E731
    return replace(
        config, tp=sig.tp, ep=sig.ep, attention_dp=sig.attention_dp, pp=sig.pp, dcp=sig.dcp, replicas=1,
        disaggregated=False, prefill_layout=None, decode_layout=None, prefill_replicas=1, decode_replicas=1,
        kv_transfer_backend=None, weight_dtype=sig.weight_dtype, activation_dtype=sig.activation_dtype,
        expert_dtype=sig.expert_dtype, kv_cache_dtype=sig.kv_cache_dtype,
        attention_backend=backend(sig.attention_backend), moe_backend=backend(sig.moe_backend),
        all_to_all_backend=sig.all_to_all_backend, graph_capture=sig.graph_capture,
        spec_method=sig.spec_method, spec_depth=sig.spec_depth if sig.spec_method != NO_SPECULATION else 0,
        eplb_replicas=0, fusions=tuple(sig.fusions) if sig.fusions is not None else config.fusions)


def anchor_cluster(anchor: Anchor, gpu: GpuProfile) -> Cluster:
    """The smallest cluster of whole nodes of ``gpu`` (the anchor's accelerator: anchors
    of another GPU type are never used) that holds the anchor's GPUs."""
    gpus = anchor.signature.tp * anchor.signature.pp
    per_node = min(gpus, gpu.gpus_per_node)
    return Cluster(gpu=gpu, gpus_per_node=per_node, num_nodes=max(1, math.ceil(gpus / per_node)))


def decode_measurements(anchor: Anchor, reproduced: bool = False) -> list[tuple[int, int, float]]:
    """(batch, context, step ms) of every decode step the anchor measured (none when its
    decode sweep was carried from another layout). ``reproduced``: a corpus point's
    reproduced step where the rule set one (`DecodePoint`), what the anchor's own layout
    prices (`decode_residual`); the calibration is fitted to the measured ones, which
    carry better to other widths (fitted to the reproduced steps, AIConfigurator's
    cross-width p90 TPOT went 29.0 -> 30.3%, over its line, and TTFT 19.8 -> 20.0-20.1%;
    refitted at every pass undamped, TPOT 10.2 -> 11.0%), while the reproduced ones hold
    the anchor's own rows (`predictor.corpus.refine.settle_own_steps`)."""
    if DECODE_CARRIED in anchor.flags:
        return []
    if anchor.decode_points:
        return [(p.batch, p.context_tokens, p.reproduced_ms if reproduced and p.reproduced_ms is not None else p.step_ms)
                for p in anchor.decode_points]
    sweep = anchor.decode_sweep
    found = [(b, sweep.prompt_tokens, s) for b, s in zip(sweep.batch_sizes, sweep.itl_ms)]
    if sweep.second_itl_ms and sweep.second_prompt_tokens:
        found += [(b, sweep.second_prompt_tokens, s) for b, s in zip(sweep.batch_sizes, sweep.second_itl_ms)]
    return found


def sweep_chunk(model: SimulateStepModel) -> int:
    """The chunk a concurrency-1 prefill of ``model``'s layout runs in."""
    return rank_chunk_tokens(Engine(model.engine), model.config)


def prefill_measurements(anchor: Anchor) -> list[tuple[int, float]]:
    """(prompt tokens, TTFT ms) of every prefill the anchor measured (none when its prefill
    sweep was carried from another layout)."""
    if PREFILL_CARRIED in anchor.flags:
        return []
    return list(zip(anchor.prefill_sweep.prompt_tokens, anchor.prefill_sweep.ttft_ms))


def anchor_points(anchor: Anchor, model: SimulateStepModel) -> list[Point]:
    """Every point the anchor measured, as raw parts of `model` (its own layout)."""
    points = [Point(f"decode b={batch} ctx={context}", "decode", tuple(model.decode_raw(batch, float(context))),
                    step_ms * US_PER_MS) for batch, context, step_ms in decode_measurements(anchor)]
    chunk = sweep_chunk(model)
    for tokens, ttft_ms in prefill_measurements(anchor):
        parts = tuple(part for size, prior in chunks(tokens, chunk) for part in model.prefill_raw(size, 1, prior))
        points.append(Point(f"prefill n={tokens}", "prefill", parts, ttft_ms * US_PER_MS, prompt_tokens=tokens))
    return points


def _host_prior(prior: Calibration, anchor: Anchor) -> Calibration:
    """The anchor's own host time (harvested or fitted from its rows) seeds the fit."""
    if anchor.host_time_ms <= 0 and anchor.host_us_per_prompt_token <= 0:
        return prior
    return replace(prior, host_ms=max(anchor.host_time_ms, 0.01),
                   host_us_per_token=anchor.host_us_per_prompt_token or prior.host_us_per_token).clamped()


_FITS: dict[tuple, Calibration] = {}
FIT_CACHE_LIMIT = 8192


def calibrate(anchor: Anchor, card: ModelCard, engine: str, prior: Calibration,
              gpu: GpuProfile | None = None) -> Calibration:
    """The factors that make the step model reproduce ``anchor`` (module docstring);
    ``gpu``: the accelerator's profile (default: the registry's). Cached per
    (anchor, card, engine, prior, GPU)."""
    profile = gpu if gpu is not None else load_gpu(anchor.signature.accelerator)
    key = (anchor, card, str(engine), prior, profile.name)
    found = _FITS.get(key)
    if found is None:
        if len(_FITS) > FIT_CACHE_LIMIT:
            _FITS.clear()
        found = _FITS[key] = _fit(anchor, card, engine, prior, profile)
    return found


_POINTS: dict[tuple, list[Point]] = {}


def _points(anchor: Anchor, card: ModelCard, engine: str, profile: GpuProfile) -> list[Point]:
    """The anchor's points as raw parts of its own layout (cached: they do not depend on
    the prior a fit starts from)."""
    key = (anchor, card, str(engine), profile.name)
    found = _POINTS.get(key)
    if found is None:
        if len(_POINTS) > FIT_CACHE_LIMIT:
            _POINTS.clear()
        found = _POINTS[key] = anchor_points(anchor, own_model(anchor, card, engine, profile))
    return found


def own_model(anchor: Anchor, card: ModelCard, engine: str, profile: GpuProfile,
              calibration: Calibration = PHYSICS) -> SimulateStepModel:
    """The step model of the anchor's own layout and kernel set, under ``calibration``."""
    return SimulateStepModel(card, anchor_cluster(anchor, profile), Engine(engine), anchor_config(anchor),
                             calibration=calibration, captured_sizes=anchor.signature.captured_sizes or None)


def fit_inputs(anchor: Anchor, card: ModelCard, engine: str,
               gpu: GpuProfile | None = None) -> tuple[list[Point], float]:
    """The points a fit of ``anchor`` reads and their prefill points' log noise (a corpus
    anchor's TTFTs come from served runs, a harvest's from a concurrency-1 sweep)."""
    profile = gpu if gpu is not None else load_gpu(anchor.signature.accelerator)
    served = bool(anchor.provenance.source_rows)
    return _points(anchor, card, engine, profile), SIGMA_SERVED_PREFILL_POINT if served else SIGMA_PREFILL_POINT


def _fit(anchor: Anchor, card: ModelCard, engine: str, prior: Calibration, profile: GpuProfile) -> Calibration:
    points, prefill_sigma = fit_inputs(anchor, card, engine, profile)
    # An engine's host time measured apart from the prefill is not a residual to share
    # with it (`ENGINE_HOST_SIGMA`, `predictor.corpus.host`).
    engine_host = HOST_PER_ENGINE in anchor.flags
    return fit_points(points, _host_prior(prior, anchor), profile.kernel_launch_us, source=f"anchor:{anchor.id}",
                      prefill_sigma=SIGMA_PREFILL_POINT if engine_host else prefill_sigma,
                      prior_sigma={"host_ms": ENGINE_HOST_SIGMA} if engine_host else None)


def anchored_model(anchor: Anchor, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                   prior: Calibration, *, mode: Mode = Mode.ANCHORED, flags: tuple[str, ...] = (),
                   acceptance: tuple[float, ...] | None = None, measured_steps: bool = True,
                   engine_host: bool = False) -> SimulateStepModel:
    """The target's step model under the anchor's calibration (``acceptance``: the
    traffic's L(k), METHOD §3.8; ``measured_steps``: on the anchor's own layout, its
    measured decode steps and (a harvest's) prefills correct the calibrated physics
    between them, `predictor.step.residual`; ``engine_host``: a benchmark anchor's host
    time is replaced by its engine's front end's, module docstring)."""
    calibration = calibrate(anchor, card, str(engine), prior, cluster.gpu)
    carried = None
    if engine_host and takes_engine_host(anchor):
        flags = (*flags, f"host time: the {engine} front end's, not the {anchor.provenance.source} harness's "
                         f"{calibration.host_ms:.0f} ms")
        calibration = with_engine_host(calibration, str(engine))
    elif not _same_widths(anchor, config):
        carried = carried_host(anchor, card, str(engine), prior, cluster.gpu)
    residual = prefill = None
    same_kernels = own_kernels(anchor, config)
    if measured_steps and same_kernels and _same_widths(anchor, config):
        residual = decode_residual(anchor, card, str(engine), prior, cluster.gpu)
        prefill = prefill_residual(anchor, card, str(engine), prior, cluster.gpu)
    if residual is not None or prefill is not None:
        flags = (*flags, MEASURED_STEPS)
    return SimulateStepModel(card, cluster, engine, config, acceptance, calibration=calibration, mode=mode,
                             anchor_id=anchor.id, flags=flags, captured_sizes=anchor.signature.captured_sizes or None,
                             first_wave_stall_ms=anchor.first_wave_stall_ms if same_kernels else 0.0,
                             first_wave_stall_per_client_ms=anchor.first_wave_stall_per_client_ms if same_kernels else 0.0,
                             decode_residual=residual, prefill_residual=prefill, carried_host=carried)


def takes_engine_host(anchor: Anchor) -> bool:
    """Whether a question about the user's own deployment replaces the anchor's fitted
    host time with its engine's front end's: a public benchmark's anchor (module docstring)."""
    return anchor.provenance.source in BENCHMARK_HARNESSES


def with_engine_host(calibration: Calibration, engine: str) -> Calibration:
    """``calibration`` with its engine's front-end host time (`predictor.corpus.host.
    host_for`): what a question about the user's own deployment pays per request (module
    docstring). Its per-token part is the engine's measured one even where it is below
    the 5 us a fit may reach (vLLM: 2.15 us): held to 5 us, InferenceX's vLLM TTFTs
    priced from AIConfigurator's anchors went +17 -> +29% (scripts/cross_harness_ttft.py)."""
    front = host_for(engine)
    return replace(calibration, host_ms=front.base_ms, host_us_per_token=front.per_token_us)


def own_layout(anchor: Anchor, config: Configuration) -> bool:
    """Whether ``config`` runs the anchor's own layout and kernel set (its widths,
    precisions, kernels, capture and speculation): where its measured steps apply
    (`predictor.step.residual`)."""
    return _same_widths(anchor, config) and own_kernels(anchor, config)


def _same_widths(anchor: Anchor, config: Configuration) -> bool:
    """Whether ``config`` is a colocated replica of the anchor's widths."""
    return not config.disaggregated and same_widths(anchor.signature, config)


def own_kernels(anchor: Anchor, config: Configuration) -> bool:
    """Whether ``config`` runs the anchor's kernel set (`KERNEL_SET_FIELDS`), at any widths.

    An anchor's one-off first-wave stall (`Anchor.first_wave_stall_ms`: the start-up wait
    of a run's first requests, read from its TTFT skew) goes with its kernel set: what a
    run compiles, tunes and warms on its first requests is its kernels, so the stall
    carries to the same kernels at other widths, lengths and loads, not to another kernel
    set. Measured on InferenceX: DeepSeek-R1 FP4 under SGLang on B200 stalls at 32+ clients
    at TP4 and TP8 alike (mean TTFT ~7 s over a ~0.4 s median; dropping the stall off an
    anchor's own layout took cross-width's absurd TTFTs 19 -> 50), while its FP8 runs on
    MI355X, priced from the FP4 anchor of their layout, took its ~4 s stall (TTFT 476 ms at
    4 clients, measured 198; precision protocol TTFT 140.9 -> 16.4% without it)."""
    ran = anchor_config(anchor, config)
    return all(getattr(ran, name) == getattr(config, name) for name in KERNEL_SET_FIELDS)


# What besides the widths must match for an anchor's measured steps to apply.
KERNEL_SET_FIELDS = ("weight_dtype", "activation_dtype", "expert_dtype", "kv_cache_dtype", "attention_backend",
                     "moe_backend", "all_to_all_backend", "graph_capture", "spec_method", "spec_depth", "fusions")
_OWN_BUILT: dict[tuple, object] = {}
_Built = TypeVar("_Built")


def _on_own_model(kind: str, anchor: Anchor, card: ModelCard, engine: str, prior: Calibration, gpu: GpuProfile | None,
                  build: Callable[[SimulateStepModel], _Built]) -> _Built:
    """``build`` on the anchor's own calibrated model, cached like its fit (per ``kind``)."""
    profile = gpu if gpu is not None else load_gpu(anchor.signature.accelerator)
    key = (kind, anchor, card, str(engine), prior, profile.name)
    if key not in _OWN_BUILT:
        if len(_OWN_BUILT) > FIT_CACHE_LIMIT:
            _OWN_BUILT.clear()
        _OWN_BUILT[key] = build(own_model(anchor, card, engine, profile, calibrate(anchor, card, engine, prior, profile)))
    return _OWN_BUILT[key]


def carried_host(anchor: Anchor, card: ModelCard, engine: str, prior: Calibration,
                 gpu: GpuProfile | None = None) -> CarriedHost | None:
    """How the anchor's fitted host time is carried off its own widths (module docstring):
    its engine's front-end constant stays, the rest scales with the decode step at
    :data:`HOST_STEP` (None when the fit holds no more than the front end); cached like
    its fit."""
    front_ms = host_for(engine).base_ms

    def build(model: SimulateStepModel) -> CarriedHost | None:
        if model.calibration.host_ms <= front_ms:
            return None
        return CarriedHost(front_ms, model.decode(*HOST_STEP).total_us, HOST_STEP)
    return _on_own_model("host", anchor, card, engine, prior, gpu, build)


def decode_residual(anchor: Anchor, card: ModelCard, engine: str, prior: Calibration,
                    gpu: GpuProfile | None = None) -> DecodeResidual | None:
    """What the anchor's calibration misses at each decode step it measured
    (`predictor.step.residual`; a corpus point's reproduced step, `decode_measurements`),
    at its own layout; cached like its fit."""
    def build(model: SimulateStepModel) -> DecodeResidual | None:
        found = []
        for batch, context, step_ms in decode_measurements(anchor, reproduced=True):
            modelled_us = model.decode_us(batch, float(context))
            if modelled_us > 0:
                found.append((batch, float(context), math.log(step_ms * US_PER_MS / modelled_us)))
        return DecodeResidual.from_points(found)
    return _on_own_model("decode", anchor, card, engine, prior, gpu, build)


def prefill_residual(anchor: Anchor, card: ModelCard, engine: str, prior: Calibration,
                     gpu: GpuProfile | None = None) -> PrefillResidual | None:
    """What the anchor's calibration misses at each prompt length its prefill sweep
    measured (`predictor.step.residual`): the measured TTFT less the fitted host time, over
    the modelled prefill in the anchor's chunks, at its own layout; cached like its fit.
    Only a measured sweep (a harvest's concurrency-1 TTFTs) is carried: a corpus anchor's
    prefill points are read from served runs through the wave model (`predictor.corpus.
    refine`), queueing included, and carried as measurements they moved AIConfigurator's
    in-ladder TTFT 17.3 -> 18.1% and load 19.4 -> 20.5% (InferenceX in-ladder 14.8 ->
    13.9%, load 23.2 -> 23.3%)."""
    if anchor.provenance.source_rows:
        return None

    def build(model: SimulateStepModel) -> PrefillResidual | None:
        found = []
        for tokens, ttft_ms in prefill_measurements(anchor):
            host_ms = host_time_ms(model, tokens)
            modelled_ms = single_ttft_ms(model, tokens, sweep_chunk(model)) - host_ms
            if modelled_ms > 0 and ttft_ms > host_ms:
                found.append((tokens, math.log((ttft_ms - host_ms) / modelled_ms)))
        return PrefillResidual.from_points(found)
    return _on_own_model("prefill", anchor, card, engine, prior, gpu, build)
