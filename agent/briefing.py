"""What the planner and investigator read (METHOD §6 "Planner" inputs), as compact text.

The architecture record, the cluster, every lever's legal set on the engine (minus
unvalidated precisions), the objective with its direction, the SLOs and workload, and a
one-line-per-trial summary of the latest trials. Configurations are shown as the levers
that differ from the baseline, which is how proposals are written back (partial
configurations). Plain functions of the session: no LLM here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent.guards import allowed_values
from agent.trial import Trial
from levers.catalog import LEVERS
from levers.configuration import Configuration, format_value

if TYPE_CHECKING:
    from agent.session import SearchSession

HISTORY_TRIALS = 40          # METHOD §6: a summary of the 40 most recent trials
KEY_METRICS = ("throughput_per_gpu", "output_throughput_per_gpu", "ttft_ms_mean", "tpot_ms_mean",
               "itl_ms_p90", "interactivity_mean", "max_concurrency")
BILLION = 1e9


def architecture(session: "SearchSession") -> str:
    card = session.context.target.card
    groups = [{"kind": str(g.kind), "layers": g.num_layers, "heads": g.num_heads,
               "kv_heads": g.num_kv_heads, "head_dim": g.head_dim,
               **({"window_tokens": g.window_tokens} if g.window_tokens else {}),
               **({"indexer_topk": g.indexer_topk} if g.indexer_topk else {})} for g in card.attention]
    record: dict[str, Any] = {
        "name": card.name, "layers": card.num_layers, "hidden_size": card.hidden_size,
        "vocab_size": card.vocab_size, "max_context": card.max_context, "attention": groups,
        "attention_tp_must_divide_heads": card.attention_heads,
        "total_params_b": round(card.total_params() / BILLION, 1),
        "active_params_b": round(card.active_params() / BILLION, 1),
        "native_dtypes": {k: str(v) for k, v in card.native_dtypes.model_dump().items()},
        "mtp_layers": card.mtp_layers,
    }
    if card.is_moe:
        record["moe"] = {"moe_layers": card.moe_layers, "routed_experts": card.num_experts,
                         "top_k": card.top_k, "shared_experts": card.num_shared_experts,
                         "expert_intermediate": card.moe_intermediate_size,
                         "latent_moe_dim": card.latent_moe_dim}
    return json.dumps(record)


def cluster(session: "SearchSession") -> str:
    target = session.context.target
    gpu = target.cluster.gpu
    return json.dumps({
        "spec": target.cluster.spec, "gpu": gpu.name, "vendor": gpu.vendor,
        "nodes": target.cluster.num_nodes, "gpus_per_node": target.cluster.gpus_per_node,
        "total_gpus": target.cluster.total_gpus, "scale_up_gpus": target.cluster.scale_up_gpus(),
        "hbm_gb_per_gpu": gpu.hbm_gb, "fp4_tensor_cores": bool(gpu.fp4_tflops),
        "engine": str(target.engine),
    })


def legal_sets(session: "SearchSession") -> str:
    """One line per lever: name, legal values (or range), what it does."""
    lines = []
    for lever in LEVERS:
        if lever.is_ranged:
            low, high = lever.bounds
            values = f"{format_value(float(low))}..{format_value(float(high))}"
            if lever.name == "host_kv_tier_gb":
                values += " GB per GPU, or N:shared (one pool over the deployment's nodes)"
        elif lever.values is not None:
            values = ", ".join(format_value(v) for v in allowed_values(session.context, lever.name))
            if lever.optional:
                values += ", auto"
        else:
            values = lever.accepted_text()
        lines.append(f"{lever.name}: {values} | {lever.description}")
    return "\n".join(lines)


def objective(session: "SearchSession") -> str:
    context = session.context
    goal = context.objective
    slos = ", ".join(str(slo) for slo in context.slos) or "none"
    return (f"objective {goal.name} ({goal.direction}imise metric {goal.metric}, {goal.description}); "
            f"SLOs: {slos}; workload: {context.workload.name}; "
            f"a trial that meets every SLO beats one that does not")


def budget(session: "SearchSession") -> str:
    return (f"{session.remaining} of {session.budget} trials left; the search stops early when the best "
            f"has not changed for {session.stale_after} trials")


def describe(config: Configuration | None, base: Configuration | None) -> str:
    return "(not applied)" if config is None else config.describe(base)


def trial_line(trial: Trial, base: Configuration | None) -> str:
    head = f"#{trial.index} {trial.phase}: {describe(trial.config, base)}"
    if trial.config is None and trial.proposed is not None:
        head += f" proposed {json.dumps(trial.proposed)[:200]}"
    if not trial.legal:
        return f"{head} -> REJECTED ({trial.stage}): {trial.reason}"
    slo = {True: "SLOs met", False: "SLO missed", None: "SLOs unverified"}[trial.slo_met]
    metrics = trial.metrics or {}
    shown = ", ".join(f"{k}={metrics[k]:.4g}" for k in KEY_METRICS if metrics.get(k) is not None)
    value = "n/a" if trial.objective_value is None else f"{trial.objective_value:.4g}"
    dup = f" (duplicate of #{trial.duplicate_of})" if trial.duplicate_of is not None else ""
    return f"{head} -> objective {value}, {slo}, {trial.mode}{dup}; {shown}"


def history(session: "SearchSession", last: int = HISTORY_TRIALS) -> str:
    trials = session.trials[-max(1, min(last, HISTORY_TRIALS)):]
    if not trials:
        return "no trials yet"
    return "\n".join(trial_line(trial, session.baseline) for trial in trials)


def incumbent(session: "SearchSession") -> str:
    leader = session.leader
    if leader is None:
        return "no priced trial yet; baseline: " + describe(session.baseline, None)
    label = "best so far" if leader.slo_met is True else "nearest SLO miss so far"
    return f"{label}: {trial_line(leader, session.baseline)}"
