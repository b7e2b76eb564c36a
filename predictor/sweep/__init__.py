"""Pareto sweeps (PRODUCT.md §2 `pareto`; METHOD §8): price a model's legal space and
keep the throughput-per-GPU vs interactivity frontier.

`space` enumerates the plan; `executors` run it (serial, local pool, Ray); `run` is the
one library call behind `inferasim pareto`; `frontier` marks the Pareto set; `output`
writes the CSV/JSON files and `plot` the PNG.
"""
