"""Solvers: every method behind :func:`solve`, each returning a simulated :class:`Result`."""

from fusionopt.solvers.registry import default_methods, get_method, methods, register, solve
from fusionopt.solvers.comparison import Comparison, ComparisonRow, compare, format_table
from fusionopt.solvers.result import Result, Status

__all__ = [
    "Comparison", "ComparisonRow", "Result", "Status", "compare", "default_methods", "format_table", "get_method",
    "methods", "register", "solve",
]
