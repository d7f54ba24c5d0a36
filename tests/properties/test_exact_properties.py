"""The exact fusion optimum: DP against brute force, its two algorithms, caps, bounds."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, cut_vectors, partition_plans, problems

from fusionopt.model import Plan, Problem, simulate
from fusionopt.model import (
    best_bound, channel_bound, compute_bound, fluid_bound, fluid_latency_bound, fusion_bound, last_message_bound,
)
from fusionopt.model import optimal_fusion
from fusionopt.solvers import solve
from fusionopt.solvers.exact import brute, dp

BASELINES = ["wfbp", "single", "threshold", "ddp", "horovod"]
REL = 1e-9


def close(a, b):
    return a == pytest.approx(b, rel=REL, abs=1e-15)


@settings(deadline=None)
@given(problem=problems(max_n=10))
def test_dp_equals_brute_force(problem):
    exact, exhaustive = dp(problem), brute(problem)
    assert close(exact.iteration_time, exhaustive.iteration_time)
    assert str(exact.status) == "OPTIMAL" and exact.lower_bound == exact.iteration_time
    assert close(simulate(problem, exact.plan).iteration_time, exact.iteration_time)


@settings(deadline=None)
@given(problem=problems(max_n=40, cost=alpha_beta))
def test_linear_and_quadratic_dp_agree_on_affine_costs(problem):
    linear = optimal_fusion(problem, algorithm="linear")
    quadratic = optimal_fusion(problem, algorithm="quadratic")
    assert (linear.algorithm, quadratic.algorithm) == ("linear", "quadratic")
    assert close(linear.iteration_time, quadratic.iteration_time)
    assert close(linear.communication_end, quadratic.communication_end)
    for best in (linear, quadratic):
        plan = Plan.from_cuts(problem.profile, best.cuts)
        assert close(simulate(problem, plan).iteration_time, best.iteration_time)


@st.composite
def capped(draw, cost=None):
    problem = draw(problems(max_n=9) if cost is None else problems(max_n=9, cost=cost))
    sizes = problem.profile.sizes
    cap = None
    if draw(st.booleans()):
        cap = draw(st.integers(int(sizes.max()), int(sizes.sum())))
    k = draw(st.one_of(st.none(), st.integers(1, problem.profile.n)))
    return problem, cap, k


@settings(deadline=None)
@given(case=capped())
def test_capped_dp_equals_capped_brute_force(case):
    problem, cap, k = case
    try:
        exhaustive = brute(problem, max_message_bytes=cap, max_messages=k)
    except ValueError as exc:
        assert "infeasible" in str(exc)
        with pytest.raises(ValueError, match="infeasible"):
            dp(problem, max_message_bytes=cap, max_messages=k)
        return
    exact = dp(problem, max_message_bytes=cap, max_messages=k)
    assert close(exact.iteration_time, exhaustive.iteration_time)
    assert str(exact.status) == "OPTIMAL"
    sizes = exact.plan.message_bytes
    if cap is not None:
        assert sizes.max() <= cap
    if k is not None:
        assert len(sizes) <= k
    # Constraints only ever cost time.
    assert exact.iteration_time >= dp(problem).iteration_time * (1 - REL)


@settings(deadline=None)
@given(problem=problems(max_n=12))
def test_no_baseline_beats_the_dp(problem):
    optimum = dp(problem).iteration_time
    for name in BASELINES:
        assert solve(problem, name).iteration_time >= optimum * (1 - REL)


@settings(deadline=None)
@given(data=st.data(), problem=problems(max_n=8))
def test_every_bound_is_below_every_plan(data, problem):
    any_plan = data.draw(partition_plans(problem.profile))
    fusion_plan = Plan.from_cuts(problem.profile, data.draw(cut_vectors(problem.profile.n)))
    t_any = simulate(problem, any_plan).iteration_time
    t_fusion = simulate(problem, fusion_plan).iteration_time
    for bound in (compute_bound(problem), last_message_bound(problem), channel_bound(problem),
                  fluid_bound(problem), fluid_latency_bound(problem), best_bound(problem)):
        if bound is not None:
            assert bound <= t_any * (1 + REL) + 1e-15
            assert bound <= t_fusion * (1 + REL) + 1e-15
    assert fusion_bound(problem) <= t_fusion * (1 + REL) + 1e-15
    assert best_bound(problem, space="fusion") <= t_fusion * (1 + REL) + 1e-15


@settings(deadline=None)
@given(problem=problems(min_n=1, max_n=1, cost=alpha_beta, sync="layerwise"))
def test_fluid_bound_is_the_optimum_for_one_tensor_without_latency(problem):
    # One tensor, alpha = 0: one message right at B is optimal and meets the fluid bound.
    free = Problem(problem.profile, type(problem.cost)(0.0, problem.cost.beta), sync="layerwise")
    assert close(fluid_bound(free), dp(free).iteration_time)


def fluid_service(ready, work):
    """Completion of each tensor when a channel serves ``work[i]`` seconds released at
    ``ready[i]``, preemptively, smallest forward index first: an event simulation."""
    import heapq

    n = len(ready)
    releases = sorted(range(n), key=lambda i: (ready[i], -i))
    remaining = list(map(float, work))
    done = [0.0] * n
    pending: list[int] = []
    clock, released = float(ready[releases[0]]), 0
    while released < n or pending:
        while released < n and ready[releases[released]] <= clock:
            heapq.heappush(pending, releases[released])
            released += 1
        next_release = float(ready[releases[released]]) if released < n else math.inf
        if not pending:
            clock = next_release
            continue
        i = pending[0]
        if clock + remaining[i] <= next_release:
            clock += remaining[i]
            done[i] = clock
            heapq.heappop(pending)
        else:
            remaining[i] -= next_release - clock
            clock = next_release
    return np.array(done)


@settings(deadline=None)
@given(problem=problems(max_n=30, cost=alpha_beta))
def test_the_fluid_closed_form_is_the_fluid_schedule(problem):
    # The bounds take when tensors 0..i are all served from a closed form (Lindley's
    # recursion); an event simulation of the fluid schedule must agree.
    from fusionopt.model import fluid_prefix_done

    profile, beta = problem.profile, problem.cost.affine[1]
    simulated = np.maximum.accumulate(fluid_service(profile.ready_times, profile.sizes * beta))
    closed = fluid_prefix_done(profile, beta)
    scale = profile.B + float(profile.sizes.sum()) * beta + 1e-300
    assert closed.tolist() == pytest.approx(simulated.tolist(), rel=1e-12, abs=1e-12 * scale)
