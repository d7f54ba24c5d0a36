"""Every registered method schedules every valid problem it is meant for, or refuses it for a
documented reason; whatever it returns is a valid plan the simulator agrees with."""

import math

import pytest
from hypothesis import given, settings

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate, ParameterServer
from fusionopt.solvers import solve, catalogue, get_method

# The reasons a method may give for not taking a problem, each documented in its docstring.
REFUSALS = (
    "is for sync='layerwise' only",                 # P3, ByteScheduler, layerwise-opt
    "needs an affine cost",                         # US-Byte (its block cost is a + b S)
    "plans and refuses n = ",                       # brute force, n > 20
    "and refuses more than 2^16",                   # ps-brute, more than 2^16 plans
    "is for sync='barrier' only",                   # dp-apart
)
SHORT = {"time_limit": 0.2}                         # keep the anytime searches short here


def options(method: str) -> dict:
    return {k: v for k, v in SHORT.items() if k in get_method(method).options}


def check_every_method(problem: Problem) -> None:
    """Each registered method for ``problem``'s pattern (all-reduce or parameter server) gives a
    valid plan the simulator agrees with, at no less than the compute time, or refuses it
    for a documented reason."""
    for method, entry in ((m.name, m) for m in catalogue()):
        if entry.pattern != problem.pattern.name:
            continue
        try:
            result = solve(problem, method, **options(method))
        except ValueError as exc:
            assert any(reason in str(exc) for reason in REFUSALS), f"{method}: {exc}"
            continue
        result.plan.validate(problem.profile)
        again = simulate(problem, result.plan).iteration_time
        assert math.isclose(again, result.iteration_time, rel_tol=1e-9, abs_tol=1e-12), method
        assert result.iteration_time >= problem.profile.compute_time * (1 - 1e-12), method


@settings(deadline=None, max_examples=8)
@given(problem=problems(min_n=2, max_n=40, cost=alpha_beta))
def test_every_all_reduce_method_gives_a_valid_plan_or_a_documented_refusal(problem):
    check_every_method(problem)


@settings(deadline=None, max_examples=6)
@given(problem=problems(min_n=2, max_n=12, cost=alpha_beta))
def test_every_parameter_server_method_gives_a_valid_plan(problem):
    check_every_method(Problem(problem.profile, pattern=ParameterServer(problem.cost), sync=problem.sync))


def test_usbyte_with_nothing_to_cut_schedules_whole_tensors():
    # MODEL.md section 5, alpha = 1 ms, layerwise: the default unit (1M parameters) is larger
    # than every tensor, so US-Byte sends whole tensors: WFBP's order and its 14 ms.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    result = solve(Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise"), "usbyte")
    assert [[(c.tensor, c.lo, c.hi) for c in m.chunks] for m in result.plan.messages] == [
        [(2, 0, 2_000_000)], [(1, 0, 1_000_000)], [(0, 0, 4_000_000)]]
    assert result.iteration_time == pytest.approx(14e-3, rel=1e-12)
