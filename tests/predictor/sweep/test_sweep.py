"""Pareto sweeps: the enumerated space, the kept speculative variant, backends that agree,
the frontier marks and the files (PRODUCT.md §2 `pareto`, METHOD §3.8, §8)."""

import csv
import json
import time
from dataclasses import replace

import pytest

from levers.errors import InputError
from predictor.anchors.anchoring import PricedCheck
from predictor.feasibility import check_configuration
from predictor.prediction import Prediction, illegal
from predictor.step.cost import Mode
from predictor.sweep.executors import (
    LocalPoolExecutor,
    RayExecutor,
    SerialExecutor,
    SweepJob,
    chunk_ranges,
    make_executor,
    pool_chunks,
    prepared,
)
from predictor.sweep.frontier import Bound, FrontierRule, dominates
from predictor.sweep.output import COLUMNS, write_sweep
from predictor.sweep.run import parse_modes, run_sweep
from predictor.sweep.space import (
    SpaceOptions,
    build_plan,
    colocated_layouts,
    precision_choices,
    speculative_variants,
)
from predictor.target import resolve_target
from predictor.workload import AGENTIC, parse_workload

WORKLOAD = parse_workload("1k/1k")
SMALL = SpaceOptions(concurrency_ladder=(1, 4, 16, 64, 1024), max_spec_depth=2)
WEIGHT_FACTOR = {None: 1.0, "bf16": 1.0, "fp8": 0.55, "fp4": 0.35}
TOO_MANY_CLIENTS = 512


def fake_predict(target, config, workload, *, seed=0, num_requests=None):
    """A cheap deterministic stand-in for `predict`: bigger batches raise throughput and
    slow each user; a draft depth pays at small batches only; tp=2 counts as anchored."""
    if config.concurrency > TOO_MANY_CLIENTS:
        return illegal(("fake: more clients than the fake allows",))
    replicas = config.decode_replicas if config.disaggregated else config.replicas
    batch = config.concurrency / replicas
    kv = 0.8 if config.kv_cache_dtype == "fp8" else 1.0
    depth = config.spec_depth
    step_ms = 4.0 + 12.0 * WEIGHT_FACTOR[config.weight_dtype] / config.tp + 0.2 * kv * batch * (1 + depth)
    committed = 1.0 + 0.7 * depth - 0.15 * depth ** 2
    interactivity = 1000.0 * committed / step_ms
    output = interactivity * config.concurrency / config.total_gpus
    # input + output: not physical here, it ranks the points in the opposite order, so a
    # frontier or a variant choice taken on the total instead of the output fails the tests
    metrics = {"output_throughput_per_gpu": output, "throughput_per_gpu": 1e6 / (1.0 + output),
               "interactivity_mean": interactivity, "interactivity_p50": interactivity,
               "tpot_ms_mean": step_ms / committed, "ttft_ms_mean": 100.0 * config.concurrency}
    mode = Mode.ANCHORED if config.tp == 2 else Mode.RANK_ONLY
    return Prediction(True, (), mode, None, (), metrics, None)


@pytest.fixture(scope="module")
def small_target():
    return resolve_target("qwen3.5-35b", "h100x2", "vllm")


# -- the space ------------------------------------------------------------------------
def test_precision_choices_narrow_only_and_need_fp4_tensor_cores():
    fp8_native = resolve_target("deepseek-r1", "mi355x", "vllm")   # fp8 weights/experts, bf16 KV
    assert precision_choices(fp8_native.card, fp8_native.cluster) == [
        (w, e, kv) for w in (None, "fp4") for e in (None, "fp4") for kv in (None, "fp8")]
    no_fp4 = resolve_target("deepseek-r1", "h100x8", "vllm")
    assert precision_choices(no_fp4.card, no_fp4.cluster) == [(None, None, None), (None, None, "fp8")]
    dense = resolve_target("llama-3.1-8b", "b200x1", "vllm")          # bf16, no experts
    assert len(precision_choices(dense.card, dense.cluster)) == 3 * 1 * 2


def test_speculative_variants_from_mtp_layers_or_a_measured_curve():
    card = resolve_target("deepseek-r1").card           # one MTP layer, no curve
    assert speculative_variants(card, "vllm", 2) == (("none", 0), ("mtp", 1), ("mtp", 2))
    kimi = resolve_target("kimi-k2.5").card              # no MTP layers, an EAGLE-3 curve
    assert speculative_variants(kimi, "vllm", 1) == (("none", 0), ("eagle3", 1))
    llama = resolve_target("llama-3.1-8b").card
    assert speculative_variants(llama, "vllm", 3) == (("none", 0),)
    assert speculative_variants(card, "atom", 0) == (("none", 0),)


def test_layouts_divide_what_they_must():
    target = resolve_target("deepseek-r1", "mi355x", "vllm")
    layouts = colocated_layouts(target.card, target.cluster, target.engine)
    for tp, pp, ep, dp in layouts:
        assert tp * pp <= 8 and tp % ep == 0 and tp % dp == 0 and 61 % pp == 0
        assert 128 % (tp // dp) == 0 and 256 % ep == 0
    # 61 layers: one stage only; tp 1, 2, 4, 8 with every ep | tp and dp | tp
    assert len(layouts) == 1 + 2 * 2 + 3 * 3 + 4 * 4


def test_every_family_is_legal_and_fits_the_cluster(small_target):
    plan = build_plan(small_target, WORKLOAD, SMALL)
    assert plan.families and plan.num_illegal_families >= 0
    for family in plan.families:
        base = family.base
        assert PricedCheck(None, WORKLOAD.priced_context_tokens)(small_target.card, small_target.cluster, "vllm",
                                                                  base, WORKLOAD.context_tokens).legal
        assert base.total_gpus <= 2
        if base.disaggregated:
            assert min(base.prefill_replicas, base.decode_replicas) == 1
    for group in plan.groups:
        base = plan.families[group.family].base
        assert group.concurrency >= (base.decode_replicas if base.disaggregated else base.replicas)
    assert any(f.base.disaggregated for f in plan.families)
    assert plan.num_points == sum(len(plan.families[g.family].variants) for g in plan.groups)


def test_a_family_is_sized_at_the_precisions_it_is_priced_at():
    """Llama-3.1-70B's unset precision is priced at its H100 vLLM anchors' FP8 recipe: its
    TP1 family fits (70 GB of weights on 80), where the BF16 checkpoint would not."""
    target = resolve_target("llama-3.1-70b", "h100x8", "vllm")
    plan = build_plan(target, parse_workload("1k/1k"), SpaceOptions(include_disaggregated=False))
    plain = [f.base for f in plan.families if f.base.weight_dtype is None and not f.base.disaggregated]
    single = [base for base in plain if base.tp * base.pp == 1]
    assert single
    assert not check_configuration(target.card, target.cluster, "vllm", single[0], 2048).legal   # as typed: BF16


def test_max_points_samples_whole_families_deterministically():
    target = resolve_target("deepseek-r1", "mi355x", "vllm")
    full = build_plan(target, WORKLOAD, SMALL)
    capped = build_plan(target, WORKLOAD, SpaceOptions(**{**_fields(SMALL), "max_points": 1000}))
    again = build_plan(target, WORKLOAD, SpaceOptions(**{**_fields(SMALL), "max_points": 1000}))
    assert 900 <= capped.num_points <= 1000
    assert capped.num_points + capped.num_sampled_out == full.num_points
    assert capped.families == again.families
    ladder = len(SMALL.concurrency_ladder)
    assert all(sum(g.family == i for g in capped.groups) >= 1 for i in range(len(capped.families)))
    assert len(capped.groups) <= len(capped.families) * ladder


def _fields(options: SpaceOptions) -> dict:
    return {name: getattr(options, name) for name in options.__slots__}


# -- execution ------------------------------------------------------------------------
def test_chunks_cover_every_group_once():
    for num_groups, workers in ((0, 2), (1, 2), (7, 1), (1000, 2), (100_000, 16)):
        chunks = chunk_ranges(num_groups, workers)
        covered = [i for start, stop in chunks for i in range(start, stop)]
        assert covered == list(range(num_groups))


def test_an_agentic_pool_starts_the_dearest_groups_first_and_covers_each_once(small_target):
    job = SweepJob.for_target(small_target, AGENTIC, SMALL, predict_fn=fake_predict)
    _, plan = prepared(job)
    chunks = pool_chunks(job, len(plan.groups), 2)
    assert sorted(start for _, (start, _) in chunks) == list(range(len(plan.groups)))
    costs = [plan.groups[start].concurrency * len(plan.families[plan.groups[start].family].variants)
             for _, (start, _) in chunks]
    assert costs == sorted(costs, reverse=True) and costs[0] > costs[-1]
    fixed = SweepJob.for_target(small_target, WORKLOAD, SMALL, predict_fn=fake_predict)
    assert [c for _, c in pool_chunks(fixed, 100, 2)] == chunk_ranges(100, 2)   # in order
    serial = run_sweep(small_target, AGENTIC, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    pooled = run_sweep(small_target, AGENTIC, options=SMALL, executor=LocalPoolExecutor(2), predict_fn=fake_predict)
    assert pooled.points == serial.points and pooled.frontier == serial.frontier


CALLS: list[tuple[int, int, int | None]] = []


def recording_predict(target, config, workload, *, seed=0, num_requests=None):
    CALLS.append((config.concurrency, config.spec_depth, num_requests))
    return fake_predict(target, config, workload, seed=seed, num_requests=num_requests)


def test_an_agentic_group_ranks_its_variants_on_bounded_replays_and_prices_the_kept_one_in_full(small_target):
    """At 64 agentic clients the default replay is 2,560 requests: each variant is ranked on
    1,024 (predictor.sim.fidelity) and the kept one is priced again at the default, which
    its point reports; at 16 clients the default (640) is already the bound."""
    CALLS.clear()
    result = run_sweep(small_target, AGENTIC, options=SMALL, executor=SerialExecutor(), predict_fn=recording_predict)
    plan = build_plan(small_target, AGENTIC, SMALL)
    assert {n for c, _, n in CALLS if c == 64} == {1024, None}
    assert {n for c, _, n in CALLS if c in (1, 4, 16)} == {None}
    legal_at_64 = sum(p.config.concurrency == 64 for p in result.points)
    assert legal_at_64 and sum(c == 64 and n is None for c, _, n in CALLS) == legal_at_64
    assert result.num_priced == plan.num_points + legal_at_64
    # the kept variant is the one the bounded ranking chose, reported as priced in full
    for point in (p for p in result.points if p.config.concurrency == 64):
        ranked = [d for c, d, n in CALLS if c == 64 and n == 1024]
        assert point.config.spec_depth in ranked


def test_best_speculative_variant_is_kept_per_concurrency(small_target):
    result = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    depths = set()
    for point in result.points:
        variants = [replace(point.config, spec_method=m, spec_depth=d)
                    for m, d in (("none", 0), ("mtp", 1), ("mtp", 2))]
        scores = [fake_predict(small_target, v, WORKLOAD).metrics["output_throughput_per_gpu"] for v in variants]
        assert point.config.spec_depth == scores.index(max(scores))
        depths.add(point.config.spec_depth)
    assert depths == {0, 1, 2}   # the fake makes each depth win somewhere
    assert all(p.config.concurrency <= TOO_MANY_CLIENTS for p in result.points)
    plan = build_plan(small_target, WORKLOAD, SMALL)
    assert result.num_illegal_groups == sum(g.concurrency > TOO_MANY_CLIENTS for g in plan.groups)
    assert result.num_priced == plan.num_points


def test_local_pool_matches_the_serial_run(small_target):
    serial = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    pooled = run_sweep(small_target, WORKLOAD, options=SMALL, executor=LocalPoolExecutor(2), predict_fn=fake_predict)
    assert pooled.points == serial.points
    assert pooled.frontier == serial.frontier and len(serial.frontier) >= 3


def test_frontier_marks_are_the_non_dominated_points(small_target):
    result = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    coordinates = [(p.metrics["output_throughput_per_gpu"], p.interactivity) for p in result.points]
    non_dominated = {xy for xy in coordinates if not any(dominates(other, xy) for other in coordinates)}
    on = [xy for point, xy in zip(result.points, coordinates) if point.on_frontier]
    assert sorted(on) == sorted(non_dominated)      # each frontier coordinate exactly once
    for point, xy in zip(result.points, coordinates):   # ties keep the fewest GPUs
        if point.on_frontier:
            tied = [p for p, other in zip(result.points, coordinates) if other == xy]
            assert point.config.total_gpus == min(p.config.total_gpus for p in tied)


def test_ttft_cap_keeps_saturated_points_off_the_frontier(small_target):
    """The fake's TTFT is 100 ms per client: 6.4 s at 64 clients, over a 5 s cap."""
    capped = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict,
                       rule=FrontierRule(ttft_max_ms=5_000.0))
    uncapped = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict,
                         rule=FrontierRule(ttft_max_ms=None))
    assert any(p.metrics["ttft_ms_mean"] > 5_000.0 for p in uncapped.frontier)
    assert capped.frontier and all(p.metrics["ttft_ms_mean"] <= 5_000.0 for p in capped.frontier)
    assert capped.num_ineligible == sum(p.metrics["ttft_ms_mean"] > 5_000.0 for p in capped.points) > 0
    eligible = [(p.output_throughput_per_gpu, p.interactivity) for p in capped.points if p.is_eligible]
    for point in capped.frontier:   # the frontier of the eligible points, exactly
        assert not any(dominates(other, (point.output_throughput_per_gpu, point.interactivity)) for other in eligible)
    assert capped.to_json()["frontier_rule"]["ttft_max_ms"] == 5_000.0


def test_bounds_admit_what_they_bound_and_unknown_metrics():
    floor = Bound("interactivity_p50", ">=", 50.0, "p50-interactivity>=50")
    assert floor.admits({"interactivity_p50": 60.0}) and not floor.admits({"interactivity_p50": 40.0})
    assert floor.admits({})   # nothing to check
    rule = FrontierRule(ttft_max_ms=1_000.0, bounds=(floor,))
    assert not rule.admits({"interactivity_p50": 60.0, "ttft_ms_mean": 1_500.0})
    assert rule.describe() == "mean TTFT <= 1 s, p50-interactivity>=50"
    assert FrontierRule(None).describe() == "every point"


def test_modes_filter_points(small_target):
    both = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    anchored = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(),
                         modes=parse_modes("anchored"), predict_fn=fake_predict)
    assert anchored.points and all(p.mode is Mode.ANCHORED for p in anchored.points)
    rank_only = sum(p.mode is Mode.RANK_ONLY for p in both.points)
    assert rank_only > 0 and anchored.num_excluded_by_mode == rank_only
    assert parse_modes("simulate") == {Mode.RANK_ONLY} and parse_modes(None) == set(Mode)
    with pytest.raises(InputError):
        parse_modes("anchored,measured")
    for empty in (",", "anchored,,", "", " "):       # said before any work, not a sweep of no mode
        with pytest.raises(InputError, match="holds an empty item"):
            parse_modes(empty)


def test_ray_missing_is_a_user_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)
    with pytest.raises(InputError, match="inferasim\\[ray\\]"):
        make_executor("auto")


@pytest.mark.ray
@pytest.mark.slow
def test_ray_and_local_pool_give_the_same_frontier(small_target):
    """One local Ray instance, two sweeps: the fake predictor, and the real one on a
    space with anchored and rank-only points (DeepSeek-R1 on MI355X, SGLang)."""
    ray = pytest.importorskip("ray")
    anchored_target = resolve_target("deepseek-r1", "mi355x", "sglang")
    real_options = SpaceOptions(concurrency_ladder=(1, 8, 64, 512), max_spec_depth=0, include_disaggregated=False)
    cases = [(small_target, SMALL, fake_predict), (anchored_target, real_options, None)]
    local = [run_sweep(t, WORKLOAD, options=o, executor=LocalPoolExecutor(2), predict_fn=f, seed=3)
             for t, o, f in cases]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        on_ray = [run_sweep(t, WORKLOAD, options=o, executor=RayExecutor(), predict_fn=f, seed=3)
                  for t, o, f in cases]
    finally:
        ray.shutdown()
    for pooled, distributed in zip(local, on_ray):
        assert distributed.backend == "ray" and distributed.workers == 2
        assert distributed.points == pooled.points
        assert distributed.frontier == pooled.frontier and len(pooled.frontier) >= 3
    assert {p.mode for p in on_ray[1].points} == {Mode.ANCHORED, Mode.RANK_ONLY}


# -- files ----------------------------------------------------------------------------
def test_files_and_plot(small_target, tmp_path):
    result = run_sweep(small_target, WORKLOAD, options=SMALL, executor=SerialExecutor(), predict_fn=fake_predict)
    paths = write_sweep(result, tmp_path / "out")
    with open(paths["points"]) as handle:
        rows = list(csv.DictReader(handle))
    with open(paths["frontier"]) as handle:
        frontier_rows = list(csv.DictReader(handle))
    assert tuple(rows[0].keys()) == COLUMNS and len(rows) == result.num_points
    assert len(frontier_rows) == len(result.frontier) and all(r["on_frontier"] == "true" for r in frontier_rows)
    best = max(result.points, key=lambda p: p.output_throughput_per_gpu)
    top = max(float(r["output_throughput_per_gpu"]) for r in frontier_rows)
    assert top == pytest.approx(best.output_throughput_per_gpu, rel=1e-5)   # CSV keeps 6 significant digits
    summary = json.loads(paths["sweep"].read_text())
    assert summary["num_points"] == result.num_points and len(summary["frontier"]) == len(result.frontier)
    _check_png(paths["plot"])


def _check_png(path):
    image = pytest.importorskip("matplotlib.image").imread(path)
    assert path.stat().st_size > 20_000
    height, width = image.shape[:2]
    assert (width, height) == (1320, 770)   # 12 x 7 in at 110 dpi
    grey = image[..., :3].mean(axis=2)
    assert grey.std() > 0.05                 # not a blank canvas
    assert (grey < 0.5).mean() > 0.005       # dark ink: axes, labels, the bold frontier


def test_an_unreachable_ray_address_is_refused_within_its_deadline():
    """Ray retries a head it cannot reach without end; the executor checks first."""
    import socket
    import time

    from predictor.sweep.executors import check_reachable

    with socket.socket() as closed:         # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"--ray: cannot reach '127\.0\.0\.1:\d+'"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2.0)
    assert time.perf_counter() - started < 5.0
    for bad in ("nonsense", "host:", "host:99999", "ray://:80"):
        with pytest.raises(InputError, match="is not an address"):
            check_reachable(bad)


def _one_answer(listening, answer: bytes | tuple | None) -> None:
    """Accept one connection, read the client's bytes, answer (None: never; a tuple: in
    parts, 0.3 s apart)."""
    connection, _ = listening.accept()
    with connection:
        connection.recv(64)
        if answer is None:
            time.sleep(3.0)
            return
        for i, part in enumerate(answer if isinstance(answer, tuple) else (answer,)):
            if i:
                time.sleep(0.3)
            connection.sendall(part)


SETTINGS = bytes.fromhex("000018040000000000")


@pytest.mark.parametrize("answer, said", [(SETTINGS, None),      # a gRPC server
                                          ((SETTINGS[:2], SETTINGS[2:]), None),   # TCP delivers it in parts
                                          (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not as a Ray head"),
                                          (None, "timed out")])
def test_a_ray_head_must_answer_as_a_grpc_server_within_its_deadline(answer, said):
    """A port that accepts and never replies held `ray.init` without end; the check sends
    HTTP/2's preface and needs a SETTINGS frame back (a real GCS answers at once)."""
    import socket
    import threading

    from predictor.sweep.executors import check_reachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        server = threading.Thread(target=_one_answer, args=(listening, answer), daemon=True)
        server.start()
        address = f"ray://127.0.0.1:{listening.getsockname()[1]}"
        started = time.perf_counter()
        if said is None:
            check_reachable(address, timeout_s=1.0)
        else:
            with pytest.raises(InputError, match=said):
                check_reachable(address, timeout_s=1.0)
        assert time.perf_counter() - started < 2.5
        server.join(5.0)


@pytest.mark.parametrize("engine, splits", [("atom", False), ("sglang", True), ("vllm", True)])
def test_no_split_family_on_an_engine_whose_command_line_cannot_start_one(engine, splits):
    """A frontier of ATOM splits was one `deploy` refuses (its command line has no pool
    flags): the sweep leaves them out, as the seed planner does."""
    target = resolve_target("gpt-oss-120b", "mi355x", engine)
    plan = build_plan(target, WORKLOAD, SMALL)
    assert any(family.base.disaggregated for family in plan.families) is splits
    assert any(not family.base.disaggregated for family in plan.families)


def test_a_tls_ray_head_is_checked_for_its_port_alone(monkeypatch):
    """A head behind RAY_USE_TLS speaks TLS first and answers no plain HTTP/2 preface:
    its port accepting is what is checked (refusing it would refuse every TLS cluster)."""
    import socket

    from predictor.sweep.executors import check_reachable

    monkeypatch.setenv("RAY_USE_TLS", "1")
    with socket.socket() as listening:       # accepts, never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        started = time.perf_counter()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}", timeout_s=1.0)
        assert time.perf_counter() - started < 0.9
