"""Guards: untrusted proposals are validated like user input; the best is always legal and priced."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.guards import guard_proposal, parse_precisions
from agent.trial import Phase, Stage
from levers.catalog import LEVER_NAMES
from levers.errors import InputError
from tests.agent.tune_fakes import make_context, make_session


def _guard(proposal, **options):
    context = make_context(**options)
    session = make_session(**options)
    return guard_proposal(context, session.baseline, proposal)


@pytest.mark.parametrize("proposal, reason", [
    ({"warp_speed": 9}, "unknown lever 'warp_speed'"),
    ({"attention_backend": "trtllm"}, "attention_backend=trtllm is not in the legal set on vllm"),
    ({"kv_memory_fraction": 0.95}, "kv_memory_fraction: 0.95 is out of range"),
    ({"tp": "eight"}, "tp: 'eight' is not a legal value"),
    ([1, 2, 3], "a proposal must be an object of lever -> value, not list"),
    ({}, "the proposal changes no lever"),
    ("tp=8,,=3", "unreadable proposal"),
])
def test_bad_proposals_are_refused_with_their_reason(proposal, reason):
    result = _guard(proposal)
    assert not result.accepted and result.config is None
    assert result.reasons[0].startswith(reason)


def test_text_and_json_proposals_apply_over_the_base():
    result = _guard("tp=2,kv_cache_dtype=fp8")
    assert result.accepted and result.config.tp == 2 and result.config.kv_cache_dtype == "fp8"
    assert result.config.replicas == 8  # the base's other levers stay
    assert _guard('{"Max-Running-Requests": "512"}').config.max_running_requests == 512


def test_validated_precisions_limit_offers_and_acceptance():
    assert parse_precisions("fp8, fp4") == ("fp8", "fp4") and parse_precisions(None) is None
    with pytest.raises(InputError, match="unknown precision 'int4'"):
        parse_precisions("fp8,int4")
    refused = _guard({"weight_dtype": "bf16"}, precisions="fp8,fp4")
    assert refused.reasons == ("weight_dtype=bf16 is not a validated precision (legal: fp8, fp4)",)
    assert _guard({"weight_dtype": "fp8"}, precisions="fp8,fp4").accepted


PLAUSIBLE = st.sampled_from(["fp8", "fp4", "8", 8, 2, 1, "on", "deepep", 0.8, 512, "TP4/EP4/DP4", True])
JUNK = st.one_of(PLAUSIBLE, st.none(), st.booleans(), st.integers(-10, 5000), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.text(max_size=6), max_size=3))
LEVER_KEYS = st.one_of(st.sampled_from(LEVER_NAMES), st.text(max_size=10))
PROPOSALS = st.one_of(st.dictionaries(LEVER_KEYS, JUNK, max_size=5), JUNK)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(proposals=st.lists(PROPOSALS, min_size=1, max_size=12))
def test_arbitrary_proposals_never_make_the_best_illegal_or_unpriced(proposals):
    session = make_session(budget=100, slos=("tpot<=40",))
    for proposal in proposals:
        trial = session.propose(proposal, Phase.INVESTIGATOR)
        assert trial.legal or trial.stage in tuple(Stage)
        assert trial.legal == (trial.metrics is not None)
    best = session.best()
    if best is not None:
        assert best.legal and best.priced and best.slo_met is True
        assert best.config is not None and best.mode in ("anchored", "rank-only")
    for trial in session.trials:
        if trial.config is None:
            assert trial.stage is Stage.GUARD and trial.reasons
