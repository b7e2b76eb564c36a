"""The anchor artifact (METHOD §4, PRODUCT.md §5): one short measurement of one kernel
set at one width. Pydantic at the boundary (files on disk), `extra="forbid"`.

The JSON Schema shipped in `predictor/data/anchor.schema.json` is generated from these
models (`scripts/build_schemas.py`) and checked in tests.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Signature(_Strict):
    """Everything that defines the kernel set and width (METHOD §4 "Signature")."""

    accelerator: str                     # GPU profile name, e.g. "MI355X"
    engine: str                          # vllm | sglang | atom | trtllm | llamacpp
    engine_version: str = "unknown"      # image or build; a new build needs a new harvest
    model: str                           # model card name
    weight_dtype: str
    activation_dtype: str
    expert_dtype: str | None = None
    kv_cache_dtype: str
    attention_backend: str = "auto"
    moe_backend: str = "auto"
    all_to_all_backend: str = "none"
    graph_capture: str = "full"
    captured_sizes: tuple[int, ...] = ()
    spec_method: str = "none"
    spec_depth: int = 0
    fusions: tuple[str, ...] | None = None   # the fusions it ran (None: not recorded, the lever default)
    dcp: int = 1
    tp: int
    ep: int = 1
    attention_dp: int = 1
    pp: int = 1

    def kernel_set(self) -> tuple:
        """The anchor-defining part (METHOD §2): everything except the widths."""
        return (self.accelerator.lower(), self.engine, self.engine_version, self.model.lower(),
                self.weight_dtype, self.activation_dtype, self.expert_dtype, self.kv_cache_dtype,
                self.attention_backend, self.moe_backend, self.graph_capture, self.spec_method, self.dcp)


class DecodeSweep(_Strict):
    """Median single-wave inter-token latency (ms) per batch size, at one prompt length."""

    prompt_tokens: int = Field(gt=0)
    batch_sizes: tuple[int, ...] = Field(min_length=1)
    itl_ms: tuple[float, ...] = Field(min_length=1)
    # Optional second prompt length for the context slope (METHOD §3.4).
    second_prompt_tokens: int | None = None
    second_itl_ms: tuple[float, ...] | None = None
    is_full_sweep: bool = True  # every captured size measured (needed to carry a narrower anchor)

    @model_validator(mode="after")
    def _aligned(self) -> "DecodeSweep":
        if len(self.batch_sizes) != len(self.itl_ms):
            raise ValueError("batch_sizes and itl_ms must have the same length")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError("batch_sizes must be strictly increasing")
        if any(t <= 0 for t in self.itl_ms):
            raise ValueError("itl_ms must be positive")
        if self.second_itl_ms is not None and len(self.second_itl_ms) != len(self.batch_sizes):
            raise ValueError("second_itl_ms must align with batch_sizes")
        return self


class DecodePoint(_Strict):
    """One measured decode step (ms) at a replica batch and mean context (tokens).

    A corpus anchor reads ``step_ms`` from served runs through its first fit (the
    calibration is fitted to it, `predictor.corpus.refine`); ``reproduced_ms``, when set,
    is the step at which the predictor under that calibration reproduces the measured
    TPOT of the point's rows (corpus rule step 6): the anchor's own layout reads its
    decode steps there (`predictor.step.anchored.decode_residual`)."""

    batch: int = Field(gt=0)
    context_tokens: int = Field(gt=0)
    step_ms: float = Field(gt=0)
    reproduced_ms: float | None = Field(default=None, gt=0)


class PrefillSweep(_Strict):
    """TTFT (ms) at concurrency 1 per prompt length, prefix caching off; fitted
    ``T(n) = F + c1 n + c2 n^2`` (METHOD §3.2) with ``F`` in ms."""

    prompt_tokens: tuple[int, ...] = Field(min_length=1)
    ttft_ms: tuple[float, ...] = Field(min_length=1)
    fit_f_ms: float
    fit_c1_ms: float
    fit_c2_ms: float

    @model_validator(mode="after")
    def _aligned(self) -> "PrefillSweep":
        if len(self.prompt_tokens) != len(self.ttft_ms):
            raise ValueError("prompt_tokens and ttft_ms must have the same length")
        return self

    def predict_ms(self, num_tokens: float) -> float:
        return self.fit_f_ms + self.fit_c1_ms * num_tokens + self.fit_c2_ms * num_tokens ** 2


class PackedProbe(_Strict):
    """One step with ``num_seqs`` sequences of ``seq_tokens`` each (METHOD §4)."""

    num_seqs: int
    seq_tokens: int
    step_ms: float
    token_budget: int | None = None
    serialised: bool = False  # the self-check found serialisation (0.63-1.39x rule failed)


class Provenance(_Strict):
    source: str                         # "harvest" | "inferencex" | "aiconfigurator" | ...
    timestamp: str
    node: str = "unknown"
    real_weights: bool = True
    prefix_caching_off: bool = True
    command_line: str = ""
    source_rows: tuple[str, ...] = ()   # corpus row ids an anchor was built from
    notes: tuple[str, ...] = ()


# An anchor flag: its host time is its engine's, measured apart from the prefill over many
# layouts (`predictor.corpus.host`), so a fit holds it close and the prefill takes the rest
# of the TTFT (`predictor.step.anchored.ENGINE_HOST_SIGMA`).
HOST_PER_ENGINE = "host-per-engine"
# An anchor flag: its points were measured in the pools of a disaggregated deployment (a
# corpus anchor whose rows are all split rows). A split it calibrates is no `split`
# transfer (`predictor.anchors.coverage.transfer_kinds`); a colocated layout it calibrates
# shows the flag.
SPLIT_POOL = "split-pool"
# Anchor flags: the fit reached a bound of METHOD §3.12 (`predictor.corpus.refine`). A host
# time at 1 s means the prefill physics could not explain the TTFT of its rows and the
# calibration absorbed the rest (Qwen3-32B bf16 on one H100 under SGLang: compute 2.5x its
# siblings' at TP2-TP8): its factors reproduce its own layout (its loads and lengths, its
# queueing included) but not the physics of another, so it prices its own layout only;
# other layouts take another anchor of the stack, else the cross-model priors
# (`predictor.anchors.store`).
# A start-up stall at 10 s is the runs' own (DeepSeek-R1 on B200 under SGLang stalls
# ~70 s from 32 clients up), read from the TTFT skew after the step is fitted: it does not
# bend the calibration, and the anchor stays carried.
HOST_AT_BOUND, STALL_AT_BOUND = "host-time-at-bound", "stall-at-bound"
# An anchor flag: its fit left the physical range to reproduce its rows (a bandwidth-bound
# part slower than `predictor.step.priors.TEACHING_MAX_BANDWIDTH` times its prior, under
# 40% of HBM's datasheet rate), so, like a host time at its bound, it prices its own
# widths and precisions only (`predictor.anchors.store`) and teaches no prior. Qwen3-32B bf16 at TP2 on
# GB200 under TensorRT-LLM (AIConfigurator: 8.2 ms at batch 1, 90 ms at 16, 64 ms at 128;
# its fit misses its own points by 73% in median, bandwidth 5.9) priced the same model's
# FP4 decode pool at TP4 and 15k context at 98 ms a step, measured 13.4.
BEYOND_PHYSICS = "fit-beyond-physics"
# Anchor flags: a corpus layout seen in only one pool role borrows the other role's sweep
# from a neighbouring layout (`predictor.corpus.anchors`, step 7), carried across width
# by a curve rule, not measured on this layout; neither the anchor's fit nor its
# measured-step corrections read it (`predictor.step.anchored`).
DECODE_CARRIED, PREFILL_CARRIED = "decode-sweep-carried", "prefill-sweep-carried"


class Anchor(_Strict):
    """One anchor file. ``id`` is stable: derived from the signature."""

    id: str
    schema_version: int = 1
    signature: Signature
    decode_sweep: DecodeSweep
    prefill_sweep: PrefillSweep
    packed_probe: PackedProbe | None = None
    # Every measured decode step at its own context (corpus anchors: one per run);
    # when present the calibration is fitted to these instead of the sweep.
    decode_points: tuple[DecodePoint, ...] = ()
    host_time_ms: float = 0.0           # per-request host time added to TTFT/e2e (METHOD §3.12)
    host_us_per_prompt_token: float = 0.0
    # One-off stall the first wave of a fixed-count benchmark run pays (warm-up, JIT,
    # graph capture on first use): fitted from a corpus's mean-vs-median TTFT; 0 for a harvest.
    first_wave_stall_ms: float = 0.0
    # The part of that stall that grows with the run's clients per replica (ms per client).
    first_wave_stall_per_client_ms: float = 0.0
    flags: tuple[str, ...] = ()          # harvest-time flags (e.g. "serialised-decode")
    provenance: Provenance
