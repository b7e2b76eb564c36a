"""Host time per engine for corpus anchors (METHOD §3.12: "fit it per engine from anchor
runs: an anchor's lowest-concurrency TTFT is part GPU prefill and part host time").

A serving run separates the two only where its median inter-token latency is a real step
time: per-token streaming (mean ITL within 10% of mean TPOT), no speculation, colocated.
There the prefill interference gives the GPU prefill marginal of each run,
`M = (1 - median ITL / mean TPOT) / lambda` (`lambda` requests per ms per replica, by
Little's law with the median TTFT), which is steady across concurrency. The host time of
a layout at prompt length `n` is then its lowest-concurrency median TTFT minus the
decode step the prefill rides (median ITL) minus `M`, and `H(n) = H0 + h n` is fitted by
least squares per engine.

`HOST_BY_ENGINE` freezes that fit on the InferenceX dev corpus (fixed_seq_runs_dev.csv,
Dec 2025 - Jan 2026; `scripts/build_default_anchors.py --fit-host` recomputes it):
vLLM from 12 layouts on B200/H100/H200, ATOM from 6 on MI355X, SGLang from 4 on MI355X
(the MI300X 8k layout gave a negative host time and is dropped). TRT-LLM runs stream in
chunks everywhere, so it keeps the analytical predictor's default (1 ms + 8 us/token,
METHOD §3.12's tokenisation range).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from levers.catalog import Engine
from predictor.analytical import HOST_BASE_MS, TOKENIZE_US_PER_TOKEN
from predictor.corpus.row import CorpusRow
from predictor.units import US_PER_MS

PER_TOKEN_STREAM_TOLERANCE = 0.10   # |mean ITL / mean TPOT - 1| for a per-token stream
MIN_INTERFERENCE_SHARE = 0.03       # below this the ITL/TPOT gap is noise


@dataclass(frozen=True, slots=True)
class HostTime:
    base_ms: float
    per_token_us: float
    source: str

    def ms(self, prompt_tokens: float) -> float:
        return self.base_ms + self.per_token_us * prompt_tokens / US_PER_MS


DEFAULT_HOST = HostTime(HOST_BASE_MS, TOKENIZE_US_PER_TOKEN, "analytical default (METHOD §3.12)")
HOST_BY_ENGINE: dict[Engine, HostTime] = {
    Engine.VLLM: HostTime(15.1, 2.15, "fit on InferenceX dev, 12 per-token-streaming layouts"),
    Engine.ATOM: HostTime(6.1, 1.40, "fit on InferenceX dev, 6 per-token-streaming layouts"),
    Engine.SGLANG: HostTime(0.4, 5.68, "fit on InferenceX dev, 4 per-token-streaming layouts (MI355X)"),
}


# Engines whose measured host time an anchor from per-token-streaming runs keeps (flag
# `HOST_PER_ENGINE`): one anchor's TTFTs at one width cannot split host time from prefill
# (gpt-oss-120b's H200 TP1 vLLM anchor fitted 36 ms of host time per 1k prompt where
# TTFT = 23 ms + 57 ms / TP over its four widths, and priced TP8 20-28% high). vLLM's
# constant rests on 12 layouts over three GPUs; ATOM's (6 layouts) and SGLang's (4) on one
# GPU each, and holding them too made InferenceX's load TTFT worse (23.0 -> 24.1%, absurd
# 45 -> 52 rows; 1 refine round). AIConfigurator's rows carry no ITL, so its anchors keep
# fitting their own.
ANCHORING_HOSTS = frozenset({Engine.VLLM})


def host_for(engine: str) -> HostTime:
    return HOST_BY_ENGINE.get(Engine(engine), DEFAULT_HOST)


def ttft_typical(row: CorpusRow) -> float | None:
    """The median TTFT when the corpus gives it (a mean TTFT carries one-off startup
    stalls: up to 6x the median in the InferenceX dev corpus), else the mean."""
    m = row.measured
    return m.ttft_ms_median if m.ttft_ms_median is not None else m.ttft_ms_mean


def is_per_token_stream(row: CorpusRow) -> bool:
    m = row.measured
    if None in (m.itl_ms_mean, m.itl_ms_median, m.tpot_ms_mean, m.ttft_ms_median):
        return False
    ratio = m.itl_ms_mean / m.tpot_ms_mean
    return abs(ratio - 1.0) <= PER_TOKEN_STREAM_TOLERANCE and row.spec == "none" and not row.config.disaggregated


def request_rate_per_ms(row: CorpusRow, clients: float) -> float:
    """`lambda`: requests per ms of `clients` closed-loop clients, by Little's law."""
    return clients / (ttft_typical(row) + (row.osl - 1) * row.measured.tpot_ms_mean)


def interference_marginal(row: CorpusRow, clients: float) -> float | None:
    """`M = (1 - median ITL / mean TPOT) / lambda` of a per-token-streaming run; None when
    the ITL/TPOT gap is noise."""
    share = 1.0 - row.measured.itl_ms_median / row.measured.tpot_ms_mean
    return share / request_rate_per_ms(row, clients) if share > MIN_INTERFERENCE_SHARE else None


def host_points(rows: list[CorpusRow]) -> dict[str, list[tuple[int, float]]]:
    """(prompt tokens, host ms) per engine from per-token-streaming layouts."""
    groups: dict[tuple, list[CorpusRow]] = defaultdict(list)
    for row in rows:
        if is_per_token_stream(row):
            groups[(row.stack, row.layout_name, row.isl, row.osl)].append(row)
    points: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for (stack, _, isl, _), found in groups.items():
        marginals = [m for row in found if (m := interference_marginal(row, row.concurrency)) is not None]
        if len(marginals) < 2:
            continue
        marginal = statistics.median(marginals)
        lowest = min(r.concurrency for r in found)
        host = statistics.median(r.measured.ttft_ms_median - r.measured.itl_ms_median - marginal
                                 for r in found if r.concurrency == lowest)
        points[stack[1]].append((isl, host))
    return points


def fit_host_constants(rows: list[CorpusRow]) -> dict[str, HostTime]:
    """The per-engine least-squares fit of `H0 + h n` (negative host times dropped)."""
    fitted = {}
    for engine, points in host_points(rows).items():
        kept = [(n, h) for n, h in points if h > 0]
        if len({n for n, _ in kept}) < 2:
            continue
        lengths = np.array([n for n, _ in kept], dtype=float)
        hosts = np.array([h for _, h in kept])
        design = np.stack([np.ones_like(lengths), lengths], axis=1)
        base, per_token = np.linalg.lstsq(design, hosts, rcond=None)[0]
        fitted[engine] = HostTime(max(0.0, float(base)), max(0.0, float(per_token) * US_PER_MS),
                                  f"fit on {len(kept)} per-token-streaming layouts")
    return fitted
