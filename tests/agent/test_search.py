"""The two-phase search with a scripted LM (DummyLM): plans, parse failures, guards,
timeouts, early stops, resume, determinism and secrets — all through `agent.tune.tune`."""

import json

import dspy
import pytest

from agent.search import NO_LLM_NOTE, NO_LM_NOTE
from agent.tune import TuneRequest, tune
from ledgers.store import load_ledger
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import FakePredictor, failing, plan_answer, report, scripted, step

PLAN = [{"kv_cache_dtype": "fp8"}, {"weight_dtype": "fp8", "expert_dtype": "fp8"}, {"ep": 2},
        {"concurrency": 1024}, {"max_running_requests": 512, "kv_cache_dtype": "fp8"}]


def run(tmp_path, runtime=None, listeners=None, **options):
    options.setdefault("model", "qwen3-30b-a3b")
    options.setdefault("workload", "1k/1k")
    request = TuneRequest(**options)
    return tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, runtime=runtime,
                listeners=listeners, ledger_dir=tmp_path)


def ledger_of(result):
    return load_ledger(result.ledger_path)


def test_a_valid_plan_is_executed_then_the_investigator_then_seeds(tmp_path):
    answers = [plan_answer(PLAN),
               step("read_scratchpad"),
               step("evaluate_config", {"changes": {"kv_cache_dtype": "fp8", "weight_dtype": "fp8"}}),
               step("write_scratchpad", {"note": "fp8 KV helps"}),
               step("ask", {"question": "is ep worth it?"}), {"answer": "maybe"},
               step("finish"), report({"kv_cache_dtype": "fp8"})]
    result = run(tmp_path, scripted(answers), budget=20, max_cycles=1)
    ledger = ledger_of(result)
    phases = [t.phase for t in ledger.trials]
    assert phases[:8] == ["seed"] * 8                       # 40% of 20 seeds first
    assert phases[8:13] == ["planner"] * 5
    assert phases[13] == "investigator" and phases[14:] == ["seed"] * 6
    assert [t.proposed for t in ledger.trials[8:13]] == PLAN
    assert [t.legal for t in ledger.trials[8:13]] == [True, True, False, True, True]
    assert ledger.trials[10].rejected_by == "structure"  # ep=2 over the tp=1 baseline
    assert ledger.trials[10].reason == "ep=2 must divide tp=1 and the 128 routed experts"
    assert ledger.llm.rationale == "load and KV precision limit throughput"
    assert ledger.llm.scratchpad == ["fp8 KV helps"] and ledger.llm.what_worked == ["fp8 KV cache"]
    assert [(c.role, c.outcome) for c in ledger.llm.calls] == [
        ("planner", "ok"), ("subquestion", "ok"), ("investigator", "ok")]
    assert ledger.llm.phase_end_reason == "1 planner/investigator cycles done"
    assert result.best is not None and result.best.legal and len(ledger.trials) == 20


def test_an_unparsable_plan_is_recorded_and_the_search_continues_with_seeds(tmp_path):
    garbage = {"plan": "I would try more GPUs"}
    result = run(tmp_path, scripted([garbage, garbage]), budget=15)
    ledger = ledger_of(result)
    assert [c.outcome for c in ledger.llm.calls] == ["parse_error"]
    assert "AdapterParseError" in ledger.llm.calls[0].message
    assert ledger.llm.phase_end_reason.startswith("planner call failed (parse_error)")
    assert [t.phase for t in ledger.trials] == ["seed"] * 15
    assert ledger.stop_reason == "budget: all 15 trials spent" and result.best is not None


def test_investigator_junk_is_rejected_with_reasons(tmp_path):
    plan = [{"kv_cache_dtype": "fp8"}, {"concurrency": 32}, {"concurrency": 128}, {"max_running_requests": 64},
            {"prefix_cache": "off"}]
    answers = [plan_answer(plan),
               step("evaluate_config", {"changes": {"warp_speed": 9}}),
               step("evaluate_config", {"changes": {"attention_backend": "trtllm"}}),
               step("evaluate_config", {"changes": {"tp": 4, "replicas": 2}}),
               step("evaluate_config", {"kv_cache_dtype": "fp8"}),       # levers given directly
               step("finish"), report()]
    result = run(tmp_path, scripted(answers), model="kimi-k3", budget=20, max_cycles=1)
    investigated = [t for t in ledger_of(result).trials if t.phase == "investigator"]
    assert [t.rejected_by for t in investigated] == ["guard", "guard", "memory", None]
    assert investigated[3].legal and investigated[3].configuration["kv_cache_dtype"] == "fp8"
    assert investigated[0].reason == "unknown lever 'warp_speed'" and investigated[0].configuration is None
    assert investigated[1].reason.startswith("attention_backend=trtllm is not in the legal set on vllm")
    assert "exceed 90% of HBM" in investigated[2].reason
    assert result.best.legal and result.best.config.tp == 8


def test_lm_timeouts_end_the_llm_phase_and_return_the_seed_result(tmp_path):
    runtime = failing(dspy.LMTimeoutError("request timed out after 3 retries"))
    result = run(tmp_path, runtime, budget=12)
    ledger = ledger_of(result)
    assert [(c.role, c.outcome) for c in ledger.llm.calls] == [("planner", "timeout")]
    assert "timed out" in ledger.llm.phase_end_reason
    assert {t.phase for t in ledger.trials} == {"seed"} and len(ledger.trials) == 12
    assert ledger.best is not None and result.best.index == ledger.best.index


def test_the_investigator_is_stopped_when_the_budget_runs_out(tmp_path):
    answers = [plan_answer(PLAN), step("evaluate_config", {"changes": {"concurrency": 16}}),
               step("evaluate_config", {"changes": {"concurrency": 24}})]
    result = run(tmp_path, scripted(answers), budget=11)
    ledger = ledger_of(result)
    assert [c.outcome for c in ledger.llm.calls] == ["ok", "stopped"]
    assert len(ledger.trials) == 11 and ledger.stop_reason == "budget: all 11 trials spent"


def test_no_lm_configured_runs_seeds_only_and_says_so(tmp_path):
    result = run(tmp_path, budget=10)
    assert result.outcome.lm_note == NO_LM_NOTE and result.lm is None
    assert run(tmp_path, budget=10, no_llm=True, lm="openai/gpt-4o-mini").outcome.lm_note == NO_LLM_NOTE


VOLATILE = {"search_id", "created_at", "updated_at", "stats"}


def _stable(path):
    data = json.loads(path.read_text())
    for trial in data["trials"]:
        trial.pop("wall_ms")
    return {k: v for k, v in data.items() if k not in VOLATILE}


def test_no_llm_with_the_same_seed_gives_the_same_ledger(tmp_path):
    first = run(tmp_path / "a", budget=40, seed=7, no_llm=True, slos=("tpot<=20",))
    second = run(tmp_path / "b", budget=40, seed=7, no_llm=True, slos=("tpot<=20",))
    assert first.ledger_path != second.ledger_path
    assert _stable(first.ledger_path) == _stable(second.ledger_path)


class Interrupt(BaseException):
    pass


def test_resume_continues_an_interrupted_search(tmp_path):
    def interrupt_after_seven(session, trial):
        if len(session.trials) == 7:
            raise Interrupt

    with pytest.raises(Interrupt):
        run(tmp_path, budget=30, no_llm=True, listeners=[interrupt_after_seven])
    (path,) = tmp_path.glob("*.json")
    partial = load_ledger(path)
    assert partial.status == "running" and len(partial.trials) == 7
    resumed = tune(TuneRequest(resume=str(path), budget=30), predict_fn=FakePredictor(),
                   check_fn=check_configuration)
    ledger = load_ledger(path)
    assert resumed.ledger_path == path and ledger.status == "finished" and ledger.no_llm
    assert resumed.outcome.lm_note == NO_LLM_NOTE
    assert [t.index for t in ledger.trials] == list(range(len(ledger.trials)))
    assert [t.model_dump() for t in ledger.trials[:7]] == [t.model_dump() for t in partial.trials]
    configs = [json.dumps(t.configuration, sort_keys=True) for t in ledger.trials]
    assert len(set(configs)) == len(configs)                      # no seed re-run after resuming
    straight = run(tmp_path / "straight", budget=30, no_llm=True)  # the same search, uninterrupted
    assert configs == [json.dumps(t.configuration, sort_keys=True) for t in ledger_of(straight).trials]
    assert ledger.stop_reason == ledger_of(straight).stop_reason


def test_secrets_never_reach_the_ledger(tmp_path, monkeypatch):
    secret = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    runtime = failing(dspy.LMAuthError(f"invalid api key {secret}"))
    result = run(tmp_path, runtime, budget=6,
                 command_line=("inferasim", "tune", "--api-key", secret, f"--token={secret}"))
    text = result.ledger_path.read_text()
    assert secret not in text and "***" in text
    assert ledger_of(result).llm.calls[0].outcome == "lm_error"
