"""Property tests of the parameter-server simulator, its fast path, its DAG check and bounds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ps_strategies import offsets, ps_plans, ps_problems
from strategies import alpha_beta, cut_vectors, partition_plans, problems

from fusionopt.checks import longest_path_time
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, simulate, ParameterServer, PSPlan, offsets_iteration_time, ps_lower_bound

REL = 1e-9


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=REL, abs=1e-15)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=REL, atol=1e-15)


def assert_reduces(reference, t):
    assert close(t.iteration_time, reference.iteration_time)
    for field in ("message_ready", "message_start", "message_end", "reduced", "forward_start"):
        assert same(getattr(t, field), getattr(reference, field)), field
    # Free pulls of the pushed messages end with them.
    assert same(t.pull_end, reference.message_end)


@given(data=st.data(), problem=problems())
def test_one_worker_equivalent_with_free_pulls_is_all_reduce(data, problem):
    # The push channel costs what the all-reduce costs, pulls and updates are free, and each
    # message is pulled as it was pushed: the all-reduce timeline, for any plan.
    plan = data.draw(partition_plans(problem.profile))
    ps = ParameterServer(problem.cost, AlphaBeta(0.0, 0.0))
    ps_problem = Problem(problem.profile, sync=problem.sync, pattern=ps)
    assert_reduces(simulate(problem, plan), simulate(ps_problem, PSPlan.mirror(plan)))


@given(data=st.data(), problem=problems(cost=alpha_beta), delta=st.floats(0.0, 1e-3))
def test_one_worker_one_server_links_reduce_too(data, problem, delta):
    # One worker and one server of their own: c_push = a + g S, the all-reduce AlphaBeta(a, g).
    # Fusion plans never cut a tensor, so partitioned compute splits nothing and delta is moot.
    alpha, beta = problem.cost.affine
    linked = ParameterServer.from_links(1, 1, latency=alpha, inverse_bandwidth=beta)
    assert linked.push == problem.cost
    ps = ParameterServer(linked.push, AlphaBeta(0.0, 0.0), partition_compute=True, delta=delta)
    plan = Plan.from_cuts(problem.profile, data.draw(cut_vectors(problem.profile.n)))
    t = simulate(Problem(problem.profile, sync=problem.sync, pattern=ps), PSPlan.mirror(plan))
    assert_reduces(simulate(problem, plan), t)
    assert t.compute_overhead == 0.0


@settings(deadline=None)
@given(data=st.data(), problem=ps_problems())
def test_dag_longest_path_equals_simulate(data, problem):
    plan = data.draw(ps_plans(problem.profile))
    assert close(longest_path_time(problem, plan), simulate(problem, plan).iteration_time)


def check_fast_evaluator(data, problem):
    profile = problem.profile
    push = data.draw(offsets(profile, "push"))
    pull = data.draw(offsets(profile, "pull"))
    expected = simulate(problem, PSPlan.from_offsets(profile, push, pull)).iteration_time
    assert close(offsets_iteration_time(problem, push, pull), expected)


@given(data=st.data(), problem=ps_problems())
def test_fast_evaluator_equals_simulate(data, problem):
    check_fast_evaluator(data, problem)


# A nearly free push channel with slow server updates: a message pushed earlier may be
# updated later than the next one, so a pull's gate is a maximum over a range of pushes.
fast_push = st.builds(AlphaBeta, alpha=st.just(0.0), beta=st.floats(1e-13, 1e-11))


@given(data=st.data(), problem=ps_problems(cost=fast_push))
def test_fast_evaluator_equals_simulate_with_slow_updates(data, problem):
    check_fast_evaluator(data, problem)


@given(values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40), data=st.data())
def test_range_maximum(values, data):
    from fusionopt.model import range_max

    array = np.array(values)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, len(values) - 1), st.integers(0, len(values) - 1)),
                               min_size=1, max_size=20))
    first = np.array([min(p) for p in pairs])
    last = np.array([max(p) for p in pairs])
    expected = [max(values[a:b + 1]) for a, b in zip(first, last)]
    assert range_max(array, first, last).tolist() == expected


@given(data=st.data(), problem=ps_problems())
def test_every_ps_plan_respects_the_bound_and_the_channel_rules(data, problem):
    plan = data.draw(ps_plans(problem.profile))
    t = simulate(problem, plan)
    profile, ps = problem.profile, problem.pattern
    assert t.iteration_time >= ps_lower_bound(problem) * (1 - REL)
    assert t.exposed >= t.compute_overhead - 1e-15 * max(1.0, t.iteration_time)
    assert np.all(t.message_start >= t.message_ready)
    assert np.all(t.message_start[1:] >= t.message_end[:-1])
    assert np.all(t.pull_start >= t.pull_ready)
    assert np.all(t.pull_start[1:] >= t.pull_end[:-1])
    assert close(t.busy, float(problem.cost(plan.push.message_bytes).sum()))
    assert close(t.pull_busy, float(ps.pull(plan.pull.message_bytes).sum()))
    assert np.allclose(t.server_updated, t.message_end + ps.server_update(plan.push.message_bytes), rtol=REL)
    # Each pull waits for the update of every push it shares a byte with.
    for m, message in enumerate(plan.pull.messages):
        for c in message.chunks:
            for k, pushed in enumerate(plan.push.messages):
                if any(p.tensor == c.tensor and p.lo < c.hi and p.hi > c.lo for p in pushed.chunks):
                    assert t.pull_ready[m] >= t.server_updated[k]
    # Without partitioned compute the backward is the profile's and no delta is paid.
    if not ps.partition_compute:
        assert t.compute_overhead == 0.0
        assert np.all(t.message_ready >= profile.ready_times.min())


@given(data=st.data(), problem=ps_problems(partition=False))
def test_pulls_only_delay_the_all_reduce_of_the_push_plan(data, problem):
    # What makes the all-reduce bounds valid for a PS without partitioned compute.
    plan = data.draw(ps_plans(problem.profile))
    push_only = simulate(problem.plain(), plan.push).iteration_time
    assert simulate(problem, plan).iteration_time >= push_only * (1 - REL)


@given(data=st.data(), problem=ps_problems(partition=True), k=st.floats(0.01, 100.0))
def test_scaling_every_time_scales_T(data, problem, k):
    from fusionopt.model import Profile

    profile, ps = problem.profile, problem.pattern
    plan = data.draw(ps_plans(profile))
    scaled_profile = Profile.from_arrays(profile.sizes, profile.forward * k, profile.backward * k,
                                         update=profile.update * k)
    scaled_ps = ParameterServer(ps.push.scaled(k), ps.pull.scaled(k), update_per_byte=ps.update_per_byte * k,
                                update_overhead=ps.update_overhead * k, partition_compute=True, delta=ps.delta * k)
    scaled = Problem(scaled_profile, sync=problem.sync, pattern=scaled_ps)
    assert close(simulate(scaled, plan).iteration_time, k * simulate(problem, plan).iteration_time)


@given(problem=ps_problems(sync="barrier"), data=st.data())
def test_barrier_forward_follows_the_last_pull(problem, data):
    profile = problem.profile
    t = simulate(problem, data.draw(ps_plans(profile)))
    backward_end = profile.B + (t.compute_overhead if problem.pattern.partition_compute else 0.0)
    assert close(t.iteration_time, max(backward_end, t.communication_end) + profile.U + profile.F)
