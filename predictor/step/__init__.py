"""The step cost model (METHOD §2, §3): the price of one prefill, decode or mixed step of
one replica layout, as a breakdown of named terms.

`cost` holds the interface (`StepModel`, `StepCost`, `Mode`); `simulate` rebuilds a step
per operator on the GPU's rates (`operators`, `kernels`, `fusions`, `imbalance`,
`speculation`, `comm`, `comm_cost`); `anchored` calibrates it with a measured anchor and
carries it by the transfer laws of `transfer` (§3.1-§3.8, §3.11-§3.13); `handoff` prices
the KV hand-off of a disaggregated split (§3.11).
"""
