"""Model cards (METHOD §3.9): each model's architecture as the step and memory models
read it.

`model_card` is the frozen record; `attention` its attention groups (MHA/GQA, MLA,
compressed, linear); `builder` turns a public config.json (`config_reader`) into a card;
`registry` loads the embedded cards and the user's, and resolves aliases (PRODUCT.md §2).
"""
