"""CP-SAT with several channels: the processor-sharing fast path against the event
simulator, the relaxation below every plan's true time, and the optimum against an
exhaustive search."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, cut_vectors, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import cpsat, automatic_quantum
from fusionopt.model import channel_schedule
from fusionopt.solvers.exact import ChannelRelaxation

MS = 1e-3
RTOL = 1e-9

channel_counts = st.integers(2, 4)
copy_costs = st.one_of(st.just(0.0), st.floats(0.0, 2e-9))
copy_places = st.sampled_from(["channel", "compute"])


@st.composite
def channel_problems(draw, min_n: int = 1, max_n: int = 7) -> Problem:
    return Problem(draw(profiles(min_n, max_n)), draw(alpha_beta),
                   sync=draw(st.sampled_from(["barrier", "layerwise"])), channels=draw(channel_counts),
                   copy_cost=draw(copy_costs), copy_on=draw(copy_places))


def all_paths(n: int):
    for bits in itertools.product((False, True), repeat=n - 1):
        cuts = np.array(bits, dtype=bool)
        yield (0, *(np.flatnonzero(cuts) + 1).tolist(), n), cuts


def exhaustive(problem: Problem, cap: float = math.inf, limit: int | None = None) -> float:
    best = math.inf
    for _, cuts in all_paths(problem.profile.n):
        plan = Plan.from_cuts(problem.profile, cuts)
        if plan.message_bytes.max() > cap or (limit is not None and plan.num_messages > limit):
            continue
        best = min(best, simulate(problem, plan).iteration_time)
    return best


def worked(alpha_ms: float, **extensions) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), **extensions)


@settings(deadline=None)
@given(st.data())
def test_channel_schedule_matches_the_event_simulator(data):
    problem = data.draw(channel_problems(max_n=9))
    cuts = data.draw(cut_vectors(problem.profile.n))
    plan = Plan.from_cuts(problem.profile, cuts)
    timeline = simulate(problem, plan)
    times = channel_schedule(problem, cuts)
    scale = RTOL * timeline.iteration_time + 1e-15
    assert times["iteration_time"] == pytest.approx(timeline.iteration_time, rel=RTOL, abs=1e-15)
    assert np.allclose(times["dispatch"], timeline.message_start, rtol=RTOL, atol=1e-15)
    assert np.allclose(times["end"], timeline.message_end, rtol=RTOL, atol=1e-15)
    # The shared-end bound is a lower bound on each end.
    assert (times["shared_end"] <= times["end"] + scale).all()


def test_worked_example_on_two_channels():
    # MODEL.md section 5, alpha = 3 ms, two channels. WFBP in backward order: t3 (2 MB,
    # ready 1 ms) latency 1-4, transfer 4-6; t2 (1 MB, ready 3) latency 3-6, transfer 6-7;
    # t1 (4 MB, ready 6, a slot frees at 6) latency 6-9, transfer 9-13; T = 13 + 3 = 16 ms.
    problem = worked(3, channels=2)
    times = channel_schedule(problem, [True, True])
    assert (times["dispatch"] / MS).round(9).tolist() == [1.0, 3.0, 6.0]
    assert (times["end"] / MS).round(9).tolist() == [6.0, 7.0, 13.0]
    # {t3, t2} ready at 3: latency 3-6, transfer 6-9; t1 latency 6-9, transfer 9-13: 16 ms.
    # {t3}, {t2, t1}: t3 1-6; {t2, t1} ready 6, latency 6-9, transfer 9-14: 17 ms. Single: 19 ms.
    expected = {(True, True): 16.0, (False, True): 16.0, (True, False): 17.0, (False, False): 19.0}
    for cuts, t in expected.items():
        assert channel_schedule(problem, list(cuts))["iteration_time"] / MS == pytest.approx(t, abs=1e-9)
    result = cpsat(problem, workers=1)
    assert result.iteration_time / MS == pytest.approx(16.0, abs=1e-9)
    assert result.status is Status.OPTIMAL
    assert result.lower_bound <= result.iteration_time
    assert result.lower_bound >= result.iteration_time - result.stats["rounding_bound"] * (1 + 1e-9)


@settings(deadline=None)
@given(channel_problems(min_n=2, max_n=6), st.data())
def test_relaxation_is_below_every_plan_before_and_after_cuts(problem, data):
    n = problem.profile.n
    paths = list(all_paths(n))
    schedules = {path: channel_schedule(problem, cuts) for path, cuts in paths}
    worst = max(s["iteration_time"] for s in schedules.values())
    q = automatic_quantum(worst, 1)
    relaxation = ChannelRelaxation(problem, quantum=q, horizon=math.floor(worst / q) + 1, cap=math.inf,
                                   limit=None, keep_path=paths[0][0])
    for path in data.draw(st.lists(st.sampled_from([p for p, _ in paths]), max_size=3)):
        relaxation.add_cuts(path, schedules[path])
    for path, _ in paths:
        truth = schedules[path]["iteration_time"]
        assert relaxation.value(path) <= truth * (1 + RTOL) + 1e-15


@settings(deadline=None, max_examples=40)
@given(channel_problems(min_n=1, max_n=7))
def test_cpsat_finds_the_exhaustive_optimum(problem):
    result = cpsat(problem, workers=1, time_limit=30)
    optimum = exhaustive(problem)
    rounding = result.stats["rounding_bound"]
    assert result.status is Status.OPTIMAL
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert result.iteration_time <= optimum + rounding + RTOL * optimum
    assert result.lower_bound <= optimum * (1 + RTOL)


@settings(deadline=None, max_examples=25)
@given(channel_problems(min_n=2, max_n=7), st.data())
def test_cpsat_with_caps_finds_the_exhaustive_optimum(problem, data):
    n = problem.profile.n
    sizes = problem.profile.sizes
    limit = data.draw(st.integers(1, n))
    cap = float(data.draw(st.integers(int(sizes.max()), int(sizes.sum()))))
    try:
        result = cpsat(problem, workers=1, time_limit=30, max_messages=limit, max_message_bytes=cap)
    except ValueError as exc:
        assert "infeasible" in str(exc) or "no fusion plan" in str(exc)
        assert exhaustive(problem, cap, limit) == math.inf
        return
    optimum = exhaustive(problem, cap, limit)
    assert result.plan.num_messages <= limit
    assert result.plan.message_bytes.max() <= cap
    assert result.status is Status.OPTIMAL
    assert result.iteration_time <= optimum + result.stats["rounding_bound"] + RTOL * optimum


def test_cpsat_with_channels_agrees_with_brute_force_on_a_larger_instance():
    rng = np.random.default_rng(11)
    n = 12
    profile = Profile.from_arrays(rng.integers(100_000, 4_000_000, n), rng.uniform(0, 1e-3, n),
                                  rng.uniform(0, 2e-3, n))
    problem = Problem(profile, AlphaBeta(4e-4, 1e-9), channels=2)
    result = cpsat(problem, workers=1, time_limit=60)
    reference = solve(problem, "brute")
    assert result.status is Status.OPTIMAL
    assert result.iteration_time == pytest.approx(reference.iteration_time, rel=RTOL)


def test_anytime_result_with_a_short_time_limit():
    rng = np.random.default_rng(5)
    n = 40
    profile = Profile.from_arrays(rng.integers(1_000, 4_000_000, n), rng.uniform(0, 1e-4, n),
                                  rng.uniform(0, 5e-4, n))
    problem = Problem(profile, AlphaBeta(5e-5, 4e-10), sync="layerwise", channels=3)
    result = cpsat(problem, time_limit=0.3)
    assert result.status in {Status.OPTIMAL, Status.TIME_LIMIT}
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert result.lower_bound <= result.iteration_time
    hint = solve(problem, result.stats["hint"]).iteration_time
    assert result.iteration_time <= hint


def test_contention_with_several_channels_is_refused():
    problem = worked(1, channels=2, contention=1.5)
    with pytest.raises(ValueError, match=r"cpsat does not model contention = 1.5 with channels = 2.*brute"):
        cpsat(problem)
    with pytest.raises(ValueError, match="does not model contention"):
        solve(problem, "cpsat")
    with pytest.raises(ValueError, match="does not model contention"):
        channel_schedule(problem, [True, True])


def test_a_ready_order_that_is_not_the_reverse_forward_order():
    # Found by hypothesis: tensor 1's gradient is ready before tensor 2's, so the position of a
    # message no longer tells its smallest forward index; the relaxation had assumed it did,
    # overstated what follows a message and lost every plan.
    profile = Profile.from_arrays([1, 1, 4, 1, 1, 1, 1], [0, 0.00763024, 0, 0, 0, 0, 0],
                                  [0, 0, 0, 0, 0.0078125, 0, 0], ready_order=(6, 5, 4, 3, 1, 2, 0))
    problem = Problem(profile, AlphaBeta(0.0, 6.5777167014938345e-09), sync="layerwise", channels=2)
    result = solve(problem, "cpsat", time_limit=60)
    assert result.status is Status.OPTIMAL
    assert result.iteration_time == pytest.approx(solve(problem, "brute").iteration_time,
                                                  abs=result.stats["rounding_bound"])
