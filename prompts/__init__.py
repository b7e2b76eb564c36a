"""Instructions (text files) for the DSPy planner and investigator signatures."""
