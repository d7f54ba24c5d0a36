"""CP-SAT with compute per message (``message_compute``) against an exhaustive search, on one
channel and on several, and a hand-worked optimum."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.solvers import Status
from fusionopt.solvers.exact import cpsat

MS = 1e-3
RTOL = 1e-9


def exhaustive(problem: Problem) -> float:
    """The smallest simulated T over every fusion plan (2^(n-1) cut vectors)."""
    return min(simulate(problem, Plan.from_cuts(problem.profile, np.array(bits, dtype=bool))).iteration_time
               for bits in itertools.product((False, True), repeat=problem.profile.n - 1))


def with_eta(problem: Problem, eta: float, **options) -> Problem:
    return Problem(problem.profile, problem.cost, sync=problem.sync, message_compute=eta, **options)


def check(problem: Problem, result) -> None:
    optimum = exhaustive(problem)
    tiny = RTOL * optimum + 1e-15
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert result.plan.is_fusion(problem.profile)
    assert optimum - tiny <= result.iteration_time <= optimum + result.stats["rounding_bound"] + tiny
    assert result.lower_bound <= optimum + tiny


@settings(deadline=None, max_examples=40)
@given(problems(max_n=7, sync="barrier"), st.floats(0.0, 5e-3), st.sampled_from([0.0, 1e-9]),
       st.sampled_from(["channel", "compute"]), st.sampled_from([1.0, 1.6]), st.sampled_from([0.0, 0.0, 5e-10]))
def test_one_channel_equals_the_exhaustive_optimum(problem, eta, gamma, copy_on, kappa, eta_byte):
    problem = with_eta(problem, eta, copy_cost=gamma, copy_on=copy_on, contention=kappa,
                       message_compute_per_byte=eta_byte)
    result = cpsat(problem, workers=1)
    assert result.status is Status.OPTIMAL
    check(problem, result)


@settings(deadline=None, max_examples=15)
@given(problems(max_n=5, cost=alpha_beta), st.floats(0.0, 5e-3), st.integers(2, 3), st.sampled_from([0.0, 5e-10]))
def test_several_channels_equal_the_exhaustive_optimum(problem, eta, channels, eta_byte):
    problem = with_eta(problem, eta, channels=channels, message_compute_per_byte=eta_byte)
    result = cpsat(problem, workers=1, time_limit=30)
    assert result.status is Status.OPTIMAL
    check(problem, result)


def test_eta_moves_the_optimum_to_fewer_messages():
    # MODEL.md section 5 with alpha 0, beta 1 us/MB: without eta every plan but one message
    # ends at 9.004 ms (WFBP) or so; with eta = 0.5 ms each message adds 0.5 ms to the backward,
    # so one message (ready 6.5, 7 us: 9.507 ms) beats WFBP's 10.504.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    result = cpsat(Problem(profile, AlphaBeta(0.0, 1e-12), message_compute=0.5 * MS), workers=1)
    assert result.plan.num_messages == 1
    assert result.iteration_time == pytest.approx(9.507 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL
