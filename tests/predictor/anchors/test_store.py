"""The anchor store, schema and selection by coverage (predictor/anchors/store.py,
METHOD §4)."""

import importlib.util
import json
import math
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from levers.configuration import Configuration
from levers.errors import InputError
from predictor.anchors.anchor import BEYOND_PHYSICS, HOST_AT_BOUND, STALL_AT_BOUND, Anchor, DecodeSweep, Provenance, Signature
from predictor.anchors.check import plain_coverage
from predictor.anchors.store import (
    AnchorStore,
    _ordered,
    anchor_id_for,
    build_anchor,
    load_anchor_file,
    save_anchor,
    signature_for,
    target_batch,
    user_anchors_dir,
)
from predictor.cards.registry import load_card
from predictor.hardware import has_gpu_profile, parse_cluster
from predictor.step.anchored import calibrate
from predictor.step.priors import TEACHING_MAX_BANDWIDTH, dtype_class, shipped_priors, teaches_other_models

REPO = Path(__file__).resolve().parents[3]
CARD = load_card("deepseek-r1")
MI355X = parse_cluster("mi355x")
SWEEP = (1, 2, 4, 8, 16, 32, 64)


def make_anchor(*, accelerator="MI355X", engine="sglang", model="DeepSeek-R1", tp=8, ep=1, dp=1,
                batches=SWEEP, full=True, kv="bf16", backend="auto", timestamp="2025-06-01T00:00:00Z",
                **extra) -> Anchor:
    sig = Signature(accelerator=accelerator, engine=engine, model=model, weight_dtype="fp8",
                    activation_dtype="fp8", expert_dtype="fp8", kv_cache_dtype=kv, attention_backend=backend,
                    tp=tp, ep=ep, attention_dp=dp, captured_sizes=tuple(batches))
    sweep = DecodeSweep(prompt_tokens=1024, batch_sizes=tuple(batches),
                        itl_ms=tuple(20.0 + 0.25 * b for b in batches), is_full_sweep=full)
    return build_anchor(sig, sweep, (512, 1024, 2048, 4096, 8192), (60.0, 90.0, 160.0, 330.0, 800.0),
                        Provenance(source="test", timestamp=timestamp), **extra)


def select(anchors, concurrency=64, **changes):
    config = Configuration(**{"tp": 8, "concurrency": concurrency, **changes})
    return AnchorStore.from_anchors(anchors).select(CARD, MI355X, "sglang", config, concurrency)


# --- files, ids, schema ------------------------------------------------------------------

def test_bad_anchor_file_names_the_file_and_first_error(tmp_path):
    data = make_anchor().model_dump(mode="json")
    data["decode_sweep"]["itl_ms"] = data["decode_sweep"]["itl_ms"][:-1]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        load_anchor_file(path)
    message = caught.value.message
    assert "broken.json" in message and "decode_sweep" in message and "same length" in message
    assert "\n" not in message
    del data["signature"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"schema error at signature: Field required"):
        load_anchor_file(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_anchor_file(path)


def test_save_is_atomic_and_round_trips(tmp_path):
    anchor = make_anchor()
    folder = tmp_path / "cache"
    path = save_anchor(anchor, folder)
    assert path == folder / f"{anchor.id}.json"
    assert load_anchor_file(path) == anchor
    assert [p.name for p in folder.iterdir()] == [path.name]     # no temp file left
    assert save_anchor(anchor).parent == user_anchors_dir()      # default: $INFERASIM_HOME/anchors


def test_anchor_id_is_stable_and_readable():
    sig = make_anchor(tp=8, ep=8, dp=8).signature
    anchor_id = anchor_id_for(sig)
    assert anchor_id.startswith("mi355x-sglang-deepseek-r1-fp8-tp8ep8dp8-")
    assert len(anchor_id.rsplit("-", 1)[1]) == 6
    assert anchor_id == anchor_id_for(Signature.model_validate(sig.model_dump()))
    assert anchor_id != anchor_id_for(sig.model_copy(update={"engine_version": "0.5.1"}))


def test_schema_file_is_up_to_date_and_validates_an_anchor():
    spec = importlib.util.spec_from_file_location("build_schemas", REPO / "scripts" / "build_schemas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = (REPO / "predictor" / "data" / "anchor.schema.json").read_text("utf-8")
    assert shipped == module.anchor_schema_text(), "run scripts/build_schemas.py"
    schema = json.loads(shipped)
    jsonschema.validate(make_anchor().model_dump(mode="json"), schema)
    bad = make_anchor().model_dump(mode="json") | {"surprise": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_signature_resolves_native_dtypes_and_auto_backends():
    sig = signature_for(CARD, MI355X, "sglang", Configuration(tp=8))
    assert (sig.weight_dtype, sig.activation_dtype, sig.expert_dtype, sig.kv_cache_dtype) == ("fp8", "fp8", "fp8", "bf16")
    assert sig.attention_backend == sig.moe_backend == "auto"
    kimi = signature_for(load_card("kimi-k2.5"), MI355X, "vllm", Configuration(tp=8))
    assert (kimi.weight_dtype, kimi.activation_dtype, kimi.expert_dtype) == ("bf16", "bf16", "fp4")
    llama = signature_for(load_card("Llama-3.1-70B"), MI355X, "vllm", Configuration(tp=4, kv_cache_dtype="fp8"))
    assert llama.expert_dtype is None and llama.kv_cache_dtype == "fp8"


def test_an_unset_activation_signs_as_the_narrowest_its_gemms_run():
    """What a harvest of the configuration measures: requantized fp4 experts run W4A4 on a
    GPU with FP4 tensor cores (and sign fp4 though the attention stays bf16), weight-only
    on Hopper; an NVFP4 recipe signs fp4, not its own name."""
    glm, experts = load_card("glm-5.2"), Configuration(tp=8, ep=8, expert_dtype="fp4")
    assert signature_for(glm, parse_cluster("b200x8"), "vllm", experts).activation_dtype == "fp4"
    assert signature_for(glm, parse_cluster("h200x8"), "vllm", experts).activation_dtype == "bf16"
    kimi = signature_for(load_card("kimi-k3"), parse_cluster("b200x8"), "trtllm",
                         Configuration(tp=8, weight_dtype="recipe:nvfp4"))
    assert kimi.activation_dtype == "fp4"
    assert signature_for(glm, parse_cluster("b200x8"), "vllm",
                         Configuration(tp=8, ep=8, expert_dtype="fp8")).activation_dtype == "fp8"


# --- refusal and coverage ----------------------------------------------------------------

def test_another_gpu_or_engine_is_refused():
    h100 = make_anchor(accelerator="H100")
    vllm = make_anchor(engine="vllm")
    selection = select([h100, vllm])
    assert selection.anchor is None and not selection.covered and "no anchor" in selection.reason
    store = AnchorStore.from_anchors([h100, vllm])
    assert not store.has_anchor(CARD, MI355X, "sglang")
    assert store.has_anchor(CARD, parse_cluster("h100"), "sglang")


def test_exact_width_covers_in_ladder_with_no_flags():
    anchor = make_anchor()
    selection = select([anchor], concurrency=32)
    assert selection.covered and selection.anchor == anchor and selection.flags == ()
    assert selection.kinds == ("in-ladder",)


def test_a_batch_outside_the_sweep_is_a_load_transfer_up_or_down():
    anchor = make_anchor(batches=(8, 16, 32, 64))
    assert select([anchor], concurrency=80, max_running_requests=1024).kinds == ("in-ladder",)   # 1.25x band
    outside = select([anchor], concurrency=512, max_running_requests=1024)
    assert not outside.covered and outside.anchor == anchor and outside.kinds == ("load",)
    assert "batch-outside-sweep" in outside.flags
    below = select([anchor], concurrency=2)
    assert below.kinds == ("load-down",) and "batch-outside-sweep" in below.flags


def test_target_batch_is_per_replica_and_per_micro_batch():
    config = Configuration(tp=8, pp=2, replicas=2, concurrency=256)
    assert target_batch(config, 256) == 64       # 128 per replica, 64 per micro-batch
    assert target_batch(replace(config, max_running_requests=32), 256) == 16


def test_target_batch_caps_each_attention_dp_rank_as_the_engines_do():
    """Lever 23 caps each scheduler rank (the simulator's and the analytical model's
    running cap): a DEP8 replica holds 8x the cap, not the cap."""
    config = Configuration(tp=8, ep=8, attention_dp=8, max_running_requests=64, concurrency=1024)
    assert target_batch(config, 1024) == 512
    assert target_batch(replace(config, attention_dp=1), 1024) == 64


def test_an_anchor_whose_fit_reached_a_bound_prices_its_own_layout_only():
    """A host time at its 1 s bound: the calibration absorbed what the prefill physics
    missed on its rows. It keeps its own layout at any load; other layouts take another
    anchor of the stack, else the priors, and say so; a stall at its bound is the runs'
    own and keeps the anchor carried."""
    at_bound = make_anchor(tp=4).model_copy(update={"flags": (HOST_AT_BOUND,)})
    assert select([at_bound], tp=4).anchor == at_bound                       # its own ladder
    assert select([at_bound], tp=4, concurrency=2048, max_running_requests=2048).kinds == ("load",)
    pool = AnchorStore.from_anchors([at_bound]).select(CARD, MI355X, "sglang", Configuration(tp=4, concurrency=64), 64,
                                                       disaggregated=True)
    assert pool.anchor is None                                                # a split's pool is another layout
    alone = select([at_bound], tp=8)
    assert alone.anchor is None and not alone.covered
    assert any(flag.startswith("anchor-not-carried") and at_bound.id in flag for flag in alone.flags)
    assert alone.recipe == select([make_anchor(tp=4)], tp=8).recipe          # its recipe still resolves levers
    farther = make_anchor(tp=2)
    instead = select([at_bound, farther], tp=8)
    assert instead.anchor == farther and f"anchor-not-carried: {at_bound.id} (host-time-at-bound)" in instead.flags
    assert select([make_anchor(tp=4), farther], tp=8).anchor.signature.tp == 4   # unflagged: the nearest
    stalled = make_anchor(tp=4).model_copy(update={"flags": (STALL_AT_BOUND,)})
    assert select([stalled, farther], tp=8).anchor == stalled


def test_an_anchor_whose_fit_left_the_physical_range_prices_its_own_widths_only():
    """Its factors reproduce its own steps (queued KV, interference) and describe no other
    layout or precision: another width or an asked precision it did not run takes the next
    anchor of the stack, else the priors; its own widths and precisions keep it, a split's
    pool of them too (its steps are that layout's)."""
    beyond = make_anchor(tp=4).model_copy(update={"flags": (BEYOND_PHYSICS,)})
    assert select([beyond], tp=4).anchor == beyond
    own = beyond.signature.weight_dtype
    assert select([beyond], tp=4, weight_dtype=own).anchor == beyond
    other = next(d for d in ("fp8", "bf16") if d != own)
    assert select([beyond], tp=4, weight_dtype=other).anchor is None       # another precision's bytes
    pool = AnchorStore.from_anchors([beyond]).select(CARD, MI355X, "sglang", Configuration(tp=4, concurrency=64), 64,
                                                     disaggregated=True)
    assert pool.anchor == beyond
    alone = select([beyond], tp=8)
    assert alone.anchor is None and f"anchor-not-carried: {beyond.id} (fit-beyond-physics)" in alone.flags
    farther = make_anchor(tp=2)
    assert select([beyond, farther], tp=8).anchor == farther


def test_the_fit_beyond_physics_flag_is_set_at_build_where_priors_stop_learning():
    """The build flags the fits the priors leave out (one threshold, `TEACHING_MAX_BANDWIDTH`):
    Qwen3-32B's GB200 bf16 TP2 sweep and three H100 split-pool points. The build fits around
    its first priors, the priors around their own last round, so a fit within 2% of the
    threshold may read either way (B300 DeepSeek-V3 fp8 TP4: 2.503, at its host bound too)."""
    priors = shipped_priors()
    anchors = [a for a in AnchorStore.default().all() if has_gpu_profile(a.signature.accelerator)]
    assert sum(BEYOND_PHYSICS in a.flags for a in anchors) >= 4
    for anchor in anchors:
        sig = anchor.signature
        fitted = calibrate(anchor, load_card(sig.model), sig.engine,
                           priors.seed(sig.accelerator, sig.engine, dtype_class(sig.weight_dtype, sig.expert_dtype)))
        if abs(fitted.bandwidth / TEACHING_MAX_BANDWIDTH - 1.0) > 0.02:
            assert (BEYOND_PHYSICS in anchor.flags) == (not teaches_other_models(fitted)), anchor.id


def test_another_layout_is_a_width_transfer_from_the_nearest_layout():
    quarter, half, exact = make_anchor(tp=2), make_anchor(tp=4), make_anchor(tp=8)
    assert select([quarter, half, exact], concurrency=32).anchor == exact
    nearest = select([quarter, half], concurrency=32)
    assert nearest.anchor == half and nearest.kinds == ("width",) and not nearest.covered
    assert "extrapolated-width" in select([quarter], concurrency=32).flags    # two doublings
    assert select([exact], tp=4, concurrency=32).kinds == ("width",)           # wider anchors calibrate too
    ep = select([make_anchor(ep=8, dp=8), make_anchor()], ep=8, attention_dp=8, concurrency=32)
    assert ep.anchor.signature.ep == 8 and ep.kinds == ("in-ladder",)


def test_pools_and_replicas_are_priced_by_their_own_kinds():
    anchor = make_anchor(tp=8, ep=1)
    assert select([anchor], concurrency=64, replicas=2).kinds == ("in-ladder",)
    split = select([anchor], concurrency=32, disaggregated=True, prefill_layout="TP8/EP1/DP1",
                   decode_layout="TP8/EP1/DP1")
    assert split.kinds == ("split",)


def test_an_anchor_measured_in_split_pools_prices_a_split_in_ladder():
    """A pool anchor prices a split's pool without the split transfer; a colocated replica
    it prices shows its flag (that direction has no measured error of its own)."""
    from predictor.anchors.anchor import SPLIT_POOL

    pool = make_anchor(tp=8, ep=1, flags=(SPLIT_POOL,))
    split = select([pool], concurrency=32, disaggregated=True, prefill_layout="TP8/EP1/DP1",
                   decode_layout="TP8/EP1/DP1")
    assert split.kinds == ("in-ladder",) and split.covered
    colocated = select([pool], concurrency=32)
    assert colocated.kinds == ("in-ladder",) and SPLIT_POOL in colocated.flags


def test_unset_levers_take_the_anchor_recipe_and_set_ones_must_match():
    aiter = make_anchor(backend="aiter", kv="fp8")
    plain = select([aiter], concurrency=32)
    assert plain.covered and plain.recipe == {"weight_dtype": "fp8", "activation_dtype": "fp8",
                                              "expert_dtype": "fp8", "kv_cache_dtype": "fp8",
                                              "attention_backend": "aiter"}
    assert select([aiter], attention_backend="aiter", concurrency=32).covered
    mismatch = select([aiter], attention_backend="triton", concurrency=32)
    assert mismatch.kinds == ("precision",) and mismatch.anchor == aiter
    assert any("attention_backend aiter != triton" in f for f in mismatch.flags)


def test_the_native_dtypes_win_a_tie_between_recipes():
    fp8, fp4 = make_anchor(), make_anchor(kv="bf16").model_copy(update={"id": "fp4-anchor"})
    fp4 = fp4.model_copy(update={"signature": fp4.signature.model_copy(update={"expert_dtype": "fp4"})})
    assert select([fp4, fp8], concurrency=32).anchor == fp8              # DeepSeek-R1 ships fp8 experts
    assert select([fp4, fp8], expert_dtype="fp4", concurrency=32).anchor == fp4


def test_speculation_is_part_of_the_kernel_set():
    selection = select([make_anchor()], spec_method="mtp", spec_depth=2, concurrency=32)
    assert selection.kinds == ("precision",) and any("spec_method none != mtp" in f for f in selection.flags)


def test_provenance_and_probe_flags_are_carried():
    from predictor.anchors.anchor import PackedProbe

    probe = PackedProbe(num_seqs=4, seq_tokens=1024, step_ms=200.0, serialised=True)
    anchor = make_anchor(packed_probe=probe, flags=("harvest-note",))
    anchor = anchor.model_copy(update={"provenance": anchor.provenance.model_copy(update={"real_weights": False})})
    flags = select([anchor]).flags
    assert {"serialised-probe", "harvest-note", "random-weights"} <= set(flags)


# --- the default store ---------------------------------------------------------------------

def test_default_store_reads_user_cache_and_skips_bad_files():
    user = make_anchor()
    save_anchor(user)
    (user_anchors_dir() / "broken.json").write_text("{}")
    store = AnchorStore.default()
    assert store.entry(user.id).where == "user"
    assert store.get(user.id) == user
    assert any("broken.json" in path and "schema error" in message for path, message in store.problems)
    with pytest.raises(InputError, match="unknown anchor"):
        store.get("no-such-anchor")
    newer = make_anchor(timestamp="2026-01-01T00:00:00Z")
    assert newer.id == user.id
    save_anchor(newer)
    assert AnchorStore.default().get(user.id).provenance.timestamp.startswith("2026")  # re-read on change


def test_a_dated_harvest_is_newer_than_an_anchor_of_unknown_date():
    """28 embedded corpus anchors say "unknown": as a string it sorted after every date,
    so a user's fresh harvest of the same stack lost to the embedded one."""
    undated, dated = make_anchor(timestamp="unknown"), make_anchor(timestamp="2026-12-07T03:00:00+00:00")
    older = make_anchor(timestamp="2026-02-06")
    assert _ordered([undated, older, dated], key=lambda anchor: 0) == [dated, older, undated]


def test_the_plain_configuration_of_every_embedded_stack_is_anchored_by_it():
    """Issue 12: a user naming a measured stack's model, cluster, engine, widths, precision
    and speculation, and nothing else, is calibrated by that stack's anchor in-ladder."""
    found = plain_coverage(AnchorStore.default())
    assert found.total >= 250 and found.anchored >= 240, found.misses[:5]


def test_a_users_question_is_priced_with_its_engines_front_end_and_a_corpus_row_with_its_harness():
    """Llama-3.1-8B on H100 under TensorRT-LLM is anchored by AIConfigurator runs whose
    TTFTs carry a ~300 ms harness floor: the product's own question (no harness) pays the
    engine's front end, the same question as an AIConfigurator row pays the floor its
    anchor fitted; a model with no anchor takes the engine's front end too."""
    from levers.catalog import Engine
    from predictor.corpus.host import host_for
    from predictor.predict import predict
    from predictor.target import Target
    from predictor.workload import Harness, WorkloadSpec

    target = Target(load_card("llama-3.1-8b"), parse_cluster("h100x8"), Engine("trtllm"))
    config = Configuration(concurrency=1)
    user = predict(target, config, WorkloadSpec("fixed", 100, 10))
    row = predict(target, config, WorkloadSpec("fixed", 100, 10, harness=Harness("aiconfigurator")))
    assert user.mode == row.mode and user.anchor_id == row.anchor_id is not None
    assert user.metrics["ttft_ms_mean"] < 30.0 < 100.0 < row.metrics["ttft_ms_mean"]
    assert user.metrics["tpot_ms_mean"] == pytest.approx(row.metrics["tpot_ms_mean"], rel=0.02)
    assert any(flag.startswith("host time: the trtllm front end's") for flag in user.flags)
    kimi = Target(load_card("kimi-k3"), parse_cluster("gb300x4x2"), Engine("sglang"))
    rank_only = predict(kimi, Configuration(tp=8, concurrency=4), WorkloadSpec("fixed", 1024, 1024))
    assert rank_only.calibration["host_ms"] == pytest.approx(host_for("sglang").base_ms, abs=1e-3)
    assert rank_only.calibration["source"].endswith("+host:sglang")


def test_a_users_question_from_a_benchmark_anchor_carries_the_harness_kind():
    """The engine's front-end host time replaces a public benchmark's: the prediction's
    kinds say so (`harness`, TTFT's band measured across harnesses) and its TTFT interval
    is that band's; a corpus row, which names its harness, carries no such kind."""
    from levers.catalog import Engine
    from predictor.anchors.coverage import HARNESS
    from predictor.predict import predict
    from predictor.target import Target
    from predictor.uncertainty import shipped_error_bars
    from predictor.workload import Harness, WorkloadSpec

    target = Target(load_card("llama-3.1-8b"), parse_cluster("h100x8"), Engine("trtllm"))
    config = Configuration(concurrency=1)
    user = predict(target, config, WorkloadSpec("fixed", 100, 10))
    row = predict(target, config, WorkloadSpec("fixed", 100, 10, harness=Harness("aiconfigurator")))
    assert HARNESS in user.transfer_kinds and HARNESS not in row.transfer_kinds
    assert user.mode == row.mode
    band = shipped_error_bars().by_kind[HARNESS]["ttft"]
    low, high = user.intervals["ttft_ms_mean"]
    assert math.log(high / low) >= band.q90 - band.q10 - 1e-9       # the harness band, enveloped with the rest


def test_a_physics_prior_is_a_none_transfer_with_or_without_a_harness():
    """With no anchor and no prior the kind is `none`; a product question's prior names
    its engine's host time (`physics+host:vllm`) and stays `none`, not `cross-model`."""
    from levers.catalog import Engine
    from predictor.anchors.anchoring import Anchoring
    from predictor.step.priors import Priors
    from predictor.target import Target

    target = Target(load_card("llama-3.1-8b"), parse_cluster("h100x8"), Engine("vllm"))
    for harness in (None, "inferencex"):
        anchoring = Anchoring(target, AnchorStore.from_anchors([]), Priors({}, {}, {}, {}), harness=harness)
        anchoring.model(Configuration(tp=1))
        assert anchoring.kinds == ("none",), harness


def test_a_stack_serves_one_checkpoint_whatever_the_load():
    """`Anchoring.recipe`: DeepSeek-R1 TP8/EP8 on B200 under SGLang has FP4 and FP8 anchors;
    with the precisions unset it took the FP4 anchor's checkpoint at one client and the
    FP8 anchor's at 256 (memory 48.2 -> 49.4 GB, KV 70,272 -> 35,136 B a token), so a
    concurrency sweep compared two deployments. The checkpoint is now chosen blind to the
    load; the rest of the recipe still follows the anchor of that checkpoint at the load."""
    from predictor.anchors.anchoring import as_priced
    from predictor.target import Target

    target = Target(load_card("deepseek-r1"), parse_cluster("b200x8"), "sglang")
    priced = {c: as_priced(target, Configuration(tp=8, ep=8, concurrency=c))[0] for c in (1, 16, 64, 256)}
    checkpoints = {(p.weight_dtype, p.expert_dtype) for p in priced.values()}
    assert len(checkpoints) == 1 and None not in next(iter(checkpoints)), checkpoints
    fp8 = as_priced(target, Configuration(tp=8, ep=8, weight_dtype="fp8", expert_dtype="fp8", concurrency=1))[0]
    assert (fp8.weight_dtype, fp8.expert_dtype) == ("fp8", "fp8")        # a set precision is kept
    assert plain_coverage(AnchorStore.default()).anchored >= 240
