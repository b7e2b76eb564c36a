"""The mix planner (METHOD §7): one configuration per model and latency tier.

`config` validates models.yaml; `candidates` expands each model's candidates; `planner`
prices them on agentic traffic; `selection` picks per tier by headroom; `ledger` writes
one ledger per model.
"""
