"""Compute per message (``message_compute``, MODEL.md section 2.1): hand-worked cases, the fast
paths against the event simulator, and the paths that refuse it."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, cut_vectors, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Plan, Problem, Profile, fusion_iteration_time, simulate, free_channel_window, priority_dispatch,
    fusion_message_times, optimal_fusion, score_cuts,
)
from fusionopt.cost import with_overhead
from fusionopt.model import ParameterServer, channel_schedule, Chunk, layerwise_slack
from fusionopt.solvers import Status, solve

MS = 1e-3
RTOL = 1e-9


def worked_profile() -> Profile:
    # MODEL.md section 5: backward t3 1 ms, t2 2 ms, t1 3 ms; forward 1 ms each.
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])


def ms(values):
    return [round(v * 1e3, 9) for v in values]


def test_compute_critical_wfbp_grows_by_eta_per_message():
    # alpha 0, beta 1 us/MB: the compute is critical. eta 0.5 ms after each backward:
    # t3 0-1, eta 1-1.5 ({t3} ready 1.5, sent 1.5-1.502), t2 1.5-3.5, eta 3.5-4 ({t2} 4-4.001),
    # t1 4-7, eta 7-7.5 ({t1} 7.5-7.504); T = 7.504 + 3 = 10.504 ms, 9.004 without: 3 eta more.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(0.0, 1e-12), message_compute=0.5 * MS)
    t = simulate(problem, Plan.per_tensor(p))
    assert ms(t.message_ready) == [1.5, 4, 7.5]
    assert ms(t.message_end) == [1.502, 4.001, 7.504]
    assert t.iteration_time == pytest.approx(10.504 * MS, rel=1e-12)
    plain = simulate(Problem(p, AlphaBeta(0.0, 1e-12)), Plan.per_tensor(p)).iteration_time
    assert t.iteration_time - plain == pytest.approx(3 * 0.5 * MS, rel=1e-9)
    # One message: one eta, after the whole backward: 6.5 + 0.007 + 3 = 9.507 ms.
    single = simulate(problem, Plan.from_cuts(p, [False, False]))
    assert single.iteration_time == pytest.approx(9.507 * MS, rel=1e-12)


def test_eta_hides_behind_a_busy_channel_but_the_first_message():
    # alpha 5 ms: the channel is critical. WFBP without eta: t3 1-6, t2 6-11, t1 11-16, T 19.
    # With eta 0.5 ms: {t3} ready 1.5 and sent 1.5-6.5; {t2} ready 4 and {t1} ready 7.5 wait
    # for the channel (6.5-11.5, 11.5-16.5): only the first eta reaches T = 19.5 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(5 * MS, 0.0), message_compute=0.5 * MS)
    t = simulate(problem, Plan.per_tensor(p))
    assert ms(t.message_ready) == [1.5, 4, 7.5]
    assert ms(t.message_end) == [6.5, 11.5, 16.5]
    assert t.iteration_time == pytest.approx(19.5 * MS, rel=1e-12)


def test_eta_follows_the_packing_on_the_compute_stream():
    # gamma 1 ms/MB on the compute stream, eta 0.5 ms, plan {t3, t2}, {t1}, alpha 0, beta 1 us/MB:
    # t3 0-1, t2 1-3, pack 3 MB 3-6 and eta 6-6.5 ({t3, t2} ready 6.5, sent 6.5-6.503),
    # t1 6.5-9.5, eta 9.5-10 ({t1} 10-10.004); T = 10.004 + 3 = 13.004 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(0.0, 1e-12), copy_cost=1e-9, copy_on="compute", message_compute=0.5 * MS)
    t = simulate(problem, Plan.from_groups(p, [[2, 1], [0]]))
    assert ms(t.message_ready) == [6.5, 10]
    assert ms(t.message_end) == [6.503, 10.004]
    assert t.iteration_time == pytest.approx(13.004 * MS, rel=1e-12)
    ready, end = fusion_message_times(problem, [False, True])
    assert ms(ready) == [6.5, 10] and ms(end) == [6.503, 10.004]


def test_compute_per_byte_runs_each_messages_cast_on_the_compute_stream():
    # 0.5 ns of compute-stream work a byte of every message (a cast on the backward's stream),
    # alpha 1 ms, beta 1 ns/B. WFBP: t3 0-1, its 2 MB cast 1-2 ({t3} 2-5); t2 2-4, cast
    # 4-4.5 ({t2} 5-7); t1 4.5-7.5, cast 7.5-9.5 ({t1} 9.5-14.5); T = 14.5 + 3 = 17.5 ms.
    # {t3}, {t2, t1}: the 5 MB cast after t1, 7-9.5: 9.5-15.5, T 18.5. One message: its 7 MB
    # cast 6-9.5, 9.5-17.5, T 20.5. The DP, brute force and CP-SAT agree on 17.5 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(MS, 1e-9), message_compute_per_byte=0.5e-9)
    assert problem.extensions == ("message_compute",)
    t = simulate(problem, Plan.per_tensor(p))
    assert ms(t.message_ready) == [2, 4.5, 9.5] and ms(t.message_end) == [5, 7, 14.5]
    assert t.iteration_time == pytest.approx(17.5 * MS, rel=1e-12)
    for groups, expected in (([[2], [1, 0]], 18.5), ([[2, 1, 0]], 20.5)):
        assert simulate(problem, Plan.from_groups(p, groups)).iteration_time == pytest.approx(expected * MS, rel=1e-12)
    ready, end = fusion_message_times(problem, [True, True])
    assert ms(ready) == [2, 4.5, 9.5] and ms(end) == [5, 7, 14.5]
    for method in ("dp", "brute", "cpsat"):
        assert solve(problem, method).iteration_time == pytest.approx(17.5 * MS, rel=1e-12), method
    # With eta 0.5 ms a message as well, {t3, t2} then {t1} is best: the 3 MB cast and an eta
    # after t2 (3-5), ready 5, sent 5-9; t1 5-8, cast and eta 8-10.5, sent 10.5-15.5: 18.5 ms.
    both = Problem(p, AlphaBeta(MS, 1e-9), message_compute=0.5 * MS, message_compute_per_byte=0.5e-9)
    assert solve(both, "dp").plan.groups() == [[2, 1], [0]]
    assert solve(both, "dp").iteration_time == pytest.approx(18.5 * MS, rel=1e-12)
    assert solve(both, "brute").iteration_time == pytest.approx(18.5 * MS, rel=1e-12)


def test_eta_on_two_channels():
    # alpha 1 ms, beta 1 ms/MB, two channels, eta 0.5 ms, WFBP: {t3} ready 1.5, latency to 2.5,
    # 2 MB to 4.5; {t2} ready 4, latency to 5, 1 MB to 6; {t1} ready 7.5, 1 + 4 ms: 12.5; T 15.5.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(MS, 1e-9), channels=2, message_compute=0.5 * MS)
    times = channel_schedule(problem, [True, True])
    assert ms(times["ready"]) == [1.5, 4, 7.5]
    assert ms(times["end"]) == [4.5, 6, 12.5]
    assert times["iteration_time"] == pytest.approx(15.5 * MS, rel=1e-12)
    assert simulate(problem, Plan.per_tensor(p)).iteration_time == pytest.approx(15.5 * MS, rel=1e-12)


def test_with_overhead_puts_eta_on_the_compute_stream():
    p = worked_profile()
    problem = with_overhead(Problem(p, AlphaBeta(0.0, 1e-12)), per_step=0.2 * MS, per_message=0.0,
                            per_message_compute=0.5 * MS)
    assert problem.message_compute == 0.5 * MS and problem.profile.host_overhead == pytest.approx(0.2 * MS)
    # The compute-critical WFBP above, and the host overhead after it: 10.504 + 0.2 ms.
    assert simulate(problem, Plan.per_tensor(p)).iteration_time == pytest.approx(10.704 * MS, rel=1e-12)
    with pytest.raises(ValueError, match="per-message compute must be"):
        with_overhead(Problem(p, AlphaBeta(0.0, 1e-12)), per_step=0.0, per_message=0.0, per_message_compute=-1.0)


ETA_BYTE = st.sampled_from([0.0, 0.0, 1e-10, 1e-9])     # compute-stream seconds a byte of every message


@settings(deadline=None)
@given(data=st.data(), problem=problems(), eta=st.floats(0.0, 5e-3), gamma=st.floats(0.0, 2e-9),
       kappa=st.floats(1.0, 3.0), copy_on=st.sampled_from(["channel", "compute"]), eta_byte=ETA_BYTE)
def test_fusion_fast_path_equals_simulate(data, problem, eta, gamma, kappa, copy_on, eta_byte):
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=gamma, copy_on=copy_on,
                       contention=kappa, message_compute=eta, message_compute_per_byte=eta_byte)
    cuts = data.draw(cut_vectors(problem.profile.n))
    timeline = simulate(extended, Plan.from_cuts(problem.profile, cuts))
    assert fusion_iteration_time(extended, cuts) == pytest.approx(timeline.iteration_time, rel=RTOL, abs=1e-15)
    ready, _ = fusion_message_times(extended, cuts)
    assert ready.tolist() == pytest.approx(timeline.message_ready.tolist(), rel=RTOL, abs=1e-15)
    # Compute per message only adds time.
    assert timeline.iteration_time >= simulate(problem, Plan.from_cuts(problem.profile, cuts)).iteration_time * (1 - RTOL)


@settings(deadline=None)
@given(data=st.data(), problem=problems(cost=alpha_beta), eta=st.floats(0.0, 5e-3), gamma=st.floats(0.0, 2e-9),
       kappa=st.sampled_from([1.0, 1.5]), mu=st.sampled_from([1.0, 1.7]), copy_on=st.sampled_from(["channel", "compute"]),
       channels=st.integers(1, 3), eta_byte=ETA_BYTE)
def test_score_cuts_equals_simulate(data, problem, eta, gamma, kappa, mu, copy_on, channels, eta_byte):
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=gamma, copy_on=copy_on,
                       contention=kappa, comm_contention=mu, channels=channels, message_compute=eta,
                       message_compute_per_byte=eta_byte)
    rows = data.draw(st.lists(cut_vectors(problem.profile.n), min_size=1, max_size=4))
    scores = score_cuts(extended, np.array(rows).reshape(len(rows), problem.profile.n - 1))
    for row, score in zip(rows, scores):
        expected = simulate(extended, Plan.from_cuts(problem.profile, row)).iteration_time
        assert score == pytest.approx(expected, rel=RTOL, abs=1e-15)


def test_paths_without_it_refuse_it():
    p = worked_profile()
    cost = AlphaBeta(MS, 1e-9)
    extended = Problem(p, cost, message_compute=MS)
    assert extended.extensions == ("message_compute",)
    with pytest.raises(ValueError, match="the fusion DP applies to the plain model only, and this problem has "
                                         "contention on"):
        optimal_fusion(Problem(p, cost, message_compute=MS, contention=1.5))
    slack = Profile.from_arrays([8, 8], [1.0, 2.0], [0.0, 3.0], update=[0.5, 0.5], ready_order=[0, 1])
    with pytest.raises(ValueError, match="the fusion DP with message_compute needs a zero layerwise slack"):
        optimal_fusion(Problem(slack, AlphaBeta(0, 1), sync="layerwise", message_compute=0.1))
    with pytest.raises(ValueError, match="priority policies do not model compute per message"):
        priority_dispatch(Problem(p, cost, sync="layerwise", message_compute=MS), [Chunk(i, 0, 10) for i in range(3)],
                          free_channel_window(1))
    with pytest.raises(ValueError, match=r"parameter server does not combine with message_compute \(message_compute=0.001\)"):
        Problem(p, pattern=ParameterServer(cost), message_compute=MS)
    with pytest.raises(ValueError, match=r"parameter server does not combine with message_compute_per_byte "
                                         r"\(message_compute_per_byte=1e-09\)"):
        Problem(p, pattern=ParameterServer(cost), message_compute_per_byte=1e-9)
    with pytest.raises(ValueError, match="priority policies do not model compute per message"):
        priority_dispatch(Problem(p, cost, sync="layerwise", message_compute_per_byte=1e-9),
                          [Chunk(i, 0, 10) for i in range(3)], free_channel_window(1))
    with pytest.raises(ValueError, match="message_compute_per_byte must be >= 0, got -1"):
        Problem(p, cost, message_compute_per_byte=-1)
    with pytest.raises(ValueError, match="message_compute must be >= 0, got -1"):
        Problem(p, cost, message_compute=-1)
    with pytest.raises(ValueError, match="message_compute must be finite, got inf"):
        Problem(p, cost, message_compute=float("inf"))


def exhaustive(problem: Problem, cap: float = math.inf, limit: int | None = None) -> float:
    """The smallest simulated T over every fusion plan meeting the caps."""
    best = math.inf
    for bits in itertools.product((False, True), repeat=problem.profile.n - 1):
        plan = Plan.from_cuts(problem.profile, np.array(bits, dtype=bool))
        if plan.message_bytes.max() <= cap and (limit is None or plan.num_messages <= limit):
            best = min(best, simulate(problem, plan).iteration_time)
    return best


def test_the_dp_takes_eta_on_the_worked_example():
    # Compute critical (alpha 0): WFBP's three eta cost 1.5 ms, one message's one eta 0.5 ms:
    # single is best at 9.507 ms. Channel critical (alpha 5 ms): WFBP 19.5 ms (above), two
    # messages {t3}, {t2, t1}: 1.5 -> 6.5, {t2, t1} ready 7.5 -> 12.5, 15.5 ms; single ready 6.5, 14.5 ms.
    p = worked_profile()
    result = solve(Problem(p, AlphaBeta(0.0, 1e-12), message_compute=0.5 * MS), "dp")
    assert result.plan.num_messages == 1 and result.iteration_time == pytest.approx(9.507 * MS, rel=1e-12)
    result = solve(Problem(p, AlphaBeta(5 * MS, 0.0), message_compute=0.5 * MS), "dp")
    assert result.plan.num_messages == 1 and result.iteration_time == pytest.approx(14.5 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL and result.lower_bound == result.iteration_time


@settings(deadline=None)
@given(problem=problems(max_n=7), eta=st.one_of(st.just(1e-6), st.floats(0.0, 5e-3)), cap_share=st.floats(0.0, 1.0),
       limit=st.one_of(st.none(), st.integers(1, 7)), eta_byte=ETA_BYTE)
def test_the_dp_equals_the_exhaustive_optimum(problem, eta, cap_share, limit, eta_byte):
    problem = Problem(problem.profile, problem.cost, sync=problem.sync, message_compute=eta,
                      message_compute_per_byte=eta_byte)
    sizes = problem.profile.sizes
    cap = float(sizes.max()) + cap_share * float(sizes.sum() - sizes.max())
    if layerwise_slack(problem) > 0.0 and problem.computes_per_message:
        with pytest.raises(ValueError, match="zero layerwise slack"):
            optimal_fusion(problem)
        return
    try:
        best = optimal_fusion(problem, max_message_bytes=cap, max_messages=limit)
    except ValueError as exc:                 # the cap needs more messages than the limit
        assert "infeasible" in str(exc)
        return
    optimum = exhaustive(problem, cap, limit)
    plan = Plan.from_cuts(problem.profile, best.cuts)
    assert best.iteration_time == pytest.approx(optimum, rel=RTOL, abs=1e-15)
    assert simulate(problem, plan).iteration_time == pytest.approx(optimum, rel=RTOL, abs=1e-15)
    assert plan.message_bytes.max() <= cap and (limit is None or plan.num_messages <= limit)
