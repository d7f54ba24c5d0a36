"""Heuristic searches, each with its gap to a proven bound: the sparrow searches (SSA,
GradSSA), ``layerwise-opt``, ``decoupled-opt`` and ``sharded-opt``."""

from fusionopt.solvers.searches._layerwise_opt import LayerwiseEvaluator, layerwise_opt
from fusionopt.solvers.searches._ssa import GRADSSA_SEEDS, GradSSA, SparrowSearch, decode, encode, gradssa, ssa

__all__ = [
    "GRADSSA_SEEDS", "GradSSA", "LayerwiseEvaluator", "SparrowSearch", "decode", "encode", "gradssa",
    "layerwise_opt", "ssa",
]
