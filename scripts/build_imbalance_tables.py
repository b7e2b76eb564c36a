"""Build the expert-imbalance tables shipped as package data
(`predictor/data/imbalance_tables.json`, METHOD §3.5).

Every grid point the step model reads (`predictor.step.imbalance.uniform_factors`:
powers of two from 1 to `LARGEST_SAMPLED_TOKENS` tokens) for every shipped MoE model
card's (experts, top-k) at each standard EP width dividing its experts, sampled with the
module's sampler and fixed seed, so a shipped value equals a fresh sample exactly. A
prediction then never pays the ~0.2 s a large grid point costs to sample.

Usage: python scripts/build_imbalance_tables.py [--out FILE]   (about 5 min on one core)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from predictor.cards.registry import list_cards
from predictor.step.imbalance import LARGEST_SAMPLED_TOKENS, TABLE_EP_WIDTHS, TABLE_FILE, sample_factors, table_key

ROOT = Path(__file__).resolve().parents[1]


def shapes() -> list[tuple[int, int]]:
    """Distinct (experts, top-k) of the shipped MoE cards."""
    return sorted({(card.num_experts, card.top_k) for card in list_cards() if card.is_moe and card.num_experts > 0})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "predictor" / "data" / TABLE_FILE)
    args = parser.parse_args()
    started = time.perf_counter()
    factors: dict[str, list[float]] = {}
    grid = [2 ** i for i in range(LARGEST_SAMPLED_TOKENS.bit_length())]
    for experts, top_k in shapes():
        for ep in (w for w in TABLE_EP_WIDTHS if experts % w == 0 and w <= experts):
            for tokens in grid:
                value = sample_factors(experts, top_k, ep, tokens)
                factors[table_key(experts, top_k, ep, tokens)] = [value.tokens_factor, value.experts_factor]
    data = {"source": "scripts/build_imbalance_tables.py (uniform top-k router, fixed seed)",
            "key": "experts/top_k/ep/tokens -> [I_n, I_d]", "factors": factors}
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n", "utf-8")
    print(f"wrote {len(factors)} grid points for {len(shapes())} shapes to {args.out} "
          f"in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
