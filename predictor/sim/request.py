"""What the simulator moves around: a request's static description and its run state.

A :class:`RequestSpec` is frozen workload data (METHOD §5 input). A :class:`Request` is
the mutable run state of one released spec; only the engine scheduler
(`predictor.sim.scheduler`) and the KV pool change it once it is routed (STYLE rule 2).
It is a slotted class, not a dataclass, because the event loop touches it per step.
Times are microseconds of simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NO_BLOCKS = np.zeros(0, dtype=np.int64)
NO_BLOCKS.flags.writeable = False


def _no_blocks() -> np.ndarray:
    return NO_BLOCKS


@dataclass(frozen=True, slots=True, eq=False)
class RequestSpec:
    """One request of a workload.

    ``block_ids`` are the content hashes of the prompt's fixed-size blocks, prefix-
    chained (one id names one prefix); empty when the prompt shares nothing; a ``range``
    when they are consecutive by construction (an agentic session's turns).
    ``deps`` index requests of the same session that must finish first (a session turn
    waits on its predecessor; a parent turn joins its subagents); ``think_us`` is the
    delay after the last of them finishes (or, for a session's root under a closed
    loop, after the client's slot frees). ``arrival_us`` is set for open-loop roots.
    """

    prompt_tokens: int
    output_tokens: int
    block_ids: np.ndarray | range = field(default_factory=_no_blocks)
    deps: tuple[int, ...] = ()
    think_us: float = 0.0
    arrival_us: float | None = None
    label: str = ""


class Request:
    """Run state of one released request (see the module docstring)."""

    __slots__ = (
        "admit_us",
        "arrival_us",
        "block_ids",
        "cached_tokens",
        "decode_rank",
        "decodes_here",
        "dram_tokens",
        "entry_unit",
        "fetch_tokens",
        "finish_step",
        "finish_us",
        "first_token_us",
        "hit_blocks",
        "host_us",
        "is_fetched",
        "is_kv_ready",
        "is_prefilled",
        "is_reserved",
        "is_warmup",
        "landed_blocks",
        "load_target",
        "loaded_blocks",
        "local_index",
        "num_blocks",
        "output_tokens",
        "pinned_blocks",
        "prefill_target",
        "prefill_work",
        "prefilled",
        "private_tokens",
        "prompt_tokens",
        "reserved_tokens",
        "rank",
        "rid",
        "route_hbm_blocks",
        "session",
        "slot",
        "spec",
        "start_step",
        "steps_needed",
        "unit",
    )

    def __init__(self, rid: int, spec: RequestSpec, session: int, slot: int,
                 arrival_us: float, is_warmup: bool = False, local_index: int = 0) -> None:
        self.rid = rid
        self.local_index = local_index   # index within its session
        self.spec = spec
        self.session = session
        self.slot = slot
        self.is_warmup = is_warmup
        self.prompt_tokens = spec.prompt_tokens
        self.output_tokens = spec.output_tokens
        self.block_ids = spec.block_ids
        self.num_blocks = len(spec.block_ids)
        self.arrival_us = arrival_us
        self.admit_us = -1.0
        self.first_token_us = -1.0
        self.finish_us = -1.0
        self.unit = -1
        self.entry_unit = -1         # the colocated or prefill rank it was routed to        self.hit_blocks = 0          # leading blocks resident in HBM at admission
        self.route_hbm_blocks = 0    # HBM-resident leading blocks when routed (before loads)
        self.loaded_blocks = 0       # blocks promoted from the host tier for this request
        self.cached_tokens = 0
        self.dram_tokens = 0         # of cached_tokens, those loaded from the host tier
        self.prefill_target = 0      # tokens to compute
        self.prefilled = 0
        self.private_tokens = 0      # KV reserved outside the prefix cache
        self.pinned_blocks = 0       # leading blocks pinned in the prefix cache
        self.start_step = 0
        self.finish_step = 0
        self.steps_needed = 0
        self.is_kv_ready = False     # disaggregated decode: KV arrived, no prefill here
        self.decodes_here = True     # False on a prefill pool
        self.host_us = 0.0
        self.rank = None             # the scheduler rank holding it (set when routed)
        self.decode_rank = None      # disaggregated: the decode rank reserving its KV (set on arrival)
        self.is_reserved = False     # ... whose KV that rank has reserved
        self.reserved_tokens = 0     # ... that many (held apart from the prefill rank's pages)
        self.is_prefilled = False    # ... and its prompt is computed (the hand-off waits for both)
        self.prefill_work = 0        # tokens to compute, as routed (the prefill router's load)
        self.load_target = 0         # leading blocks a fetch from a host tier brings
        self.is_fetched = False      # the scheduler has checked (and fetched) its host-tier prefix
        self.fetch_tokens = 0        # ... HBM room its fetch holds until it lands
        self.landed_blocks = 0       # ... prefix blocks it holds pinned in HBM from its fetch to its admission

    def __repr__(self) -> str:
        return f"Request({self.rid}, isl={self.prompt_tokens}, osl={self.output_tokens})"
