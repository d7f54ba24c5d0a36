"""MG-WFBP: the paper's merge rule, its counter-example, and where it is optimal."""

import pytest
from hypothesis import given, settings

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta, network
from fusionopt.model import Problem, Profile, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.exact import closed_form

MS = 1e-3


def worked(alpha_ms: float) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9))


def test_model_section_5_counter_example():
    # l = 3: t2 ready at 3 < 6 = end of t3's message, which started 2 ms < alpha ago: merge.
    # {t3, t2} runs 3 -> 9. l = 2: t1 ready at 6 < 9, but 6 - 3 = 3 is not < alpha: close.
    greedy = solve(worked(3), "mgwfbp")
    assert greedy.plan.groups() == [[2, 1], [0]]
    assert greedy.iteration_time == pytest.approx(19 * MS, rel=1e-12)
    assert greedy.stats["merges"] == 1
    exact = solve(worked(3), "dp")
    assert exact.iteration_time == pytest.approx(17 * MS, rel=1e-12)
    assert greedy.gap == pytest.approx(19 / 17 - 1, rel=1e-9)


def test_wfbp_kept_when_it_is_optimal():
    # alpha = 1 ms: t3's message 1 -> 4 ends after t2 is ready (3) and started 2 ms > alpha
    # before: no merge; t2's 4 -> 6 ends when t1 is ready (6), not before: no merge.
    result = solve(worked(1), "mgwfbp")
    assert result.plan.groups() == [[2], [1], [0]]
    assert result.iteration_time == pytest.approx(14 * MS, rel=1e-12)


@settings(deadline=None)
@given(problem=problems(max_n=10))
def test_never_better_than_the_dp(problem):
    assert solve(problem, "mgwfbp").iteration_time >= solve(problem, "dp").iteration_time * (1 - 1e-9)


@settings(deadline=None)
@given(problem=problems(max_n=9, cost=alpha_beta))
def test_optimal_in_the_closed_form_cases(problem):
    known = closed_form(problem)
    if known is None:
        return
    profile = problem.profile
    if known.stats["case"] == "single" and profile.B - profile.ready_times.min() >= problem.cost.alpha:
        return      # the rule merges only while strictly less than one alpha has passed
    assert solve(problem, "mgwfbp").iteration_time == pytest.approx(simulate(problem, known.plan).iteration_time,
                                                                    rel=1e-9, abs=1e-15)


def test_runs_on_extended_problems_and_fitted_presets():
    profile = worked(3).profile
    extended = Problem(profile, network("mgwfbp-10gbe", 8), contention=1.5, copy_cost=1e-10)
    result = solve(extended, "mgwfbp")
    result.plan.validate(profile)
    assert result.iteration_time == simulate(extended, result.plan).iteration_time
    assert result.lower_bound <= result.iteration_time
    # The fitted 10GbE constants at P = 8 (alpha 0.52 ms) against 1 ms backward steps:
    # t3's message (1 -> 3.24 ms) ends after t2 is ready (3 ms) but started 2 ms > alpha
    # before, so nothing merges on the plain problem: WFBP.
    plain = solve(Problem(profile, network("mgwfbp-10gbe", 8)), "mgwfbp")
    assert plain.plan.groups() == [[2], [1], [0]] and plain.stats["merges"] == 0


@settings(deadline=None)
@given(problem=problems(max_n=12))
def test_kept_starts_equal_a_simulation_after_each_merge(problem):
    # On the plain model the scan keeps the open message's start and end; the general path
    # simulates the whole plan after each merge. They must take the same decisions.
    from fusionopt.solvers.papers import plain_merges, simulated_merges
    for alpha in (problem.cost(1), 0.0, 1e-3):
        assert plain_merges(problem, alpha) == simulated_merges(problem, alpha)
