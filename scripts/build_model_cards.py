"""Build the embedded model cards from the public architecture records.

Reads each `<Name>.json` of the reference data (`raw_config` = the public config.json,
`source`, `derived`) and writes `predictor/data/models/<Name>.json` with the same
conversion users get (`predictor.cards.registry.card_from_hf_config`). `derived_total_params` is
copied from the record's `derived` block for checking only (tests compare it with the
count derived from the card's architecture).

Usage: python scripts/build_model_cards.py [SOURCE_DIR] [--check]
(SOURCE_DIR defaults to ../shared/data/models; --check only reports differences.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from predictor.cards.builder import card_from_hf_config  # noqa: E402
from predictor.cards.model_card import CardSource, ModelCard, Recipe  # noqa: E402

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

DEFAULT_SOURCE = SHARED_DATA / "models"
OUT_DIR = REPO / "predictor" / "data" / "models"

# Hugging Face ids (the records name the model, not always its repository), plus the
# older or variant ids users may type.
HF_IDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "DeepSeek-R1": ("deepseek-ai/DeepSeek-R1", ()),
    "DeepSeek-V3": ("deepseek-ai/DeepSeek-V3", ()),
    "DeepSeek-V3.2": ("deepseek-ai/DeepSeek-V3.2", ()),
    "DeepSeek-V4-Flash": ("deepseek-ai/DeepSeek-V4-Flash", ()),
    "DeepSeek-V4-Pro": ("deepseek-ai/DeepSeek-V4-Pro", ()),
    "GLM-4.5": ("zai-org/GLM-4.5", ()),
    "GLM-4.6": ("zai-org/GLM-4.6", ()),
    "GLM-4.7": ("zai-org/GLM-4.7", ()),
    "GLM-5": ("zai-org/GLM-5", ()),
    "GLM-5.1": ("zai-org/GLM-5.1", ()),
    "GLM-5.2": ("zai-org/GLM-5.2", ()),
    "Kimi-K2": ("moonshotai/Kimi-K2-Instruct", ()),
    "Kimi-K2.5": ("moonshotai/Kimi-K2.5", ()),
    "Kimi-K3": ("moonshotai/Kimi-K3", ()),
    "Kimi-Linear-48B-A3B": ("moonshotai/Kimi-Linear-48B-A3B-Instruct", ()),
    "Llama-3.1-8B": ("meta-llama/Llama-3.1-8B", ("meta-llama/Meta-Llama-3.1-8B",)),
    "Llama-3.1-70B": ("meta-llama/Llama-3.1-70B", ("meta-llama/Meta-Llama-3.1-70B",)),
    "Llama-3.1-405B": ("meta-llama/Llama-3.1-405B", ("meta-llama/Meta-Llama-3.1-405B",)),
    "MiniMax-M1": ("MiniMaxAI/MiniMax-M1-80k", ("MiniMaxAI/MiniMax-M1-40k",)),
    "MiniMax-M2": ("MiniMaxAI/MiniMax-M2", ()),
    "MiniMax-M2.5": ("MiniMaxAI/MiniMax-M2.5", ()),
    "MiniMax-M2.7": ("MiniMaxAI/MiniMax-M2.7", ()),
    "MiniMax-M3": ("MiniMaxAI/MiniMax-M3", ()),
    "Mixtral-8x7B": ("mistralai/Mixtral-8x7B-v0.1", ()),
    "Qwen3-14B": ("Qwen/Qwen3-14B", ()),
    "Qwen3-32B": ("Qwen/Qwen3-32B", ()),
    "Qwen3-30B-A3B": ("Qwen/Qwen3-30B-A3B", ()),
    "Qwen3-235B-A22B": ("Qwen/Qwen3-235B-A22B", ()),
    "Qwen3-Next-80B-A3B": ("Qwen/Qwen3-Next-80B-A3B-Instruct", ()),
    "Qwen3.5-27B": ("Qwen/Qwen3.5-27B", ()),
    "Qwen3.5-35B-A3B": ("Qwen/Qwen3.5-35B-A3B", ()),
    "Qwen3.5-122B-A10B": ("Qwen/Qwen3.5-122B-A10B", ()),
    "Qwen3.5-397B-A17B": ("Qwen/Qwen3.5-397B-A17B", ()),
    "gpt-oss-20b": ("openai/gpt-oss-20b", ()),
    "gpt-oss-120b": ("openai/gpt-oss-120b", ()),
}


# Published checkpoints besides the native one (`weight_dtype=recipe:NAME`): the stored
# precision of each component; a component left out keeps the card's native dtype.
RECIPES: dict[str, tuple[dict, ...]] = {
    "Kimi-K3": (
        {"name": "nvfp4", "description": "NVFP4 checkpoint: routed experts NVFP4, attention projections FP8, "
                                         "shared experts, dense MLP and embeddings BF16",
         "source": "the NVFP4 layout operators deploy on GB300 (issue 13); the native checkpoint stores "
                   "routed experts in MXFP4 (config.json quantization_config) and everything else in BF16",
         "attention": "fp8", "dense_mlp": "bf16", "shared_experts": "bf16", "routed_experts": "nvfp4",
         "embeddings": "bf16"},
    ),
}


def card_source(record: dict) -> CardSource:
    """The record's source; notes and corroboration (and an UNVERIFIED status) kept as a note."""
    source = record.get("source") or {}
    notes = [f"status: {record['status']}"] if record.get("status") else []
    notes += [str(source[key]) for key in ("note", "corroboration") if source.get(key)]
    return CardSource(repo=source.get("repo", "unknown"), commit=source.get("commit"),
                      path=source.get("path"), note="; ".join(notes) or None)


def build_card(record: dict) -> ModelCard:
    name = record["name"]
    hf_id, extra = HF_IDS.get(name, (name, ()))
    derived = record.get("derived") or {}
    card = card_from_hf_config(record["raw_config"], name, card_source(record), hf_id=hf_id,
                               derived_total_params=derived.get("total_params_derived"),
                               extra_aliases=extra, origin=f"{name}.json raw_config")
    recipes = tuple(Recipe.model_validate(item) for item in RECIPES.get(name, ()))
    return card.model_copy(update={"recipes": recipes}) if recipes else card


def main(argv: list[str]) -> int:
    check_only = "--check" in argv
    paths = [arg for arg in argv if not arg.startswith("--")]
    source_dir = Path(paths[0]) if paths else DEFAULT_SOURCE
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for path in sorted(source_dir.glob("*.json")):
        card = build_card(json.loads(path.read_text()))
        derived = card.derived_total_params
        error = f"{(card.total_params() - derived) / derived:+.4%}" if derived else "n/a"
        print(f"{card.name:22s} total {card.total_params() / 1e9:9.2f} B  vs derived {error}")
        if not check_only:
            data = card.model_dump(mode="json", exclude_defaults=True)
            data["native_dtypes"] = card.native_dtypes.model_dump(mode="json")  # always explicit
            text = json.dumps(data, indent=1)
            (OUT_DIR / f"{card.name}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
