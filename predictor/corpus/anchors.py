"""THE rule that turns measured serving runs into anchors (METHOD §3.1-§3.4, §3.11, §3.12, §4).

A measured serving run is not a harvest: its mean TPOT under continuous batching
includes prefill stalls, its TTFT includes host time and the decode step in flight, and
it covers a few concurrencies at one or two prompt lengths. The rule below is fixed
before scoring (`RULE_VERSION`) and is the same for the shipped default anchors
(`scripts/build_default_anchors.py`) and for `inferasim score`.

1. **Groups.** One anchor per (stack, replica layout): stack = (GPU, engine, model,
   precision, speculation), layout = (tp, ep, attention_dp, pp). A colocated row feeds
   its replica layout in both roles; a disaggregated row feeds its decode pool's layout
   in the decode role and its prefill pool's layout in the prefill role. A layout with
   colocated rows takes each role from them only (no prefill stalls from a split's other
   pool, no hand-off); otherwise from the split rows.
2. **Batch.** A run's decode batch per replica is its mean number of decoding requests,
   by Little's law: `b = C_r * D / (TTFT + D)` with `C_r` the clients per (decode)
   replica and `D = (osl - 1) * TPOT`. Under graph capture the engine pads `b` up to the
   next captured size, so the point is recorded at that size (METHOD §3.3); the capture
   ladder recorded in the signature is the engines' common default (1, 2, 4, then every
   8 up to 1024), not the corpus concurrencies, so held-out batches read the staircase
   between measured points. Above the largest captured batch (256, the lever default)
   batches fall in 16 bins per octave. Points in one bin (repeated runs) take the median.
3. **Decode step.** The verify step is `L * TPOT` (`L` the committed tokens per step,
   METHOD §3.8; 1 without speculation) with the modelled prefill interference removed:
   a colocated replica spends the share `lambda * M(isl)` of its time on prefill work
   (`lambda = C_r / (TTFT + D)` requests per ms, `M` the prefill marginal of step 4), so
   `s(b) = L * TPOT * (1 - lambda * M)`; a decode pool has no prefill work: `s = L * TPOT`.
   (Median ITL is not a step time in general: engines stream in chunks of 10-50 tokens;
   TPOT is what every corpus records.) The context of a point is the run's mean decode
   context `isl + osl / 2` (what the analytical predictor prices), recorded as the
   sweep's `prompt_tokens`. Several contexts give the slope (METHOD §3.4): the one with
   the most batches is primary, the one farthest from it the second; a slope
   `gamma * b` per token of context (KV reads grow with batch x context) is fitted on
   every point of the other contexts and fills the batches a context did not measure
   (measured points are kept as they are).
4. **Prefill.** Per prompt length `n`, the runs at the layout's lowest per-replica
   concurrency split their TTFT into the GPU prefill marginal `M(n)` and host time
   (`predictor.corpus.points`): `M` from the prefill interference of per-token-streaming
   runs where visible, else simulate mode's prefill marginal of the layout capped by
   what the TTFT leaves. The sweep records `T(n) = H0 + h n + F_gpu + M(n)`, the TTFT a
   concurrency-1 harvest would see, fitted as `F + c1 n + c2 n^2` with `F = H0 + F_gpu`
   fixed (`F_gpu` = the cheapest decode step: a forward costs at least one token's) and
   `c1, c2 >= 0` by least squares (one prompt length: `c2 = 0`).
5. **Host time (METHOD §3.12).** The rest of the lowest-concurrency TTFT (colocated:
   after `k` decode steps the prompt's chunks ride and `M`; split: after `F_gpu + M`, half
   a decode step and the per-token host time, the two pools' fixed host time): `h` per engine from
   `predictor.corpus.host`, `H0` the median residual. TTFT means the median TTFT when the
   corpus gives one (a mean TTFT carries one-off startup stalls), else the mean.
6. **Reproduction.** With a predictor at hand (`predictor.corpus.refine`), the anchor
   is then corrected until the predictor reproduces its own rows: decode points by the
   median measured/predicted TPOT of their rows, the host time `H0` by the median
   measured-minus-predicted TTFT of the lowest-concurrency rows. This removes what
   steps 3-5 model more crudely than the predictor (queueing, hand-off, chunking).
7. **Missing role.** A layout seen only as a prefill pool (or only as a decode pool)
   borrows the other sweep from the stack's nearest layout that has it, carried across
   width by METHOD §3.1 (Eq. 1) / §3.2, and is flagged `decode-sweep-carried` /
   `prefill-sweep-carried`. The carried sweep completes the record; the anchor's fit
   and its measured-step corrections read only what its own layout measured
   (`predictor.step.anchored.decode_measurements`).
Anchors are not full captured sweeps (`is_full_sweep=False`): they cover their own TP
only (METHOD §4).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace

from levers.catalog import parse_layout
from levers.configuration import Configuration
from predictor.anchors.anchor import Anchor, DecodeSweep, PrefillSweep
from predictor.corpus.host import ttft_typical
from predictor.corpus.row import CorpusRow, RowFailure
from predictor.step.speculation import acceptance_curve
from predictor.step.transfer import padded_batch
from predictor.units import US_PER_MS

RULE_VERSION = "corpus-rule-1"
CAPTURE_LADDER: tuple[int, ...] = (1, 2, 4) + tuple(range(8, 1025, 8))
BINS_PER_OCTAVE_LOG2 = 4         # above the capture range: 16 batch bins per octave

Layout = tuple[int, int, int, int]          # tp, ep, attention_dp, pp
GroupKey = tuple[tuple[str, ...], Layout]   # (stack, layout)


@dataclass(frozen=True, slots=True)
class Role:
    """One row seen from one anchor: which layout, which role, clients per replica."""

    row: CorpusRow
    key: GroupKey
    phase: str               # "decode" | "prefill"
    clients: float           # per (pool) replica
    colocated: bool


@dataclass
class Group:
    """Everything the rule gathers for one anchor before it is assembled."""

    key: GroupKey
    decode: list[Role] = field(default_factory=list)
    prefill: list[Role] = field(default_factory=list)
    decode_points: dict[tuple[int, int], list[float]] = field(default_factory=dict)   # (ctx, b) -> steps ms
    point_rows: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    marginals: dict[int, float] = field(default_factory=dict)     # n -> GPU prefill marginal M(n), ms
    marginal_source: dict[int, str] = field(default_factory=dict)
    prefill_rows: dict[int, list[str]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    floor_ms: float = 0.0                     # F_gpu: the cheapest closed-form decode step
    host_base_ms: float = 0.0                 # H0 (step 5)
    host_per_token_us: float = 0.0            # h (step 5)
    first_wave_stall_ms: float = 0.0          # benchmark start-up stall (step 6)
    first_wave_stall_per_client_ms: float = 0.0
    prefill_ttft: dict[int, float] = field(default_factory=dict)   # n -> T1 read through the model (step 6)

    def source_rows(self) -> dict[str, CorpusRow]:
        """The group's rows by id (each once, in the order its roles first name them)."""
        return {role.row.id: role.row for role in (*self.decode, *self.prefill)}

    def prefill_points(self) -> dict[int, float]:
        """`T(n) = H0 + h n + F_gpu + M(n)`: the TTFT a concurrency-1 harvest would see
        (once step 6 has read the rows through the model, its reading)."""
        if self.prefill_ttft:
            return dict(self.prefill_ttft)
        return {n: self.host_base_ms + self.host_per_token_us * n / US_PER_MS + self.floor_ms + m
                for n, m in self.marginals.items()}

    @property
    def fixed_ms(self) -> float:
        """`F = H0 + F_gpu`."""
        return self.host_base_ms + self.floor_ms


@dataclass(frozen=True)
class AnchorBuild:
    anchors: tuple[Anchor, ...]
    failures: tuple[RowFailure, ...]
    groups: dict[str, Group]           # anchor id -> its group (points and their rows)


# --- rows to roles -------------------------------------------------------------------------

def roles_of(row: CorpusRow) -> list[Role]:
    stack, config = row.stack, row.config
    if not config.disaggregated:
        layout = (config.tp, config.ep, config.attention_dp, config.pp)
        clients = row.concurrency / max(1, config.replicas)
        return [Role(row, (stack, layout), phase, clients, True) for phase in ("decode", "prefill")]
    (ptp, pep, pdp), (dtp, dep, ddp) = parse_layout(config.prefill_layout), parse_layout(config.decode_layout)
    return [Role(row, (stack, (dtp, dep, ddp, config.pp)), "decode", row.concurrency / config.decode_replicas, False),
            Role(row, (stack, (ptp, pep, pdp, config.pp)), "prefill", row.concurrency / config.prefill_replicas,
                 False)]


def layout_config(row: CorpusRow, key: GroupKey) -> Configuration:
    """A colocated configuration of the group's layout with the row's kernel choices."""
    tp, ep, dp, pp = key[1]
    return replace(row.config, disaggregated=False, prefill_layout=None, decode_layout=None, prefill_replicas=1,
                   decode_replicas=1, kv_transfer_backend=None, tp=tp, ep=ep, attention_dp=dp, pp=pp, replicas=1)


def tokens_per_step(row: CorpusRow) -> float:
    """L(k) of the row's speculation (METHOD §3.8), 1 without it."""
    config = row.config
    if config.spec_method == "none" or config.spec_depth <= 0:
        return 1.0
    return float(acceptance_curve(row.model, config.spec_method).length(config.spec_depth))


def context_of(row: CorpusRow) -> int:
    return round(row.isl + row.osl / 2)


def decode_batch(role: Role) -> int:
    """Step 2: Little's-law running batch, recorded where the step was measured."""
    decode_ms = (role.row.osl - 1) * role.row.measured.tpot_ms_mean
    running = role.clients * decode_ms / (ttft_typical(role.row) + decode_ms)
    return recorded_batch(max(1, round(running)))


def recorded_batch(batch: int) -> int:
    """The captured size a batch is padded to (METHOD §3.3); above the largest captured
    batch (not padded) the nearest of 16 bins per octave, so that runs a few requests
    apart share one point instead of making a jagged curve."""
    cap = Configuration().max_captured_batch
    if batch <= cap:
        padded = padded_batch(batch, CAPTURE_LADDER)
        return padded if padded is not None else batch
    step = 2 ** (int(math.log2(batch)) - BINS_PER_OCTAVE_LOG2)
    return int(round(batch / step) * step)


def usable(row: CorpusRow) -> str | None:
    """Why a row cannot feed an anchor (None: it can)."""
    m = row.measured
    if m.ttft_ms_mean is None or m.tpot_ms_mean is None:
        return "an anchor row needs mean TTFT and mean TPOT"
    if row.osl < 2:
        return "an anchor row needs osl >= 2"
    return None


def group_rows(rows: list[CorpusRow]) -> tuple[dict[GroupKey, Group], list[RowFailure]]:
    """Step 1: roles by layout; each role from colocated rows when the layout has any."""
    groups: dict[GroupKey, Group] = {}
    failures = []
    for row in rows:
        reason = usable(row)
        if reason:
            failures.append(RowFailure(row.id, reason))
            continue
        for role in roles_of(row):
            group = groups.setdefault(role.key, Group(role.key))
            (group.decode if role.phase == "decode" else group.prefill).append(role)
    for group in groups.values():
        for name in ("decode", "prefill"):
            roles = getattr(group, name)
            if any(r.colocated for r in roles):
                setattr(group, name, [r for r in roles if r.colocated])
    return groups, failures


# --- assembling sweeps ------------------------------------------------------------------------

def decode_sweep(points: dict[tuple[int, int], list[float]]) -> DecodeSweep:
    """Step 3's sweep: the primary context's points, the farthest context as the second,
    and a slope `gamma * b` per token of context (KV reads grow with batch x context)
    fitted on every other point; it fills batches a context did not measure."""
    by_ctx: dict[int, dict[int, float]] = defaultdict(dict)
    for (ctx, batch), steps in points.items():
        by_ctx[ctx][batch] = statistics.median(steps)
    ranked = sorted(by_ctx, key=lambda c: (-len(by_ctx[c]), c))
    primary_ctx = ranked[0]
    first = by_ctx[primary_ctx]
    if len(ranked) == 1:
        batches = tuple(sorted(first))
        return DecodeSweep(prompt_tokens=primary_ctx, batch_sizes=batches, itl_ms=tuple(first[b] for b in batches),
                           is_full_sweep=False)
    second_ctx = max(ranked[1:], key=lambda c: (abs(c - primary_ctx), len(by_ctx[c])))
    gamma = context_gamma(by_ctx, primary_ctx)
    batches = tuple(sorted({b for values in by_ctx.values() for b in values}))
    primary = [_primary_at(by_ctx, primary_ctx, b, gamma) for b in batches]
    second = [by_ctx[second_ctx].get(b, p + gamma * b * (second_ctx - primary_ctx)) for b, p in zip(batches, primary)]
    return DecodeSweep(prompt_tokens=primary_ctx, batch_sizes=batches, itl_ms=tuple(primary),
                       second_prompt_tokens=second_ctx, second_itl_ms=tuple(max(v, 1e-3) for v in second),
                       is_full_sweep=False)


def context_gamma(by_ctx: dict[int, dict[int, float]], primary_ctx: int) -> float:
    """Least-squares `gamma` in `s(b, ctx) - s(b, ctx0) = gamma * b * (ctx - ctx0)` over the
    points of other contexts whose batch lies inside the primary context's range; >= 0."""
    first = by_ctx[primary_ctx]
    num = den = 0.0
    for ctx, values in by_ctx.items():
        if ctx == primary_ctx:
            continue
        for batch, step in values.items():
            base = _interp(first, batch)
            if base is None:
                continue
            x = batch * (ctx - primary_ctx)
            num, den = num + x * (step - base), den + x * x
    return max(0.0, num / den) if den > 0 else 0.0


def _primary_at(by_ctx: dict[int, dict[int, float]], primary_ctx: int, batch: int, gamma: float) -> float:
    """The primary context's step at `batch`: measured, interpolated, else carried from
    the other contexts' points at that batch by the slope."""
    value = _interp(by_ctx[primary_ctx], batch)
    if value is not None:
        return value
    carried = [values[batch] - gamma * batch * (ctx - primary_ctx)
               for ctx, values in by_ctx.items() if batch in values and ctx != primary_ctx]
    return max(statistics.median(carried), 1e-3)


def _interp(points: dict[int, float], batch: int) -> float | None:
    xs = sorted(points)
    if batch in points:
        return points[batch]
    if batch < xs[0] or batch > xs[-1]:
        return None
    high = next(x for x in xs if x > batch)
    low = max(x for x in xs if x < batch)
    return points[low] + (points[high] - points[low]) * (batch - low) / (high - low)


def prefill_sweep(points: dict[int, float], fixed_ms: float) -> PrefillSweep:
    """Step 4's fit `F + c1 n + c2 n^2` with F fixed and c1, c2 >= 0."""
    lengths = sorted(points)
    values = [points[n] for n in lengths]
    c1, c2 = _fit_marginal(lengths, [v - fixed_ms for v in values])
    return PrefillSweep(prompt_tokens=tuple(lengths), ttft_ms=tuple(values), fit_f_ms=fixed_ms,
                        fit_c1_ms=c1, fit_c2_ms=c2)


def _fit_marginal(lengths: list[int], marginals: list[float]) -> tuple[float, float]:
    """Least squares of `c1 n + c2 n^2` with both non-negative (each subset tried)."""
    best: tuple[float, float, float] | None = None
    for use_linear, use_square in ((True, True), (True, False), (False, True)):
        if use_linear and use_square and len(lengths) < 2:
            continue
        c1, c2 = _solve(lengths, marginals, use_linear, use_square)
        if c1 < 0 or c2 < 0:
            continue
        residual = sum((c1 * n + c2 * n * n - m) ** 2 for n, m in zip(lengths, marginals))
        if best is None or residual < best[0] - 1e-12:
            best = (residual, c1, c2)
    if best is None:
        return max(0.0, sum(marginals) / max(1, sum(lengths))), 0.0
    return best[1], best[2]


def _solve(ns: list[int], ms: list[float], linear: bool, square: bool) -> tuple[float, float]:
    if linear and not square:
        return sum(n * m for n, m in zip(ns, ms)) / sum(n * n for n in ns), 0.0
    if square and not linear:
        return 0.0, sum(n * n * m for n, m in zip(ns, ms)) / sum(n ** 4 for n in ns)
    a11, a12, a22 = sum(n * n for n in ns), sum(n ** 3 for n in ns), sum(n ** 4 for n in ns)
    b1, b2 = sum(n * m for n, m in zip(ns, ms)), sum(n * n * m for n, m in zip(ns, ms))
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-9 * a11 * a22:
        return _solve(ns, ms, True, False)
    return (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
