"""The Pareto figure (predictor/sweep/plot.py): colour by layout family, marker by
precision, labelled frontier, legend outside the data, excluded points apart."""

import pytest

from levers.configuration import Configuration
from predictor.step.cost import Mode
from predictor.sweep.frontier import Bound, FrontierRule
from predictor.sweep.plot import FAMILIES, build_figure, layout_family, precision, pyplot, short_label
from predictor.sweep.run import SweepPoint

TP = Configuration(tp=4, concurrency=8)
DP = Configuration(tp=4, attention_dp=4, weight_dtype="fp8", concurrency=64)
EP = Configuration(tp=8, attention_dp=8, ep=8, expert_dtype="fp4", concurrency=256)
SPLIT = Configuration(tp=4, attention_dp=4, disaggregated=True, prefill_layout="TP4", decode_layout="TP4/EP1/DP4",
                      decode_replicas=2, concurrency=128, spec_method="mtp", spec_depth=2)


def point(config, throughput, interactivity, ttft_ms=100.0, frontier=False, eligible=True, mode=Mode.RANK_ONLY):
    metrics = {"throughput_per_gpu": throughput, "interactivity_p50": interactivity, "ttft_ms_mean": ttft_ms}
    return SweepPoint(0, config, mode, "analytical", metrics, frontier, eligible)


def test_families_precisions_and_labels():
    assert [layout_family(c) for c in (TP, DP, EP, SPLIT)] == ["TP", "attention-DP", "EP", "disaggregated"]
    assert [precision(c) for c in (TP, DP, EP, SPLIT)] == ["native", "fp8", "fp4", "native"]
    assert short_label(EP) == "TP8 DP8 EP8 fp4 c256"
    assert short_label(SPLIT) == "P TP4x1 D TP4/EP1/DP4x2 c128 mtp:2"
    assert short_label(Configuration(tp=2, replicas=4, concurrency=16)) == "TP2 x4 c16"


def test_figure_colours_markers_labels_and_an_outside_legend():
    plt = pyplot()
    points = [point(TP, 100, 150, frontier=True, mode=Mode.ANCHORED), point(DP, 400, 90, frontier=True),
              point(EP, 900, 40, frontier=True), point(SPLIT, 700, 45),
              point(EP, 950, 10, ttft_ms=90_000.0, eligible=False)]
    rule = FrontierRule(10_000.0, (Bound("interactivity_mean", ">=", 25.0, "interactivity>=25"),))
    figure = build_figure(plt, points, "test", rule)
    try:
        figure.canvas.draw()
        axes = figure.axes[0]
        labels = sorted(text.get_text() for text in axes.texts)
        assert labels == sorted(short_label(p.config) for p in points[:3])
        legend = axes.get_legend()
        entries = [text.get_text() for text in legend.get_texts()]
        assert {"colocated TP", "attention-DP", "EP (+ attention-DP)", "disaggregated P/D"} <= set(entries)
        assert {"precision native", "precision fp8", "precision fp4"} <= set(entries)
        assert "off the frontier rule (1)" in entries and "SLO interactivity>=25" in entries
        assert "frontier among points with mean TTFT <= 10 s, interactivity>=25" in axes.get_title()
        renderer = figure.canvas.get_renderer()
        box, frame = legend.get_window_extent(renderer), axes.get_window_extent(renderer)
        assert box.x0 >= frame.x1   # the legend is right of the axes: it covers no data
        colours = {tuple(round(c, 3) for c in collection.get_edgecolor()[0][:3])
                   for collection in axes.collections if len(collection.get_offsets())}
        family_rgb = {tuple(round(int(h[i:i + 2], 16) / 255, 3) for i in (1, 3, 5)) for h in FAMILIES.values()}
        assert len(colours & family_rgb) == 4
        markers = {collection.get_paths()[0].vertices.shape[0] for collection in axes.collections}
        assert len(markers) >= 3    # circles, squares, triangles and crosses differ in outline
    finally:
        plt.close(figure)


def test_an_empty_sweep_still_draws():
    plt = pyplot()
    figure = build_figure(plt, [], "empty", FrontierRule())
    try:
        assert figure.axes[0].get_legend() is None
    finally:
        plt.close(figure)


@pytest.mark.parametrize("config, family", [(TP, "TP"), (SPLIT, "disaggregated")])
def test_family_of_one(config, family):
    assert layout_family(config) == family
