"""The discrete-event simulator (METHOD §5) on the step cost model.

`simulate` replays a workload (fixed-length, synthetic, agentic, or a trace) on a
configuration's replicas and returns a `SimResult` (distributions, throughput per GPU,
prefix hit rates, and `.metrics` in the objectives' key convention).
"""

from predictor.sim.agentic import AgenticProfile, AgenticWorkload, load_profile
from predictor.sim.api import SimOptions, as_workload, simulate
from predictor.sim.capacity import CapacityModel, PoolCapacity, memory_capacity
from predictor.sim.prefix_cache import EvictionPolicy
from predictor.sim.results import SimResult
from predictor.sim.router import RouterPolicy
from predictor.sim.scheduler import PROFILES, SCHEDULERS, AdmissionPolicy, EngineProfile
from predictor.sim.traces import TraceWorkload, load_trace
from predictor.sim.workloads import (
    ArrivalMode,
    LengthRange,
    Popularity,
    Session,
    SyntheticWorkload,
)

__all__ = [
    "PROFILES",
    "SCHEDULERS",
    "AdmissionPolicy",
    "AgenticProfile",
    "AgenticWorkload",
    "ArrivalMode",
    "CapacityModel",
    "EngineProfile",
    "EvictionPolicy",
    "LengthRange",
    "PoolCapacity",
    "Popularity",
    "RouterPolicy",
    "Session",
    "SimOptions",
    "SimResult",
    "SyntheticWorkload",
    "TraceWorkload",
    "as_workload",
    "load_profile",
    "load_trace",
    "memory_capacity",
    "simulate",
]
