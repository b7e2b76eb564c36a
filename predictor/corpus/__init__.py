"""Measured corpora and scoring (METHOD §8): reading public serving runs, building
anchors from them by a fixed rule, and scoring predictions against the rest.

Reading: `read` (one entry point), `formats` (InferenceX, AIConfigurator, native),
`row` (one measured run), `where` (row filters). Anchors from rows: `anchors` (the rule),
`assemble`, `points`, `refine`, `host` (host time, METHOD §3.12). Scoring: `score`
(predict every non-anchor row), `metrics` (errors, ranking fidelity), `summary` and
`report` (what `inferasim score` prints).
"""
