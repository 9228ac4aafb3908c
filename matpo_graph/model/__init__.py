"""The model layer: load a causal LM, choose what trains, run its forward pass, save it as a model folder.

Both trainers (the supervised warm-up and the RL update) and export sit on top of it; it knows nothing of
graphs, rollouts or credit.
"""
