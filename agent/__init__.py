"""Search on top of the predictor: seed planner, DSPy planner and ReAct investigator,
the two-phase search loop, the mix planner, and the typer CLI (METHOD §6-§7)."""
