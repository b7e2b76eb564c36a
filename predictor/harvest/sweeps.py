"""The harvest sweeps and what is read off their streams (METHOD §4, §3.2, §3.12).

- Decode (`decode_wave`): `b` requests sent at once; the gaps between streamed tokens
  are read only inside the window where every request of the wave is decoding (from
  the last first token to the first last token) and pooled; the step is their median.
  A wave whose window is empty never had all its requests running together: the
  engine serialised it (`WaveResult.serialised`).
- Repeated waves of one batch (`combine_waves`, a CPU default: a busy shared machine
  moves one short wave by tens of percent) keep the median of the wave medians.
- Prefill (`prefill_sweep`): TTFT at concurrency 1, unique prompts, median of
  `repeats` interleaved passes per length, fitted to `F + c1 n + c2 n^2` (`predictor.step.transfer.fit_prefill`).
- Packed-prefill probe (`packed_probe`): `k` prompts of the billed length at once with
  one output token; the step is the last first token after the send, compared with one
  `k L`-token prompt measured alone and with the fit (see `checks`).
- Prefix-reuse probe: one prompt sent twice; a much faster repeat means the engine
  reuses prefixes.
- Host time (METHOD §3.12): the fit's intercept beyond one decode step
  (`host_time_ms = max(0, F - s(1))`: a near-empty prefill costs about one forward),
  and the per-prompt-token host cost as the slope of the engine's tokenize endpoint
  time over two lengths (HTTP + tokenization), when it has one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from predictor.harvest.client import RequestTrace, StreamClient, failed, run_wave
from predictor.harvest.prompts import Prompt, PromptFactory
from predictor.step.transfer import fit_prefill, prefill_time
from predictor.units import S_PER_MS, US_PER_MS

MIN_WAVE_GAPS = 3            # fewer pooled gaps than this: no measurement for the wave
PREFILL_OUTPUT_TOKENS = 1
HOST_PROBE_REPEATS = 5


@dataclass(frozen=True, slots=True)
class WaveResult:
    batch: int
    prompt_tokens: int
    itl_ms: float | None          # median gap inside the all-running window
    gaps: int
    window_ms: float              # length of the all-running window (<= 0: empty)
    first_token_spread_ms: float  # last first token - first first token
    serialised: bool
    reported_prompt_tokens: tuple[int | None, ...] = ()
    counted_prompt_tokens: tuple[int | None, ...] = ()

    def to_json(self) -> dict:
        return {"batch": self.batch, "prompt_tokens": self.prompt_tokens, "itl_ms": self.itl_ms,
                "gaps": self.gaps, "window_ms": round(self.window_ms, 3),
                "first_token_spread_ms": round(self.first_token_spread_ms, 3), "serialised": self.serialised}


def wave_gaps_s(traces: Sequence[RequestTrace]) -> tuple[list[float], float, float]:
    """(pooled gaps in s, window start, window end): gaps whose both ends lie where
    every request has started and none has finished."""
    start = max(t.first_token_s for t in traces)
    end = min(t.last_token_s for t in traces)
    gaps = []
    for trace in traces:
        times = trace.token_times_s
        for before, after in pairwise(times):
            if before >= start and after <= end:
                gaps.append(after - before)
    return gaps, start, end


def decode_wave(traces: Sequence[RequestTrace], prompt_tokens: int,
                counted: Sequence[int | None] = ()) -> WaveResult:
    """The single-wave median ITL of one batch (module docstring)."""
    gaps, start, end = wave_gaps_s(traces)
    spread = (start - min(t.first_token_s for t in traces)) / S_PER_MS
    itl = statistics.median(gaps) / S_PER_MS if len(gaps) >= MIN_WAVE_GAPS else None
    serialised = len(traces) > 1 and end <= start
    return WaveResult(batch=len(traces), prompt_tokens=prompt_tokens, itl_ms=itl, gaps=len(gaps),
                      window_ms=(end - start) / S_PER_MS, first_token_spread_ms=spread, serialised=serialised,
                      reported_prompt_tokens=tuple(t.prompt_tokens for t in traces),
                      counted_prompt_tokens=tuple(counted))


@dataclass(frozen=True, slots=True)
class PrefillResult:
    prompt_tokens: tuple[int, ...]
    ttft_ms: tuple[float, ...]          # median per length
    samples_ms: tuple[tuple[float, ...], ...]
    fit: tuple[float, float, float]     # F (ms), c1 (ms/token), c2 (ms/token^2)

    def predict_ms(self, tokens: float, num_seqs: int = 1) -> float:
        return prefill_time(self.fit, tokens, num_seqs)

    def to_json(self) -> dict:
        return {"prompt_tokens": list(self.prompt_tokens), "ttft_ms": [round(t, 3) for t in self.ttft_ms],
                "fit_f_ms": self.fit[0], "fit_c1_ms": self.fit[1], "fit_c2_ms": self.fit[2]}


def prefill_from_samples(lengths: Sequence[int], samples_ms: Sequence[Sequence[float]]) -> PrefillResult:
    medians = tuple(statistics.median(s) for s in samples_ms)
    return PrefillResult(tuple(lengths), medians, tuple(tuple(s) for s in samples_ms),
                         fit_prefill(lengths, medians))


@dataclass(frozen=True, slots=True)
class ProbeResult:
    num_seqs: int
    seq_tokens: int
    step_ms: float                 # send -> last first token of the packed wave
    single_ms: float               # one num_seqs * seq_tokens prompt alone
    fit_ms: float                  # the fit's packed step
    first_token_spread_ms: float

    @property
    def packed_tokens(self) -> int:
        return self.num_seqs * self.seq_tokens

    def to_json(self) -> dict:
        return {"num_seqs": self.num_seqs, "seq_tokens": self.seq_tokens, "step_ms": round(self.step_ms, 3),
                "single_ms": round(self.single_ms, 3), "fit_ms": round(self.fit_ms, 3),
                "first_token_spread_ms": round(self.first_token_spread_ms, 3)}


def probe_from_traces(packed: Sequence[RequestTrace], single: RequestTrace, seq_tokens: int,
                      fit: tuple[float, float, float]) -> ProbeResult:
    sent = min(t.sent_s for t in packed)
    firsts = [t.first_token_s for t in packed]
    k = len(packed)
    return ProbeResult(num_seqs=k, seq_tokens=seq_tokens, step_ms=(max(firsts) - sent) / S_PER_MS,
                       single_ms=single.ttft_ms, fit_ms=prefill_time(fit, k * seq_tokens, k),
                       first_token_spread_ms=(max(firsts) - min(firsts)) / S_PER_MS)


# --- runners (talk to an engine) ---------------------------------------------------------

def _texts(prompts: Sequence[Prompt]) -> list[str]:
    return [p.text for p in prompts]


def warm_up(client: StreamClient, factory: PromptFactory, tokens: int, output_tokens: int) -> None:
    """One discarded request: first-use initialisation is not part of any step."""
    failed([client.stream(factory.make(tokens).text, output_tokens)], "warm-up")


def run_decode_wave(client: StreamClient, factory: PromptFactory, batch: int, prompt_tokens: int,
                    output_tokens: int) -> WaveResult:
    prompts = factory.batch(prompt_tokens, batch)
    traces = run_wave(client, _texts(prompts), output_tokens)
    failed(traces, f"the decode wave at batch {batch}")
    return decode_wave(traces, prompt_tokens, [p.counted_tokens for p in prompts])


def combine_waves(waves: Sequence[WaveResult]) -> WaveResult:
    """Repeated single waves of one batch: the median of their medians; serialised if
    any was (a wave that never ran together is not averaged away)."""
    first = waves[0]
    if len(waves) == 1:
        return first
    medians = [w.itl_ms for w in waves]
    itl = statistics.median(medians) if all(m is not None for m in medians) else None
    return WaveResult(batch=first.batch, prompt_tokens=first.prompt_tokens, itl_ms=itl,
                      gaps=sum(w.gaps for w in waves), window_ms=min(w.window_ms for w in waves),
                      first_token_spread_ms=max(w.first_token_spread_ms for w in waves),
                      serialised=any(w.serialised for w in waves),
                      reported_prompt_tokens=tuple(r for w in waves for r in w.reported_prompt_tokens),
                      counted_prompt_tokens=tuple(c for w in waves for c in w.counted_prompt_tokens))


def run_decode_sweep(client: StreamClient, factory: PromptFactory, batches: Sequence[int], prompt_tokens: int,
                     output_tokens: int, progress: Callable[[str], None] | None = None,
                     waves_per_batch: int = 1) -> list[WaveResult]:
    results = []
    for batch in batches:
        if progress:
            progress(f"decode wave b={batch} at {prompt_tokens} prompt tokens x{waves_per_batch}")
        results.append(combine_waves([run_decode_wave(client, factory, batch, prompt_tokens, output_tokens)
                                      for _ in range(waves_per_batch)]))
    return results


def run_prefill_sweep(client: StreamClient, factory: PromptFactory, lengths: Sequence[int], repeats: int,
                      progress: Callable[[str], None] | None = None) -> tuple[PrefillResult, list[Prompt]]:
    """`repeats` passes over all lengths (interleaved, so a slow spell of a shared
    machine lands on every length rather than biasing one)."""
    samples: list[list[float]] = [[] for _ in lengths]
    used: list[Prompt] = []
    for index in range(repeats):
        if progress:
            progress(f"prefill pass {index + 1}/{repeats} over {list(lengths)} tokens")
        for row, length in zip(samples, lengths):
            prompt = factory.make(length)
            used.append(prompt)
            trace = client.stream(prompt.text, PREFILL_OUTPUT_TOKENS)
            failed([trace], f"the prefill sweep at {length} tokens")
            row.append(trace.ttft_ms)
    return prefill_from_samples(lengths, samples), used


def run_packed_probe(client: StreamClient, factory: PromptFactory, num_seqs: int, seq_tokens: int,
                     fit: tuple[float, float, float]) -> ProbeResult:
    single = client.stream(factory.make(num_seqs * seq_tokens).text, PREFILL_OUTPUT_TOKENS)
    failed([single], "the packed-prefill probe (single prompt)")
    packed = run_wave(client, _texts(factory.batch(seq_tokens, num_seqs)), PREFILL_OUTPUT_TOKENS)
    failed(packed, "the packed-prefill probe")
    return probe_from_traces(packed, single, seq_tokens, fit)


def run_reuse_probe(client: StreamClient, factory: PromptFactory, tokens: int) -> tuple[float, float]:
    """(first TTFT, repeat TTFT) of one prompt sent twice, in ms."""
    text = factory.make(tokens).text
    first = client.stream(text, PREFILL_OUTPUT_TOKENS)
    repeat = client.stream(text, PREFILL_OUTPUT_TOKENS)
    failed([first, repeat], "the prefix-reuse probe")
    return first.ttft_ms, repeat.ttft_ms


def host_time_ms(fit: tuple[float, float, float], decode_step_ms: float) -> float:
    """METHOD §3.12: the intercept beyond one forward (module docstring)."""
    return max(0.0, fit[0] - decode_step_ms)


def host_us_per_prompt_token(client: StreamClient, factory: PromptFactory, short_tokens: int, long_tokens: int,
                             clock: Callable[[], float] = time.perf_counter) -> float | None:
    """Slope of the tokenize endpoint's time over two prompt lengths (us per token);
    None when the engine cannot tokenize."""
    def timed(text: str) -> float | None:
        values = []
        for _ in range(HOST_PROBE_REPEATS):
            started = clock()
            if client.tokenize_count(text) is None:
                return None
            values.append(clock() - started)
        return statistics.median(values)

    short, long = timed(factory.make(short_tokens).text), timed(factory.make(long_tokens).text)
    if short is None or long is None:
        return None
    return max(0.0, (long - short) / (long_tokens - short_tokens)) / S_PER_MS * US_PER_MS
