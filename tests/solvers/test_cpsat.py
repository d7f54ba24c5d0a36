"""CP-SAT arc model: hand-worked cases, agreement with the exact DP, bounds, hints, bad input."""

import math
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import problems

import fusionopt.zoo
from fusionopt.model import layerwise_slack
from fusionopt.cost import AlphaBeta
from fusionopt.model import Chunk, Message, Plan, Problem, Profile, simulate, fewest_messages
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import cpsat, dp

MS = 1e-3
SLACK = 1e-12          # seconds of float noise between two exact methods
ANYTIME = {Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT}


def worked(alpha_ms: float, sync: str = "barrier") -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), sync=sync)


def best_baseline_time(problem: Problem) -> float:
    return min(solve(problem, name).iteration_time
               for name in ("wfbp", "single", "ddp", "horovod", "threshold"))


def check_against_dp(problem: Problem, result, optimum: float) -> None:
    """The claims cpsat makes, each checked against the DP optimum."""
    rounding = result.stats["rounding_bound"]
    if layerwise_slack(problem) > 0.0:
        # CP-SAT minimises the last message's end, which no longer decides T: its plan is
        # no better than the optimum and its bound stays below it.
        assert optimum - SLACK <= result.iteration_time
        assert result.stats["iteration_time_bound"] <= optimum + SLACK
        assert result.lower_bound <= optimum + SLACK
        return
    assert result.status is Status.OPTIMAL
    assert result.stats["cpsat_status"] == "OPTIMAL"
    assert result.plan.is_fusion(problem.profile)
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert optimum - SLACK <= result.iteration_time <= optimum + rounding + SLACK
    own_bound = result.stats["iteration_time_bound"]
    # CP-SAT's bound is a lower bound (rounded down), and tight to the rounding bound.
    assert optimum - rounding - SLACK <= own_bound <= optimum + SLACK
    assert result.lower_bound <= result.iteration_time
    assert result.stats["bound"] <= result.stats["objective"]


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_model_section_5(sync):
    second = cpsat(worked(3, sync))
    assert second.plan.groups() == [[2], [1, 0]]             # {t3}, {t2, t1}
    assert second.iteration_time == pytest.approx(17 * MS, rel=1e-6)
    assert second.status is Status.OPTIMAL
    first = cpsat(worked(1, sync), hint=None)
    assert first.plan.groups() == [[2], [1], [0]]             # WFBP
    assert first.iteration_time == pytest.approx(14 * MS, rel=1e-6)
    assert first.status is Status.OPTIMAL
    assert first.stats["hint_used"] is False and first.stats["hint"] == "none"


def test_stats_and_automatic_quantum():
    problem = worked(3)
    result = solve(problem, "cpsat", time_limit=5, workers=1)
    stats = result.stats
    q = stats["time_quantum"]
    assert math.frexp(q)[0] == 0.5                            # a power of two
    assert stats["rounding_bound"] == 4 * q                   # (n + 1) q
    # The hint (DDP's {t3},{t2,t1}, 17 ms, first of the ties) ends at 14 ms: (n + 1) q <= 1e-7 * 14 ms.
    assert stats["hint"] == "ddp" and stats["hint_used"] is True
    assert 0.5e-7 * 14 * MS < stats["rounding_bound"] <= 1e-7 * 14 * MS
    # Of the n (n + 1) / 2 = 6 arcs, the single message (ready at 6 ms, 10 ms long) cannot
    # end by the hint's 14 ms: pruned.
    assert stats["arcs"] == 5
    assert stats["objective"] == pytest.approx(14 * MS, rel=1e-6)
    assert stats["bound"] == stats["objective"]
    assert stats["iteration_time_bound"] == pytest.approx(17 * MS, rel=1e-6)
    assert stats["plan_source"] in ("cpsat", "hint")
    assert stats["wall_time"] >= 0


@settings(deadline=None, max_examples=25)
@given(problems(max_n=12), st.sampled_from([None, "best-baseline"]))
def test_equals_the_dp_within_the_rounding_bound(problem, hint):
    result = cpsat(problem, hint=hint, workers=1)
    check_against_dp(problem, result, dp(problem).iteration_time)


@settings(deadline=None, max_examples=25)
@given(problems(min_n=2, max_n=12), st.floats(0.0, 1.0), st.integers(1, 12))
def test_equals_the_dp_with_caps(problem, cap_share, max_messages):
    sizes = problem.profile.sizes
    largest, total = int(sizes.max()), int(sizes.sum())
    cap = largest + cap_share * (total - largest)
    assume(fewest_messages(sizes[problem.profile.backward_order], cap) <= max_messages)
    result = cpsat(problem, max_message_bytes=cap, max_messages=max_messages, workers=1)
    check_against_dp(problem, result,
                     dp(problem, max_message_bytes=cap, max_messages=max_messages).iteration_time)
    assert result.plan.num_messages <= max_messages
    assert result.plan.message_bytes.max() <= cap


@settings(deadline=None, max_examples=20)
@given(problems(max_n=8), st.sampled_from([1e-4, 1e-3, 3e-3]))
def test_coarse_quanta_keep_the_bound_below_the_optimum(problem, quantum):
    # Rounding down makes CP-SAT's bound valid however coarse q is; rounding to nearest
    # would not. The plan found is within (n + 1) q of the optimum.
    result = cpsat(problem, time_quantum=quantum, hint=None, workers=1)
    assert result.stats["time_quantum"] == quantum
    assert result.stats["rounding_bound"] == pytest.approx((problem.profile.n + 1) * quantum)
    check_against_dp(problem, result, dp(problem).iteration_time)


def test_hints():
    problem = worked(3)
    profile = problem.profile
    by_method = cpsat(problem, hint="dp")
    assert by_method.stats["hint"] == "dp" and by_method.stats["hint_used"] is True
    assert by_method.iteration_time == pytest.approx(17 * MS, rel=1e-6)
    wfbp_plan = Plan.per_tensor(profile)
    by_plan = cpsat(problem, hint=wfbp_plan)
    assert by_plan.stats["hint"] == "plan" and by_plan.plan.groups() == [[2], [1, 0]]
    # A hint that breaks a cap is not used; the caps still hold.
    capped = cpsat(problem, hint=wfbp_plan, max_messages=1)
    assert capped.stats["hint_used"] is False and "breaks the caps" in capped.stats["hint"]
    assert capped.plan.groups() == [[2, 1, 0]]
    assert capped.iteration_time == pytest.approx(19 * MS, rel=1e-6)
    # A method hint is solved with the caps when it takes them.
    assert cpsat(problem, hint="dp", max_messages=1).stats["hint_used"] is True


def test_anytime_on_a_larger_instance():
    full = fusionopt.zoo.profile("googlenet")
    n = 60
    profile = Profile.from_arrays(full.sizes[:n], full.forward[:n], full.backward[:n])
    problem = Problem(profile, AlphaBeta(5e-5, 4e-11))
    result = cpsat(problem, time_limit=0.05)
    assert result.status in ANYTIME
    assert result.plan.is_fusion(profile)
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert result.iteration_time <= best_baseline_time(problem)
    assert result.lower_bound <= result.iteration_time
    assert result.iteration_time >= dp(problem).iteration_time - SLACK
    assert result.stats["arcs"] <= n * (n + 1) // 2
    if result.stats["cpsat_status"] != "OPTIMAL":
        assert result.status is not Status.FEASIBLE           # the time limit stopped it


def test_bad_input_is_named():
    problem = worked(3)
    profile = problem.profile
    for value in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="^time_limit must be a positive, finite number of seconds, got "):
            cpsat(problem, time_limit=value)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        cpsat(problem, workers=0)
    with pytest.raises(ValueError, match="time_quantum must be positive"):
        cpsat(problem, time_quantum=0)
    with pytest.raises(ValueError, match="time_quantum = 1e-300 s is too small"):
        cpsat(problem, time_quantum=1e-300)
    with pytest.raises(ValueError, match="random_seed"):
        cpsat(problem, random_seed=2.5)
    forward_order = Plan.from_groups(profile, [[0], [1], [2]])
    with pytest.raises(ValueError, match="^hint: not a fusion plan of this profile"):
        cpsat(problem, hint=forward_order)
    split = Plan((Message((Chunk(2, 0, 2_000_000), Chunk(1, 0, 500_000))),
                  Message((Chunk(1, 500_000, 1_000_000), Chunk(0, 0, 4_000_000)))))
    with pytest.raises(ValueError, match="^hint: not a fusion plan of this profile"):
        cpsat(problem, hint=split)
    with pytest.raises(ValueError, match="hint 'cpsat'"):
        cpsat(problem, hint="cpsat")
    with pytest.raises(ValueError, match="hint 'nope' is neither"):
        cpsat(problem, hint="nope")
    with pytest.raises(ValueError, match="hint must be"):
        cpsat(problem, hint=3)
    with pytest.raises(ValueError, match="^hint 'ps-dp' is neither 'best-baseline' nor an all-reduce method: it plans "
                                         "parameter-server problems$"):
        cpsat(problem, hint="ps-dp")
    with pytest.raises(ValueError, match="infeasible: tensor 't0'"):
        cpsat(problem, max_message_bytes=3e6)
    with pytest.raises(ValueError, match="max_messages must be an integer"):
        cpsat(problem, max_messages=0)
    with pytest.raises(ValueError, match="unknown option 'timelimit'"):
        solve(problem, "cpsat", timelimit=1)


def test_missing_ortools_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    with pytest.raises(ImportError, match="pip install ortools"):
        cpsat(worked(3))


def test_a_random_n60_profile_with_a_piecewise_cost():
    # Zeros in the backward times (biases) and a non-affine cost: the O(n^2) DP's ground.
    from fusionopt.cost import PiecewiseLinear

    rng = np.random.default_rng(7)
    n = 60
    backward = np.where(rng.random(n) < 0.4, 0.0, rng.uniform(1e-5, 1e-3, n))
    profile = Profile.from_arrays(rng.integers(1_000, 4_000_000, n), backward / 2, backward)
    cost = PiecewiseLinear([1, 65_536, 1_048_576, 8_388_608], [2e-5, 6e-5, 3e-4, 1.5e-3])
    problem = Problem(profile, cost)
    result = cpsat(problem, time_limit=0.05)
    assert result.status in ANYTIME
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert dp(problem).iteration_time - SLACK <= result.iteration_time <= best_baseline_time(problem)
    assert result.lower_bound <= result.iteration_time


def test_the_time_limit_holds_while_the_model_is_built():
    # DenseNet-201 (the V100 roofline estimate, 64 workers on 100 Gb IB): building the arc
    # model took 44 s. With a 0.05 s limit the solve stops building, returns the reference
    # plan with TIME_LIMIT, and says so.
    import time

    from fusionopt import zoo
    from fusionopt.cost import network

    problem = Problem(zoo.profile("densenet201", device="v100", compute="roofline"), network("100gb-ib", 64))
    started = time.perf_counter()
    result = solve(problem, "cpsat", time_limit=0.05)
    assert time.perf_counter() - started < 3.0
    assert str(result.status) == "TIME_LIMIT" and result.stats["cpsat_status"] == "NOT_BUILT"
    assert "not built within time_limit = 0.05 s" in result.stats["model"]
    result.plan.validate(problem.profile)
    assert result.iteration_time >= solve(problem, "dp").iteration_time * (1 - 1e-12)   # a valid plan, not better
