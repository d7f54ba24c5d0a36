"""The life cycle every method runs in (fusionopt.solvers.solving): the solver
returns an Outcome, the life cycle times the solve, simulates the plan, certifies it against
the bounds and sets the status."""

import ast
import inspect
import time
from pathlib import Path

import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile
from fusionopt.solvers import solve, catalogue, solving, Interrupted, Outcome, Status

def problem() -> Problem:
    # Backward 3, 2, 1 ms (ready at 1, 3, 6 ms), 1 ms + 1 ns/B: WFBP ends at 14 ms and meets
    # the fusion bound; one message of 7 MB ends at 6 + 8 + 3 (forward) = 17 ms.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    return Problem(profile, AlphaBeta(1e-3, 1e-9))


def test_the_life_cycle_judges_what_the_solver_found():
    def one_message(problem, *, wait=0.0):
        time.sleep(wait)
        return Outcome(Plan.from_groups(problem.profile, [[2, 1, 0]]), stats={"mine": 1})

    solver = solving("one-message", one_message)
    result = solver(problem(), wait=0.02)
    assert result.method == "one-message" and result.stats["mine"] == 1
    assert round(result.iteration_time * 1e3, 9) == 17.0 and str(result.status) == "FEASIBLE"
    assert round(result.lower_bound * 1e3, 9) == 14.0 and result.gap == pytest.approx(3 / 14, rel=1e-12)
    assert result.solve_seconds >= 0.02
    per_tensor = solving("mine", lambda problem: Outcome(Plan.per_tensor(problem.profile)))(problem())
    assert str(per_tensor.status) == "OPTIMAL" and per_tensor.gap == pytest.approx(0.0, abs=1e-12)


def test_a_false_claim_is_caught():
    plan = Plan.from_groups(problem().profile, [[2, 1, 0]])
    with pytest.raises(AssertionError, match="claims an optimum of 0.015 s but its plan simulates to"):
        solving("liar", lambda problem: Outcome(plan, lower_bound=0.015, optimal=True))(problem())
    with pytest.raises(AssertionError, match="is below the proven bound"):
        solving("liar", lambda problem: Outcome(plan, lower_bound=0.02))(problem())
    with pytest.raises(TypeError, match="^method 'bad' returned Plan: a solver returns an Outcome$"):
        solving("bad", lambda problem: plan)(problem())


def test_an_interrupted_search_is_judged_too():
    def stopped(problem):
        raise Interrupted(Outcome(Plan.per_tensor(problem.profile), status=Status.INTERRUPTED))

    with pytest.raises(KeyboardInterrupt) as caught:
        solving("stopped", stopped)(problem())
    kept = caught.value.result
    assert kept.method == "stopped" and str(kept.status) == "INTERRUPTED" and kept.gap == pytest.approx(0.0, abs=1e-12)
    assert round(kept.iteration_time * 1e3, 9) == 14.0


def test_a_method_handed_another_result_is_judged_as_itself():
    fast = Problem(problem().profile, AlphaBeta(1e-4, 1e-10))   # WFBP's closed-form case, handed on
    result = solve(fast, "of-wfbp")
    assert result.method == "of-wfbp" and result.stats["case"] == "wfbp" and str(result.status) == "OPTIMAL"
    searched = solve(problem(), "of-wfbp", rng=0)             # GradSSA's result, handed on: 17 ms as its own
    assert searched.method == "of-wfbp" and searched.stats["case"] == "gradssa"
    assert searched.iteration_time == solve(problem(), "gradssa", rng=0).iteration_time


def test_no_registered_solver_judges_itself():
    # finish (simulate, bound, status) is called by the life cycle only: no module of a
    # registered method calls it.
    modules = {Path(inspect.unwrap(m.function).__code__.co_filename) for m in catalogue()}
    calling = sorted(path.name for path in modules
                     if any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "finish"
                            for node in ast.walk(ast.parse(path.read_text()))))
    assert len(modules) > 20 and calling == []
