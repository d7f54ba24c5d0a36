"""Exact methods on hand-worked cases, the closed forms, and their bad input."""

import time

import numpy as np
import pytest
from hypothesis import given, settings

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import Problem, Profile, fluid_bound, layerwise_slack
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import closed_form, dp

MS = 1e-3


def worked(alpha_ms: float, sync: str = "barrier") -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), sync=sync)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
@pytest.mark.parametrize("method", ["dp", "brute"])
def test_model_section_5_second_case(method, sync):
    result = solve(worked(3, sync), method)
    assert result.plan.groups() == [[2], [1, 0]]          # {t3}, {t2, t1}
    assert result.iteration_time == pytest.approx(17 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL
    assert result.lower_bound == result.iteration_time and result.gap == 0.0


def test_model_section_5_first_case_wfbp_optimal():
    result = solve(worked(1), "dp")
    assert result.plan.groups() == [[2], [1], [0]]
    assert result.iteration_time == pytest.approx(14 * MS, rel=1e-12)


def test_dp_algorithms_and_caps_on_the_worked_example():
    problem = worked(3)
    assert solve(problem, "dp", algorithm="quadratic").stats["algorithm"] == "quadratic"
    assert solve(problem, "dp").stats["algorithm"] == "linear"
    # A 2 MB cap cannot hold t1 (4 MB), and fusion never splits a tensor.
    with pytest.raises(ValueError, match="infeasible: tensor 't0' has 4000000 bytes, more than max_message_bytes = 2000000"):
        solve(problem, "dp", max_message_bytes=2e6)
    # A 5 MB cap forbids the single message (7 MB) but allows {t3},{t2,t1}.
    capped = solve(problem, "dp", max_message_bytes=5e6)
    assert capped.plan.groups() == [[2], [1, 0]]
    # One message at most: the single message, 19 ms.
    one = solve(problem, "dp", max_messages=1)
    assert one.plan.groups() == [[2, 1, 0]] and one.iteration_time == pytest.approx(19 * MS, rel=1e-12)
    assert solve(problem, "brute", max_messages=1).iteration_time == pytest.approx(19 * MS, rel=1e-12)
    # A 4 MB cap packs backward sizes [2, 1, 4] MB into 2 messages at best.
    with pytest.raises(ValueError, match="needs at least 2 messages, more than max_messages = 1"):
        solve(problem, "dp", max_message_bytes=4e6, max_messages=1)


def test_piecewise_linear_costs_use_the_quadratic_dp():
    # A protocol switch: messages up to 2 MB cost 1 ms flat, then 1 ms per extra MB.
    cost = PiecewiseLinear([1, 2e6, 3e6], [MS, MS, 2 * MS])
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    problem = Problem(profile, cost)
    result = solve(problem, "dp")
    assert result.stats["algorithm"] == "quadratic"
    assert result.iteration_time == pytest.approx(solve(problem, "brute").iteration_time, rel=1e-12)
    with pytest.raises(ValueError, match="linear-time DP needs an affine cost"):
        solve(problem, "dp", algorithm="linear")


@settings(deadline=None)
@given(problem=problems(max_n=9))
def test_closed_forms_are_optimal_when_recognised(problem):
    outcome = closed_form(problem)
    if outcome is None:
        return
    result = outcome.judged(problem, "closed-form", time.perf_counter())
    assert result.status is Status.OPTIMAL
    assert result.iteration_time == pytest.approx(dp(problem).iteration_time, rel=1e-9, abs=1e-15)
    order = list(problem.profile.ready_order)
    expected = [[i] for i in order] if result.stats["case"] == "wfbp" else [order]
    assert result.plan.groups() == expected


def test_closed_forms_on_hand_cases():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    # c(s_2) = 0.1 + 0.2 = 0.3 ms <= b_1 = 2 ms; c(s_1) = 0.2 ms <= b_0 = 3 ms: WFBP.
    problem = Problem(profile, AlphaBeta(1e-4, 1e-10))
    wfbp = closed_form(problem).judged(problem, "closed-form", time.perf_counter())
    assert wfbp.stats["case"] == "wfbp"
    assert wfbp.iteration_time == pytest.approx((6 + 0.1 + 0.4 + 3) * MS, rel=1e-12)
    # B - r_2 = 5 ms <= alpha = 6 ms: single message, 6 + 6 + 7 + 3 = 22 ms.
    problem = Problem(profile, AlphaBeta(6 * MS, 1e-9))
    single = closed_form(problem).judged(problem, "closed-form", time.perf_counter())
    assert single.stats["case"] == "single"
    assert single.iteration_time == pytest.approx(22 * MS, rel=1e-12)
    # Neither: MODEL.md section 5.
    assert closed_form(worked(3)) is None and closed_form(worked(1)) is None


def test_fluid_bound_hand_worked():
    # Fluid service of 4, 1, 2 ms of work released at 6, 3, 1 ms ends at 10 ms; the
    # forward (3 ms) follows: 13 ms. The best plan (DP, layerwise) is 17 ms.
    assert fluid_bound(worked(3, "layerwise")) == pytest.approx(13 * MS, rel=1e-12)


def test_bad_input_is_named():
    profile = Profile.from_arrays([8] * 21, [0.0] * 21, [MS] * 21)
    with pytest.raises(ValueError, match="refuses n = 21 > 20; use method='dp'"):
        solve(Problem(profile, AlphaBeta(MS, 1e-9)), "brute")
    with pytest.raises(ValueError, match="max_messages must be an integer >= 1, got 0"):
        solve(worked(3), "dp", max_messages=0)
    with pytest.raises(ValueError, match="max_message_bytes must be positive, got -1"):
        solve(worked(3), "dp", max_message_bytes=-1)
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        solve(worked(3), "dp", algorithm="fast")


class ShiftedCost(AlphaBeta):
    """c(0) = alpha: not zero at zero."""

    def _evaluate(self, sizes):
        return self.alpha + self.beta * sizes


class SawtoothCost(AlphaBeta):
    """Cheaper past 1 MB: not monotone."""

    def _evaluate(self, sizes):
        return np.where(sizes > 0, self.alpha + self.beta * np.where(sizes > 1e6, sizes - 1e6, sizes), 0.0)


def test_cost_models_that_break_the_rules_are_refused():
    profile = worked(3).profile
    with pytest.raises(ValueError, match=r"cost model ShiftedCost: c\(0\) = 0.003 s, must be 0"):
        Problem(profile, ShiftedCost(3 * MS, 1e-9))
    with pytest.raises(ValueError, match=r"cost model SawtoothCost is not monotone: c\(\d+ B\) = .* s > c\(\d+ B\)"):
        Problem(profile, SawtoothCost(MS, 1e-9))


def test_brute_force_is_the_exact_reference_with_several_channels():
    # Worked example, alpha 0, beta 2 ns/B, two channels sharing the bandwidth: every
    # fusion plan simulated event by event; brute force keeps the best of the four.
    from itertools import product
    from fusionopt.model import Plan, simulate
    profile = worked(3).profile
    problem = Problem(profile, AlphaBeta(0.0, 2e-9), channels=2)
    times = [simulate(problem, Plan.from_cuts(profile, list(cuts))).iteration_time
             for cuts in product([False, True], repeat=2)]
    result = solve(problem, "brute")
    assert result.iteration_time == pytest.approx(min(times), rel=1e-12)
    assert result.status is Status.OPTIMAL and result.stats["plans"] == 4
    with pytest.raises(ValueError, match="refuses n = 15 > 14"):
        solve(Problem(Profile.from_arrays([8] * 15, [0.0] * 15, [MS] * 15), AlphaBeta(MS, 1e-9), channels=2), "brute")


@settings(deadline=None, max_examples=25)
@given(problem=problems(max_n=6, cost=alpha_beta))
def test_brute_force_with_extensions_matches_cpsat(problem):
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=1e-10, contention=1.5)
    exhaustive = solve(extended, "brute")
    exact = solve(extended, "cpsat", workers=1)
    tolerance = exact.stats["rounding_bound"] + 1e-12 * exhaustive.iteration_time
    if layerwise_slack(extended) > 0.0:
        # CP-SAT minimises the last message's end, which then no longer decides T: it claims
        # no optimum, and its plan and bound bracket brute force's.
        assert exact.status is not Status.OPTIMAL or exact.iteration_time <= exhaustive.iteration_time + tolerance
        assert exhaustive.iteration_time <= exact.iteration_time + 1e-12 * exhaustive.iteration_time
        assert exact.lower_bound <= exhaustive.iteration_time + 1e-12 * exhaustive.iteration_time
        return
    assert exact.iteration_time == pytest.approx(exhaustive.iteration_time, abs=tolerance)
