"""The plan runner on the local backend: the plan is honoured, sync is honoured, sums are exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_helpers import SIZES, plan_of, small_problem, small_profile
from strategies import partition_plans
from fusionopt.executor import Measurement, run, Layout
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate


def test_worked_example_runs_correctly_and_predicts_the_simulator():
    problem = small_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, ranks=3, iterations=3, warmup=1, time_scale=0.5)
    assert isinstance(m, Measurement)
    assert m.correct and m.errors == ()
    assert (m.backend, m.ranks, m.sync, m.steps) == ("local", 3, "barrier", 4)
    assert m.iteration_times.shape == (3,)
    assert m.message_start.shape == m.message_end.shape == (3, 2)
    # The prediction is the simulator's on the problem with compute halved.
    profile = small_profile()
    scaled = Profile.from_arrays(profile.sizes, profile.forward * 0.5, profile.backward * 0.5)
    expected = simulate(Problem(scaled, problem.cost), plan)
    assert m.predicted_time == pytest.approx(expected.iteration_time, rel=1e-12)
    assert m.relative_error == pytest.approx((m.iteration_time - m.predicted_time) / m.predicted_time)
    # Every byte of 3 ranks x 3 tensors x 4 steps was compared.
    assert m.checked_bytes == 3 * sum(profile.sizes) * 4


def test_messages_run_in_plan_order_after_their_gradients_are_emitted():
    problem = small_problem(sync="layerwise")
    profile = problem.profile
    # Forward order, not backward order: message 0 (tensor 0) is ready last, at B.
    plan = Plan.per_tensor(profile, order=[0, 1, 2])
    m = run(problem, plan, ranks=2, iterations=2, warmup=0, time_scale=2.0)
    ready = profile.ready_times * 2.0
    for step in range(2):
        start, end = m.message_start[step], m.message_end[step]
        assert start[0] >= ready[0]                       # tensor 0 is emitted last
        assert np.all(start[1:] >= end[:-1])              # one at a time, in plan order
        assert np.all(end > start)
        assert m.reduced[step].tolist() == pytest.approx(end.tolist(), abs=5e-3)


def test_chunks_of_a_tensor_spread_over_messages_are_all_summed():
    profile = small_profile()
    plan = plan_of([(2, 0, 1000), (0, 4000, 4096)], [(1, 0, 1024), (2, 1000, 2048)],
                   [(0, 0, 4000)])
    problem = Problem(profile, AlphaBeta(1e-4, 1e-9), sync="layerwise")
    m = run(problem, plan, ranks=4, iterations=1, warmup=1, time_scale=0.0)
    assert m.correct
    assert m.checked_bytes == 4 * sum(SIZES) * 2


def test_odd_byte_boundaries_are_summed_exactly_in_single_byte_words():
    profile = small_profile()
    plan = plan_of([(2, 0, 2047), (1, 0, 3)], [(0, 0, 4096), (2, 2047, 2048)], [(1, 3, 1024)])
    assert Layout(profile, plan).word_bytes == 1
    m = run(Problem(profile, AlphaBeta(1e-4, 1e-9)), plan, ranks=4, iterations=1, warmup=1, time_scale=0.0)
    assert m.correct


def test_word_size_is_the_widest_dividing_every_boundary():
    profile = small_profile()
    assert Layout(profile, Plan.per_tensor(profile)).word_bytes == 8
    assert Layout(profile, plan_of([(0, 0, 4094), (1, 0, 1024), (2, 0, 2048)], [(0, 4094, 4096)])).word_bytes == 2
    odd = plan_of([(0, 0, 3), (1, 0, 1024)], [(0, 3, 4096), (2, 0, 2048)])
    assert Layout(profile, odd).word_bytes == 1
    assert Layout(profile, plan_of([(0, 0, 4092), (1, 0, 1024), (2, 0, 2048)], [(0, 4092, 4096)]),
                  word_sizes=(8, 4, 1)).word_bytes == 4


def test_barrier_sync_waits_for_every_tensor_and_layerwise_does_not():
    # Tensor 0 is tiny and sent first; tensor 1 is 32 MiB and sent after it. No compute.
    profile = Profile.from_arrays([64, 32 << 20], [0.0, 0.0], [0.0, 0.0])
    plan = Plan.per_tensor(profile, order=[0, 1])
    for sync in ("barrier", "layerwise"):
        m = run(Problem(profile, AlphaBeta(1e-4, 1e-10), sync=sync), plan, ranks=2, iterations=1, warmup=0)
        reduced, phi = m.reduced[0], m.forward_start[0]
        assert reduced[1] > reduced[0]
        if sync == "barrier":
            assert phi[0] >= reduced[1]          # forward waits for every gradient
        else:
            assert phi[0] < reduced[1]           # tensor 0's forward overlaps tensor 1's message
            assert phi[1] >= reduced[1]
        assert m.iteration_times[0] >= phi[1]


def test_forward_and_updates_follow_the_model_clock():
    problem = small_problem(sync="layerwise", update=0.5e-3)
    profile = problem.profile
    m = run(problem, Plan.per_tensor(profile), ranks=2, iterations=2, warmup=0, time_scale=1.0)
    for step in range(2):
        phi, reduced = m.forward_start[step], m.reduced[step]
        assert phi[0] == pytest.approx(max(profile.B, reduced[0]) + 0.5e-3)
        for i in range(1, profile.n):
            assert phi[i] == pytest.approx(max(phi[i - 1] + 1e-3, reduced[i]) + 0.5e-3)
        assert m.iteration_times[step] >= phi[-1] + 1e-3


def test_a_plan_missing_bytes_fails_naming_the_tensor_and_range():
    problem = small_problem()
    plan = plan_of([(2, 0, 2048), (1, 0, 1024)], [(0, 0, 3072)])      # bytes [3072, 4096) of t0 lost
    with pytest.raises(ValueError, match=r"tensor 't0' \(index 0\): bytes \[3072, 4096\) are missing"):
        run(problem, plan, ranks=2)
    m = run(problem, plan, ranks=2, iterations=3, time_scale=0.0, validate=False, raise_on_error=False)
    assert not m.correct and m.steps == 1                 # stopped after the first step
    assert m.errors[0].startswith("rank 0, step 0: tensor 't0' (index 0): bytes [3072, 4096) differ")
    assert "carried by no message" in m.errors[0]
    assert any(e.startswith("rank 1, step 0: tensor 't0'") for e in m.errors)


def test_a_plan_repeating_a_chunk_fails_naming_both_messages():
    from fusionopt.executor import CorrectnessError

    problem = small_problem()
    plan = plan_of([(2, 0, 2048), (1, 0, 1024)], [(0, 0, 4096)], [(1, 512, 1024)])
    with pytest.raises(CorrectnessError, match=r"tensor 't1' \(index 1\): bytes \[512, 1024\) differ .*"
                                               r"carried by messages 0 and 2") as info:
        run(problem, plan, ranks=2, time_scale=0.0, validate=False)
    assert info.value.measurement is not None and not info.value.measurement.correct


def test_a_single_rank_and_a_single_message_work():
    problem = small_problem()
    single = Plan.from_groups(problem.profile, [[2, 1, 0]])
    m = run(problem, single, ranks=1, iterations=2, warmup=0, time_scale=0.0)
    assert m.correct and m.ranks == 1 and m.message_end.shape == (2, 1)


def test_measurement_dict_is_json_ready():
    import json

    problem = small_problem()
    m = run(problem, Plan.per_tensor(problem.profile), ranks=2, iterations=2, warmup=0, time_scale=0.0)
    doc = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    assert doc["correct"] is True and doc["ranks"] == 2 and len(doc["iteration_times"]) == 2
    assert doc["predicted_time"] == pytest.approx(m.predicted_time)
    assert "correctness    ok" in m.summary()


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "gloo"}, "unknown backend 'gloo'; choose one of local, mpi, nccl"),
    ({"ranks": 0}, "ranks must be an integer >= 1, got 0"),
    ({"iterations": 0}, "iterations must be an integer >= 1, got 0"),
    ({"time_scale": -1.0}, "time_scale must be a finite number >= 0, got -1.0"),
    ({"timeout": 0.0}, "timeout must be a finite number > 0, got 0.0"),
    ({"emulate_link": True}, "emulate_link applies to the nccl backend only, not 'local'"),
])
def test_bad_options_are_named(kwargs, message):
    problem = small_problem()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(problem, Plan.per_tensor(problem.profile), **kwargs)


def test_unknown_options_are_an_error():
    problem = small_problem()
    with pytest.raises(TypeError):
        run(problem, Plan.per_tensor(problem.profile), bucket=1)


def test_problems_with_extensions_are_refused():
    profile = small_profile()
    problem = Problem(profile, AlphaBeta(1e-4, 1e-9), copy_cost=1e-10)
    with pytest.raises(ValueError, match="plain model .* copy_cost on"):
        run(problem, Plan.per_tensor(profile))


def test_chunks_out_of_range_are_refused_even_without_validation():
    problem = small_problem()
    with pytest.raises(ValueError, match=r"tensor 't1' \(index 1\): bytes \[0, 2000\) run past its size of 1024 B"):
        run(problem, plan_of([(2, 0, 2048), (1, 0, 2000), (0, 0, 4096)]), validate=False)


@st.composite
def small_plans(draw):
    n = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    backward = draw(st.lists(st.sampled_from([0.0, 1e-4, 3e-4]), min_size=n, max_size=n))
    profile = Profile.from_arrays(sizes, [1e-4] * n, backward)
    return profile, draw(partition_plans(profile))


@settings(deadline=None)
@given(small_plans(), st.integers(1, 4), st.sampled_from(["barrier", "layerwise"]))
def test_any_valid_plan_runs_correctly_and_in_order(instance, ranks, sync):
    profile, plan = instance
    problem = Problem(profile, AlphaBeta(1e-5, 1e-9), sync=sync)
    m = run(problem, plan, ranks=ranks, iterations=1, warmup=0, time_scale=1.0)
    assert m.correct
    ready = profile.ready_times
    start, end = m.message_start[0], m.message_end[0]
    for k, message in enumerate(plan.messages):
        assert start[k] >= max(ready[c.tensor] for c in message.chunks)
        if k:
            assert start[k] >= end[k - 1]
    assert m.iteration_times[0] >= profile.B + profile.F
    assert not math.isnan(m.relative_error)


def test_release_times_hold_messages_and_gradients_follow_the_ready_order():
    # Tensors 1 and 2 tie (tensor 1 has no backward time of its own) and the ready order
    # puts 1 first; a message released at 20 ms starts no earlier, on the run's clock.
    profile = Profile.from_arrays(SIZES, [1e-3] * 3, [3e-3, 0.0, 2e-3], ready_order=[1, 2, 0])
    problem = Problem(profile, AlphaBeta(1e-4, 1e-9))
    plan = Plan.from_groups(profile, [[1], [2], [0]], release=[0.0, 20e-3, 0.0])
    m = run(problem, plan, ranks=2, iterations=2, warmup=0, time_scale=1.0)
    assert m.correct
    for step in range(2):
        start = m.message_start[step]
        assert start[0] >= profile.ready_times[1] - 1e-3
        assert start[1] >= 20e-3                                    # held until its release
        assert start[2] >= m.message_end[step][1]
    assert m.predicted_time == simulate(problem, plan).iteration_time
    assert Layout(profile, plan).messages[1].need == 2 and Layout(profile, plan).messages[1].release == 20e-3
