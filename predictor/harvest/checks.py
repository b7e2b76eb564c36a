"""The harvest checks of METHOD §4: each refuses or flags, none corrects silently.

Every check returns a `Check` (ok / flag / refuse, a message, and the flag that goes
into the anchor's `flags`). A refusal stops the harvest before anything is written;
a flag is written into the anchor and carried by every prediction made from it.

- prompt length recorded: the engine's own count of the sweep prompts must match the
  recorded length (within `PROMPT_LENGTH_TOLERANCE`); no count at all is flagged;
- weights real: an engine launched with dummy/random weights is refused (random weights
  spread MoE tokens evenly and make an anchor too fast); weights behind an endpoint
  cannot be seen and are flagged unverified;
- prefix caching off: asking for it on is refused; timed prompts that share their
  unique prefix are refused; a repeated prompt that comes back faster than `REUSE_RATIO` of its first
  time shows the engine reuses prefixes: refused when the timed prompts could have
  reused anything, flagged otherwise (they were unique from their first words);
- width: an anchor is one replica on at most one node (no PP, replicas, disaggregation);
- build: an unknown engine build is flagged (a new build needs a new harvest);
- decode floor: a batch-1 ITL below the time its weights take to read at the GPU's
  datasheet bandwidth is refused (the stream's delivery, not the engine's steps);
- decode serialisation: a wave whose requests never all ran together, or whose step
  grows like the batch (`ITL(b) >= NOT_BATCHED_RATIO * b * ITL(1)`), is flagged
  `serialised-decode` and its batches are left out of the sweep;
- packing: a step of `N` packed tokens must cost 0.63-1.39x one `N`-token prompt, the
  fit must reproduce the probe's widest step within the same band, and the packed
  first tokens must arrive together (spread below `PACKED_SPREAD_LIMIT` of the step);
  otherwise the probe measured serialisation (`serialised-probe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from levers.configuration import Configuration
from predictor.harvest.prompts import UNIQUE_PREFIX_WORDS
from predictor.harvest.sweeps import ProbeResult, WaveResult

PROMPT_LENGTH_TOLERANCE = 0.10
REUSE_RATIO = 0.5
NOT_BATCHED_RATIO = 0.9
PACKED_RATIO_BAND = (0.63, 1.39)       # METHOD §4
PACKED_SPREAD_LIMIT = 0.5
RANDOM_WEIGHT_FLAGS = ("--load_dummy", "--load-format=dummy", "--load_format=dummy")   # ATOM; vLLM/SGLang
LOAD_FORMAT_FLAGS = ("--load-format", "--load_format")


class Outcome(StrEnum):
    OK = "ok"
    FLAG = "flag"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    outcome: Outcome
    message: str
    flag: str | None = None

    def to_json(self) -> dict:
        return {"check": self.name, "outcome": str(self.outcome), "message": self.message, "flag": self.flag}


def _ok(name: str, message: str) -> Check:
    return Check(name, Outcome.OK, message)


def refusals(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.outcome is Outcome.REFUSE]


def flags_of(checks: Sequence[Check]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.flag for c in checks if c.outcome is Outcome.FLAG and c.flag))


# --- before measuring -----------------------------------------------------------------------

def check_width(config: Configuration, devices: int, span: str = "node") -> Check:
    """One replica, no pipeline, on at most one node (METHOD §2: PP, replicas and
    disaggregation are restored analytically). ``span`` names what ``devices`` counts: a
    launch runs on one node; an endpoint may span the nodes of one scale-up domain."""
    problems = []
    if config.disaggregated:
        problems.append("disaggregated (harvest each pool's layout on its own)")
    if config.replicas > 1:
        problems.append(f"replicas={config.replicas} (an anchor measures one replica)")
    if config.pp > 1:
        problems.append(f"pp={config.pp} (PP is restored by Eq. 4; harvest pp=1)")
    if config.replica_gpus > devices:
        problems.append(f"{config.replica_gpus} devices exceed one {span} of {devices}")
    if problems:
        return Check("width", Outcome.REFUSE, "not an anchor layout: " + "; ".join(problems))
    return _ok("width", f"TP{config.tp}/EP{config.ep}/DP{config.attention_dp} on one {span}")


def check_prefix_cache_lever(config: Configuration, explicit: set[str]) -> Check:
    if "prefix_cache" in explicit and config.prefix_cache == "on":
        return Check("prefix-caching", Outcome.REFUSE,
                     "prefix_cache=on was asked for: a length sweep would reuse its own prefix (2-9x too fast)")
    return _ok("prefix-caching", "prefix caching not requested (launch flags turn it off where the engine has one)")


def loads_random_weights(argv: Sequence[str]) -> bool:
    """`--load-format dummy` (vLLM, SGLang) or `--load_dummy` (ATOM) anywhere in argv."""
    for index, arg in enumerate(argv):
        if arg in RANDOM_WEIGHT_FLAGS:
            return True
        if arg in LOAD_FORMAT_FLAGS and index + 1 < len(argv) and argv[index + 1] == "dummy":
            return True
    return False


def check_weights(launched: bool, argv: Sequence[str] = ()) -> Check:
    if launched and loads_random_weights(argv):
        return Check("real-weights", Outcome.REFUSE,
                     "the launch loads dummy (random) weights: MoE routing is even and the anchor too fast")
    if not launched:
        return Check("real-weights", Outcome.FLAG, "weights behind --endpoint cannot be verified",
                     "weights-unverified")
    return _ok("real-weights", "launched from the real checkpoint")


def check_engine_build(version: str) -> Check:
    if not version or version == "unknown":
        return Check("engine-build", Outcome.FLAG, "engine build unknown: a new build needs a new harvest",
                     "engine-build-unknown")
    return _ok("engine-build", f"engine build {version}")


# --- after measuring -------------------------------------------------------------------------

def check_prompt_length(recorded: int, counted: Sequence[int | None], reported: Sequence[int | None]) -> Check:
    """The engine's own count (tokenize API or usage) against the recorded length."""
    observed = [c for c in counted if c is not None] or [r for r in reported if r is not None]
    if not observed:
        return Check("prompt-length", Outcome.FLAG,
                     f"prompt length {recorded} recorded but the engine reported no token count",
                     "prompt-length-unverified")
    worst = max(observed, key=lambda n: abs(n - recorded))
    if abs(worst - recorded) > PROMPT_LENGTH_TOLERANCE * recorded:
        return Check("prompt-length", Outcome.REFUSE,
                     f"sweep prompts were {worst} tokens, not the recorded {recorded}")
    return _ok("prompt-length", f"prompt length {recorded} tokens (engine count {worst})")


def check_prompts_unique(shared_prefix_words: int) -> Check:
    """Two timed prompts may share at most their first word (one token of a long prompt);
    sharing the whole unique prefix means the prompt factory's guarantee broke."""
    if shared_prefix_words >= UNIQUE_PREFIX_WORDS:
        return Check("unique-prompts", Outcome.REFUSE,
                     f"timed prompts share a {shared_prefix_words}-word prefix: a cache could reuse it")
    return _ok("unique-prompts", "every timed prompt starts differently")


def check_prefix_reuse(first_ms: float, repeat_ms: float, prompts_unique: bool) -> Check:
    """A repeated prompt much faster than its first run: the engine reuses prefixes."""
    if repeat_ms >= REUSE_RATIO * first_ms:
        return _ok("prefix-reuse", f"a repeated prompt took {repeat_ms:.1f} ms vs {first_ms:.1f} ms: no reuse")
    if not prompts_unique:
        return Check("prefix-reuse", Outcome.REFUSE,
                     f"the engine reuses prefixes ({repeat_ms:.1f} ms repeat vs {first_ms:.1f} ms) "
                     "and the timed prompts share prefixes")
    return Check("prefix-reuse", Outcome.FLAG,
                 f"the engine reuses prefixes ({repeat_ms:.1f} ms repeat vs {first_ms:.1f} ms); the timed "
                 "prompts were unique from their first words, so the sweep did not reuse its own prefix",
                 "engine-reuses-prefixes")


def serialised_batches(waves: Sequence[WaveResult]) -> list[int]:
    """Batches whose wave never ran together, or whose step grew like the batch."""
    base = next((w.itl_ms for w in waves if w.batch == 1 and w.itl_ms), None)
    bad = []
    for wave in waves:
        if wave.batch <= 1:
            continue
        not_batched = base is not None and wave.itl_ms is not None and \
            wave.itl_ms >= NOT_BATCHED_RATIO * wave.batch * base
        if wave.serialised or wave.itl_ms is None or not_batched:
            bad.append(wave.batch)
    return bad


def check_decode_waves(waves: Sequence[WaveResult]) -> Check:
    bad = serialised_batches(waves)
    if bad:
        return Check("decode-batching", Outcome.FLAG,
                     f"waves at batch {', '.join(map(str, bad))} never ran all their requests together "
                     "(the engine serialised them): left out of the decode sweep", "serialised-decode")
    return _ok("decode-batching", "every wave decoded its requests together")


# A step streams at least its weights once: at batch 1 the GEMMs' and routed experts' bytes
# at the HBM's datasheet rate (the physics prices them at 0.8 of it), with this margin for
# a datasheet's rounding. A decode (or, with speculation, a token of one) faster than that
# is the stream's delivery, not the engine's steps: a bursty endpoint gave Llama-3.1-8B on
# one H100 a 0.07 ms ITL where its weights alone take 4.5 ms, and the anchor written
# from it was carried as in-ladder, 56x off its own point.
WEIGHT_FLOOR_MARGIN = 0.9


def check_decode_floor(waves: Sequence[WaveResult], floor_ms: float | None) -> Check:
    """Refuses a sweep whose batch-1 ITL is below ``floor_ms`` (module docstring); None:
    no floor is known (a CPU harvest)."""
    base = next((w.itl_ms for w in waves if w.batch == 1 and w.itl_ms), None)
    if floor_ms is None or base is None or base >= WEIGHT_FLOOR_MARGIN * floor_ms:
        return _ok("decode-floor", "the batch-1 decode is no faster than reading the weights")
    return Check("decode-floor", Outcome.REFUSE,
                 f"the batch-1 ITL of {base:.3g} ms is below the {floor_ms:.3g} ms its weights take to read at the "
                 "GPU's datasheet bandwidth: the stream's timing is not the engine's steps (a proxy or client "
                 "that buffers the stream?)")


def probe_failures(probe: ProbeResult) -> list[str]:
    low, high = PACKED_RATIO_BAND
    reasons = []
    ratio = probe.step_ms / probe.single_ms if probe.single_ms > 0 else float("inf")
    if not low <= ratio <= high:
        reasons.append(f"{probe.packed_tokens} packed tokens cost {ratio:.2f}x one {probe.packed_tokens}-token "
                       f"prompt (accepted {low}-{high}x)")
    fit_ratio = probe.step_ms / probe.fit_ms if probe.fit_ms > 0 else float("inf")
    if not low <= fit_ratio <= high:
        reasons.append(f"the prefill fit predicts {probe.fit_ms:.1f} ms for the packed step, measured "
                       f"{probe.step_ms:.1f} ms ({fit_ratio:.2f}x)")
    if probe.num_seqs > 1 and probe.first_token_spread_ms > PACKED_SPREAD_LIMIT * probe.step_ms:
        reasons.append(f"packed first tokens arrived over {probe.first_token_spread_ms:.1f} ms of a "
                       f"{probe.step_ms:.1f} ms step (one at a time)")
    return reasons


def check_packed_probe(probe: ProbeResult | None) -> Check:
    if probe is None:
        return _ok("packed-probe", "not run")
    reasons = probe_failures(probe)
    if reasons:
        return Check("packed-probe", Outcome.FLAG, "the probe measured serialisation: " + "; ".join(reasons),
                     "serialised-probe")
    return _ok("packed-probe", f"{probe.num_seqs}x{probe.seq_tokens} packed step {probe.step_ms:.1f} ms passes")
