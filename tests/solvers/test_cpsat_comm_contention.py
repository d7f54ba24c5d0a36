"""CP-SAT with two-way contention on one channel: messages slowed ``mu`` times while the
backward computes (MODEL.md section 6). The backlog recursion it encodes, its rounding bound
and its optimum against an exhaustive search judged by the event simulator."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import cut_vectors, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate, arc_times, backward_arrays, layerwise_slack
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import (
    delay_cut, integer_arc_times, rounded_path, rounding_factor, cpsat, arc_positions, plan_path,
)

MS = 1e-3
RTOL = 1e-9


def slack(seconds: float) -> float:
    return RTOL * seconds + 1e-15


@st.composite
def two_way(draw, max_n: int = 7, min_n: int = 1):
    problem = draw(problems(min_n=min_n, max_n=max_n))
    return Problem(problem.profile, problem.cost, sync=problem.sync,
                   copy_cost=draw(st.one_of(st.just(0.0), st.floats(0.0, 2e-9))),
                   copy_on=draw(st.sampled_from(["channel", "compute"])),
                   contention=draw(st.one_of(st.just(1.0), st.just(2.0), st.floats(1.0, 3.0))),
                   comm_contention=draw(st.one_of(st.just(2.0), st.floats(1.0 + 1e-6, 40.0))))


def exhaustive(problem: Problem) -> float:
    profile = problem.profile
    return min(simulate(problem, Plan.from_cuts(profile, np.array(bits, dtype=bool))).iteration_time
               for bits in itertools.product((False, True), repeat=profile.n - 1))


@settings(deadline=None, max_examples=100)
@given(st.data(), two_way(max_n=8), st.sampled_from([1e-6, 1e-4, 1e-3, 2.5e-3]))
def test_rounded_recursion_brackets_the_true_end(data, problem, quantum):
    # q V <= E < q V + rounding_bound for every plan, V the least integer end of the model.
    assume(layerwise_slack(problem) == 0.0)
    profile = problem.profile
    n = profile.n
    plan = Plan.from_cuts(profile, data.draw(cut_vectors(n)))
    rho, prefix = backward_arrays(problem)
    tails, heads = np.triu_indices(n + 1, k=1)
    times = arc_times(problem, np.concatenate(([0.0], rho)), prefix, tails, heads)
    constants = integer_arc_times(problem, quantum, times)
    path = plan_path(plan, profile)
    least = rounded_path(path, arc_positions(path, n), constants)
    true_end = simulate(problem, plan).iteration_time - profile.U - profile.F
    tiny = slack(true_end)
    assert quantum * least["end"][-1] <= true_end + tiny
    assert true_end < quantum * least["end"][-1] + rounding_factor(problem, plan.num_messages) * quantum + tiny
    for p in range(1, n + 1):                   # the delay cuts hold for the true end
        assert quantum * delay_cut(path, arc_positions(path, n), constants, p) <= true_end + tiny


def test_rounding_factors_with_comm_contention():
    # kappa > 1: a_M < (M^2 + M) / 2 for the ready time and g_M < M for the backlog, so
    # E / q - V < (M^2 + 3M) / 2; kappa = 1: a_M < M, so 2M.
    profile = Profile.from_arrays([1] * 5, [MS] * 5, [MS] * 5)
    cost = AlphaBeta(MS, 1e-9)
    assert rounding_factor(Problem(profile, cost, comm_contention=2.0), 3) == 6
    assert rounding_factor(Problem(profile, cost, contention=1.5, comm_contention=2.0), 3) == 9
    assert rounding_factor(Problem(profile, cost, contention=1.5, comm_contention=2.0), 1) == 2


@settings(deadline=None, max_examples=60)
@given(two_way(), st.sampled_from([None, "best-baseline"]))
def test_equals_the_exhaustive_optimum(problem, hint):
    result = cpsat(problem, hint=hint, workers=1)
    optimum = exhaustive(problem)
    tiny = slack(optimum)
    rounding = result.stats["rounding_bound"]
    assert rounding == rounding_factor(problem, problem.profile.n) * result.stats["time_quantum"]
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert optimum - tiny <= result.iteration_time
    assert result.lower_bound <= optimum + tiny
    if layerwise_slack(problem) > 0.0:
        return                                  # E no longer decides T: feasible, bound valid
    assert result.stats["cpsat_status"] == "OPTIMAL" and result.status is Status.OPTIMAL
    assert result.iteration_time <= optimum + rounding + tiny
    assert optimum - rounding - tiny <= result.stats["iteration_time_bound"] <= optimum + tiny


@settings(deadline=None, max_examples=30)
@given(two_way(max_n=6), st.sampled_from([1e-4, 1e-3, 3e-3]))
def test_coarse_quanta_keep_the_bound_below_the_optimum(problem, quantum):
    result = cpsat(problem, time_quantum=quantum, hint=None, workers=1)
    optimum = exhaustive(problem)
    assert result.lower_bound <= optimum + slack(optimum)
    if layerwise_slack(problem) == 0.0:
        assert result.iteration_time <= optimum + result.stats["rounding_bound"] + slack(optimum)


def worked(**contention) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(MS, 1e-9), **contention)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_model_section_6_worked_example(sync):
    # MODEL.md section 6, alpha 1 ms: with mu = 2 alone, {t3}, {t2, t1} at 15.5 ms is best
    # (WFBP and {t3, t2}, {t1} 16.5, one message 17); with kappa = mu = 2, one message at
    # 17 ms (WFBP 19, the two others 18). Without contention WFBP is (14 ms).
    for contention, groups, best in (({"comm_contention": 2.0}, [[2], [1, 0]], 15.5),
                                     ({"contention": 2.0, "comm_contention": 2.0}, [[2, 1, 0]], 17.0)):
        problem = worked(sync=sync, **contention)
        for hint in ("best-baseline", None):
            result = cpsat(problem, hint=hint, workers=1)
            assert result.plan.groups() == groups
            assert result.iteration_time == pytest.approx(best * MS, rel=1e-12)
            assert result.status is Status.OPTIMAL
        assert solve(problem, "brute").iteration_time == pytest.approx(best * MS, rel=1e-12)


def test_several_channels_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"cpsat does not model comm_contention = 2.0 with channels = 2: "
                                         r"use method='brute' \(n <= 14\) or a metaheuristic \('gradssa'\)"):
        cpsat(worked(comm_contention=2.0, channels=2))


def test_a_large_mu_widens_the_quantum_for_the_lags():
    # The lags reach (1 - 1/kappa) mu = 50 times a backlog: the automatic quantum keeps
    # them under 2^30 steps, and a quantum too fine for them is refused by name.
    problem = worked(contention=2.0, comm_contention=100.0)
    result = cpsat(problem, workers=1)
    assert result.status is Status.OPTIMAL
    assert 50 * (result.iteration_time / result.stats["time_quantum"]) < 2 ** 30
    with pytest.raises(ValueError, match=r"its backlogs and lags may take .*more than 2\^30"):
        cpsat(problem, time_quantum=2.0 ** -32)
