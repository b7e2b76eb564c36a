"""Honest error bars (METHOD §2, §8): every predicted metric carries an 80% interval from
the measured error of its transfer kind, and the mode label follows that error.

A prediction's transfer kinds (`predictor.anchors.coverage`: in-ladder, width, length,
load (up), load-down, split, precision, cross-model, none, harness) say how far it is
from what was measured.
`inferasim score --protocol` measures each kind on the embedded corpora (the protocol of
the same name: anchors on one width, length, load or layout, predictions on the others;
`scripts/build_error_bars.py` writes `predictor/data/error_bars.json`). For each kind and
metric family (TPOT, TTFT, throughput) the table holds the 10th and 90th percentiles of
``log(measured / predicted)`` and the median absolute percentage error.

- **Interval**: ``[predicted * exp(q10), predicted * exp(q90)]`` with the lowest ``q10``
  and the highest ``q90`` of the kinds that apply: every band a prediction's transfers
  measured, enveloped (the inverse for interactivity, which is 1/TPOT); memory metrics are
  exact arithmetic and carry none. The widest band alone can sit on the wrong side: a
  split whose pools also change width took the width band of loose AIConfigurator
  anchors (measured / predicted 0.77-1.19: those rows lean priced slow) while such splits
  are priced fast (measured TPOT 1.2-1.26x the predicted), so 9 of the 17 loose split
  rows fell outside it. Measured in-sample on the dev corpora's protocols:
  AIConfigurator split coverage TPOT / throughput 71 / 72 -> 82 / 82% (TTFT 80%); every
  other protocol of both corpora within a point of before.
- **Fit tier**: an anchor that its own calibration reproduces closely (median decode
  residual at most `TIGHT_FIT_RESIDUAL`) transfers with smaller errors than one it fits
  loosely, so each kind's band is also measured per tier (`fit_tier`) and a prediction
  takes its tier's band when the tier holds `MIN_TIER_ROWS` residuals of that kind.
  Measured on the dev corpora's transfer protocols (one band per kind, then per tier):
  InferenceX's 80% bands held 90-96% of TPOT rows, AIConfigurator's 71-75%; per tier
  85-93% and 72-78%.
- **Anchor source**: what an anchor was built from sets how far it transfers: from
  InferenceX's replicated ladders the transfer errors were half those from
  AIConfigurator's single silicon runs at the same fit tier, and no property of the
  configuration separated the two. So a band is also measured per source of the anchor
  (``Provenance.source``) and per source and tier (`band_keys`, most specific first); a
  prediction takes the most specific band that holds `MIN_TIER_ROWS` residuals of its
  kind. An anchor from elsewhere (a harvest) takes its tier's or the kind's band.
  Measured (in-sample, transfer protocols' TPOT and throughput): InferenceX 85-94% ->
  77-87%, AIConfigurator 71-78% -> 78-80%. A prediction no anchor calibrates (simulate
  mode, cross-model priors) has no anchor source; it takes the band of the harness its
  workload names (a corpus row's source: the same keys), since the harness sets the
  floors no prior knows (a harness's per-request host time, its launch recipes). The
  product's own questions name no harness and take the kind's band, pooled over both.
- **Mode**: `anchored` when an anchor of the model calibrates the prediction and the
  widest applicable kind measured at most `DECISION_GRADE_APE` median error on TPOT and on
  throughput; otherwise `rank-only` (simulate mode and cross-model priors always are).
- **Primary kind** (`transfer`): the applicable kind with the largest measured TPOT error.
- **Harness**: a public benchmark's anchor answering a question about the user's own
  deployment prices TTFT with the engine's front-end host time, not the host time its
  benchmark's client added: the ``harness`` kind, whose TTFT band is measured across
  harnesses (`predictor.corpus.cross_harness`: AIConfigurator's anchors, InferenceX's
  rows of the same stacks). It moves TTFT alone, so it widens TTFT's interval and has no
  say in the mode.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from statistics import NormalDist

from predictor.anchors.coverage import CROSS_MODEL, HARNESS, IN_LADDER, NONE, TRANSFER_KINDS
from predictor.step.cost import Mode

DECISION_GRADE_APE = 10.0     # % median APE on TPOT and throughput (the product's accuracy target)
TIGHT_FIT_RESIDUAL = 0.025    # median |log| decode residual of an anchor's own fit (module docstring)
MIN_TIER_ROWS = 40            # residuals a tier's band needs before it replaces the kind's
TIERS = ("tight", "loose")
TTFT_ONLY_KINDS = (HARNESS,)  # kinds that move TTFT alone: they widen its interval, never judge the mode
FAMILIES = ("tpot", "ttft", "throughput")
# Which family's error a metric key carries, and whether it is the inverse of it.
_FAMILY_OF = (("interactivity", "tpot", True), ("generation_rate", "tpot", True), ("tpot", "tpot", False),
              ("itl", "tpot", False), ("e2e", "tpot", False), ("ttft", "ttft", False),
              ("throughput", "throughput", False), ("step_ms", "tpot", False))
# Metrics no band measures: exact arithmetic, or the model's own ratios (a step's
# pollution, mean step over decode step, is at least 1 by construction: TPOT's band put
# its interval at 0.86-1.22 around a split pool's exact 1.0).
UNBANDED = frozenset({"max_concurrency", "gpus_per_replica", "tpot_pollution"})
# Used only while no table is shipped: a severity order, most uncertain first.
_SEVERITY = (NONE, CROSS_MODEL, "split", "precision", "length", "load-down", "load", "width", HARNESS, IN_LADDER)


@dataclass(frozen=True, slots=True)
class KindError:
    """The measured error of one transfer kind on one metric family."""

    q10: float            # log(measured / predicted)
    q90: float
    median_ape: float     # %
    rows: int


def fit_tier(calibration: dict | None) -> str | None:
    """The fit tier of a prediction's calibration JSON (`Prediction.calibration`: one
    calibration, or ``{"pools": [...]}``): `tight` when every anchor-fitted calibration's
    median decode residual is at most `TIGHT_FIT_RESIDUAL`, else `loose`; None without a
    fitted anchor."""
    if not calibration:
        return None
    worst = None
    for item in calibration.get("pools", [calibration]):
        residuals = (item or {}).get("residuals") or {}
        if str((item or {}).get("source", "")).startswith("anchor:") and residuals.get("num_decode_points"):
            worst = max(worst or 0.0, float(residuals.get("decode_median_abs", 0.0)))
    if worst is None:
        return None
    return "tight" if worst <= TIGHT_FIT_RESIDUAL else "loose"


def anchor_source(calibration: dict | None) -> str | None:
    """The one source (`Provenance.source`) of every anchor behind a prediction's
    calibration JSON (its ``anchor_source`` fields), or None when there is none or they
    differ."""
    if not calibration:
        return None
    found = {str(item.get("anchor_source")) for item in calibration.get("pools", [calibration])
             if item and item.get("anchor_source")}
    return found.pop() if len(found) == 1 else None


def band_keys(calibration: dict | None, harness: str | None = None) -> tuple[str, ...]:
    """The bands a prediction may take, most specific first: its anchors' source and fit
    tier, the source, the tier (module docstring). A prediction no anchor calibrates
    (priors only) takes the band of the ``harness`` its workload names (a corpus row's
    source), measured on that harness's rows; the product's own questions name none."""
    tier, source = fit_tier(calibration), anchor_source(calibration)
    if source is None and tier is None and harness:
        return (str(harness),)
    keys = (f"{source}/{tier}" if source and tier else None, source, tier)
    return tuple(k for k in keys if k)


def _keys(tier: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if not tier:
        return ()
    return (tier,) if isinstance(tier, str) else tuple(tier)


def _valid_band(key: str) -> bool:
    """A band key is a fit tier, a source, or ``source/tier``."""
    source, slash, tier = key.rpartition("/")
    return bool(key) and (not slash or (bool(source) and tier in TIERS))


@dataclass(frozen=True)
class ErrorBars:
    by_kind: dict[str, dict[str, KindError]]
    source: str = ""
    by_tier: dict[str, dict[str, dict[str, KindError]]] = field(default_factory=dict)   # band -> kind -> family
    _bounds: dict = field(default_factory=dict, compare=False, repr=False)   # (key, kinds, tier) -> log bounds

    def error(self, kind: str, family: str, tier: str | tuple[str, ...] | None = None) -> KindError | None:
        """The measured error of ``kind`` on ``family``: that of the first band of
        ``tier`` (one band key or `band_keys`) that measured enough rows (module
        docstring), else the kind's."""
        for key in _keys(tier):
            found = self.by_tier.get(key, {}).get(kind, {}).get(family)
            if found is not None and found.rows >= MIN_TIER_ROWS:
                return found
        return self.by_kind.get(kind, {}).get(family)

    def primary(self, kinds: tuple[str, ...]) -> str:
        """The applicable kind with the largest measured TPOT error."""
        measured = [k for k in kinds if self.error(k, "tpot") is not None]
        if measured:
            return max(measured, key=lambda k: self.error(k, "tpot").median_ape)
        return min(kinds, key=_SEVERITY.index) if kinds else NONE

    def mode(self, kinds: tuple[str, ...], has_anchor: bool) -> Mode:
        if not has_anchor or CROSS_MODEL in kinds or NONE in kinds:
            return Mode.RANK_ONLY
        for kind in kinds:
            if kind in TTFT_ONLY_KINDS:
                continue
            for family in ("tpot", "throughput"):
                found = self.error(kind, family)
                if found is None or found.median_ape > DECISION_GRADE_APE:
                    return Mode.RANK_ONLY
        return Mode.ANCHORED

    def intervals(self, metrics: dict[str, float], kinds: tuple[str, ...],
                  tier: str | tuple[str, ...] | None = None) -> dict[str, tuple[float, float]]:
        """80% interval per metric key (module docstring); ``tier``: a band key or
        `band_keys`."""
        out: dict[str, tuple[float, float]] = {}
        for key, value in metrics.items():
            if value is None or not math.isfinite(value):
                continue
            bounds = self._bounds.get((key, kinds, tier), False)
            if bounds is False:
                bounds = self._bounds[(key, kinds, tier)] = self._log_bounds(key, kinds, tier)
            if bounds is not None:
                out[key] = (value * bounds[0], value * bounds[1])
        return out

    def _log_bounds(self, key: str, kinds: tuple[str, ...],
                    tier: str | tuple[str, ...] | None) -> tuple[float, float] | None:
        """The interval's multipliers for ``key`` (computed once per key, kinds and tier: a
        search asks for thousands of intervals over a handful of kinds)."""
        family = _family(key)
        if family is None:
            return None
        name, inverse = family
        errors = [e for k in kinds if (e := self.error(k, name, tier)) is not None]
        if not errors:
            return None
        q10, q90 = min(e.q10 for e in errors), max(e.q90 for e in errors)
        low, high = (-q90, -q10) if inverse else (q10, q90)
        return math.exp(low), math.exp(high)

    def to_json(self) -> dict:
        return {"source": self.source, "kinds": _kinds_json(self.by_kind),
                "tiers": {tier: _kinds_json(kinds) for tier, kinds in self.by_tier.items()}}

    @classmethod
    def from_json(cls, data: dict) -> ErrorBars:
        return cls(_kinds(data.get("kinds", {})), data.get("source", ""),
                   {band: _kinds(kinds) for band, kinds in data.get("tiers", {}).items() if _valid_band(band)})


def _kinds_json(by_kind: dict[str, dict[str, KindError]]) -> dict:
    return {k: {f: {"q10": round(e.q10, 5), "q90": round(e.q90, 5), "median_ape": round(e.median_ape, 3),
                    "rows": e.rows} for f, e in fam.items()} for k, fam in by_kind.items()}


def _kinds(data: dict) -> dict[str, dict[str, KindError]]:
    return {k: {f: KindError(e["q10"], e["q90"], e["median_ape"], e["rows"]) for f, e in fam.items()}
            for k, fam in data.items() if k in TRANSFER_KINDS}


def _family(key: str) -> tuple[str, bool] | None:
    if "memory" in key or key.endswith("_gb") or key in UNBANDED:
        return None
    for fragment, family, inverse in _FAMILY_OF:
        if fragment in key:
            return family, inverse
    return None


Z80_OVER_Z90 = NormalDist().inv_cdf(0.90) / NormalDist().inv_cdf(0.95)   # an 80% half-width from a 90% one


def with_sampling_noise(intervals: dict[str, tuple[float, float]], metrics: dict[str, float],
                        seed_intervals: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """80% intervals of a DES prediction widened by the simulator's own sampling noise: the
    bands were measured on fixed-length rows priced without it, and a replayed mean carries
    both. In log space each side's offset from the value and the replications' (their 90%
    interval of the mean, scaled to 80% as a normal's: at three replications their
    Student-t interval makes that ~20% wider than the mean's own noise, on the safe side)
    add in quadrature; a side the band puts beyond the value (a measured bias) moves out by
    the noise, and replications that reach zero leave no lower bound. Without it an agentic
    prediction's 80% interval could be narrower than its own replications' spread
    (DeepSeek-R1 TP8/EP8 on B200, 8 clients: 9.11-11.1 tok/s/GPU against [7.14-12.5])."""
    out = dict(intervals)
    for key, (low, high) in intervals.items():
        value, seed = metrics.get(key), seed_intervals.get(key)
        if not value or value <= 0 or seed is None or seed[1] <= 0 or low <= 0:
            continue
        above = max(0.0, math.log(seed[1] / value)) * Z80_OVER_Z90
        b = math.log(high / value)
        b = math.hypot(b, above) if b > 0 else b + above
        if seed[0] <= 0:        # the replications reach zero (a sparse tail): nothing bounds it below
            out[key] = (0.0, value * math.exp(b))
            continue
        below = max(0.0, math.log(value / seed[0])) * Z80_OVER_Z90
        a = math.log(low / value)
        a = -math.hypot(a, below) if a < 0 else a - below
        out[key] = (value * math.exp(a), value * math.exp(b))
    return out


def ordered(intervals: dict[str, tuple[float, float]],
            metrics: dict[str, float] | None = None) -> dict[str, tuple[float, float]]:
    """Each E2E interval held at or above its TTFT's (the same statistic) plus the decode
    time between them: every request's end-to-end time is its first token's plus its
    decode, while the two bands, measured apart, need not say so (an overloaded agentic
    replay read TTFT 566-1,531 s and E2E 973-1,158 s). The decode part is the predicted
    gap ``E2E - TTFT`` of that statistic (``metrics``; exact for the mean) at the low end
    of E2E's own band, so a TTFT at its high end does not leave a request no time to
    decode (Kimi-K3's agentic replay on MI355X read E2E up to 452,615 ms, TTFT's own
    upper bound, with 128 s of decoding predicted). Without ``metrics``, the gap is 0."""
    metrics = metrics or {}
    out = dict(intervals)
    for key, (low, high) in intervals.items():
        if key.startswith("e2e_ms_"):
            statistic = key.removeprefix("e2e_ms_")
            first = intervals.get("ttft_ms_" + statistic)
            if first is None:
                continue
            value, ttft = metrics.get(key), metrics.get("ttft_ms_" + statistic)
            gap = 0.0
            if value and ttft is not None and value > ttft:
                gap = (value - ttft) * min(1.0, low / value)
            out[key] = (max(low, first[0] + gap), max(high, first[1] + gap))
    return out


@lru_cache(maxsize=1)
def shipped_error_bars() -> ErrorBars:
    """The error bars measured on the embedded corpora (package data)."""
    path = resources.files("predictor") / "data" / "error_bars.json"
    try:
        return ErrorBars.from_json(json.loads(path.read_text("utf-8")))
    except FileNotFoundError:
        return ErrorBars({})
