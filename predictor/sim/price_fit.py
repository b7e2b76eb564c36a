"""A step price as an affine function of context, learned from the step model's own
answers and checked against them (issue 13 speed).

With the batch, the prefill tokens and the number of prompts fixed, a step's cost grows
linearly with the decoders' mean context (attention reads their KV) and with the
prefill's prior context (its chunk attends to it): the step models price it so (both
modes, checked across models in tests/predictor/sim/test_fast_paths.py). A DES run asks
about the same (batch, tokens) at thousands of contexts; :class:`AffineFit` answers
from ``base + per_context * context + per_prior * prior`` once real answers at
:data:`FIT_POINTS` distinct shapes determine the coefficients and a further real
answer agrees within :data:`TOLERANCE`. A shape more than :data:`REACH` beyond the
contexts the real answers span, and every :data:`RECHECK_EVERY` th answer, is a real
call compared with the fit; one disagreement retires the fit for good (the caller falls
back to the step model). No probe is ever made: every call reaches the step model at a
shape the simulation really priced, so its flags are its own, and the caller replays
the extreme contexts each fit answered for (`extremes`) so that flags raised only far
from the anchor's context are raised too.
"""

from __future__ import annotations

FIT_POINTS = 3            # real answers that determine base, per-context and per-prior
TOLERANCE = 1e-6          # relative agreement that trusts (and keeps trusting) a fit
RECHECK_EVERY = 256       # a real call among this many answers
MIN_SPREAD = 1.0          # tokens: points closer than this in context do not inform a slope
REACH = 1.25              # a fit answers up to 25% beyond the contexts real answers span
RANK_TOLERANCE = 1e-9     # a 2-axis fit needs its axes this far from collinear (1 - r^2)


class AffineFit:
    """One (batch, tokens, prompts) key's price over (context, prior)."""

    __slots__ = ("points", "coefficients", "retired", "answered", "low_context", "high_context",
                 "low_prior", "high_prior", "known")

    def __init__(self) -> None:
        self.points: list[tuple[float, float, float]] = []   # (context, prior, us) from real calls
        self.coefficients: tuple[float, float, float] | None = None
        self.retired = False
        self.answered = 0
        # the (context, prior) shapes answered at the lowest/highest context and prior
        self.low_context = self.high_context = self.low_prior = self.high_prior = (0.0, 0.0)
        self.known = (0.0, 0.0, 0.0, 0.0)    # context and prior range of the real answers it agrees with

    def answer(self, context: float, prior: float) -> float | None:
        """The fitted price, or None when a real call is due: not fitted, retired, a
        periodic recheck, or a shape more than :data:`REACH` beyond the contexts the real
        answers span (a fit is never extrapolated far without being checked)."""
        if self.coefficients is None or self.retired:
            return None
        low_c, high_c, low_p, high_p = self.known
        if not (low_c / REACH - MIN_SPREAD <= context <= high_c * REACH + MIN_SPREAD
                and low_p / REACH - MIN_SPREAD <= prior <= high_p * REACH + MIN_SPREAD):
            return None
        self.answered += 1
        if self.answered % RECHECK_EVERY == 0:
            return None
        if self.answered == 1:
            self.low_context = self.high_context = self.low_prior = self.high_prior = (context, prior)
        else:
            self._extend(context, prior)
        base, per_context, per_prior = self.coefficients
        return base + per_context * context + per_prior * prior

    def learn(self, context: float, prior: float, us: float) -> None:
        """A real answer: check the fit against it, or collect it toward one."""
        if self.retired:
            return
        if self.coefficients is not None:
            base, per_context, per_prior = self.coefficients
            if abs(base + per_context * context + per_prior * prior - us) > TOLERANCE * max(abs(us), 1.0):
                self.retired = True
            else:
                self._know(context, prior)
            return
        self.points.append((context, prior, us))
        if len(self.points) > FIT_POINTS:
            self._fit()

    def _fit(self) -> None:
        """Solve on all but the newest point; trust the fit if the newest agrees."""
        *known, (context, prior, us) = self.points
        contexts = [c for c, _, _ in known]
        priors = [q for _, q, _ in known]
        varies = (max(contexts) - min(contexts) >= MIN_SPREAD, max(priors) - min(priors) >= MIN_SPREAD)
        solved = _least_squares(known, varies)
        if solved is None:
            return
        base, per_context, per_prior = solved
        if (not varies[0] and abs(context - contexts[0]) >= MIN_SPREAD) or \
                (not varies[1] and abs(prior - priors[0]) >= MIN_SPREAD):
            return                  # the newest point moves along an axis the fit never saw
        if abs(base + per_context * context + per_prior * prior - us) <= TOLERANCE * max(abs(us), 1.0):
            self.coefficients = (base, per_context, per_prior)
            self.known = (min(min(contexts), context), max(max(contexts), context),
                          min(min(priors), prior), max(max(priors), prior))
        elif len(self.points) > 3 * FIT_POINTS:
            self.retired = True      # real answers that no affine function explains

    def _extend(self, context: float, prior: float) -> None:
        if context < self.low_context[0]:
            self.low_context = (context, prior)
        elif context > self.high_context[0]:
            self.high_context = (context, prior)
        if prior < self.low_prior[1]:
            self.low_prior = (context, prior)
        elif prior > self.high_prior[1]:
            self.high_prior = (context, prior)

    def _know(self, context: float, prior: float) -> None:
        low_c, high_c, low_p, high_p = self.known
        self.known = (min(low_c, context), max(high_c, context), min(low_p, prior), max(high_p, prior))

    def extremes(self) -> set[tuple[float, float]]:
        """The shapes (context, prior) at the edges of what the fit answered."""
        return {self.low_context, self.high_context, self.low_prior, self.high_prior}


def _least_squares(points: list[tuple[float, float, float]], varies: tuple[bool, bool]) -> tuple[float, float, float] | None:
    """(base, per_context, per_prior) fitting ``us`` on the axes that vary, by the normal
    equations of the centred axes (at most three unknowns: plain Python is ~10x numpy's
    lstsq here); None when the axes are degenerate (collinear points)."""
    n = len(points)
    mean_c = sum(c for c, _, _ in points) / n
    mean_p = sum(q for _, q, _ in points) / n
    mean_us = sum(u for _, _, u in points) / n
    axes = [i for i, used in enumerate(varies) if used]
    rows = [((c - mean_c, q - mean_p), u - mean_us) for c, q, u in points]
    slopes = [0.0, 0.0]
    if len(axes) == 1:
        a = axes[0]
        sxx = sum(x[a] * x[a] for x, _ in rows)
        if sxx <= 0.0:
            return None
        slopes[a] = sum(x[a] * y for x, y in rows) / sxx
    elif len(axes) == 2:
        s00 = sum(x[0] * x[0] for x, _ in rows)
        s11 = sum(x[1] * x[1] for x, _ in rows)
        s01 = sum(x[0] * x[1] for x, _ in rows)
        det = s00 * s11 - s01 * s01
        if det <= RANK_TOLERANCE * s00 * s11:
            return None
        s0y = sum(x[0] * y for x, y in rows)
        s1y = sum(x[1] * y for x, y in rows)
        slopes = [(s11 * s0y - s01 * s1y) / det, (s00 * s1y - s01 * s0y) / det]
    return mean_us - slopes[0] * mean_c - slopes[1] * mean_p, slopes[0], slopes[1]

