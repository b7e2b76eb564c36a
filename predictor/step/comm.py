"""Collective communication as `t = alpha + m / B` (METHOD §3.7, §3.15).

Every collective a step pays is priced by one line per (collective, group size): a
fixed cost `alpha_us` and a bandwidth `bandwidth_gbps` applied to the message the
caller passes to the collective (the per-rank buffer, as nccl-tests' `-b`, i.e. the
*algorithm* bandwidth, not nccl-tests' bus bandwidth). Inside a step only `m / B` is
charged: `alpha` is the per-kernel occupancy cost the step already pays for every
kernel (METHOD §3.7), hence `include_alpha`.

The lines are fitted offline by `scripts/build_hardware.py` from measured points and
embedded in `predictor/data/hardware.json`; each keeps its `source` and, when it was
fitted, the measured points it reproduces (`fit_points`), so a test can check it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from predictor.units import BYTES_PER_GB, US_PER_S


class Collective(StrEnum):
    """The collectives a GPU profile prices, each on its own tier (METHOD §3.7)."""

    ALLREDUCE_ONE_SHOT = "allreduce_one_shot"  # engine custom all-reduce, small messages
    ALLREDUCE_TWO_SHOT = "allreduce_two_shot"  # engine custom all-reduce, above the switch
    ALLREDUCE = "allreduce"  # library (NCCL/RCCL) all-reduce, large messages
    ALL_TO_ALL = "all_to_all"  # in-node EP dispatch/combine
    ALLGATHER = "allgather"
    REDUCE_SCATTER = "reduce_scatter"
    P2P = "p2p"  # send/recv inside the scale-up domain (pipeline hop)
    P2P_INTER = "p2p_inter"  # send/recv across nodes, over the NICs
    ALLREDUCE_INTER = "allreduce_inter"
    ALL_TO_ALL_INTER = "all_to_all_inter"


# nccl-tests bus-bandwidth factors: busbw = algbw * factor (comm_constants.json _notes).
BUS_FACTOR_BY_COLLECTIVE = {
    Collective.ALLREDUCE: lambda group: 2 * (group - 1) / group,
    Collective.ALLGATHER: lambda group: (group - 1) / group,
    Collective.REDUCE_SCATTER: lambda group: (group - 1) / group,
    Collective.ALL_TO_ALL: lambda group: (group - 1) / group,
}


def bus_factor(name: str, group: int) -> float:
    """The nccl-tests factor turning algorithm bandwidth into bus bandwidth."""
    return BUS_FACTOR_BY_COLLECTIVE[Collective(name)](group)


class CollectiveFit(BaseModel):
    """One fitted line `t_us = alpha_us + message_bytes / (bandwidth_gbps * 1e3)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha_us: float = Field(ge=0.0)
    bandwidth_gbps: float = Field(gt=0.0)
    source: str = Field(min_length=1)
    fit_points: tuple[tuple[int, float], ...] = ()
    """Measured (message bytes, us) points the line was fitted on; empty when derived."""

    def time_us(self, message_bytes: float, include_alpha: bool = True) -> float:
        """Time of one collective on `message_bytes` (GB/s = 1e9 B/s)."""
        transfer_us = message_bytes / (self.bandwidth_gbps * BYTES_PER_GB) * US_PER_S
        return transfer_us + (self.alpha_us if include_alpha else 0.0)

    def relative_errors(self) -> list[float]:
        """|fit - measured| / measured at each point the line was fitted on."""
        return [abs(self.time_us(m) - t_us) / t_us for m, t_us in self.fit_points]


def nearest_group_fit(fits: dict[int, CollectiveFit], group: int) -> CollectiveFit:
    """The fit at the nearest measured group size at or above `group`, else the largest."""
    sizes = sorted(fits)
    at_or_above = [size for size in sizes if size >= group]
    return fits[at_or_above[0] if at_or_above else sizes[-1]]
