"""The extensions of MODEL.md section 6, simulated event by event, on hand-worked cases."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, partition_plans, problems

from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import (
    Plan, Problem, Profile, evaluate_cuts, simulate, simulate_events, best_bound, fusion_bound, optimal_fusion,
)

MS = 1e-3


def worked_profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])


def ms(values):
    return [round(v * 1e3, 9) for v in values]


def test_copy_cost_on_the_channel():
    # alpha 3 ms, gamma 1 ms/MB. {t3} 1 -> 6 (one tensor: no packing); {t2, t1} (5 MB)
    # ready at 6, 3 + 5 + 5 = 13 ms -> 19. T = 19 + 3 = 22 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(3 * MS, 1e-9), copy_cost=1e-9)
    t = simulate(problem, Plan.from_groups(p, [[2], [1, 0]]))
    assert ms(t.message_start) == [1, 6] and ms(t.message_end) == [6, 19]
    assert t.iteration_time == pytest.approx(22 * MS, rel=1e-12)


def test_copy_cost_on_the_compute_stream_delays_the_backward():
    # alpha 0, beta 1e-12 (1 us/MB), gamma 1 ms/MB, plan {t3, t2}, {t1}.
    # Channel: pack 3 ms in the message: {t3,t2} 3 -> 6.003, {t1} 6.003 -> 6.007; T = 9.007.
    # Compute: backward t3 0-1, t2 1-3, pack 3-6, t1 6-9: {t3,t2} 6 -> 6.003,
    # {t1} 9 -> 9.004; T = max(9, 9.004) + 3 = 12.004 ms.
    p = worked_profile()
    plan = Plan.from_groups(p, [[2, 1], [0]])
    on_channel = simulate(Problem(p, AlphaBeta(0.0, 1e-12), copy_cost=1e-9), plan)
    on_compute = simulate(Problem(p, AlphaBeta(0.0, 1e-12), copy_cost=1e-9, copy_on="compute"), plan)
    assert on_channel.iteration_time == pytest.approx(9.007 * MS, rel=1e-9)
    assert ms(on_compute.message_ready) == [6, 9]
    assert ms(on_compute.message_end) == [6.003, 9.004]
    assert on_compute.iteration_time == pytest.approx(12.004 * MS, rel=1e-9)


def test_contention_slows_the_backward_while_the_channel_is_busy():
    # kappa 2, alpha 1 ms, WFBP. t3 ready 1, sent 1 -> 4. t2's 2 ms of backward: 1.5 ms
    # done by 4 at half speed, 0.5 ms more at full speed: ready 4.5, sent 4.5 -> 6.5.
    # t1's 3 ms: 1 ms by 6.5, 2 ms more: ready 8.5, sent 8.5 -> 13.5. T = 13.5 + 3 = 16.5.
    p = worked_profile()
    t = simulate(Problem(p, AlphaBeta(MS, 1e-9), contention=2.0), Plan.per_tensor(p))
    assert ms(t.message_ready) == [1, 4.5, 8.5]
    assert ms(t.message_end) == [4, 6.5, 13.5]
    assert t.iteration_time == pytest.approx(16.5 * MS, rel=1e-12)


def test_contention_slows_an_overlapped_forward():
    # Layerwise, kappa 2, alpha 0, beta 1 ns/B, plan t1 first then t3, t2: t1 6 -> 10,
    # t3 10 -> 12, t2 12 -> 13. Forward t1 at 10 while t3 is sent (half speed): done 12;
    # t2's forward waits for 13, runs 13 -> 14; t3's 14 -> 15. T = 15 ms.
    p = worked_profile()
    problem = Problem(p, AlphaBeta(0.0, 1e-9), sync="layerwise", contention=2.0)
    t = simulate(problem, Plan.from_groups(p, [[0], [2], [1]]))
    assert ms(t.message_end) == [10, 12, 13]
    assert ms(t.forward_start) == [10, 13, 14]
    assert t.iteration_time == pytest.approx(15 * MS, rel=1e-12)


def test_two_channels_share_the_bandwidth():
    # alpha 0, beta 2 ns/B, WFBP, K = 2. t3 (8 ms of transfer) from 1; t2 (2 ms) joins at
    # 3 with 2 ms of t3 left: both at half rate, both end at 7. t1 (8 ms) ready at 6 waits
    # for a free channel: 7 -> 15. One channel: t3 1 -> 5, t2 5 -> 7, t1 7 -> 15.
    p = worked_profile()
    two = simulate(Problem(p, AlphaBeta(0.0, 2e-9), channels=2), Plan.per_tensor(p))
    assert ms(two.message_start) == [1, 3, 7] and ms(two.message_end) == [7, 7, 15]
    one = simulate(Problem(p, AlphaBeta(0.0, 2e-9)), Plan.per_tensor(p))
    assert ms(one.message_end) == [5, 7, 15]
    assert two.iteration_time == one.iteration_time == pytest.approx(18 * MS, rel=1e-12)


def test_each_channel_pays_its_own_startup():
    # alpha 2 ms, beta 0, K = 2, WFBP, backward [1, 1, 1] ms: ready 1, 2, 3. t3 1 -> 3,
    # t2 2 -> 4 (its startup in parallel with t3's), t1 gets a channel at 3: 3 -> 5.
    # T = 5 + 3 = 8 ms; one channel would give 1 -> 3, 3 -> 5, 5 -> 7 and T = 10.
    p = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [MS] * 3)
    t = simulate(Problem(p, AlphaBeta(2 * MS, 0.0), channels=2), Plan.per_tensor(p))
    assert ms(t.message_start) == [1, 2, 3] and ms(t.message_end) == [3, 4, 5]
    assert t.iteration_time == pytest.approx(8 * MS, rel=1e-12)
    one = simulate(Problem(p, AlphaBeta(2 * MS, 0.0)), Plan.per_tensor(p))
    assert one.iteration_time == pytest.approx(10 * MS, rel=1e-12)


@settings(deadline=None)
@given(data=st.data(), problem=problems())
def test_event_simulation_reduces_to_the_plain_model(data, problem):
    plan = data.draw(partition_plans(problem.profile))
    plain = simulate(problem, plan)
    events = simulate_events(problem, plan)
    assert events.iteration_time == pytest.approx(plain.iteration_time, rel=1e-9, abs=1e-15)
    assert events.message_end.tolist() == pytest.approx(plain.message_end.tolist(), rel=1e-9, abs=1e-15)
    assert events.forward_start.tolist() == pytest.approx(plain.forward_start.tolist(), rel=1e-9, abs=1e-15)


@settings(deadline=None)
@given(data=st.data(), problem=problems(cost=alpha_beta),
       gamma=st.floats(0.0, 1e-9), kappa=st.floats(1.0, 3.0), channels=st.integers(1, 3),
       copy_on=st.sampled_from(["channel", "compute"]))
def test_extensions_never_beat_the_bounds(data, problem, gamma, kappa, channels, copy_on):
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=gamma,
                       copy_on=copy_on, contention=kappa, channels=channels)
    plan = data.draw(partition_plans(problem.profile))
    t = simulate(extended, plan)
    assert t.iteration_time >= best_bound(extended) * (1 - 1e-9)
    # Packing and contention only add time on one channel.
    if channels == 1:
        assert t.iteration_time >= simulate(problem, plan).iteration_time * (1 - 1e-9)
        fusion = Plan.per_tensor(problem.profile)
        assert simulate(extended, fusion).iteration_time >= fusion_bound(extended) * (1 - 1e-9)
    assert (t.message_start >= t.message_ready - 1e-15).all()
    assert (t.message_end >= t.message_start).all()


def test_plain_only_tools_refuse_extended_problems():
    p = worked_profile()
    extended = Problem(p, AlphaBeta(MS, 1e-9), contention=1.5)
    with pytest.raises(ValueError, match="the fusion DP applies to the plain model only, and this problem has contention on"):
        optimal_fusion(extended)
    with pytest.raises(ValueError, match="evaluate_cuts applies to the plain model only"):
        evaluate_cuts(extended, [[True, True]])
    assert fusion_bound(Problem(p, AlphaBeta(MS, 1e-9), channels=2)) is None
    assert fusion_bound(extended) == optimal_fusion(extended.plain()).iteration_time


def test_bad_extension_parameters():
    p = worked_profile()
    cost = AlphaBeta(MS, 1e-9)
    with pytest.raises(ValueError, match="copy_cost must be >= 0, got -1"):
        Problem(p, cost, copy_cost=-1)
    with pytest.raises(ValueError, match="contention must be >= 1, got 0.5"):
        Problem(p, cost, contention=0.5)
    with pytest.raises(ValueError, match="contention must be finite, got nan"):
        Problem(p, cost, contention=float("nan"))
    with pytest.raises(ValueError, match="channels must be an integer >= 1, got 0"):
        Problem(p, cost, channels=0)
    with pytest.raises(ValueError, match="unknown copy_on 'gpu'"):
        Problem(p, cost, copy_on="gpu")
    with pytest.raises(ValueError, match="channels = 2 needs an affine cost"):
        Problem(p, PiecewiseLinear([1, 1e6], [MS, 2 * MS]), channels=2)


def test_packing_is_for_messages_of_several_tensors():
    # Two chunks of one tensor in one message need no packing (MODEL.md: "a multi-tensor
    # message"); t0 split in two halves sent together costs c(4 MB) only.
    from fusionopt.model import Chunk, Message
    p = worked_profile()
    plan = Plan((Message((Chunk(2, 0, 2_000_000),)), Message((Chunk(1, 0, 1_000_000),)),
                 Message((Chunk(0, 0, 2_000_000), Chunk(0, 2_000_000, 4_000_000)))))
    packed = simulate(Problem(p, AlphaBeta(MS, 1e-9), copy_cost=1e-9), plan)
    assert packed.iteration_time == pytest.approx(simulate(Problem(p, AlphaBeta(MS, 1e-9)), plan).iteration_time, rel=1e-12)


@settings(deadline=None)
@given(data=st.data(), problem=problems(), gamma=st.floats(0.0, 2e-9), kappa=st.floats(1.0, 3.0),
       copy_on=st.sampled_from(["channel", "compute"]))
def test_fusion_fast_path_on_one_channel_equals_simulate(data, problem, gamma, kappa, copy_on):
    from fusionopt.model import fusion_iteration_time
    from strategies import cut_vectors
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=gamma,
                       copy_on=copy_on, contention=kappa)
    cuts = data.draw(cut_vectors(problem.profile.n))
    expected = simulate(extended, Plan.from_cuts(problem.profile, cuts)).iteration_time
    assert fusion_iteration_time(extended, cuts) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@settings(deadline=None)
@given(data=st.data(), problem=problems(cost=alpha_beta), gamma=st.floats(0.0, 2e-9), kappa=st.floats(1.0, 3.0),
       copy_on=st.sampled_from(["channel", "compute"]), channels=st.integers(1, 3))
def test_score_cuts_equals_simulate_on_every_model_option(data, problem, gamma, kappa, copy_on, channels):
    import numpy as np
    from fusionopt.model import score_cuts
    from strategies import cut_vectors
    extended = Problem(problem.profile, problem.cost, sync=problem.sync, copy_cost=gamma,
                       copy_on=copy_on, contention=kappa, channels=channels)
    rows = data.draw(st.lists(cut_vectors(problem.profile.n), min_size=1, max_size=5))
    scores = score_cuts(extended, np.array(rows).reshape(len(rows), problem.profile.n - 1))
    for row, score in zip(rows, scores):
        expected = simulate(extended, Plan.from_cuts(problem.profile, row)).iteration_time
        assert score == pytest.approx(expected, rel=1e-9, abs=1e-15)
