"""Losses as pure functions of tensors: one unit per loss, each tested against an independent NumPy computation."""
