"""The step cost model (anchored and simulate modes, METHOD §2-§4), the memory model
(METHOD §3.9), transfer laws, the discrete-event simulator (METHOD §5), workloads and
trace readers, the harvester; embedded data: model cards, hardware profiles, anchors.

`predictor` never imports `agent`.
"""
