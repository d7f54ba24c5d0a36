"""Solvers: every method behind :func:`solve`, each returning a simulated :class:`Result`."""

from fusionopt.solvers._catalogue import deadline, register, seconds_left, solving
from fusionopt.solvers._comparison import INFORMATIVE_SHARE, Comparison, ComparisonRow, compare, format_table
from fusionopt.solvers._registry import (
    ORDER, catalogue, comparison_candidates, default_methods, get_method, methods, solve,
)
from fusionopt.solvers._result import OPTIMALITY_RTOL, Interrupted, Outcome, Result, Status, finish, with_bound
from fusionopt.solvers._sharded_units import atom_bounds

__all__ = [
    "Comparison", "ComparisonRow", "INFORMATIVE_SHARE", "Interrupted", "OPTIMALITY_RTOL", "ORDER", "Outcome",
    "Result", "Status", "atom_bounds", "catalogue", "compare", "comparison_candidates", "deadline",
    "default_methods", "finish", "format_table", "get_method", "methods", "register", "seconds_left", "solve",
    "solving", "with_bound",
]
