"""How many DES requests a search trial costs, and which trials the confirm step
re-prices at full fidelity (METHOD §5, §6).

The DES prices a trial whenever the workload is agentic or an SLO bounds a percentile.
At the predictor's default length (40 requests per client on the agentic profile, 10
per closed-loop client on fixed lengths) a trial at 1,024 clients replays ~41,000
requests — tens of seconds on one core. During the search a trial therefore replays
`predictor.sim.fidelity.bounded_requests` of them (the rule and its measured accuracy
are documented there): the full default up to 25 agentic clients, 1,024 requests up to
256 clients, and 4 per client beyond (a fixed closed loop discards each client's first
request as warm-up, so it keeps 3 measured requests per client); one bimodal case (64
clients, fp8 KV cache) moves up to -11% in throughput, as its full-length runs do
across seeds.

Because the bounded count shifts numbers a little, the answer is chosen among the
trials priced at *full fidelity* only: search trials whose bounded count already was the
default (up to 25 agentic clients), and the trials of a final *confirm* step, which
re-prices at the default those of the :data:`CONFIRM_TOP` best distinct search trials
(SLO-meeting first, nearest misses when fewer meet) that were bounded. While no
full-fidelity trial meets the SLOs, the next candidates are confirmed too, up to
:data:`CONFIRM_MAX` in all.

An explicit ``--des-requests N`` keeps its meaning: every trial replays N requests.

Every DES search ends with the confirm step, bounded or not: the finalists are re-priced
with :data:`REPLICATIONS` independent workload draws (`predictor.sim.replications`), so
each carries a 90% interval per metric, and the answer is chosen among them; a finalist
whose objective interval overlaps the best's is reported as a tie. Search trials share
one draw per seed (common random numbers), so their differences are the candidates'.
"""

from __future__ import annotations

from typing import Any

from agent.trial import SearchContext, Trial
from levers.configuration import Configuration
from predictor.sim.api import as_workload
from predictor.sim.fidelity import SEARCH_MAX_REQUESTS, SEARCH_REQUESTS_PER_CLIENT, bounded_requests


CONFIRM_TOP = 5                   # trials re-priced at full fidelity at the end of a search
CONFIRM_MAX = 10                  # ... extended to this many while none meets the SLOs
REPLICATIONS = 5                  # independent workload draws per confirm trial (90% intervals)
SEARCH_RULE = (f"min(default, max({SEARCH_MAX_REQUESTS}, {SEARCH_REQUESTS_PER_CLIENT} * concurrency)) "
               "DES requests per search trial; the confirm step re-prices the best at the default")


def uses_des(context: "SearchContext") -> bool:
    """The predictor's rule: agentic traffic, or a percentile SLO/objective (METHOD §5)."""
    return not context.workload.is_fixed or context.need_distribution


def full_requests(context: "SearchContext", config: "Configuration") -> int:
    """The predictor's default DES length for ``config`` (what ``num_requests=None`` runs)."""
    workload = as_workload(context.workload, config, context.target)
    return workload.default_num_requests(config.concurrency)


def trial_requests(context: "SearchContext", config: "Configuration", *, full: bool = False) -> int | None:
    """DES requests to price ``config`` with (None: the predictor's default or no DES)."""
    if not bounds(context):
        return context.num_requests
    default = full_requests(context, config)
    return default if full else bounded_requests(default, config.concurrency)


def is_full_fidelity(context: "SearchContext", trial: "Trial") -> bool:
    """Whether ``trial`` was priced at the fidelity the answer is chosen at."""
    if not bounds(context) or trial.des_requests is None or trial.config is None:
        return True
    return trial.des_requests >= full_requests(context, trial.config)


def bounds(context: "SearchContext") -> bool:
    """Whether a search on ``context`` bounds its DES trials' length."""
    return context.bounded_fidelity and context.num_requests is None and uses_des(context)


def confirms(context: "SearchContext") -> bool:
    """Whether a search on ``context`` ends with the confirm step (replicated finalists)."""
    return uses_des(context)


def fidelity_json(context: "SearchContext") -> dict[str, Any] | None:
    """The ledger's ``search_fidelity`` block (None: every trial at one fidelity)."""
    if not bounds(context):
        return None
    return {"rule": SEARCH_RULE, "max_requests": SEARCH_MAX_REQUESTS,
            "requests_per_client": SEARCH_REQUESTS_PER_CLIENT, "confirm_top": CONFIRM_TOP,
            "confirm_max": CONFIRM_MAX, "replications": REPLICATIONS}
