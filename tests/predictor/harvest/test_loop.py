"""The closed loop's arithmetic offline (predictor/harvest/loop.py): steady-state figures
from constructed traces, a replayed run, and predictions on the recorded llama.cpp
anchor, where the analytical model and the DES must agree (one request at a time, no
queueing effects either model leaves out) and queueing must follow (N - 1) services."""

import random

import pytest

from predictor.harvest.client import ReplayClient, RequestTrace
from predictor.harvest.harvester import build_anchor
from predictor.harvest.loop import LoopPoint, loop_figures, measure_loop, predict_loop
from predictor.harvest.prompts import PromptFactory
from predictor.target import Target
from tests.predictor.harvest.test_harvester import replayed


def trace(sent, first, gap, tokens):
    return RequestTrace(sent, tuple(first + gap * i for i in range(tokens)), completion_tokens=tokens,
                        finish_reason="length")


def test_figures_leave_out_each_clients_warm_up_request():
    # one client, a slow first request then two steady ones; 1 s TTFT, 10 ms gaps, 4 tokens
    runs = [[trace(0.0, 5.0, 0.05, 4), trace(5.2, 6.2, 0.01, 4), trace(6.3, 7.3, 0.01, 4)]]
    figures = loop_figures(runs)
    assert figures.ttft_ms == pytest.approx(1000.0) and figures.tpot_ms == pytest.approx(10.0)
    assert figures.output_tokens_per_s == pytest.approx(12 / 7.33)


def test_a_replayed_closed_loop_is_measured_through_the_client():
    point = LoopPoint("two clients", clients=2, requests_per_client=2, prompt_tokens=8, output_tokens=3)
    client = ReplayClient([trace(0.0, 0.5 + i, 0.02, 3) for i in range(point.num_requests)])
    figures = measure_loop(client, PromptFactory(random.Random(0), lambda text: len(text.split())), point)
    assert len(client.prompts) == 4 and len(set(client.prompts)) == 4      # unique prompts
    assert figures.tpot_ms == pytest.approx(20.0)


@pytest.fixture
def anchored(gguf_file, recorded):
    plan, measurements = replayed(gguf_file, recorded)
    anchor, _ = build_anchor(plan, measurements, timestamp="2026-11-29T13:30:00+00:00", node="test")
    config = plan.config.with_changes({"max_running_requests": 1, "prefix_cache": "off"})
    return Target(plan.card, plan.cluster, plan.engine), config, anchor


def test_analytical_and_des_agree_on_a_one_at_a_time_server(anchored):
    target, config, anchor = anchored
    for point in (LoopPoint("c1", 1, 4, 384, 16), LoopPoint("c4", 4, 3, 128, 32), LoopPoint("c16", 16, 2, 64, 16)):
        analytical = predict_loop(target, config, anchor, point, des=False)
        des = predict_loop(target, config, anchor, point, des=True)
        assert analytical.mode == des.mode == "anchored"
        for key in ("ttft_ms", "tpot_ms", "output_tokens_per_s"):
            assert getattr(des, key) == pytest.approx(getattr(analytical, key), rel=0.05), (point.name, key)


def test_queueing_grows_by_one_service_per_client(anchored):
    target, config, anchor = anchored
    one, four = (predict_loop(target, config, anchor, LoopPoint(f"c{n}", n, 3, 128, 32), des=False) for n in (1, 4))
    service_ms = 32 / one.output_tokens_per_s * 1000.0          # one request's whole time on the server
    assert four.ttft_ms == pytest.approx(one.ttft_ms + 3 * service_ms, rel=0.05)
    assert four.output_tokens_per_s == pytest.approx(one.output_tokens_per_s, rel=0.05)   # one at a time
    assert four.tpot_ms == pytest.approx(one.tpot_ms, rel=1e-6)
