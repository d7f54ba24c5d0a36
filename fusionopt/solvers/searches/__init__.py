"""Heuristic searches, each with its gap to a proven bound: the sparrow searches (SSA,
GradSSA), ``layerwise-opt``, ``decoupled-opt`` and ``sharded-opt``."""
