"""Run a harvest: start the engine (or use an endpoint), run the sweeps, check, and write
one anchor JSON atomically into the cache (METHOD §4; PRODUCT.md §5, §6).

`run_harvest(plan)` is the one library call of `inferasim harvest`. The engine process
lives in an `EngineProcess` block, so it is stopped whatever happens. `measure` runs the
sweeps against any `StreamClient` (tests pass a replaying client); `build_anchor` turns
measurements into the anchor and the checks' verdicts (pure: unit-tested with
constructed bad data). A refusal raises `InputError` before anything is written.

Anchor fields: the decode sweep keeps only the batches whose waves really ran together
(`is_full_sweep` false when any was left out); `prompt_tokens` is the recorded sweep
length; the prefill sweep keeps its medians and fit; host time as in `sweeps`; the
signature carries the engine build (`engine_version`) and captured sizes; provenance
the node, weights, prefix caching, and the command line.

Every wait is bounded: the whole harvest by `deadline_s` (`--deadline`), each timed
request by `request_timeout_s`, the engine's start-up (or a given endpoint's health
check) by the plan's ready timeout, all cut to what the deadline leaves. `--record` is
written atomically (and redacted) before the anchor is built, so a refused or failed
anchor still leaves the measurement on disk.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from levers.errors import InputError
from predictor.anchors.anchor import Anchor, DecodeSweep, PackedProbe, PrefillSweep, Provenance
from predictor.anchors.store import anchor_id_for, save_anchor, user_anchors_dir
from predictor.cards.registry import register_card_file
from predictor.files import atomic_write_text
from predictor.harvest.checks import (
    Check,
    Outcome,
    check_decode_floor,
    check_decode_waves,
    check_engine_build,
    check_packed_probe,
    check_prefix_reuse,
    check_prompt_length,
    check_prompts_unique,
    flags_of,
    refusals,
    serialised_batches,
)
from predictor.files import atomic_write_text
from predictor.harvest.client import REQUEST_TIMEOUT_S, Deadline, OpenAIStreamClient, RequestTrace, StreamClient
from predictor.harvest.plan import HarvestPlan
from predictor.harvest.process import EngineProcess
from predictor.harvest.prompts import (
    UNIQUE_PREFIX_WORDS,
    PromptFactory,
    shared_prefix_words,
)
from predictor.harvest.sweeps import (
    PrefillResult,
    ProbeResult,
    WaveResult,
    combine_waves,
    host_time_ms,
    host_us_per_prompt_token,
    run_decode_sweep,
    run_packed_probe,
    run_prefill_sweep,
    run_reuse_probe,
    warm_up,
)
from predictor.step.operators import GEMM_BW_EFFICIENCY
from predictor.step.simulate import SimulateStepModel
from predictor.units import US_PER_MS

VERSION_TIMEOUT_S = 30.0
DEFAULT_DEADLINE_S = 6 * 3600.0
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Measurements:
    waves: tuple[WaveResult, ...]
    second_waves: tuple[WaveResult, ...]
    prefill: PrefillResult
    probe: ProbeResult | None
    reuse_ms: tuple[float, float] | None          # (first, repeat) TTFT of one prompt sent twice
    host_us_per_token: float | None
    prompt_texts: tuple[str, ...]                 # every timed prompt (uniqueness check)
    engine_version: str = "unknown"
    traces: tuple[dict, ...] = ()                 # recorded streams (fixtures, --record)


@dataclass(frozen=True)
class HarvestReport:
    anchor: Anchor
    path: Path | None
    checks: tuple[Check, ...]
    measurements: Measurements
    plan: HarvestPlan
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        m = self.measurements
        return {
            "anchor_id": self.anchor.id, "path": str(self.path) if self.path else None,
            "flags": list(self.anchor.flags), "checks": [c.to_json() for c in self.checks],
            "decode_waves": [w.to_json() for w in m.waves],
            "second_decode_waves": [w.to_json() for w in m.second_waves],
            "prefill": m.prefill.to_json(), "packed_probe": m.probe.to_json() if m.probe else None,
            "reuse_probe_ms": list(m.reuse_ms) if m.reuse_ms else None,
            "host_time_ms": self.anchor.host_time_ms, "host_us_per_prompt_token": self.anchor.host_us_per_prompt_token,
            "engine_version": m.engine_version, "plan": self.plan.to_json(), "notes": list(self.notes),
        }


class RecordingClient:
    """Wraps a client and keeps every timed stream (for fixtures and `--record`)."""

    def __init__(self, inner: StreamClient) -> None:
        self.inner = inner
        self.records: list[dict] = []
        self.phase = ""
        self._lock = threading.Lock()

    def stream(self, prompt: str, max_tokens: int) -> RequestTrace:
        trace = self.inner.stream(prompt, max_tokens)
        with self._lock:
            self.records.append({"phase": self.phase, "prompt": prompt, "max_tokens": max_tokens, **trace.to_json()})
        return trace

    def tokenize_count(self, text: str) -> int | None:
        return self.inner.tokenize_count(text)

    def get_json(self, path: str) -> dict | None:
        return self.inner.get_json(path)


# --- measuring ---------------------------------------------------------------------------

def measure(plan: HarvestPlan, client: StreamClient, *, rng: random.Random | None = None,
            progress: Progress | None = None) -> Measurements:
    """Every sweep of the plan against `client` (METHOD §4)."""
    sweep = plan.sweep
    recorder = RecordingClient(client)
    factory = PromptFactory(rng or random.Random(plan.request.seed), recorder.tokenize_count)
    recorder.phase = "warm-up"
    warm_up(recorder, factory, sweep.prompt_tokens, sweep.decode_tokens)
    warm_records = len(recorder.records)
    waves, second = _decode_sweeps(recorder, factory, plan, progress)
    recorder.phase = "prefill"
    prefill, _ = run_prefill_sweep(recorder, factory, sweep.prefill_lengths, sweep.repeats, progress)
    probe = None
    if sweep.probe:
        if progress:
            progress(f"packed-prefill probe {sweep.probe[0]}x{sweep.probe[1]}")
        recorder.phase = f"probe {sweep.probe[0]}x{sweep.probe[1]}"
        probe = run_packed_probe(recorder, factory, sweep.probe[0], sweep.probe[1], prefill.fit)
    timed = recorder.records[warm_records:]
    texts = tuple(r["prompt"] for r in timed)
    if progress:
        progress("prefix-reuse probe and host time")
    recorder.phase = "reuse probe"
    reuse = run_reuse_probe(recorder, factory, sweep.prefill_lengths[-1])
    host = host_us_per_prompt_token(recorder, factory, sweep.prefill_lengths[0], sweep.prefill_lengths[-1])
    return Measurements(waves=tuple(waves), second_waves=tuple(second), prefill=prefill, probe=probe, reuse_ms=reuse,
                        host_us_per_token=host, prompt_texts=texts, traces=tuple(recorder.records))


def _decode_sweeps(recorder: RecordingClient, factory: PromptFactory, plan: HarvestPlan,
                   progress: Progress | None) -> tuple[list[WaveResult], list[WaveResult]]:
    """The decode sweep at the plan's prompt length and at its second one (METHOD §4),
    each batch's streams recorded under its own phase. The context slope is the ratio of
    the two, so they are measured close in time: batch 1's waves alternate between the two
    lengths (a shared machine's speed drifts over tens of seconds: one harvest measured its
    256-token decode step 9% faster than its 64-token one, 2026-12-02), and every other
    batch takes its second length right after its first, when it batched (a serialised
    batch is left out at both)."""
    sweep, waves, second = plan.sweep, [], []
    for batch in sweep.batches:
        if batch == 1 and sweep.second_prompt_tokens:
            first, other = _alternating(recorder, factory, plan, sweep.prompt_tokens, sweep.second_prompt_tokens,
                                        progress)
            waves.append(first)
            second.append(other)
            continue
        waves += _decode_waves(recorder, factory, plan, (batch,), sweep.prompt_tokens, progress)
        if sweep.second_prompt_tokens and batch not in serialised_batches(waves):
            second += _decode_waves(recorder, factory, plan, (batch,), sweep.second_prompt_tokens, progress)
    return waves, second


def _alternating(recorder: RecordingClient, factory: PromptFactory, plan: HarvestPlan, prompt_tokens: int,
                 second_tokens: int, progress: Progress | None) -> tuple[WaveResult, WaveResult]:
    """Batch 1's waves at two prompt lengths, alternately, each length's combined."""
    runs: dict[int, list[WaveResult]] = {prompt_tokens: [], second_tokens: []}
    for _ in range(plan.sweep.waves_per_batch):
        for tokens in runs:
            recorder.phase = f"decode b=1 prompt={tokens}"
            runs[tokens] += run_decode_sweep(recorder, factory, (1,), tokens, plan.sweep.decode_tokens, progress)
    return combine_waves(runs[prompt_tokens]), combine_waves(runs[second_tokens])


def _decode_waves(recorder: RecordingClient, factory: PromptFactory, plan: HarvestPlan, batches: Sequence[int],
                  prompt_tokens: int, progress: Progress | None) -> list[WaveResult]:
    """The decode sweep at one prompt length, each batch's streams recorded under its own phase."""
    waves: list[WaveResult] = []
    for batch in batches:
        recorder.phase = f"decode b={batch} prompt={prompt_tokens}"
        waves += run_decode_sweep(recorder, factory, (batch,), prompt_tokens, plan.sweep.decode_tokens, progress,
                                  plan.sweep.waves_per_batch)
    return waves


# --- assembling ---------------------------------------------------------------------------

def _decode_sweep(plan: HarvestPlan, m: Measurements) -> DecodeSweep:
    bad = set(serialised_batches(m.waves))
    good = [w for w in m.waves if w.batch not in bad and w.itl_ms is not None]
    if not good:
        raise InputError("harvest", "refused: no decode wave produced a measurement", "an engine that streams tokens")
    second = {w.batch: w.itl_ms for w in m.second_waves if w.itl_ms is not None}
    has_second = plan.sweep.second_prompt_tokens is not None and all(w.batch in second for w in good)
    return DecodeSweep(prompt_tokens=plan.sweep.prompt_tokens, batch_sizes=tuple(w.batch for w in good),
                       itl_ms=tuple(w.itl_ms for w in good),
                       second_prompt_tokens=plan.sweep.second_prompt_tokens if has_second else None,
                       second_itl_ms=tuple(second[w.batch] for w in good) if has_second else None,
                       is_full_sweep=len(good) == len(plan.sweep.batches))


def result_checks(plan: HarvestPlan, m: Measurements) -> list[Check]:
    """The checks that need measurements (METHOD §4)."""
    counted = [c for w in m.waves for c in w.counted_prompt_tokens]
    reported = [r for w in m.waves for r in w.reported_prompt_tokens]
    shared = shared_prefix_words(list(m.prompt_texts))
    unique = shared < UNIQUE_PREFIX_WORDS
    checks = [check_prompt_length(plan.sweep.prompt_tokens, counted, reported),
              check_prompts_unique(shared), check_decode_floor(m.waves, decode_floor_ms(plan)),
              check_decode_waves(m.waves), check_packed_probe(m.probe), check_engine_build(m.engine_version)]
    if m.reuse_ms is not None:
        checks.append(check_prefix_reuse(m.reuse_ms[0], m.reuse_ms[1], unique))
    return checks


def decode_floor_ms(plan: HarvestPlan) -> float | None:
    """The batch-1 decode's weight reads at the GPU's datasheet bandwidth, per committed
    token with speculation (`checks.check_decode_floor`); None on a CPU (no profile's rate)."""
    if plan.cluster.gpu.vendor == "cpu":
        return None
    terms = dict(SimulateStepModel(plan.card, plan.cluster, plan.engine, plan.config).decode(
        1, plan.sweep.prompt_tokens).terms)
    weights_us = GEMM_BW_EFFICIENCY * (terms.get("gemm", 0.0) + terms.get("moe", 0.0))
    return weights_us / US_PER_MS / (1 + plan.config.spec_depth)


def build_anchor(plan: HarvestPlan, m: Measurements, *, timestamp: str | None = None,
                 node: str | None = None) -> tuple[Anchor, list[Check]]:
    """The anchor and every check; raises InputError on a refusal (nothing written)."""
    checks = [*plan.checks, *result_checks(plan, m)]
    refused = refusals(checks)
    if refused:
        raise InputError("harvest", "refused: " + "; ".join(c.message for c in refused),
                         "fix the engine or the request; nothing was written (METHOD §4)")
    decode = _decode_sweep(plan, m)
    f, c1, c2 = m.prefill.fit
    prefill = PrefillSweep(prompt_tokens=m.prefill.prompt_tokens, ttft_ms=m.prefill.ttft_ms,
                           fit_f_ms=f, fit_c1_ms=c1, fit_c2_ms=c2)
    probe = None
    if m.probe is not None:
        serialised = any(c.flag == "serialised-probe" for c in checks)
        probe = PackedProbe(num_seqs=m.probe.num_seqs, seq_tokens=m.probe.seq_tokens, step_ms=m.probe.step_ms,
                            token_budget=plan.config.max_batched_tokens, serialised=serialised)
    signature = plan.signature.model_copy(update={"engine_version": m.engine_version or "unknown"})
    reuse_flagged = any(c.name == "prefix-reuse" and c.outcome is Outcome.FLAG for c in checks)
    launched = plan.launch is not None
    notes = [c.message for c in checks if c.outcome is Outcome.FLAG]
    notes += list(plan.notes)
    if m.host_us_per_token is None:
        notes.append("host time per prompt token not measured (no tokenize API)")
    provenance = Provenance(
        source="harvest", timestamp=timestamp or datetime.now(UTC).isoformat(timespec="seconds"),
        node=node or _node(plan), real_weights=True, prefix_caching_off=not reuse_flagged,
        command_line=plan.launch.display() if launched else f"endpoint {plan.request.endpoint}",
        notes=tuple(notes))
    anchor = Anchor(id=anchor_id_for(signature), signature=signature, decode_sweep=decode, prefill_sweep=prefill,
                    packed_probe=probe, host_time_ms=host_time_ms(m.prefill.fit, decode.itl_ms[0]),
                    host_us_per_prompt_token=m.host_us_per_token or 0.0, flags=flags_of(checks),
                    provenance=provenance)
    return anchor, checks


def _node(plan: HarvestPlan) -> str:
    device = plan.cluster.gpu.sources.get("cpu") if plan.cluster.gpu.vendor == "cpu" else plan.cluster.spec
    threads = f", {plan.request.threads} threads" if plan.request.threads else ""
    return f"{platform.node()} ({device}{threads})"


# --- running -----------------------------------------------------------------------------

def engine_version(plan: HarvestPlan, client: StreamClient) -> str:
    """The engine build: the launched package's version, else the endpoint's /version."""
    package = plan.adapter.package
    if plan.launch is not None:
        try:
            return f"{package}=={importlib.metadata.version(package)}" if plan.request.python == sys.executable \
                else _version_in(plan.request.python, package)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    data = client.get_json("/version") or {}
    version = data.get("version")
    return f"{package}=={version}" if isinstance(version, str) and version else "unknown"


def _version_in(python: str, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{package}=={done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else "unknown"


def _client(plan: HarvestPlan, base_url: str, deadline: Deadline, request_timeout_s: float) -> OpenAIStreamClient:
    adapter = plan.adapter
    return OpenAIStreamClient(base_url, plan.served_name, extras=adapter.request_extras(plan.eos_token_id),
                              tokenize_path=adapter.tokenize_path, tokenize_body=adapter.tokenize_body,
                              timeout_s=request_timeout_s, deadline=deadline)


def wait_for_endpoint(client: OpenAIStreamClient, path: str, timeout_s: float, deadline: Deadline,
                      poll_s: float = 0.5) -> None:
    """A given endpoint answers its health check within the ready timeout (and the deadline)."""
    limit_s = deadline.bound(timeout_s)
    started = time.monotonic()
    while True:
        left_s = limit_s - (time.monotonic() - started)
        if left_s > 0 and client.is_up(path, timeout_s=left_s):
            return
        if time.monotonic() - started >= limit_s:
            deadline.check(f"the health check of {client.base_url}{path}")
            raise InputError("--endpoint", f"{client.base_url}{path} did not answer within {timeout_s:g} s "
                             "(--ready-timeout)", "a running OpenAI-compatible engine")
        time.sleep(min(poll_s, max(0.0, limit_s - (time.monotonic() - started))))


def _register_gguf_card(plan: HarvestPlan) -> None:
    """Make the harvested GGUF model predictable by name (a user card)."""
    if plan.card.source.repo != "gguf":
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{plan.card.name}.json"
        path.write_text(json.dumps(plan.card.model_dump(mode="json")))
        register_card_file(path)


def run_harvest(plan: HarvestPlan, *, directory: str | Path | None = None, progress: Progress | None = None,
                log_path: str | Path | None = None, record_path: str | Path | None = None,
                write: bool = True, deadline_s: float = DEFAULT_DEADLINE_S,
                request_timeout_s: float = REQUEST_TIMEOUT_S) -> HarvestReport:
    """Measure, check and write the anchor (module docstring)."""
    deadline = Deadline(deadline_s)
    ready_timeout_s = plan.request.ready_timeout_s
    if plan.launch is None:
        client = _client(plan, str(plan.request.endpoint), deadline, request_timeout_s)
        with client:
            wait_for_endpoint(client, plan.adapter.health_path, ready_timeout_s, deadline)
            measured = _measure_with_version(plan, client, progress)
    else:
        base = f"http://{plan.launch_request.host}:{plan.launch_request.port}"
        log = Path(log_path) if log_path else user_anchors_dir().parent / "harvest-logs" / f"{plan.card.name}.log"
        client = _client(plan, base, deadline, request_timeout_s)
        with client:
            if progress:
                progress(f"starting {plan.engine} (log {log})")
            ready = lambda: client.is_up(plan.adapter.health_path)
            with _launch_files(plan.launch.files), EngineProcess(
                    plan.launch.argv, env=plan.launch.env, ready=ready, timeout_s=deadline.bound(ready_timeout_s),
                    log_path=log):
                measured = _measure_with_version(plan, client, progress)
    if record_path:
        record = {"plan": plan.to_json(), "traces": list(measured.traces)}
        atomic_write_text(Path(record_path), json.dumps(record, indent=1) + "\n")
    anchor, checks = build_anchor(plan, measured)
    path = None
    if write:
        _register_gguf_card(plan)
        path = save_anchor(anchor, directory)
    return HarvestReport(anchor=anchor, path=path, checks=tuple(checks), measurements=measured, plan=plan)


@contextmanager
def _launch_files(files: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """The files the engine reads at start (TensorRT-LLM's options), present only while
    it runs."""
    written = [atomic_write_text(Path(path), text) for path, text in files]
    try:
        yield
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def _measure_with_version(plan: HarvestPlan, client: StreamClient, progress: Progress | None) -> Measurements:
    measured = measure(plan, client, progress=progress)
    return replace(measured, engine_version=engine_version(plan, client))

