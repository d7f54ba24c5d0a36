"""The pieces of fusionopt's CP-SAT arc models that every one of them shares.

A fusion plan of ``n`` tensors in backward order is a path through the nodes ``0, ..., n`` of a
DAG whose arc ``(k, j)`` is the message of positions ``k .. j-1`` (:mod:`fusionopt.solvers.exact._cpsat`).
Times are integers of a quantum ``q`` seconds. Here: the quantum and its limits, a plan's path
and its arcs' positions, the constraints that make the chosen arcs one path, and a first plan
that meets the caps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile

# Relative precision of the automatic time quantum: rounding_bound <= QUANTUM_PRECISION * E_ub.
QUANTUM_PRECISION = 1e-7
# The quantum when every plan ends at time 0 (no compute, free communication): any q works.
SMALLEST_QUANTUM = 2.0 ** -100
# The largest integer time a model may use. CP-SAT works in int64, but with horizons of
# about 1e10 steps (OR-Tools 9.15, the contention model, 48 tensors: the instance of
# tests/solvers/test_cpsat_extensions.py::test_large_integer_horizons_are_avoided) it
# returned a wrong "optimum" and bound. The automatic quantum keeps the horizon at or below
# 2^29, trading precision (the rounding bound grows) for a sound solver.
MAX_INTEGER_TIME = 2 ** 30


def positive_seconds(label: str, value: Any) -> float:
    """``value`` as a positive, finite float of seconds; a ``ValueError`` naming ``label`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{label} must be positive and finite (seconds), got {value!r}")
    return float(value)


def automatic_quantum(upper_end: float, factor: int) -> float:
    """The largest power of two ``q`` with ``factor * q <= QUANTUM_PRECISION * upper_end``
    (``factor * q`` is the rounding bound: ``n + 1`` for the plain model), or, when that
    would take ``upper_end`` past ``MAX_INTEGER_TIME / 2`` steps, the smallest power of
    two that does not."""
    target = QUANTUM_PRECISION * upper_end / factor
    if not target >= SMALLEST_QUANTUM:
        return SMALLEST_QUANTUM
    _, exponent = math.frexp(target)                    # target = m 2^e, 0.5 <= m < 1
    _, coarsest = math.frexp(2 * upper_end / MAX_INTEGER_TIME)
    return math.ldexp(1.0, max(exponent - 1, coarsest))


def integer_horizon(upper_end: float, factor: int, time_quantum: float | None, anchor: str) -> tuple[float, int]:
    """``(q, horizon)``: seconds per integer step (``time_quantum``, else
    :func:`automatic_quantum`) and the steps the ``anchor`` plan ("hint" or "reference"),
    which ends at ``upper_end`` seconds, takes, plus one; a ``ValueError`` when that
    passes ``MAX_INTEGER_TIME``.

    >>> integer_horizon(1.0, 3, 0.25, "reference")
    (0.25, 5)
    """
    q = time_quantum if time_quantum is not None else automatic_quantum(upper_end, factor)
    horizon = math.floor(upper_end / q) + 1
    if not horizon < MAX_INTEGER_TIME:
        raise ValueError(f"time_quantum = {q!r} s is too small: the {anchor} plan takes {horizon:.3g} steps, "
                         "more than 2^30 (MAX_INTEGER_TIME)")
    return q, horizon


def plan_path(plan: Plan, profile: Profile) -> list[int]:
    """Nodes ``0, ..., n`` visited by a fusion plan (the last position of each message)."""
    cuts = plan.cuts(profile)
    return [0] + (np.flatnonzero(cuts) + 1).tolist() + [profile.n]


def arc_positions(path: list[int], n: int) -> np.ndarray:
    """Indices into the row-major ``triu_indices(n + 1, 1)`` arc list of a path's arcs."""
    k = np.asarray(path[:-1], dtype=np.int64)
    j = np.asarray(path[1:], dtype=np.int64)
    return k * n - k * (k - 1) // 2 + (j - k - 1)


def add_path_constraints(model: Any, arcs: list[Any], leaving: list[list[Any]],
                         entering: list[list[Any]], limit: int | None) -> None:
    """The chosen arcs form one path from node 0 to node ``n`` (the DAG has no cycle), of
    at most ``limit`` arcs (messages)."""
    n = len(leaving) - 1
    model.add(sum(leaving[0]) == 1)
    model.add(sum(entering[n]) == 1)
    for m in range(1, n):
        model.add(sum(entering[m]) == sum(leaving[m]))
    if limit is not None:
        model.add(sum(arcs) <= limit)


def add_holding_ends(model: Any, new_var: Any, name: str, ends: list[Any], cuts: list[Any], count: int) -> list[Any]:
    """``[None, h_1, ..., h_count]``: for each position ``p`` a variable (``new_var(name + p)``)
    at least the end of the message holding ``p``, which is ``ends[p]`` where a message ends
    at ``p`` (``cuts[p]``, and always at ``count``) and else the next position's."""
    held = [None] + [new_var(f"{name}{p}") for p in range(1, count + 1)]
    model.add(held[count] >= ends[count])
    for p in range(1, count):
        model.add(held[p] >= ends[p]).only_enforce_if(cuts[p])
        model.add(held[p] >= held[p + 1]).only_enforce_if(~cuts[p])
    return held


def reference_cuts(problem: Problem, cap: float, limit: int | None) -> np.ndarray:
    """A fusion plan that meets the caps: WFBP, or with a message limit the greedy packing
    of contiguous groups under ``cap`` (the fewest messages, which ``check_caps`` checked)."""
    n = problem.profile.n
    if limit is None:
        return np.ones(n - 1, dtype=bool)
    sizes = problem.profile.sizes[problem.profile.backward_order].tolist()
    cuts = np.zeros(n - 1, dtype=bool)
    current = 0
    for j, s in enumerate(sizes):
        if j > 0 and current + s > cap:
            cuts[j - 1] = True
            current = 0
        current += s
    return cuts
