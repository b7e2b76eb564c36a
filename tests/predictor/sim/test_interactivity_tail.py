"""Interactivity's tail quantiles are the slow users' speed (`results.latency_distributions`):
a floor ``interactivity pN >= X`` must hold for N% of users, as ``tpot_ms pN <= Y`` does."""

from types import SimpleNamespace

import numpy as np
import pytest

from predictor.sim.results import Recorder, latency_distributions


def test_interactivity_p90_is_the_speed_ninety_percent_of_users_reach():
    rng = np.random.default_rng(0)
    tpots_ms = rng.uniform(5.0, 50.0, 1001)
    requests = [SimpleNamespace(first_token_us=0.0, finish_us=t * 1000.0 * 100, output_tokens=101)
                for t in tpots_ms]
    found = latency_distributions(requests, Recorder(), ("tpot_ms", "interactivity"))
    speed, tpot = found["interactivity"], found["tpot_ms"]
    for stat, share in (("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        assert speed[stat] == pytest.approx(1000.0 / tpot[stat], rel=1e-6)
        assert np.mean(1000.0 / tpots_ms >= speed[stat] - 1e-9) >= share
    assert speed["p999"] < speed["p99"] < speed["p90"] < speed["p50"]
    assert speed["p50"] == pytest.approx(1000.0 / tpot["p50"], rel=1e-6)
    assert speed["mean"] == pytest.approx(np.mean(1000.0 / tpots_ms))
