"""Build predictor/data/agentic_profile.json: the synthetic agentic workload's parameters.

Every parameter keeps its source. Main-session distributions come from the statistics of
the 710 public agentic coding sessions (WEKA / callanjfox/kv-cache-tester, Apache-2.0,
`shared/data/traces/agentic-coding-stats.json`); the subagent burst rate from the AgentX
corpus summary (`agentx_corpus_summary.json`: the public snapshot misses the largest
sessions, where subagents live); subagent internals (group sizes, turns, prompt sizes,
the prefix siblings share) from the subagent groups of the 47 sessions in
`shared/data/traces/agentic-coding/`. Distributions are lognormal fits through the
published p50 and p90 (sigma = ln(p90/p50) / z90).

Run: python scripts/build_agentic_profile.py [--shared ../shared/data/traces]
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
from pathlib import Path

import numpy as np

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "predictor" / "data" / "agentic_profile.json"
STATS = "agentic-coding-stats.json"
AGENTX = "agentx_corpus_summary.json"
SESSIONS = "agentic-coding"
BLOCK_TOKENS = 64
IDLE_GAP_CAP_S = 300.0          # AgentX replay rule: idle gaps capped at 300 s per session
WARM_START = (0.25, 0.75)       # AgentX replay rule: warm-up starts sessions at 25-75% of their length
MAX_CONTEXT_TOKENS = 262144     # AgentX's 256k-capped corpus sibling; the card's max context wins if smaller


def lognormal(p50: float, p90: float, source: str, low: float | None = None, high: float | None = None,
              cap: float | None = None) -> dict:
    entry = {"dist": "lognormal", "p50": round(float(p50), 3), "p90": round(float(p90), 3), "source": source}
    for key, value in (("min", low), ("max", high), ("cap", cap)):
        if value is not None:
            entry[key] = float(value)
    return entry


def _lcp(a: list[int], b: list[int]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def subagent_samples(folder: Path) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in ("group", "turns", "first", "new", "out", "think", "shared")}
    for path in sorted(glob.glob(str(folder / "*.json"))):
        requests = json.loads(Path(path).read_text())["requests"]
        firsts: list[list[int]] = []
        index = 0
        while index < len(requests):
            if requests[index].get("type") != "subagent":
                index += 1
                continue
            end = index
            while end < len(requests) and requests[end].get("type") == "subagent":
                end += 1
            samples["group"].append(end - index)
            for sub in requests[index:end]:
                inner = sub["requests"]
                samples["turns"].append(len(inner))
                samples["first"].append(inner[0]["in"])
                firsts.append(inner[0]["hash_ids"])
                samples["out"].extend(r["out"] for r in inner)
                for a, b in itertools.pairwise(inner):
                    samples["new"].append(b["in"] - _lcp(a["hash_ids"], b["hash_ids"]) * BLOCK_TOKENS)
                    samples["think"].append(b["think_time"])
            index = end
        samples["shared"].extend(_lcp(firsts[0], f) * BLOCK_TOKENS for f in firsts[1:])
    return samples


def build(shared: Path) -> dict:
    stats = json.loads((shared / STATS).read_text())
    agentx = json.loads((shared / AGENTX).read_text())
    subs = subagent_samples(shared / SESSIONS)
    pct = lambda xs, q: float(np.percentile(np.asarray(xs, float), q))
    public = f"shared/data/traces/{STATS} ({stats['traces_parsed']} sessions; {stats['source']})"
    local = f"shared/data/traces/{SESSIONS} ({len(subs['group'])} subagent groups in 47 sessions)"
    counts = agentx["counts"]
    group_sizes = np.bincount(np.asarray(subs["group"], int))
    return {
        "about": "Synthetic agentic coding profile (METHOD §5, §7); see scripts/build_agentic_profile.py",
        "block_tokens": BLOCK_TOKENS,
        "max_context_tokens": MAX_CONTEXT_TOKENS,
        "idle_gap_cap_s": IDLE_GAP_CAP_S,
        "warm_start_fraction": list(WARM_START),
        "replay_rules_source": f"shared/data/traces/{AGENTX} (replay rules)",
        "turns_per_session": lognormal(stats["requests_per_trace"]["p50"], stats["requests_per_trace"]["p90"],
                                       public + ": requests_per_trace", 1, stats["requests_per_trace"]["max"]),
        "first_prompt_tokens": lognormal(stats["first_root_input_tokens"]["p50"],
                                         stats["first_root_input_tokens"]["p90"],
                                         public + ": first_root_input_tokens",
                                         stats["tool_plus_system_tokens"]["p50"]),
        "new_tokens_per_turn": lognormal(stats["new_tokens_per_request_excl_first"]["p50"],
                                         stats["new_tokens_per_request_excl_first"]["p90"],
                                         public + ": new_tokens_per_request_excl_first (prompt beyond the "
                                         "prefix shared with the previous turn)", 1),
        "output_tokens": lognormal(stats["output_tokens"]["p50"], stats["output_tokens"]["p90"],
                                   public + ": output_tokens", 1, stats["output_tokens"]["max"]),
        "think_time_s": lognormal(stats["think_time_s"]["p50"], stats["think_time_s"]["p90"],
                                  public + ": think_time_s", 0, None, IDLE_GAP_CAP_S),
        "subagents": {
            "group_probability_per_turn": {
                "value": round(counts["subagent_groups"] / counts["main_turns"], 5),
                "source": f"shared/data/traces/{AGENTX}: subagent_groups / main_turns"},
            "group_size_weights": {"value": {str(k): int(v) for k, v in enumerate(group_sizes) if v},
                                   "source": local + ": consecutive subagent entries"},
            "turns": lognormal(pct(subs["turns"], 50), pct(subs["turns"], 90), local + ": requests per subagent", 1),
            "shared_prefix_tokens": {"value": int(pct(subs["shared"], 50)),
                                     "source": local + ": common prefix of sibling subagents' first prompts"},
            "first_prompt_tokens": lognormal(pct(subs["first"], 50), pct(subs["first"], 90),
                                             local + ": first prompt of each subagent", 1),
            "new_tokens_per_turn": lognormal(pct(subs["new"], 50), pct(subs["new"], 90),
                                             local + ": prompt beyond the previous turn's shared prefix", 1),
            "output_tokens": lognormal(pct(subs["out"], 50), pct(subs["out"], 90), local + ": output tokens", 1),
            "think_time_s": lognormal(pct(subs["think"], 50), pct(subs["think"], 90),
                                      local + ": think_time between subagent turns (also its start delay)", 0,
                                      None, IDLE_GAP_CAP_S),
        },
        "theoretical_reuse": {
            "token_weighted_same_stream_excl_first": stats["token_weighted_prefix_hit_ratio_same_stream_excl_first"],
            "token_weighted_same_stream_all": stats["token_weighted_prefix_hit_ratio_same_stream_all"],
            "agentx_median_root": agentx["per_branch_cache_shape"]["root"]["median_theoretical_cache_ratio"],
            "agentx_median_subagent": agentx["per_branch_cache_shape"]["subagent"]["median_theoretical_cache_ratio"],
            "source": f"{public}; shared/data/traces/{AGENTX}",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("INFERASIM_SHARED_TRACES", str(SHARED_DATA / "traces")))
    args = parser.parse_args()
    profile = build(Path(args.shared))
    OUT.write_text(json.dumps(profile, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
