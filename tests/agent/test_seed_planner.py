"""The seed planner: safe baseline, one lever at a time in METHOD §6 order, deterministic."""

import pytest

from agent.question import build_context
from agent.seed_planner import LeverGroup, SeedPlanner, baseline, is_legal
from agent.tune import TuneRequest
from levers.configuration import Configuration
from levers.errors import InputError
from tests.agent.tune_fakes import make_context

DEFAULT_MODEL = "kimi-k3"
MIN_SEEDS = 50
GROUP_ORDER = ["baseline", *[str(g) for g in LeverGroup]]


def _round_zero(context):
    start = baseline(context)
    return start, list(SeedPlanner(context).seeds(start))


def test_default_run_yields_at_least_50_legal_distinct_seeds_from_a_fitting_baseline():
    context = make_context(DEFAULT_MODEL, workload="agentic")
    start, seeds = _round_zero(context)
    assert start == Configuration(tp=8)  # Kimi-K3 on 8 MI355X: only tp=8 fits, native dtypes
    assert len(seeds) >= MIN_SEEDS
    configs = [seed.config for seed in seeds]
    assert len(set(configs)) == len(configs)
    assert all(is_legal(context, config) for config in configs)


def test_seeds_follow_the_fixed_group_order_and_change_one_lever_group_each():
    context = make_context(DEFAULT_MODEL, workload="agentic")
    start, seeds = _round_zero(context)
    positions = [GROUP_ORDER.index(seed.group) for seed in seeds]
    assert positions == sorted(positions)
    for seed in seeds[1:]:
        assert seed.proposed and seed.proposed == seed.config.diff(start)
        assert len(seed.proposed) <= 6, seed  # the lever plus the repairs it forces


def test_seeds_are_deterministic():
    context = make_context(DEFAULT_MODEL, workload="agentic")
    assert [s.config for s in _round_zero(context)[1]] == [s.config for s in _round_zero(context)[1]]


def test_validated_precisions_shape_the_baseline_and_the_offers():
    context = make_context(DEFAULT_MODEL, workload="agentic", precisions="fp8,fp4")
    start, seeds = _round_zero(context)
    assert start.weight_dtype == "fp8" and start.expert_dtype is None  # checkpoint experts are fp4
    assert all(seed.config.weight_dtype in ("fp8", "fp4") for seed in seeds)


def test_later_rounds_move_around_the_incumbent():
    context = make_context()
    start = baseline(context)
    incumbent = start.with_changes({"kv_cache_dtype": "fp8"})
    seeds = list(SeedPlanner(context).seeds(start, incumbent=lambda: incumbent))
    first_round = [s for s in seeds if s.config.kv_cache_dtype != "fp8"]
    second_round = [s for s in seeds if s.config.kv_cache_dtype == "fp8" and s.config != incumbent]
    assert first_round and second_round
    assert all(s.proposed == s.config.diff(incumbent) for s in second_round)


def test_a_model_that_fits_nowhere_is_an_input_error():
    context = make_context(DEFAULT_MODEL, cluster="h100x1")
    with pytest.raises(InputError, match="does not fit on h100x1"):
        baseline(context)


def test_a_frontier_moe_across_nodes_gets_a_baseline_whose_attention_stays_in_a_node():
    """Kimi-K3 fits no TP within one 8-GPU H200 node; its 93 layers split unevenly over two
    pipeline stages (as vLLM splits them) give a plain TP8 x PP2 baseline, whose tensor
    parallelism stays inside a node's scale-up domain."""
    context = make_context(DEFAULT_MODEL, cluster="h200x8x4", engine="vllm")
    start = baseline(context)
    assert start.tp // start.attention_dp <= 8 and start.tp * start.pp > 8 and is_legal(context, start)
    plain = make_context(DEFAULT_MODEL, cluster="mi355x", engine="vllm")
    assert baseline(plain).ep == 1 and baseline(plain).attention_dp == 1   # plain layouts stay first


def test_a_cpu_engine_starts_from_the_values_it_can_run():
    """llama.cpp has no graph capture: the baseline takes its one legal value rather than
    calling the model too big for the machine."""
    start = baseline(make_context("llama-3.1-8b", cluster="cpu", engine="llamacpp"))
    assert start.graph_capture == "none" and start.tp == 1


@pytest.mark.parametrize("engine, splits", [("atom", False), ("vllm", True)])
def test_no_split_seed_on_an_engine_whose_command_line_cannot_start_one(engine, splits):
    """ATOM has no prefill/decode pool flags: a split pick could not be deployed, so the
    seeds (and plan-mix's auto candidates, which are seeds) hold none; vLLM's do."""
    context = make_context("gpt-oss-120b", engine=engine)
    _, seeds = _round_zero(context)
    assert any(seed.config.disaggregated for seed in seeds) is splits
    assert any(seed.group == "disaggregation" for seed in seeds) is splits


@pytest.mark.parametrize("engine, own_chunk", [("trtllm", False), ("vllm", True)])
def test_an_engine_without_a_chunk_size_moves_it_with_the_budget(engine, own_chunk):
    """TensorRT-LLM's prompt chunk is its step budget (no flag of its own): chunk-size seeds
    would price and launch like their baseline, wasted trials under other names."""
    context = make_context("gpt-oss-120b", cluster="b200x8", engine=engine)
    start, seeds = _round_zero(context)
    moved = [s.config for s in seeds if s.config.max_batched_tokens != start.max_batched_tokens]
    chunk_only = [s.config for s in seeds if s.config.max_batched_tokens == start.max_batched_tokens
                  and s.config.chunked_prefill_size != start.chunked_prefill_size]
    assert moved and bool(chunk_only) is own_chunk
    if not own_chunk:
        assert all(c.chunked_prefill_size == c.max_batched_tokens for c in moved)


@pytest.mark.parametrize("engine, cluster, offered", [
    ("vllm", "b200x8", {"library"}), ("sglang", "b200x8", {"library", "fused_rmsnorm"}),
    ("trtllm", "b200x8", {"library", "custom_one_shot", "custom_two_shot"}),
    ("vllm", "mi355x", {"library", "quick_reduce"}), ("atom", "mi355x", set())])
def test_all_reduce_seeds_are_the_ones_the_engine_launch_can_set(engine, cluster, offered):
    """vLLM has no flag for its custom one- or two-shot all-reduce (it picks one by message
    size): such a seed priced a pick `deploy` refuses."""
    context = make_context("deepseek-r1", cluster=cluster, engine=engine)   # TP8 baseline
    _, seeds = _round_zero(context)
    values = {s.config.allreduce_algorithm for s in seeds if s.config.allreduce_algorithm is not None}
    assert values == offered


@pytest.mark.parametrize("engine, offered", [("vllm", {"deepep", "pplx"}), ("sglang", {"deepep"}), ("trtllm", set())])
def test_all_to_all_seeds_are_the_ones_the_engine_launch_can_set(engine, offered):
    """TensorRT-LLM picks its own EP dispatch: a deepep seed priced a pick `deploy` refuses."""
    context = make_context("deepseek-r1", cluster="b200x8", engine=engine)
    _, seeds = _round_zero(context)
    assert {s.config.all_to_all_backend for s in seeds} - {"none"} == offered


def test_no_seed_takes_an_attention_dp_trtllm_cannot_launch():
    """TensorRT-LLM's attention DP spans every TP rank or none; a DeepSeek-R1 search on it
    priced tp=8, attention_dp=2 and its deploy line refused the pick."""
    context = make_context("deepseek-r1", cluster="h200x8", engine="trtllm")
    _, seeds = _round_zero(context)
    assert {s.config.attention_dp for s in seeds} <= {1, 8}


def test_an_unset_activation_lever_is_the_launch_its_weights_make():
    """fp4 experts GLM-5.2 does not ship run W4A4 on B200 with the activation lever unset,
    so offering activation_dtype=fp4 would price the same launch again; bf16 (W4A16) is a
    new one and is offered."""
    context = make_context("glm-5.2", cluster="b200x8", engine="vllm")
    offers = list(SeedPlanner(context)._precision(Configuration(tp=8, ep=8, expert_dtype="fp4")))
    activations = [o["activation_dtype"] for o in offers if "activation_dtype" in o]
    assert "fp4" not in activations and "bf16" in activations


def test_precision_offers_differ_from_the_base_as_priced():
    """An unset lever is priced at the calibrating anchor's recipe (`as_priced`): offering
    that recipe's value again would price the base's own launch a second time."""
    from predictor.anchors.anchoring import as_priced
    context = make_context("deepseek-r1", cluster="b200x8", engine="sglang")
    base = Configuration(tp=8, ep=8)
    _, taken = as_priced(context.target, base, context_tokens=context.workload.priced_context_tokens)
    assert taken        # the stack has an anchor whose recipe fills the unset precisions
    offers = list(SeedPlanner(context)._precision(base))
    assert not [o for o in offers if any(o.get(lever) == value for lever, value in taken.items())]


def test_the_search_checks_memory_at_the_precisions_it_prices():
    """A candidate's unset precisions are sized as `predict` prices them (the calibrating
    anchor's FP8 recipe for Llama-3.1-70B on H100 under vLLM), not as the checkpoint's
    BF16: TP2 at a 0.8 KV fraction fits (36 GB of weights a GPU), TP1 at 0.9 too; TP1 at
    0.8 does not (70 GB of weights on 80)."""
    context = build_context(TuneRequest(model="llama-3.1-70b", cluster="h100x8", workload="2k/256"))
    assert is_legal(context, Configuration(tp=2, replicas=4, kv_memory_fraction=0.8))
    assert is_legal(context, Configuration(replicas=8))
    assert not is_legal(context, Configuration(replicas=8, kv_memory_fraction=0.8))
    assert not is_legal(context, Configuration(replicas=8, weight_dtype="bf16"))     # asked BF16 stays BF16


@pytest.mark.parametrize("objective, lowest", [("memory_per_gpu", 0.5), ("kv_cache_per_gpu", 0.5),
                                               ("weights_per_gpu", 0.8), ("throughput", 0.8)])
def test_a_memory_objective_is_offered_the_kv_fraction_down_to_its_bound(objective, lowest):
    """memory_per_gpu stopped 'exhausted' at 247 GB/GPU with 0.8-0.9 the only fractions
    tried, where a legal 0.5 holds 155; other objectives keep the first search's ladder."""
    context = make_context("gpt-oss-120b", objective=objective)
    _, seeds = _round_zero(context)
    fractions = {seed.config.kv_memory_fraction for seed in seeds if "kv_memory_fraction" in (seed.proposed or {})}
    assert min(fractions) == lowest and 0.85 in fractions
