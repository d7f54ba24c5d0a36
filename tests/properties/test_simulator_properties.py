"""Property tests of the simulator, its fast paths and the DAG check (MODEL.md 4 and 7)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, cut_vectors, partition_plans, problems

from fusionopt.checks import longest_path_time
from fusionopt.model import (
    Plan, Problem, Profile, evaluate_cuts, fusion_iteration_time, simulate, layerwise_slack, best_bound,
)

REL = 1e-9


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=REL, abs=1e-15)


@given(data=st.data(), problem=problems())
def test_every_plan_respects_the_bounds(data, problem):
    plan = data.draw(partition_plans(problem.profile))
    t = simulate(problem, plan)
    profile = problem.profile
    assert t.iteration_time >= profile.B + profile.F - 1e-15
    assert t.iteration_time >= best_bound(problem) * (1 - REL)
    assert t.exposed >= -1e-15
    # Per-message and per-tensor invariants of the recursion.
    assert np.all(t.message_start >= t.message_ready)
    assert np.all(t.message_start[1:] >= t.message_end[:-1])
    assert close(t.busy, float(problem.cost(plan.message_bytes).sum()))
    assert close(t.communication_end, float(t.reduced.max()))


@given(problem=problems())
def test_wfbp_and_groups_validate(problem):
    profile = problem.profile
    assert Plan.per_tensor(profile).validate(profile).num_messages == profile.n
    groups = [[i] for i in range(profile.n)]
    # One tensor per message in forward order is a fusion plan only where that is the ready order.
    assert Plan.from_groups(profile, groups).validate(profile).is_fusion(profile) == (
        profile.ready_order == tuple(range(profile.n)))


@given(data=st.data(), problem=problems())
def test_fast_path_and_batch_equal_simulate(data, problem):
    profile = problem.profile
    rows = data.draw(st.lists(cut_vectors(profile.n), min_size=1, max_size=6))
    batch = evaluate_cuts(problem, np.array(rows).reshape(len(rows), profile.n - 1))
    for row, batch_value in zip(rows, batch):
        expected = simulate(problem, Plan.from_cuts(profile, row)).iteration_time
        assert close(fusion_iteration_time(problem, row), expected)
        assert close(float(batch_value), expected)


@settings(deadline=None)
@given(data=st.data(), problem=problems())
def test_dag_longest_path_equals_simulate(data, problem):
    profile = problem.profile
    for plan in (data.draw(partition_plans(profile)), Plan.from_cuts(profile, data.draw(cut_vectors(profile.n)))):
        assert close(longest_path_time(problem, plan), simulate(problem, plan).iteration_time)


@given(data=st.data(), problem=problems(), k=st.floats(0.01, 100.0))
def test_scaling_times_and_costs_scales_T(data, problem, k):
    profile = problem.profile
    plan = data.draw(partition_plans(profile))
    scaled_profile = Profile.from_arrays(
        profile.sizes, profile.forward * k, profile.backward * k, update=profile.update * k)
    scaled = Problem(scaled_profile, problem.cost.scaled(k), sync=problem.sync)
    assert close(simulate(scaled, plan).iteration_time, k * simulate(problem, plan).iteration_time)


@given(data=st.data(), problem=problems(sync="barrier"))
def test_layerwise_equals_barrier_for_fifo_fusion_plans(data, problem):
    profile = problem.profile
    plan = Plan.from_cuts(profile, data.draw(cut_vectors(profile.n)))
    layerwise = Problem(profile, problem.cost, sync="layerwise")
    barrier_time = simulate(problem, plan).iteration_time
    layerwise_time = simulate(layerwise, plan).iteration_time
    slack = layerwise_slack(layerwise)
    if slack == 0.0:
        assert close(layerwise_time, barrier_time)
    else:
        # Work before the last tensor in the ready order may overlap the last message.
        assert layerwise_time <= barrier_time * (1 + 1e-12) + 1e-15
        assert layerwise_time >= barrier_time - slack - 1e-12


@settings(deadline=None)       # with layerwise slack the evaluator simulates every plan of the batch
@given(problem=problems(min_n=2, max_n=6, cost=alpha_beta), seed=st.integers(0, 2**32 - 1))
def test_batch_spans_blocks(problem, seed):
    # More plans than one evaluator block, so block boundaries are exercised.
    rng = np.random.default_rng(seed)
    m = 5 * 7 + 3                                         # blocks of 7 plans: five whole, one part
    cuts = rng.random((m, problem.profile.n - 1)) < 0.5
    batch = evaluate_cuts(problem, cuts, block=7)
    assert np.array_equal(batch, evaluate_cuts(problem, cuts))
    for row in range(m):
        assert close(float(batch[row]), fusion_iteration_time(problem, cuts[row]))
