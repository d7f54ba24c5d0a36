"""Solvers: every method behind :func:`solve`, each returning a simulated :class:`Result`."""

from fusionopt.solvers.registry import (
    ComparisonRow,
    compare,
    default_methods,
    format_table,
    get_method,
    methods,
    register,
    solve,
)
from fusionopt.solvers.result import Result, Status

__all__ = [
    "ComparisonRow", "Result", "Status", "compare", "default_methods", "format_table", "get_method", "methods",
    "register", "solve",
]
