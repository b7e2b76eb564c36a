"""A step as raw physical parts, and their price under a calibration (METHOD §2, §3).

The step model (`predictor.step.simulate`) describes every step as a :class:`RawStep`:
rooflines (an operator's time if bandwidth-bound and if compute-bound, at the prior
efficiencies of `predictor.step.operators`), elementwise passes, collectives, kernel
launches and the parts no factor touches (pipeline hops). :func:`price` turns it into the
named terms of a `StepCost` under a `Calibration`; the fit (`predictor.step.fit`) uses the
same function and its gradient, so the model that is fitted is the model that prices.

Under a calibration each roofline costs ``max(bandwidth * memory, compute * compute_us)``,
routed-expert parts are further multiplied by ``moe``, elementwise passes by
``bandwidth``, collectives by ``comm``; a forward costs ``launch_us`` per kernel plus the
eager CPU issue time its GPU work does not hide, and each step ``fixed_us``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from predictor.step.calibration import Calibration

EAGER_CPU_US_PER_KERNEL = 8.0      # CPU issue per kernel outside a graph (see predictor.step.kernels)
GEMM, ATTENTION, MOE = 0, 1, 2      # which breakdown term a roofline belongs to
TERM_NAMES = ("gemm", "attention", "moe")


class Roofline(NamedTuple):
    """One operator (or a sum of like operators) at the prior efficiencies (us). This and
    `RawStep` are NamedTuples: a DES prices a step model thousands of times a replay, and
    a frozen dataclass's __init__ costs 3x a tuple's."""

    term: int                 # GEMM | ATTENTION | MOE
    memory_us: float
    compute_us: float
    weight: float = 1.0       # how many times the step runs it

    def us(self, bandwidth: float, compute: float) -> float:
        return self.weight * max(bandwidth * self.memory_us, compute * self.compute_us)


class RawStep(NamedTuple):
    """Every part of one step before calibration."""

    rooflines: tuple[Roofline, ...] = ()
    elementwise_us: float = 0.0        # norms, RoPE, activations, quant, sampling (bandwidth)
    moe_elementwise_us: float = 0.0    # permutation and expert activations (bandwidth x moe)
    comm_us: float = 0.0               # m / B of the step's collectives
    kernels: float = 0.0               # kernels launched
    issued: float = 0.0                # kernels issued eagerly from the CPU
    fixed_steps: float = 0.0           # how many engine steps this is (each pays fixed_us)
    pipeline_us: float = 0.0           # Eq. 4 hops and host time: physics without a factor

    def plus(self, other: RawStep, weight: float = 1.0) -> RawStep:
        """This step and ``weight`` times another (a drafter's layers, a mixed step's chunk)."""
        scaled = tuple(Roofline(r.term, r.memory_us, r.compute_us, r.weight * weight) for r in other.rooflines)
        return RawStep(
            self.rooflines + scaled, self.elementwise_us + weight * other.elementwise_us,
            self.moe_elementwise_us + weight * other.moe_elementwise_us, self.comm_us + weight * other.comm_us,
            self.kernels + weight * other.kernels, self.issued + weight * other.issued,
            self.fixed_steps + weight * other.fixed_steps, self.pipeline_us + weight * other.pipeline_us)


def launch_us(kernels: float, issued: float, per_kernel_us: float, busy_us: float) -> float:
    """The launch floor plus the eager issue time the GPU's busy time does not hide."""
    floor = kernels * per_kernel_us
    return floor + max(0.0, issued * EAGER_CPU_US_PER_KERNEL - (busy_us + floor))


def rooflines_us(parts: Iterable[tuple[float, float]], cal: Calibration, weight: float = 1.0) -> float:
    """``weight * max(bandwidth * memory, compute * compute_us)`` over (memory, compute)
    parts, summed in order from 0.0 as :func:`price` sums one term's rooflines (the same
    float: a caller may price parts without building their rooflines)."""
    bw, cp, total = cal.bandwidth, cal.compute, 0.0
    for memory, compute in parts:
        total += weight * max(bw * memory, cp * compute)
    return total


def price(raw: RawStep, cal: Calibration, per_kernel_us: float,
          summed: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> dict[str, float]:
    """The named terms (us) of ``raw`` under ``cal`` (``per_kernel_us``: the launch cost
    when the calibration does not set one); ``summed``: (GEMM, attention, MoE) rooflines
    the caller priced under ``cal`` itself, outside ``raw.rooflines``."""
    bw, cp = cal.bandwidth, cal.compute
    terms = list(summed)
    for r in raw.rooflines:
        terms[r.term] += r.weight * max(bw * r.memory_us, cp * r.compute_us)
    moe = cal.moe * (terms[MOE] + bw * raw.moe_elementwise_us)
    other = bw * raw.elementwise_us
    comm = cal.comm * raw.comm_us
    busy = terms[GEMM] + terms[ATTENTION] + moe + other + comm
    kernel_us = per_kernel_us if cal.launch_us is None else cal.launch_us
    return {"gemm": terms[GEMM], "attention": terms[ATTENTION], "moe": moe, "communication": comm,
            "launch": launch_us(raw.kernels, raw.issued, kernel_us, busy), "other": other,
            "fixed": cal.fixed_us * raw.fixed_steps, "pipeline": raw.pipeline_us}


def total_us(raw: RawStep, cal: Calibration, per_kernel_us: float) -> float:
    return sum(price(raw, cal, per_kernel_us).values())
