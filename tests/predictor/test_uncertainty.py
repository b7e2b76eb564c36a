"""Error bars per transfer kind, fit tier and anchor source (predictor/uncertainty.py)."""

import math

import pytest

from predictor.uncertainty import (
    MIN_TIER_ROWS,
    TIGHT_FIT_RESIDUAL,
    ErrorBars,
    KindError,
    anchor_source,
    band_keys,
    fit_tier,
    shipped_error_bars,
    with_sampling_noise,
)


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


def test_an_interval_envelopes_every_kind_that_applies():
    """Each kind's band holds its own protocol's rows; a prediction several transfers
    apply to takes the lowest q10 and the highest q90 of them, not the widest band alone,
    which can sit on the other side (a width band skewed slow beside a split band skewed
    fast)."""
    base = {"width": {"tpot": KindError(-0.26, 0.17, 11.0, 900)},
            "split": {"tpot": KindError(-0.19, 0.22, 12.0, 65)}}
    bars = ErrorBars(base, "test")
    got = bars.intervals({"tpot_ms_mean": 10.0, "interactivity_mean": 100.0}, ("split", "width"))
    assert got["tpot_ms_mean"] == pytest.approx((10 * math.exp(-0.26), 10 * math.exp(0.22)))
    assert got["interactivity_mean"] == pytest.approx((100 * math.exp(-0.22), 100 * math.exp(0.26)))
    # one kind: its own band
    assert bars.intervals({"tpot_ms_mean": 10.0}, ("split",))["tpot_ms_mean"] == pytest.approx(
        (10 * math.exp(-0.19), 10 * math.exp(0.22)))


def test_tiers_survive_the_json_round_trip():
    bars = _bars(MIN_TIER_ROWS)
    again = ErrorBars.from_json(bars.to_json())
    assert again.error("width", "tpot", "tight").q90 == pytest.approx(0.05)
    assert again.error("width", "tpot", "loose").q10 == pytest.approx(-0.4)
    assert again.error("width", "tpot").rows == 500


def test_band_keys_run_from_source_and_tier_to_the_tier():
    aic = {**_calibration(TIGHT_FIT_RESIDUAL / 2), "anchor_source": "aiconfigurator"}
    assert band_keys(aic) == ("aiconfigurator/tight", "aiconfigurator", "tight")
    assert anchor_source(aic) == "aiconfigurator"
    # anchors of two sources behind one split: no source band, the worst tier only
    mixed = {"pools": [aic, {**_calibration(0.08, source="anchor:b"), "anchor_source": "inferencex"}]}
    assert band_keys(mixed) == ("loose",)
    # a harvest's anchor without a recorded source, and a prior, have only what they have
    assert band_keys(_calibration(0.08)) == ("loose",)
    assert band_keys({"source": "prior:b200/vllm", "residuals": {}}) == ()


def test_a_prediction_no_anchor_calibrates_takes_its_harness_band():
    prior = {"source": "prior:b200/vllm", "residuals": {}}
    assert band_keys(prior, "inferencex") == ("inferencex",)
    assert band_keys(None, "aiconfigurator") == ("aiconfigurator",)
    # an anchor's own source and tier come first: the harness is only a prior's band
    aic = {**_calibration(TIGHT_FIT_RESIDUAL / 2), "anchor_source": "aiconfigurator"}
    assert band_keys(aic, "inferencex") == ("aiconfigurator/tight", "aiconfigurator", "tight")
    assert band_keys(_calibration(0.08), "inferencex") == ("loose",)


def test_the_most_specific_band_with_enough_rows_wins():
    base = {"width": {"tpot": KindError(-0.2, 0.2, 10.0, 900)}}
    bands = {"inferencex/tight": {"width": {"tpot": KindError(-0.02, 0.02, 1.0, MIN_TIER_ROWS - 1)}},
             "inferencex": {"width": {"tpot": KindError(-0.04, 0.04, 2.0, MIN_TIER_ROWS)}},
             "tight": {"width": {"tpot": KindError(-0.1, 0.1, 5.0, 400)}}}
    bars = ErrorBars(base, "test", bands)
    keys = ("inferencex/tight", "inferencex", "tight")
    # the source-and-tier band is too thin, so the source's band sets the interval
    assert bars.intervals({"tpot_ms_mean": 10.0}, ("width",), keys)["tpot_ms_mean"] == pytest.approx(
        (10 * math.exp(-0.04), 10 * math.exp(0.04)))
    assert bars.error("width", "tpot", ("aiconfigurator/tight", "aiconfigurator", "tight")).q90 == pytest.approx(0.1)
    again = ErrorBars.from_json(bars.to_json())
    assert again.error("width", "tpot", keys).q90 == pytest.approx(0.04)
    # a malformed band key in a table is dropped, not trusted
    broken = bars.to_json()
    broken["tiers"]["inferencex/gold"] = broken["tiers"]["tight"]
    assert set(ErrorBars.from_json(broken).by_tier) == set(bands)


def test_the_shipped_no_anchor_bands_are_per_harness_and_pool_both_no_anchor_protocols():
    """scripts/build_error_bars.py: a corpus row priced with no anchor takes its harness's
    band, and the cross-model kind its predictions carry holds the no-anchor protocol's
    residuals beside leave-model-out's (both score every row of the corpus once)."""
    bars = shipped_error_bars()
    for harness in ("inferencex", "aiconfigurator"):
        none = bars.by_tier[harness]["none"]["tpot"]
        cross_model = bars.by_tier[harness]["cross-model"]["tpot"]
        assert none.rows >= MIN_TIER_ROWS and cross_model.rows == 2 * none.rows


def test_the_harness_kind_widens_ttft_alone_and_has_no_say_in_the_mode():
    """A benchmark's anchor answering the user's own question (the `harness` kind: its
    engine's front-end host time, not its harness's) moves TTFT only: TTFT takes the
    harness band when it is the wider, TPOT and throughput keep their kinds', and the
    mode follows the kinds that measure TPOT and throughput."""
    from predictor.anchors.coverage import HARNESS
    from predictor.step.cost import Mode

    base = {"in-ladder": {"tpot": KindError(-0.05, 0.05, 3.0, 500), "throughput": KindError(-0.05, 0.05, 3.0, 500),
                          "ttft": KindError(-0.1, 0.1, 10.0, 500)},
            HARNESS: {"ttft": KindError(-0.3, 0.6, 28.0, 500)}}
    bars = ErrorBars(base, "test")
    kinds = ("in-ladder", HARNESS)
    got = bars.intervals({"ttft_ms_mean": 100.0, "tpot_ms_mean": 10.0}, kinds)
    assert got["ttft_ms_mean"] == pytest.approx((100 * math.exp(-0.3), 100 * math.exp(0.6)))
    assert got["tpot_ms_mean"] == pytest.approx((10 * math.exp(-0.05), 10 * math.exp(0.05)))
    assert bars.mode(kinds, has_anchor=True) == Mode.ANCHORED
    assert bars.primary(kinds) == "in-ladder"


def test_the_shipped_harness_band_is_ttft_measured_across_harnesses():
    """scripts/build_error_bars.py measures the harness kind on InferenceX's rows of the
    stacks AIConfigurator's anchors cover (predictor.corpus.cross_harness): TTFT only."""
    from predictor.anchors.coverage import HARNESS

    band = shipped_error_bars().by_kind[HARNESS]
    assert set(band) == {"ttft"} and band["ttft"].rows >= 100
    assert band["ttft"].q10 < 0.0 < band["ttft"].q90


def test_a_des_interval_carries_the_replications_noise_too():
    """Transfer error and the replayed mean's sampling noise add in quadrature in log space:
    the interval widens, never below the noise alone (scaled from 90% to 80%), and a metric
    without replications keeps its band."""
    metrics = {"output_throughput_per_gpu": 10.0, "ttft_ms_mean": 500.0}
    bands = {"output_throughput_per_gpu": (9.0, 11.0), "ttft_ms_mean": (400.0, 600.0)}
    seeds = {"output_throughput_per_gpu": (7.0, 13.0)}
    out = with_sampling_noise(bands, metrics, seeds)
    low, high = out["output_throughput_per_gpu"]
    z = 1.2815515655446004 / 1.6448536269514722
    assert low == pytest.approx(10.0 * math.exp(-math.hypot(math.log(10 / 9), z * math.log(10 / 7))))
    assert high == pytest.approx(10.0 * math.exp(math.hypot(math.log(11 / 10), z * math.log(13 / 10))))
    assert low < 10.0 * math.exp(-z * math.log(10 / 7)) and high > 10.0 * math.exp(z * math.log(13 / 10))
    assert out["ttft_ms_mean"] == bands["ttft_ms_mean"]
    biased = with_sampling_noise({"output_throughput_per_gpu": (10.5, 12.0)}, metrics, seeds)
    assert biased["output_throughput_per_gpu"][0] < 10.5      # a band above the value moves out by the noise
    sparse = with_sampling_noise({"itl_ms_p999": (89.0, 135.0)}, {"itl_ms_p999": 110.0}, {"itl_ms_p999": (0.0, 361.0)})
    assert sparse["itl_ms_p999"][0] == 0.0 and sparse["itl_ms_p999"][1] > 135.0


def test_an_e2e_interval_holds_at_or_above_its_ttfts():
    """Every request's end-to-end time holds its first token's: each E2E bound is at least
    the same statistic's TTFT bound (bands measured apart read E2E 973-1,158 s against
    TTFT 566-1,531 s on an overloaded replay); other metrics are left alone."""
    from predictor.uncertainty import ordered

    out = ordered({"ttft_ms_mean": (566.0, 1531.0), "e2e_ms_mean": (973.0, 1158.0), "ttft_ms_p90": (10.0, 20.0),
                   "e2e_ms_p90": (30.0, 40.0), "e2e_ms_p99": (1.0, 2.0), "tpot_ms_mean": (1.0, 2.0)})
    assert out["e2e_ms_mean"] == (973.0, 1531.0) and out["e2e_ms_p90"] == (30.0, 40.0)
    assert out["e2e_ms_p99"] == (1.0, 2.0) and out["tpot_ms_mean"] == (1.0, 2.0)
    assert ordered({"ttft_ms_mean": (5.0, 9.0), "e2e_ms_mean": (3.0, 4.0)})["e2e_ms_mean"] == (5.0, 9.0)


def test_an_e2e_interval_keeps_room_for_the_decode():
    """E2E is TTFT plus the decode: a TTFT at its upper bound still leaves the predicted
    decode time (E2E - TTFT) at the low end of E2E's band (Kimi-K3's agentic replay:
    E2E's upper bound equalled TTFT's with 128 s of decoding predicted)."""
    from predictor.uncertainty import ordered

    metrics = {"ttft_ms_mean": 160_530.0, "e2e_ms_mean": 288_906.0}
    out = ordered({"ttft_ms_mean": (100_015.0, 452_615.0), "e2e_ms_mean": (232_039.0, 360_000.0)}, metrics)
    decode_low = (288_906.0 - 160_530.0) * 232_039.0 / 288_906.0
    assert out["e2e_ms_mean"] == pytest.approx((232_039.0, 452_615.0 + decode_low))
    assert out["e2e_ms_mean"][1] > out["ttft_ms_mean"][1]
    # a band that already holds TTFT's plus the decode is left as it is
    wide = ordered({"ttft_ms_mean": (100.0, 200.0), "e2e_ms_mean": (900.0, 2000.0)},
                   {"ttft_ms_mean": 150.0, "e2e_ms_mean": 1000.0})
    assert wide["e2e_ms_mean"] == (900.0, 2000.0)


def test_a_steps_pollution_carries_no_band():
    """Mean step over decode step is the model's own ratio (>= 1, exactly 1 in a split
    pool): TPOT's band does not apply to it."""
    bars = ErrorBars({"width": {"tpot": KindError(-0.2, 0.2, 10.0, 500)}}, "test")
    got = bars.intervals({"tpot_ms_mean": 10.0, "tpot_pollution": 1.0}, ("width",))
    assert "tpot_ms_mean" in got and "tpot_pollution" not in got
