"""Speculative decoding: committed tokens per verify step and drafter cost (METHOD §3.8).

A verify step at depth ``k`` commits ``L(k) = 1 + sum_{i<=k} prod_{j<=i} a_j`` tokens and
processes ``b * (k + 1)`` tokens for a batch of ``b``. ``L(k)`` comes, in order, from:
1. an explicit override curve (the user's or a trace's: acceptance on real agentic
   traffic can be far below benchmark curves, so the curve is an input, never hidden);
2. the model's measured curve for the method (``predictor/data/acceptance.json``, built by
   ``scripts/build_acceptance.py`` from SPEED-Bench coding runs);
3. the sibling head's curve (MTP for EAGLE-3 and vice versa);
4. the per-depth median over every model's default curve.
N-gram (prompt lookup) has no measured curve and must not borrow a neural drafter's: without
an override it takes `NGRAM_DEFAULT_LENGTHS`, a documented conservative chain (per-position
acceptance 0.3, halving at each later position: L(1) = 1.30, L(3) = 1.35), and the
prediction is flagged `acceptance: n-gram default` (pass `--acceptance`).

Acceptance is an input (`parse_acceptance`): a list of ``L(1), L(2), ...``; ``k:AL`` pairs
that force the committed tokens at given depths (benchmarks fix AL; depths in between and
beyond follow a constant per-position acceptance through the forced points); ``al=X``, a
forced acceptance length at whatever depth the configuration drafts (a benchmark that
fixes AL): ``L(k) = min(X, k + 1)``, since a verify step cannot commit more than its
``k + 1`` tokens (the curve's source says so when the cap binds); or a file (JSON
``{"lengths": [...]}``, ``{"k": AL}`` or ``{"al": X}``, or CSV rows ``k,AL``).

Beyond the last measured depth a geometric acceptance chain is fitted to the measured
increments ``L(i) - L(i-1) = A * r^i`` (least squares in log space over the positive
increments, ``r`` clamped to ``[0, 0.95]``) and summed on.

Entropy classes scale the first-position acceptance ``a_1``, hence every increment:
``L = 1 + s * (L_measured - 1)``; low (code, math) ``s = 1`` (the measured curves are the
coding category), mixed (science, QA) 0.88, high (writing, roleplay) 0.75. The factors
are a judgement from the per-task spread of published EAGLE-3 acceptance lengths
(summarisation and open chat about 0.75-0.9 of code), not a measurement here.

Drafter cost (:class:`DrafterPlan`): MTP runs the model's MTP layer count (1 when the card
records none) of target layers per draft token plus the LM head; EAGLE-3 runs one dense
layer per draft token over a pruned 32k vocabulary plus its 3-hidden-state fusion once;
DSpark runs three MoE layers once over all draft positions plus a light serial head (the LM
head) per draft token; n-gram drafting is free on the GPU.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Protocol

from levers.errors import InputError, accepted_list
from levers.inputs import is_number, read_text
from predictor.cards.model_card import ModelCard


class SpecMethod(StrEnum):
    NONE = "none"
    MTP = "mtp"
    EAGLE3 = "eagle3"
    DSPARK = "dspark"
    NGRAM = "ngram"


class Entropy(StrEnum):
    LOW = "low"      # code, math: the measured (coding) curves
    MIXED = "mixed"  # science, QA
    HIGH = "high"    # writing, roleplay


NGRAM_DEFAULT_LENGTHS = (1.30, 1.345, 1.348)   # per-position 0.3, 0.15, 0.075 (module docstring)
NGRAM_DEFAULT_SOURCE = "n-gram conservative default (no measured curve; pass --acceptance)"
ENTROPY_SCALE = {Entropy.LOW: 1.0, Entropy.MIXED: 0.88, Entropy.HIGH: 0.75}
SIBLING = {SpecMethod.MTP: SpecMethod.EAGLE3, SpecMethod.EAGLE3: SpecMethod.MTP}
DEFAULT_THINKING = "on"                      # every measured model has a thinking-on curve
MAX_CHAIN_RATIO = 0.95
EAGLE3_DRAFT_VOCAB = 32_000                  # EAGLE-3's default pruned draft vocabulary
DSPARK_LAYERS = 3                            # MoE layers (dense on a dense model)


class HasLength(Protocol):
    def length(self, depth: int) -> float: ...


@dataclass(frozen=True, slots=True)
class AcceptanceCurve:
    """``L(k)``: measured points for k = 1..K, a fitted geometric chain beyond."""

    lengths: tuple[float, ...]
    source: str
    chain_scale: float = 0.0   # A in increment(i) = A * r^i beyond the last point
    chain_ratio: float = 0.0   # r

    @classmethod
    def fitted(cls, lengths: Sequence[float], source: str, scale: float = 1.0) -> AcceptanceCurve:
        """A curve from measured ``L(1..K)``, scaled by an entropy factor ``scale``."""
        if not lengths:
            raise ValueError("an acceptance curve needs at least L(1)")
        scaled = tuple(1.0 + scale * (float(value) - 1.0) for value in lengths)
        chain_scale, chain_ratio = _fit_chain(scaled)
        return cls(scaled, source, chain_scale, chain_ratio)

    def length(self, depth: int) -> float:
        """Committed tokens per verify step at draft depth ``depth`` (``L(0) = 1``)."""
        if depth <= 0 or not self.lengths:
            return 1.0
        last = len(self.lengths)
        if depth <= last:
            return self.lengths[depth - 1]
        extra = sum(self.chain_scale * self.chain_ratio ** i for i in range(last + 1, depth + 1))
        return self.lengths[-1] + extra


def _fit_chain(lengths: tuple[float, ...]) -> tuple[float, float]:
    """``(A, r)`` of ``increment(i) = A * r^i`` over the positive measured increments."""
    previous = (1.0,) + lengths[:-1]
    points = [(i + 1, math.log(now - before)) for i, (now, before) in enumerate(zip(lengths, previous))
              if now - before > 1e-6]
    if not points:
        return 0.0, 0.0
    if len(points) == 1:
        depth, log_increment = points[0]
        ratio = min(MAX_CHAIN_RATIO, math.exp(log_increment / depth))
        return math.exp(log_increment) / ratio ** depth, ratio
    xs, ys = zip(*points)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)
    ratio = min(MAX_CHAIN_RATIO, math.exp(slope))
    return math.exp(mean_y - math.log(ratio) * mean_x) if ratio > 0 else 0.0, ratio


# -- measured curves --------------------------------------------------------------------------
@lru_cache(maxsize=1)
def measured_curves() -> tuple[dict, ...]:
    text = (resources.files("predictor") / "data" / "acceptance.json").read_text("utf-8")
    return tuple(json.loads(text)["curves"])


def _pick(model: str, method: SpecMethod, thinking: str) -> dict | None:
    matches = [c for c in measured_curves() if c["model"].lower() == model.lower() and c["method"] == method.value]
    for chosen in ([c for c in matches if c["thinking"] == thinking and c["primary"]],
                   [c for c in matches if c["primary"]], matches):
        if chosen:
            return chosen[0]
    return None


def _median_lengths(thinking: str) -> tuple[float, ...]:
    curves = [c for c in measured_curves() if c["primary"] and c["thinking"] == thinking] or list(measured_curves())
    depth = min(len(c["acceptance_length"]) for c in curves)
    return tuple(statistics.median(c["acceptance_length"][i] for c in curves) for i in range(depth))


def parse_method(name: str) -> SpecMethod:
    try:
        return SpecMethod(str(name).strip().lower())
    except ValueError:
        raise InputError("spec_method", f"unknown method '{name}'", accepted_list(SpecMethod)) from None


def parse_entropy(name: str) -> Entropy:
    try:
        return Entropy(str(name).strip().lower())
    except ValueError:
        raise InputError("entropy", f"unknown entropy class '{name}'", accepted_list(Entropy)) from None


def acceptance_curve(model: str, method: str, entropy: str = Entropy.LOW, thinking: str = DEFAULT_THINKING,
                     override: Sequence[float] | None = None) -> AcceptanceCurve:
    """``L(k)`` for ``model`` (a card name) and ``method`` by the order in the module doc
    (cached: every step model of a search asks for its curve)."""
    if override is not None and not isinstance(override, tuple):
        override = tuple(override)
    # the forced length rides in the key: a forced curve equals the plain tuple of its values
    return _acceptance_curve(model, str(method), str(entropy), str(thinking), override,
                             getattr(override, "forced_al", None))


@lru_cache(maxsize=1024)
def _acceptance_curve(model: str, method: str, entropy: str, thinking: str,
                      override: tuple[float, ...] | None, _forced_al: float | None) -> AcceptanceCurve:
    spec, scale = parse_method(method), ENTROPY_SCALE[parse_entropy(entropy)]
    if override is not None:
        values = [float(v) for v in override]
        if not values or any(v < 1.0 or not math.isfinite(v) for v in values):
            raise InputError("acceptance curve", f"{values} is not a list of L(k) >= 1",
                             "committed tokens per verify step for depths 1..n, e.g. 1.8,2.4,2.9")
        forced = getattr(override, "forced_al", None)
        if forced is not None:   # forced means forced: no entropy scaling
            return AcceptanceCurve.fitted(values, f"forced AL {forced:g} (at most k + 1 per verify step)")
        return AcceptanceCurve.fitted(values, "override", scale)
    if spec is SpecMethod.NONE:
        return AcceptanceCurve((), "no speculation")
    if spec is SpecMethod.NGRAM:
        return AcceptanceCurve.fitted(NGRAM_DEFAULT_LENGTHS, NGRAM_DEFAULT_SOURCE, scale)
    for candidate, how in ((spec, "measured"), (SIBLING.get(spec), "sibling")):
        found = _pick(model, candidate, thinking) if candidate else None
        if found:
            source = f"{how}: {found['model']} {found['method']} thinking {found['thinking']} ({found['file']})"
            return AcceptanceCurve.fitted(found["acceptance_length"], source, scale)
    return AcceptanceCurve.fitted(_median_lengths(thinking), "per-depth median across models", scale)


ACCEPTANCE_ACCEPTED = ("L(1),L(2),... committed tokens per verify step (e.g. 1.8,2.4,2.9), k:AL pairs "
                       "(e.g. 3:2.4), al=X (a forced acceptance length at the configured depth, e.g. al=3.2), "
                       "or a JSON/CSV file of them")
FORCED_PREFIX = "al="
MAX_FORCED_DEPTH = 16


class ForcedAcceptance(tuple):
    """``L(1..16)`` of a forced acceptance length ``al``: ``min(al, k + 1)`` (module docstring)."""

    forced_al: float

    def __new__(cls, al: float) -> ForcedAcceptance:
        curve = super().__new__(cls, tuple(min(al, depth + 1.0) for depth in range(1, MAX_FORCED_DEPTH + 1)))
        curve.forced_al = al
        return curve

    def __reduce__(self) -> tuple:
        return ForcedAcceptance, (self.forced_al,)


def forced_acceptance(text: str) -> ForcedAcceptance:
    """``al=X`` -> the forced curve; errors name the input."""
    raw = text.strip()
    try:
        value = float(raw[len(FORCED_PREFIX):])
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 1.0 <= value <= MAX_FORCED_DEPTH + 1:
        raise InputError("--acceptance", f"'{raw[:80]}' is not a forced acceptance length",
                         f"al=X with 1 <= X <= {MAX_FORCED_DEPTH + 1} committed tokens per verify step")
    return ForcedAcceptance(value)


def _constant_chain(depth: int, length: float) -> float:
    """The per-position acceptance ``a`` with ``1 + a + ... + a^depth = length``."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if sum(mid ** i for i in range(depth + 1)) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def lengths_from_pairs(pairs: dict[int, float]) -> tuple[float, ...]:
    """``L(1..max k)`` through forced ``{k: AL}`` points (module docstring)."""
    deepest = max(pairs)
    out, previous_depth, previous_length = [], 0, 1.0
    for depth in range(1, deepest + 1):
        following = min(k for k in pairs if k >= depth)
        span, target = following - previous_depth, pairs[following]
        rate = _constant_chain(span, 1.0 + (target - previous_length) if span else 0.0) if span else 0.0
        steps = depth - previous_depth
        out.append(previous_length + sum(rate ** i for i in range(1, steps + 1)))
        if depth == following:
            out[-1] = target
            previous_depth, previous_length = depth, target
    return tuple(out)


ACCEPTANCE_FILE_MAX_BYTES = 1 << 20    # an acceptance curve is a few lines; a bigger file is a mistake


def read_acceptance_file(path: str | Path, what: str = "--acceptance file") -> str:
    """An acceptance file's text (`parse_acceptance`'s ``read_file``), bounded in size."""
    return read_text(path, what, max_bytes=ACCEPTANCE_FILE_MAX_BYTES, expected=ACCEPTANCE_ACCEPTED)


def parse_acceptance(text: str, read_file: Callable[[str], str] | None = None,
                     what: str = "--acceptance") -> tuple[float, ...]:
    """``L(1..k)`` from an `--acceptance` value (module docstring); errors name the input
    (``what``). A verify step after ``k`` drafted tokens commits at most ``k + 1``, so an
    ``L(k)`` above that is refused, as is a depth given twice."""
    raw = text.strip()
    if raw.lower().startswith(FORCED_PREFIX):
        return forced_acceptance(raw.lower())
    if read_file is not None and raw and not any(c in raw for c in ":,=") and not _is_number(raw):
        return _from_file(raw, read_file(raw))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    pairs: dict[int, float] | None = None
    try:
        if parts and all(":" in p for p in parts):
            items = [(int(k), float(v)) for k, v in (p.split(":", 1) for p in parts)]
            pairs = dict(items)
            if any(k < 1 or k > 16 for k in pairs) or len(pairs) != len(items):
                raise ValueError
        else:
            lengths = tuple(float(p) for p in parts)
    except ValueError:
        pairs_given = bool(parts) and all(":" in p for p in parts)
        raise InputError(what, f"cannot read '{raw[:80]}'" + (" (each depth once, from 1 to 16)" if pairs_given else ""),
                         ACCEPTANCE_ACCEPTED) from None
    if pairs is None and len(lengths) > MAX_FORCED_DEPTH:
        raise InputError(what, f"'{raw[:80]}' lists {len(lengths)} depths, more than {MAX_FORCED_DEPTH}",
                         ACCEPTANCE_ACCEPTED)
    if pairs is not None:
        if any(not math.isfinite(v) or v < 1.0 for v in pairs.values()):
            raise InputError(what, f"'{raw[:80]}' is not a list of L(k) >= 1", ACCEPTANCE_ACCEPTED)
        _check_committed(pairs, raw, what)
        lengths = lengths_from_pairs(pairs)     # feasible points: the interpolation steps at most one too
    if not lengths or any(not math.isfinite(v) or v < 1.0 for v in lengths) or list(lengths) != sorted(lengths):
        raise InputError(what, f"'{raw[:80]}' is not a non-decreasing list of L(k) >= 1", ACCEPTANCE_ACCEPTED)
    if pairs is None:
        _check_committed(dict(enumerate(lengths, start=1)), raw, what)
    return lengths


def _check_committed(lengths: dict[int, float], raw: str, what: str) -> None:
    """A verify step commits the accepted drafts and one token of its own, so each drafted
    token adds at most one: ``L(k) - L(j) <= k - j`` (``L(0) = 1``) between any two depths."""
    previous_depth, previous = 0, 1.0
    for depth, length in sorted(lengths.items()):
        bound = previous + depth - previous_depth
        if length > bound + 1e-9:
            since = f"with L({previous_depth}) = {previous:g}" if previous_depth else "from none drafted"
            raise InputError(what, f"'{raw[:80]}' gives L({depth}) = {length:g}, above the {bound:g} it can reach "
                                   f"{since}: more than one token per drafted token", ACCEPTANCE_ACCEPTED)
        previous_depth, previous = depth, length


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _from_file(path: str, content: str) -> tuple[float, ...]:
    what = f"--acceptance file '{path[:120]}'"
    body = content.strip()
    if body.startswith(("{", "[")):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as error:
            raise InputError(what, f"not JSON (line {error.lineno})", ACCEPTANCE_ACCEPTED) from None
        lengths = data.get("lengths") if isinstance(data, dict) and "lengths" in data else data
        if isinstance(data, dict) and set(data) == {"al"} and is_number(data["al"]):
            return forced_acceptance(f"{FORCED_PREFIX}{data['al']}")
        if isinstance(lengths, dict) and "lengths" not in lengths and all(is_number(v) for v in lengths.values()):
            return parse_acceptance(",".join(f"{k}:{v}" for k, v in lengths.items()), what=what)
        if isinstance(lengths, list) and lengths and all(is_number(v) for v in lengths):
            return parse_acceptance(",".join(str(v) for v in lengths), what=what)
        raise InputError(what, "holds no acceptance curve", ACCEPTANCE_ACCEPTED)
    rows = [line.split(",") for line in body.splitlines() if line.strip() and not line.lower().startswith("k")]
    if not rows or any(len(r) < 2 for r in rows):
        raise InputError(what, "is not CSV rows k,AL" if rows else "is empty", ACCEPTANCE_ACCEPTED)
    return parse_acceptance(",".join(f"{r[0].strip()}:{r[1].strip()}" for r in rows), what=what)


def curve_from_positions(acceptance: Sequence[float], source: str = "override") -> AcceptanceCurve:
    """A curve from per-position acceptance ``a_1..a_k`` (Eq. 2: ``L(k) = 1 + sum prod a_j``)."""
    lengths, product, total = [], 1.0, 1.0
    for rate in acceptance:
        product *= float(rate)
        total += product
        lengths.append(total)
    return AcceptanceCurve.fitted(lengths, source)


def best_depth(step_us_fn: Callable[[int], float], method: HasLength, max_depth: int) -> int:
    """The depth in ``0..max_depth`` with the most committed tokens per unit of step time
    (METHOD §3.8); ``step_us_fn(k)`` is the verify step (plus drafting) at depth ``k``,
    ``step_us_fn(0)`` the step without speculation. Ties keep the shallower depth."""
    best, best_rate = 0, 1.0 / step_us_fn(0)
    for depth in range(1, max(0, max_depth) + 1):
        rate = method.length(depth) / step_us_fn(depth)
        if rate > best_rate * (1 + 1e-12):
            best, best_rate = depth, rate
    return best


# -- drafter cost -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DrafterPlan:
    """What drafting ``k`` tokens runs, for the step model to price (METHOD §3.8)."""

    method: SpecMethod
    target_layers_per_draft: int = 0   # MTP: target layers (same kind) per draft token
    dense_layers_per_draft: int = 0    # EAGLE-3: one dense layer per draft token
    target_layers_once: int = 0        # DSpark: target (MoE) layers once over all k draft positions
    lm_head_vocab: int = 0             # LM head (and sampling) per draft token; 0 = none
    fusion_params_once: int = 0        # EAGLE-3 fc over three hidden states; MTP eh_proj (charged once)

    @property
    def is_free(self) -> bool:
        return not (self.target_layers_per_draft or self.dense_layers_per_draft or self.target_layers_once
                    or self.lm_head_vocab)


def drafter_plan(card: ModelCard, method: str) -> DrafterPlan:
    """The drafter of ``method`` for ``card``."""
    spec, hidden = parse_method(method), card.hidden_size
    if spec is SpecMethod.MTP:
        return DrafterPlan(spec, target_layers_per_draft=max(1, card.mtp_layers), lm_head_vocab=card.vocab_size,
                           fusion_params_once=2 * hidden * hidden)
    if spec is SpecMethod.EAGLE3:
        return DrafterPlan(spec, dense_layers_per_draft=1, lm_head_vocab=min(EAGLE3_DRAFT_VOCAB, card.vocab_size),
                           fusion_params_once=3 * hidden * hidden)
    if spec is SpecMethod.DSPARK:
        return DrafterPlan(spec, target_layers_once=DSPARK_LAYERS, lm_head_vocab=card.vocab_size)
    return DrafterPlan(spec)
