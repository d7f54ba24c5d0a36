"""Two-way contention (MODEL.md section 6): messages slowed ``mu`` times while the compute
stream computes, beside compute slowed ``kappa`` times while a message is in flight."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, costs, cut_vectors, partition_plans, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Chunk, Plan, Problem, Profile, simulate, best_bound, fusion_bound, Decoupled, credit_window, free_channel_window,
    priority_dispatch, fusion_message_times, layerwise_slack, fusion_iteration_time, score_cuts, ParameterServer,
    channel_schedule,
)

MS = 1e-3


def worked_profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])


def ms(values):
    return [round(v * 1e3, 9) for v in values]


def test_messages_slow_while_the_backward_computes():
    # MODEL.md section 5, alpha 1 ms, WFBP, mu 2, kappa 1. t3 (3 ms on the channel) ready at 1,
    # half speed until the backward ends at 6: 2.5 ms sent, the last 0.5 ms by 6.5. t2 (2 ms)
    # ready at 3, then 6.5 -> 8.5 at full speed; t1 (5 ms) 8.5 -> 13.5. T = 13.5 + 3 = 16.5.
    p = worked_profile()
    t = simulate(Problem(p, AlphaBeta(MS, 1e-9), comm_contention=2.0), Plan.per_tensor(p))
    assert ms(t.message_ready) == [1, 3, 6]
    assert ms(t.message_start) == [1, 6.5, 8.5]
    assert ms(t.message_end) == [6.5, 8.5, 13.5]
    assert t.iteration_time == pytest.approx(16.5 * MS, rel=1e-12)


def test_two_way_contention_turns_the_best_plan_around():
    # kappa = mu = 2, WFBP: from 1 to 5 t2's 2 ms of backward run at half speed while t3 sends
    # 2 of its 3 ms; at 5 the backlog is 1 + 2 ms, t1's 3 ms of backward and the backlog both
    # take 6 ms at half speed: ready at 11, t1's 5 ms end at 16; T = 19 (14 without contention).
    # One message of everything waits for the backward (6) and sends 8 ms alone: T = 17, the
    # best of the four plans ({t3, t2}, {t1} and {t3}, {t2, t1} both end at 15: T = 18).
    p = worked_profile()
    two_way = Problem(p, AlphaBeta(MS, 1e-9), contention=2.0, comm_contention=2.0)
    wfbp = simulate(two_way, Plan.per_tensor(p))
    assert ms(wfbp.message_ready) == [1, 5, 11]
    assert ms(wfbp.message_end) == [7, 11, 16]
    times = {str(cuts): fusion_iteration_time(two_way, cuts) for cuts in ([1, 1], [0, 0], [0, 1], [1, 0])}
    assert {k: round(v * 1e3, 9) for k, v in times.items()} == {"[1, 1]": 19.0, "[0, 0]": 17.0,
                                                              "[0, 1]": 18.0, "[1, 0]": 18.0}
    plain = Problem(p, AlphaBeta(MS, 1e-9))
    assert fusion_iteration_time(plain, [1, 1]) == pytest.approx(14 * MS, rel=1e-12)


def test_the_recursion_gives_the_hand_worked_ends():
    p = worked_profile()
    ready, end = fusion_message_times(Problem(p, AlphaBeta(MS, 1e-9), comm_contention=2.0), [True, False])
    # {t3} ready at 1: 2.5 of its 3 ms by 6, done at 6.5; {t2, t1} (6 ms) 6.5 -> 12.5.
    assert ms(ready) == [1, 6] and ms(end) == [6.5, 12.5]


def test_a_message_overlapping_the_forward_slows_with_it():
    # Layerwise, alpha 0, beta 1 ns/B, mu 2, plan t1 first, then t3, t2: t1 6 -> 10 (the stream
    # waits for it), t3 (2 ms) from 10 while t1's forward computes 10 -> 11: 0.5 ms sent, the
    # rest 11 -> 12.5; t2 (1 ms) 12.5 -> 13.5 while the stream waits; forward t2 13.5 -> 14.5
    # while nothing is in flight, t3 14.5 -> 15.5. T = 15.5 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(0.0, 1e-9), sync="layerwise", comm_contention=2.0)
    t = simulate(problem, Plan.from_groups(p, [[0], [2], [1]]))
    assert ms(t.message_end) == [10, 12.5, 13.5]
    assert ms(t.forward_start) == [10, 13.5, 14.5]
    assert t.iteration_time == pytest.approx(15.5 * MS, rel=1e-12)


def test_comm_contention_is_checked_and_named():
    p = worked_profile()
    cost = AlphaBeta(MS, 1e-9)
    with pytest.raises(ValueError, match="comm_contention must be >= 1, got 0.5"):
        Problem(p, cost, comm_contention=0.5)
    with pytest.raises(ValueError, match="comm_contention must be finite, got inf"):
        Problem(p, cost, comm_contention=math.inf)
    problem = Problem(p, cost, comm_contention=3.0)
    assert problem.extensions == ("comm_contention",)
    assert "comm_contention=3.0" in repr(problem)
    assert problem.plain().extensions == ()
    assert Problem(p, cost, comm_contention=1.0).extensions == ()
    with pytest.raises(ValueError, match=r"the parameter server does not combine with comm_contention "
                                         r"\(comm_contention=2.0\)"):
        Problem(p, pattern=ParameterServer(AlphaBeta(1e-4, 1e-9)), comm_contention=2.0)
    with pytest.raises(ValueError, match=r"the decoupled all-reduce does not combine with comm_contention"):
        Problem(p, pattern=Decoupled(AlphaBeta(1e-4, 5e-10), AlphaBeta(1e-4, 5e-10)), comm_contention=2.0)
    with pytest.raises(ValueError, match="channel_schedule does not model contention"):
        channel_schedule(Problem(p, cost, channels=2, comm_contention=2.0), [True, True])


@st.composite
def two_way(draw, cost=alpha_beta):
    problem = draw(problems(cost=cost))
    return Problem(problem.profile, problem.cost, sync=problem.sync,
                   copy_cost=draw(st.one_of(st.just(0.0), st.floats(1e-12, 2e-9))),
                   copy_on=draw(st.sampled_from(["channel", "compute"])),
                   contention=draw(st.one_of(st.just(1.0), st.floats(1.0, 3.0))),
                   comm_contention=draw(st.floats(1.0, 20.0)))


@settings(deadline=None)
@given(data=st.data(), problem=two_way(cost=costs))
def test_the_event_simulation_equals_the_backlog_recursion(data, problem):
    # Two computations of one fusion plan: the engine's event loop, and the closed recursion
    # over the channel's backlog (fusion._channel_times), where the compute stream works
    # without a break until the backward ends and then waits for the last message.
    assume(layerwise_slack(problem) == 0.0)
    cuts = data.draw(cut_vectors(problem.profile.n))
    timeline = simulate(problem, Plan.from_cuts(problem.profile, cuts))
    ready, end = fusion_message_times(problem, cuts)
    assert timeline.message_ready.tolist() == pytest.approx(ready.tolist(), rel=1e-9, abs=1e-15)
    assert timeline.message_end.tolist() == pytest.approx(end.tolist(), rel=1e-9, abs=1e-15)
    profile = problem.profile
    assert timeline.iteration_time == pytest.approx(end[-1] + profile.U + profile.F + profile.W, rel=1e-9, abs=1e-15)


@settings(deadline=None)
@given(data=st.data(), problem=two_way(), channels=st.integers(1, 3))
def test_score_cuts_equals_simulate_with_two_way_contention(data, problem, channels):
    problem = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=problem.copy_cost,
                      copy_on=problem.copy_on, contention=problem.contention,
                      comm_contention=problem.comm_contention, channels=channels)
    rows = data.draw(st.lists(cut_vectors(problem.profile.n), min_size=1, max_size=5))
    scores = score_cuts(problem, np.array(rows).reshape(len(rows), problem.profile.n - 1))
    for row, score in zip(rows, scores):
        expected = simulate(problem, Plan.from_cuts(problem.profile, row)).iteration_time
        assert score == pytest.approx(expected, rel=1e-9, abs=1e-15)
        if channels == 1:
            assert fusion_iteration_time(problem, row) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@settings(deadline=None)
@given(data=st.data(), problem=two_way(), channels=st.integers(1, 2), credit=st.booleans())
def test_the_priority_policy_reproduces_the_simulator(data, problem, channels, credit):
    # The policy times its slices itself (to return credit, to post to a free channel); the
    # simulator judging its static plan must agree.
    problem = Problem(problem.profile, problem.cost, sync="layerwise", contention=problem.contention,
                      comm_contention=problem.comm_contention, channels=channels)
    profile = problem.profile
    halves = [Chunk(i, lo, hi) for i, size in enumerate(profile.sizes.tolist())
              for lo, hi in ((0, max(1, size // 2)), (max(1, size // 2), size)) if hi > lo]
    window = credit_window(channels, int(profile.sizes.max())) if credit else free_channel_window(channels)
    run = priority_dispatch(problem, halves, window)
    timeline = simulate(problem, run.plan(halves))
    assert timeline.message_end.tolist() == pytest.approx(run.end.tolist(), rel=1e-9, abs=1e-15)
    assert timeline.iteration_time == pytest.approx(run.iteration_time, rel=1e-9, abs=1e-15)


@settings(deadline=None)
@given(data=st.data(), problem=two_way())
def test_slower_messages_only_add_time_on_one_channel(data, problem):
    plan = data.draw(partition_plans(problem.profile))
    one_way = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=problem.copy_cost,
                      copy_on=problem.copy_on, contention=problem.contention)
    t = simulate(problem, plan).iteration_time
    assert t >= simulate(one_way, plan).iteration_time * (1 - 1e-9)
    assert t >= best_bound(problem) * (1 - 1e-9)
    fusion = Plan.per_tensor(problem.profile)
    assert simulate(problem, fusion).iteration_time >= fusion_bound(problem) * (1 - 1e-9)


@settings(deadline=None)
@given(problem=problems(cost=alpha_beta, sync="barrier"), mu=st.floats(1.0, 1e3))
def test_messages_slowed_without_end_never_take_longer_than_no_overlap(problem, mu):
    # kappa = 1: the backward ends at B whatever the channel does, and the channel then sends
    # what is left at full speed, so T <= B + sum_k c(S_k) + U + F + W (WFBP); as mu grows the
    # channel sends next to nothing during the backward and T tends to that sum.
    profile = problem.profile
    plan = Plan.per_tensor(profile)
    serial = profile.B + float(problem.cost(plan.message_bytes.astype(float)).sum()) + profile.U + profile.F + profile.W
    slowed = Problem(profile, problem.cost, comm_contention=mu)
    t = simulate(slowed, plan).iteration_time
    assert simulate(problem, plan).iteration_time * (1 - 1e-9) <= t <= serial * (1 + 1e-9)
    stalled = simulate(Problem(profile, problem.cost, comm_contention=1e12), plan).iteration_time
    assert stalled == pytest.approx(serial, rel=1e-9, abs=1e-12)
