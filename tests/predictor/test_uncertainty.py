"""Error bars per transfer kind and fit tier (predictor/uncertainty.py)."""

import math

import pytest

from predictor.uncertainty import MIN_TIER_ROWS, TIGHT_FIT_RESIDUAL, ErrorBars, KindError, fit_tier


def _calibration(residual, source="anchor:a", points=6):
    return {"source": source, "residuals": {"num_decode_points": points, "decode_median_abs": residual}}


def test_the_fit_tier_follows_the_worst_fitted_anchor():
    assert fit_tier(_calibration(TIGHT_FIT_RESIDUAL / 2)) == "tight"
    assert fit_tier(_calibration(TIGHT_FIT_RESIDUAL * 2)) == "loose"
    split = {"pools": [_calibration(0.01), _calibration(0.08, source="anchor:b")]}
    assert fit_tier(split) == "loose"
    # a prior or physics calibration, or an anchor without decode points, has no tier
    assert fit_tier(_calibration(0.01, source="prior:b200/vllm")) is None
    assert fit_tier(_calibration(0.01, points=0)) is None
    assert fit_tier(None) is None


def _bars(tight_rows):
    base = {"width": {"tpot": KindError(-0.2, 0.2, 10.0, 500)}}
    tiers = {"tight": {"width": {"tpot": KindError(-0.05, 0.05, 3.0, tight_rows)}},
             "loose": {"width": {"tpot": KindError(-0.4, 0.3, 18.0, 300)}}}
    return ErrorBars(base, "test", tiers)


def test_a_tier_with_enough_rows_sets_the_band():
    bars = _bars(MIN_TIER_ROWS)
    tight = bars.intervals({"tpot_ms_mean": 10.0}, ("width",), "tight")["tpot_ms_mean"]
    loose = bars.intervals({"tpot_ms_mean": 10.0}, ("width",), "loose")["tpot_ms_mean"]
    untiered = bars.intervals({"tpot_ms_mean": 10.0}, ("width",))["tpot_ms_mean"]
    assert tight == pytest.approx((10 * math.exp(-0.05), 10 * math.exp(0.05)))
    assert loose == pytest.approx((10 * math.exp(-0.4), 10 * math.exp(0.3)))
    assert untiered == pytest.approx((10 * math.exp(-0.2), 10 * math.exp(0.2)))
    # interactivity is 1 / TPOT: its band is the inverse
    inter = bars.intervals({"interactivity_mean": 100.0}, ("width",), "loose")["interactivity_mean"]
    assert inter == pytest.approx((100 * math.exp(-0.3), 100 * math.exp(0.4)))


def test_a_thin_tier_falls_back_to_the_kind():
    bars = _bars(MIN_TIER_ROWS - 1)
    assert bars.intervals({"tpot_ms_mean": 10.0}, ("width",), "tight")["tpot_ms_mean"] == pytest.approx(
        (10 * math.exp(-0.2), 10 * math.exp(0.2)))


def test_tiers_survive_the_json_round_trip():
    bars = _bars(MIN_TIER_ROWS)
    again = ErrorBars.from_json(bars.to_json())
    assert again.error("width", "tpot", "tight").q90 == pytest.approx(0.05)
    assert again.error("width", "tpot", "loose").q10 == pytest.approx(-0.4)
    assert again.error("width", "tpot").rows == 500
