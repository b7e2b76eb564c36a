"""Anchors (METHOD §2, §4; PRODUCT.md §5): the measured step sweeps the step model is
calibrated by.

`anchor` is the on-disk schema; `store` reads the embedded and user anchors and selects
one per target; `coverage` says which anchor covers which target and with what flags;
`check` validates anchor files for `inferasim anchors check`.
"""
