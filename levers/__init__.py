"""The 36 levers (PRODUCT.md §3): legal sets per engine, kinds, the frozen
`Configuration`, partial configurations and structural legality.

This is the bottom layer: data flows levers -> predictor -> objectives -> agent.
"""
