"""From an answer to a deployment (`inferasim deploy`): the engine launch command of a
pick (a ledger's best or any trial, a plan-mix slot, a `--config`) with prefix caching
as priced and the scheduler levers it chose, and for a disaggregated pick a Dynamo graph
and an llm-d manifest per pool.

`pick` resolves what to deploy, `plan` builds the launch commands through the
harvester's engine adapters (one lever -> flag mapping for both), `dynamo` and `llmd`
write the Kubernetes manifests around those commands.
"""
