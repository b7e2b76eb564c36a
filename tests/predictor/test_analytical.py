"""The analytical steady state (predictor/analytical.py) on a linear fake step model,
where every quantity can be computed by hand."""

from dataclasses import replace

import pytest

from levers.catalog import Engine
from predictor.analytical import Load, PoolLoad, busiest_rank_prompts, chunks, disaggregated_state, steady_state
from predictor.sim.scheduler import PROFILES
from predictor.step.cost import Mode, StepCost


class LinearModel:
    """decode = 5 ms + 0.05 ms per request; a prefill chunk adds 0.1 us per token."""

    mode = Mode.RANK_ONLY
    anchor_id = None
    flags = ()
    attention_dp = 1

    def __init__(self, tokens_per_step: float = 1.0) -> None:
        self.tokens_per_step = tokens_per_step

    def decode_us(self, batch, context_tokens):
        return 5000.0 + 50.0 * batch

    def prefill_us(self, num_tokens, num_seqs=1, context_tokens=0.0):
        return 2000.0 + 0.1 * num_tokens

    def mixed_us(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0, *, prompts=0):
        return self.decode_us(decode_batch, context_tokens) + 0.1 * prefill_tokens

    def decode(self, batch, context_tokens):
        return StepCost.of(fixed=self.decode_us(batch, context_tokens))

    def prefill(self, num_tokens, num_seqs=1, context_tokens=0.0):
        return StepCost.of(fixed=self.prefill_us(num_tokens))

    def mixed(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0, *, prompts=0):
        return StepCost.of(fixed=self.mixed_us(prefill_tokens, decode_batch, context_tokens, prompts=prompts))


class RankedModel(LinearModel):
    """The same on four attention-DP ranks: a counted prompt's chunk runs on one rank."""

    attention_dp = 4

    def mixed_us(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0, *, prompts=0,
                 rank_prompts=0):
        per_rank = prefill_tokens * rank_prompts / prompts if rank_prompts else prefill_tokens if prompts \
            else prefill_tokens / 4
        return self.decode_us(decode_batch, context_tokens) + 0.1 * per_rank


def test_busiest_attention_dp_rank_carries_the_largest_poisson_count():
    assert busiest_rank_prompts(3.0, 1) == 3.0                          # one rank: every prompt, serially
    assert busiest_rank_prompts(0.01, 8) == pytest.approx(0.01, rel=0.01)   # rare prompts seldom meet
    assert busiest_rank_prompts(1000.0, 8) == pytest.approx(125.0, rel=0.2)  # many: about k / dp each
    assert 2.0 < busiest_rank_prompts(8.0, 8) < 3.0                     # E[max] of 8 Poisson(1) counts
    values = [busiest_rank_prompts(k, 4) for k in (0.5, 1.0, 2.0, 4.0, 8.0, 60.0, 400.0)]
    assert values == sorted(values)


def test_attention_dp_prompts_of_one_step_overlap_on_their_ranks():
    load = Load(isl=1024, osl=1025, concurrency=256, running_cap=256, chunk_tokens=8192)
    state = steady_state(RankedModel(), load)
    others = state.running * 255 / 256
    per_step = round(others / 1024, 3)
    expected_step_ms = (5000 + 50 * round(state.running) + 102.4 * busiest_rank_prompts(per_step, 4)) / 1000
    assert state.step_ms == pytest.approx(expected_step_ms, rel=1e-5)   # the fixed point's last move
    assert busiest_rank_prompts(per_step, 4) < 0.95 * per_step        # a quarter of a prompt a step: some overlap
    # the prompt's own chunk rides one rank whole: its TTFT carries 102.4 us, not a quarter
    assert state.ttft_admission_ms == pytest.approx((5000 + 50 * round(others) + 102.4) / 1000, rel=1e-9)


def test_a_closed_loop_past_the_prefill_budget_queues_its_prompts():
    """1,000 clients of one-step requests and 1k prompts, 2k tokens a step: a step starts
    two prompts, so every step is a full mixed step (not the decode step plus the work of
    hundreds of prompts), the rate is two prompts a step and the other clients wait
    (Little's law over the loop)."""
    load = Load(isl=1000, osl=2, concurrency=1000, running_cap=4096, chunk_tokens=2000)
    state = steady_state(LinearModel(), load)
    assert state.step_ms == pytest.approx((5000 + 50 * 2 + 0.1 * 2000) / 1000, rel=1e-3)
    assert state.requests_per_s == pytest.approx(2 / state.step_ms * 1000)
    assert state.requests_per_s * state.e2e_ms / 1000 == pytest.approx(1000, rel=1e-6)
    below = steady_state(LinearModel(), replace(load, concurrency=2))      # within the budget: no queue
    assert below.ttft_ms - below.ttft_admission_ms <= below.step_ms          # a step's wait at most
    assert state.ttft_ms - state.ttft_admission_ms > 100 * state.step_ms


def test_one_output_token_each_step_carries_the_prompts_of_the_step():
    """With no decode a step is its prompts': 100 clients of 1k prompts and one output
    token in an 8k budget run eight prompts a step, and Little's law gives the wait (one
    prompt a step was charged: DeepSeek-R1 DEP8 at 100/1 priced at 7x the DES's output)."""
    state = steady_state(LinearModel(), Load(1024, 1, concurrency=100, running_cap=256, chunk_tokens=8192))
    assert state.requests_per_s * state.step_ms / 1000 == pytest.approx(8.0)
    assert state.step_ms == pytest.approx((5000 + 50 + 2000 + 0.1 * 8192) / 1000)   # the eight prompts' work
    assert state.ttft_ms == pytest.approx(100 / state.requests_per_s * 1000, rel=0.02)


def test_balanced_attention_dp_starts_one_prompt_per_rank_together():
    # TRT-LLM's enable_balance: prompts wait until every rank has one, so a step carries
    # k / dp one-prompt rounds, below the busiest rank of k random placements.
    load = Load(isl=1024, osl=1025, concurrency=256, running_cap=256, chunk_tokens=8192, balanced_dp=True)
    state = steady_state(RankedModel(), load)
    per_step = state.running * 255 / 256 / 1024
    expected_step_ms = (5000 + 50 * round(state.running) + 102.4 * per_step / 4) / 1000
    assert state.step_ms == pytest.approx(expected_step_ms, rel=1e-4)
    random_placement = steady_state(RankedModel(), replace(load, balanced_dp=False))
    assert state.step_ms < random_placement.step_ms
    assert PROFILES[Engine.TRTLLM].balances_attention_dp
    assert not PROFILES[Engine.VLLM].balances_attention_dp and not PROFILES[Engine.SGLANG].balances_attention_dp


def test_balanced_attention_dp_steps_carry_no_more_prompts_than_clients():
    """Two clients on four balanced ranks: a step carries at most their two prompts' MoE
    tokens, never one per rank (DeepSeek-R1 DEP8 under TensorRT-LLM was priced 58.6 ms TTFT
    at one client and 104 at two, each prompt's step carrying eight prompts)."""
    class Recording(RankedModel):
        def __init__(self):
            super().__init__()
            self.prompts = []

        def mixed_us(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0, *, prompts=0,
                     rank_prompts=0):
            self.prompts.append(prompts)
            return super().mixed_us(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens,
                                    prompts=prompts, rank_prompts=rank_prompts)

    for clients in (2, 3):
        model = Recording()
        steady_state(model, Load(isl=1024, osl=1025, concurrency=clients, running_cap=256, chunk_tokens=8192,
                                 balanced_dp=True))
        assert model.prompts and max(model.prompts) <= clients


def test_chunks_split_a_prompt():
    assert chunks(1000, 512) == [(512, 0), (488, 512)]
    assert chunks(100, 8192) == [(100, 0)]


def test_closed_loop_obeys_littles_law_and_the_step_formula():
    load = Load(isl=1024, osl=1025, concurrency=64, running_cap=256, chunk_tokens=8192)
    state = steady_state(LinearModel(), load)
    # Little's law: clients = rate x end-to-end latency.
    assert state.requests_per_s * state.e2e_ms / 1000 == pytest.approx(64, rel=1e-6)
    # Mean step = decode(batch) + the prefills of the *other* clients spread over a
    # request's 1024 decode steps: (running x 63/64)/1024 prompts x 0.1 us x 1024 tokens.
    batch = round(state.running)
    others = state.running * 63 / 64
    expected_step_ms = (5000 + 50 * batch + 0.1 * 1024 * others / 1024) / 1000
    assert state.step_ms == pytest.approx(expected_step_ms, rel=1e-9)
    assert state.tpot_ms == state.step_ms
    # TTFT: half a step's wait for the running step, then one chunk of 1024 tokens riding
    # in a decode step of the other clients.
    assert state.ttft_ms == pytest.approx(state.step_ms / 2 + (5000 + 50 * round(others) + 102.4) / 1000, rel=1e-9)
    assert 63 < state.running < 64


def test_one_client_is_never_stalled_by_its_own_prefill():
    state = steady_state(LinearModel(), Load(isl=4096, osl=17, concurrency=1))
    # TPOT is the pure batch-1 decode step; the prompt is paid once, in TTFT.
    assert state.tpot_ms == pytest.approx(5.05, rel=1e-9)
    assert state.ttft_ms == pytest.approx((2000 + 0.1 * 4096) / 1000, rel=1e-9)
    assert state.e2e_ms == pytest.approx(state.ttft_ms + 16 * 5.05, rel=1e-9)


def test_clients_beyond_the_running_cap_queue():
    capped = steady_state(LinearModel(), Load(1024, 1025, concurrency=128, running_cap=32))
    free = steady_state(LinearModel(), Load(1024, 1025, concurrency=32, running_cap=32))
    assert capped.requests_per_s == pytest.approx(free.requests_per_s, rel=1e-6)
    # 96 clients wait; by Little's law each waits 96 / rate.
    wait_ms = 96 / capped.requests_per_s * 1000
    assert capped.ttft_ms == pytest.approx(free.ttft_ms + wait_ms, rel=1e-6)
    assert capped.ttft_admission_ms == pytest.approx(free.ttft_admission_ms, rel=1e-6)


def test_speculation_commits_several_tokens_per_step():
    plain = steady_state(LinearModel(1.0), Load(1024, 1025, concurrency=8))
    spec = steady_state(LinearModel(2.5), Load(1024, 1025, concurrency=8))
    assert spec.tpot_ms == pytest.approx(spec.step_ms / 2.5)
    assert spec.tpot_ms < 0.5 * plain.tpot_ms


def test_open_loop_below_capacity_serves_the_offered_rate():
    state = steady_state(LinearModel(), Load(1024, 257, concurrency=0, arrival_rate=2.0))
    assert state.requests_per_s == 2.0
    assert not state.overloaded
    # ~ rate x decode time requests are decoding.
    assert state.running == pytest.approx(2.0 * 256 * state.step_ms / 1000, rel=1e-6)


def test_an_overloaded_open_loop_serves_what_the_full_replica_serves():
    """Arrivals beyond what the replica serves: the throughput is the replica full (a
    closed loop at its running cap), not the offered load, and it is flagged."""
    load = Load(1024, 257, concurrency=0, arrival_rate=10_000.0, running_cap=64)
    state = steady_state(LinearModel(), load)
    full = steady_state(LinearModel(), replace(load, arrival_rate=0.0, concurrency=64))
    assert state.overloaded and state.requests_per_s == pytest.approx(full.requests_per_s)
    assert state.requests_per_s < 1000


def test_disaggregated_pools_have_no_prefill_interference():
    model = LinearModel()
    pools = PoolLoad(prefill=Load(1024, 1025, 0, replicas=1), decode=Load(1024, 1025, 64, running_cap=256),
                     prefill_budget_tokens=8192, handoff_us=500.0)
    state, rate = disaggregated_state(model, model, pools, 64)
    assert state.step_ms == pytest.approx(state.decode_step_ms)
    assert rate * state.e2e_ms / 1000 == pytest.approx(64, rel=0.02)
    assert state.ttft_ms > (2000 + 102.4 + 500) / 1000


def test_a_closed_loop_client_waits_out_its_host_time():
    """A client's cycle is the engine time plus the host time it waits out (METHOD §3.12)."""
    host_us = 200_000.0
    bare = steady_state(LinearModel(), Load(1024, 1025, concurrency=8))
    hosted = steady_state(LinearModel(), Load(1024, 1025, concurrency=8, host_us=host_us))
    # Little's law over the whole cycle: clients = rate x (e2e + host)
    assert hosted.requests_per_s * (hosted.e2e_ms + host_us / 1000) / 1000 == pytest.approx(8, rel=1e-6)
    assert hosted.requests_per_s < bare.requests_per_s


def test_queued_clients_hide_host_time_unless_it_shares_the_engines_cores():
    host_us = 200_000.0
    free = steady_state(LinearModel(), Load(1024, 1025, concurrency=128, running_cap=32))
    gpu = steady_state(LinearModel(), Load(1024, 1025, concurrency=128, running_cap=32, host_us=host_us))
    cpu = steady_state(LinearModel(), Load(1024, 1025, concurrency=128, running_cap=32, host_us=host_us,
                                           host_overlaps=False))
    # a saturated GPU engine runs at cap / e2e whatever the clients' host time ...
    assert gpu.requests_per_s == pytest.approx(free.requests_per_s, rel=1e-6)
    # ... while on a CPU engine the host work is part of each request's service
    assert cpu.requests_per_s == pytest.approx(32 / ((cpu.e2e_ms - (cpu.ttft_ms - cpu.ttft_admission_ms)
                                                      + host_us / 1000) / 1000), rel=1e-3)
    assert cpu.requests_per_s < 0.99 * gpu.requests_per_s


def test_a_split_benchmark_meets_its_first_wave_at_the_prefill_pool():
    """C prompts arriving together queue at the prefill pool; one request in
    ``requests_per_client`` meets that wave (predictor.analytical)."""
    from predictor.analytical import TOKENIZE_US_PER_TOKEN, disaggregated_benchmark_ttft_ms, wave_tokenize_ms

    model = LinearModel()
    def wave(clients, requests_per_client, replicas=1):
        pools = PoolLoad(prefill=Load(1024, 1025, 0, replicas=replicas), decode=Load(1024, 1025, clients, running_cap=512),
                         prefill_budget_tokens=8192, handoff_us=500.0)
        state, _ = disaggregated_state(model, model, pools, clients)
        return disaggregated_benchmark_ttft_ms(model, model, pools, clients, state, requests_per_client), state

    one, state = wave(128, 1)
    # 128 prompts of 1024 tokens, 8 a step of 2000 + 0.1 * 8192 us: mean finish of 16 steps;
    # then the hand-off, half a decode step, and the front end's serial tokenisation of the
    # 127 prompts ahead (half of them on average, METHOD §3.12's default per-token cost)
    step_us = 2000 + 0.1 * 8192
    mean_finish_us = sum(step_us * k for k in range(1, 17)) / 16
    tokenise_ms = wave_tokenize_ms(model, Load(1024, 1025, 128, running_cap=128))
    assert tokenise_ms == pytest.approx(127 / 2 * TOKENIZE_US_PER_TOKEN * 1024 / 1000)
    assert one == pytest.approx((mean_finish_us + 500 + state.step_ms * 1000 / 2) / 1000 + tokenise_ms, rel=1e-6)
    ten, _ = wave(128, 10)
    assert ten == pytest.approx(0.1 * one + 0.9 * state.ttft_ms, rel=1e-6)
    assert wave(32, 10)[0] < ten                        # the wave grows with the clients
    assert wave(128, 10, replicas=4)[0] < ten           # and shrinks with prefill replicas


def test_a_scheduler_that_polls_every_n_steps_makes_arrivals_wait_half_of_them():
    """SGLang's --scheduler-recv-interval N (METHOD §8, `Load.recv_interval`): a
    closed-loop arrival waits for the next poll, N/2 running steps on average instead of
    half a step; the steps themselves are the same work."""
    model = LinearModel()
    base = Load(isl=1000, osl=101, concurrency=16, running_cap=64, chunk_tokens=8192)
    polled = Load(isl=1000, osl=101, concurrency=16, running_cap=64, chunk_tokens=8192, recv_interval=30)
    s1, s30 = steady_state(model, base), steady_state(model, polled)
    assert s30.ttft_ms - s1.ttft_ms == pytest.approx((30 * s30.step_ms - s1.step_ms) / 2.0, rel=0.01)
    assert s30.tpot_ms == pytest.approx(s1.tpot_ms, rel=0.02)
    assert s30.requests_per_s < s1.requests_per_s      # each cycle is longer by the wait


def test_a_scheduler_that_plans_a_step_ahead_admits_a_step_later():
    """vLLM's async scheduling (`Load.ahead_steps`): the next step is planned while the GPU
    runs this one, so an arrival joins one running step later; the steps are the same."""
    model = LinearModel()
    base = Load(isl=1000, osl=101, concurrency=16, running_cap=64, chunk_tokens=8192)
    ahead = Load(isl=1000, osl=101, concurrency=16, running_cap=64, chunk_tokens=8192, ahead_steps=1)
    s0, s1 = steady_state(model, base), steady_state(model, ahead)
    assert s1.ttft_ms - s0.ttft_ms == pytest.approx((1.5 * s1.step_ms - 0.5 * s0.step_ms), rel=0.01)
    assert s1.tpot_ms == pytest.approx(s0.tpot_ms, rel=0.02)


def _real(model: str, cluster: str, engine: str, **levers):
    from levers.configuration import Configuration
    from predictor.predict import predict
    from predictor.target import Target
    from predictor.cards.registry import load_card
    from predictor.hardware import parse_cluster
    from predictor.workload import WorkloadSpec

    target = Target(load_card(model), parse_cluster(cluster), Engine(engine))
    return lambda isl, osl, **more: predict(target, Configuration(**{**levers, **more}),
                                            WorkloadSpec("fixed", isl, osl)).metrics


def test_short_prompts_arriving_together_share_one_mixed_step():
    """Many short prompts a step (100/10): a mixed step carries them together, priced once.
    Summed one-prompt marginals charged the eager launch of a batch past the captured
    sizes once per prompt (Llama-3.1-8B on H200, TP8: ITL 4.8 -> 50 ms and output
    throughput down 4.6x from 128 to 256 clients) and priced Qwen3-32B's 12 prompts a step
    below the compute roofline (156% of the H200's dense BF16 peak)."""
    llama = _real("llama-3.1-8b", "h200x8", "vllm", tp=8)
    by_clients = {c: llama(100, 10, concurrency=c) for c in (128, 160, 200, 256)}
    outputs = [by_clients[c]["output_throughput_per_gpu"] for c in sorted(by_clients)]
    assert outputs == sorted(outputs)
    assert by_clients[256]["itl_ms_mean"] < 3 * by_clients[128]["itl_ms_mean"]
    qwen = _real("qwen3-32b", "h200x8", "vllm", tp=1)(100, 10, concurrency=128)
    params = 32.8e9                          # Qwen3-32B, 2 FLOPs a token per weight
    peak = 989e12                            # H200 dense BF16
    assert qwen["throughput_per_gpu"] * 2 * params <= peak


def test_a_mixed_step_of_several_prompts_attends_within_each_prompt():
    """Eight 1k prompts in one 8k step cost less attention than one 8k prompt (each
    attends to its own tokens), and no less than one 1k prompt's step."""
    from levers.configuration import Configuration
    from predictor.anchors.anchoring import Anchoring
    from predictor.cards.registry import load_card
    from predictor.hardware import parse_cluster
    from predictor.target import Target

    target = Target(load_card("llama-3.1-70b"), parse_cluster("h200x8"), Engine("vllm"))
    model = Anchoring.of(target).model(Configuration(tp=8))
    eight = model.mixed(8192, 32, 2048.0, prompts=8).get("attention")
    one_long = model.mixed(8192, 32, 2048.0, prompts=1).get("attention")
    one_short = model.mixed(1024, 32, 2048.0, prompts=1).get("attention")
    assert one_short < eight < one_long


def test_prompts_a_step_are_priced_continuously_and_the_fixed_point_settles(monkeypatch):
    """4.4 prompts a step are steps of 4 and 5 in the proportion that averages 4.4: the
    price is continuous in the load, so the fixed point settles (rounded to a whole
    count, Llama-3.1-8B's 64-client answer alternated between 4 and 5 prompts a step and
    moved with the number of iterations: ITL 4.26 or 4.82 ms)."""
    import predictor.analytical as analytical
    from predictor.analytical import prompts_together

    assert prompts_together(0.7, 100, 8192) == 1.0 and prompts_together(4.4, 100, 8192) == 4.4
    assert prompts_together(400.0, 100, 8192) == 81.92 and prompts_together(3.0, 8192, 8192) == 1.0
    answers = []
    for iterations in (12, 13, 20):
        monkeypatch.setattr(analytical, "ITERATIONS", iterations)
        answers.append(_real("llama-3.1-8b", "h200x8", "vllm", tp=8)(100, 10, concurrency=64)["itl_ms_mean"])
    assert max(answers) / min(answers) < 1.01


def test_attention_dp_short_prompts_of_one_rank_share_its_mixed_step():
    """Under attention DP the busiest rank's prompts of a step share one mixed step, and the
    MoE layers carry every rank's: DeepSeek-R1 DEP8 on H200 (SGLang), 100/10 at 256
    clients, about 25 prompts a step and 6 on the busiest rank. Summed one-prompt
    marginals priced each 100-token prompt on the rank's weight-bound GEMMs (1.3 ms) and
    counted only the busiest rank's prompt tokens at the MoE: ITL 38 ms, below a mixed step
    of six prompts on one rank (48 ms, its dense GEMMs compute-bound)."""
    from levers.configuration import Configuration
    from predictor.anchors.anchoring import Anchoring
    from predictor.cards.registry import load_card
    from predictor.hardware import parse_cluster
    from predictor.target import Target

    config = Configuration(tp=8, attention_dp=8, ep=8)
    metrics = _real("deepseek-r1", "h200x8", "sglang", tp=8, attention_dp=8, ep=8)(100, 10, concurrency=256)
    model = Anchoring.of(Target(load_card("deepseek-r1"), parse_cluster("h200x8"), Engine("sglang"))).model(config)
    batch = 230                                 # about the running batch: 256 x 9 / 10
    six_on_one_rank = model.mixed_us(600, batch, 105.0, prompts=6, rank_prompts=6) / 1000
    assert metrics["itl_ms_mean"] >= six_on_one_rank
    # the rank's six prompts cost more together than six times one (past the weights' read)
    one = model.mixed_us(100, batch, 105.0, prompts=1) / 1000 - model.decode_us(batch, 105.0) / 1000
    assert six_on_one_rank - model.decode_us(batch, 105.0) / 1000 > 6 * one



@pytest.mark.parametrize("model, cluster, engine, levers, isl, osl", [
    ("deepseek-r1", "h200x8", "sglang", dict(tp=8, attention_dp=8, ep=8), 100, 10),
    ("deepseek-r1", "b200x8", "trtllm", dict(tp=8, attention_dp=8, ep=8), 1000, 100),          # balanced DP
    ("deepseek-r1", "b200x8", "trtllm", dict(tp=8, attention_dp=8, ep=8, spec_method="mtp", spec_depth=3), 1000, 100),
])
def test_attention_dp_throughput_rises_with_load_without_a_cliff(model, cluster, engine, levers, isl, osl):
    """A review found cliffs where the busiest rank's expected prompts passed its chunk
    (SGLang DEP8, 100/10: output 755 -> 597 tok/s/GPU from 520 to 528 clients) or one
    prompt a step (TensorRT-LLM's balanced DP, 1000/100: 1834 -> 1116 from 800 to 832): the
    MoE then carried every rank's prompts on one side of the line and one prompt's on the
    other. The DES shows neither."""
    price = _real(model, cluster, engine, **levers)
    clients = (64, 256, 512, 520, 528, 640, 800, 832, 1024, 1536)
    outputs = [price(isl, osl, concurrency=c)["output_throughput_per_gpu"] for c in clients]
    assert all(b >= 0.99 * a for a, b in zip(outputs, outputs[1:])), list(zip(clients, outputs))


def test_a_prompt_one_token_longer_than_the_budget_holds_prices_alike():
    """The budget holds chunk / isl prompts, the last partly (the engine fills it): at 4096
    and 4097 prompt tokens in an 8192-token budget the prefill-bound step was 103 and 52 ms."""
    price = _real("llama-3.1-8b", "h200x8", "vllm", tp=1)
    at, past = (price(isl, 20, concurrency=1024)["itl_ms_mean"] for isl in (4096, 4097))
    assert past == pytest.approx(at, rel=0.02)


def test_a_prefill_bound_split_queues_its_clients_as_little_s_law_says():
    """A closed loop whose prefill pool is the bottleneck: the rate stops growing with the
    clients, so each waits longer (TTFT and end-to-end grow) and output throughput equals
    clients x output tokens / end-to-end. TTFT stayed 6.6 s from 256 to 1,024 clients."""
    split = _real("deepseek-r1", "b200x8x2", "sglang", disaggregated=True, prefill_layout="TP8/EP8/DP8",
                  decode_layout="TP8/EP8/DP8")
    by_clients = {c: split(8192, 1024, concurrency=c) for c in (256, 1024)}
    assert by_clients[1024]["ttft_ms_mean"] > 3 * by_clients[256]["ttft_ms_mean"]
    for clients, metrics in by_clients.items():
        rate = clients * 1024 / (metrics["e2e_ms_mean"] / 1000.0) / 16
        assert metrics["output_throughput_per_gpu"] == pytest.approx(rate, rel=0.05)


def test_a_dwdp_prefill_pool_prefills_on_every_rank():
    """DWDP16 is sixteen independent prefill ranks (`pool_configs`), not one: on 8k/1k its
    fleet's output is within 2x of a TP16 prefill pool's (it was 15x below)."""
    pools = dict(tp=16, ep=16, attention_dp=16, disaggregated=True, decode_layout="TP16/EP16/DP16",
                 all_to_all_backend="deepep",
                 weight_dtype="recipe:nvfp4", kv_cache_dtype="fp8", concurrency=256)
    dwdp = _real("kimi-k3", "gb300x4x8", "trtllm", prefill_layout="DWDP16", **pools)(8192, 1024)
    tp16 = _real("kimi-k3", "gb300x4x8", "trtllm", prefill_layout="TP16/EP16/DP16", **pools)(8192, 1024)
    assert dwdp["output_throughput_per_gpu"] > tp16["output_throughput_per_gpu"] / 2
