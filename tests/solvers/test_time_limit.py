"""The life cycle owns the time limit: one check for every method that takes one, and one
deadline per solve that a warm start inside it never outlives."""

import inspect
import math
import time

import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile
from fusionopt.solvers import catalogue, deadline, seconds_left, solving, Outcome

PROBLEM = Problem(Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3]), AlphaBeta(3e-3, 1e-9))


def limited_methods() -> list:
    return [m for m in catalogue() if "time_limit" in inspect.signature(m.function).parameters]


def test_every_method_with_a_time_limit_checks_it_in_one_line():
    names = [m.name for m in limited_methods()]
    assert {"cpsat", "milp", "ssa", "gradssa", "layerwise-opt", "sharded-opt", "decoupled-opt"} <= set(names)
    for m in limited_methods():
        # The check comes first, whatever the problem: the same line for every method.
        for bad, line in ((0, "time_limit must be a positive, finite number of seconds, got 0"),
                          (math.nan, "time_limit must be a positive, finite number of seconds, got nan"),
                          ("10", "time_limit must be a number of seconds, got '10'")):
            with pytest.raises(ValueError) as caught:
                m.function(PROBLEM, time_limit=bad)
            assert str(caught.value) == line, m.name


def test_a_solve_sets_its_deadline_and_a_warm_start_inside_it_never_outlives_it():
    seen = {}

    def inner_body(problem, *, time_limit: float = 1000.0):
        seen["inner"] = deadline()
        return Outcome(Plan.per_tensor(problem.profile), space="any")

    inner = solving("inner", inner_body)

    def outer_body(problem, *, time_limit: float = 5.0):
        seen["outer"] = deadline()
        seen["left"] = seconds_left()
        inner(problem)                                     # its own limit is 1000 s: the outer's 5 s hold
        return Outcome(Plan.per_tensor(problem.profile), space="any")

    outer = solving("outer", outer_body)
    before = time.perf_counter()
    outer(PROBLEM)
    after = time.perf_counter()
    assert before + 5.0 <= seen["outer"] <= after + 5.0
    assert seen["inner"] == seen["outer"] and 0 < seen["left"] <= 5.0
    assert deadline() == math.inf                          # outside a solve: no deadline
    seen.clear()
    inner(PROBLEM, time_limit=2.0)                         # alone, a method's own limit
    assert before + 2.0 <= seen["inner"] <= time.perf_counter() + 2.0
