"""MODEL.md section 5, to the last digit, for every sync mode and every evaluator."""

import numpy as np
import pytest

from fusionopt.checks import longest_path_time
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, evaluate_cuts, fusion_iteration_time, simulate

MS = 1e-3
# Groups in 0-based forward indices (t1, t2, t3 of MODEL.md are 0, 1, 2), channel order.
WFBP = [[2], [1], [0]]
SINGLE = [[2, 1, 0]]
T3T2_T1 = [[2, 1], [0]]
T3_T2T1 = [[2], [1, 0]]


def worked_profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], forward=[1 * MS] * 3, backward=[3 * MS, 2 * MS, 1 * MS])


def cuts_of(groups):
    return Plan.from_groups(worked_profile(), groups).cuts(worked_profile())


EXPECTED = [
    # alpha (ms), groups, T (ms)
    (1, WFBP, 14), (1, SINGLE, 17), (1, T3T2_T1, 15), (1, T3_T2T1, 15),
    (3, WFBP, 20), (3, SINGLE, 19), (3, T3T2_T1, 19), (3, T3_T2T1, 17),
]


def test_ready_times_and_totals():
    p = worked_profile()
    assert p.ready_times.tolist() == pytest.approx([6 * MS, 3 * MS, 1 * MS], abs=1e-15)
    assert p.B == pytest.approx(6 * MS, abs=1e-15)
    assert p.F == pytest.approx(3 * MS, abs=1e-15)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
@pytest.mark.parametrize("alpha_ms,groups,expected_ms", EXPECTED)
def test_worked_example_every_evaluator(sync, alpha_ms, groups, expected_ms):
    profile = worked_profile()
    problem = Problem(profile, AlphaBeta(alpha=alpha_ms * MS, beta=1e-9), sync=sync)
    plan = Plan.from_groups(profile, groups)
    cuts = plan.cuts(profile)
    values = {
        "simulate": simulate(problem, plan).iteration_time,
        "fast path": fusion_iteration_time(problem, cuts),
        "batch": float(evaluate_cuts(problem, cuts[None, :])[0]),
        "dag": longest_path_time(problem, plan),
    }
    for label, value in values.items():
        assert value == pytest.approx(expected_ms * MS, rel=1e-12, abs=1e-15), label


def test_wfbp_timeline_alpha_1ms():
    # "t3 runs 1 to 4, t2 4 to 6, t1 6 to 11; barrier T = 11 + 3 = 14 ms".
    profile = worked_profile()
    t = simulate(Problem(profile, AlphaBeta(1 * MS, 1e-9)), Plan.from_groups(profile, WFBP))
    assert t.message_start.tolist() == pytest.approx([1 * MS, 4 * MS, 6 * MS], abs=1e-15)
    assert t.message_end.tolist() == pytest.approx([4 * MS, 6 * MS, 11 * MS], abs=1e-15)
    assert t.reduced.tolist() == pytest.approx([11 * MS, 6 * MS, 4 * MS], abs=1e-15)
    assert t.forward_start.tolist() == pytest.approx([11 * MS, 12 * MS, 13 * MS], abs=1e-15)
    assert t.exposed == pytest.approx(5 * MS, abs=1e-15)
    assert t.busy == pytest.approx(10 * MS, abs=1e-15)
    assert t.idle == pytest.approx(4 * MS, abs=1e-15)
    assert t.scaling_efficiency() == pytest.approx(9 / 14, rel=1e-12)
    assert t.throughput(workers=8, batch=32) == pytest.approx(8 * 32 / (14 * MS), rel=1e-12)


def test_batch_matches_every_plan_of_the_example():
    profile = worked_profile()
    for alpha_ms, by_groups in ((1, {}), (3, {})):
        problem = Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9))
        all_cuts = np.array([[a, b] for a in (0, 1) for b in (0, 1)], dtype=bool)
        batch = evaluate_cuts(problem, all_cuts)
        for row, value in zip(all_cuts, batch):
            expected = simulate(problem, Plan.from_cuts(profile, row)).iteration_time
            assert value == pytest.approx(expected, rel=1e-12)
    # And the optimum of alpha = 3 ms is {t3},{t2,t1} at 17 ms, uniquely.
    problem = Problem(profile, AlphaBeta(3 * MS, 1e-9))
    batch = evaluate_cuts(problem, all_cuts)
    assert batch.min() == pytest.approx(17 * MS, rel=1e-12)
    assert all_cuts[batch.argmin()].tolist() == cuts_of(T3_T2T1).tolist()
    # In blocks of one plan each, the same times; a block of no plan is refused.
    assert np.array_equal(evaluate_cuts(problem, all_cuts, block=1), batch)
    with pytest.raises(ValueError, match=r"^evaluate_cuts: block must be a whole number >= 1, not 0$"):
        evaluate_cuts(problem, all_cuts, block=0)


def test_layerwise_partition_reordering_hand_worked():
    # A partition plan that reorders: t1 (index 0) first, then t3, then t2, alpha = 1 ms.
    # Ready: t1 at 6, t2 at 3, t3 at 1. Message t1: starts 6, ends 6 + 1 + 4 = 11.
    # t3: starts 11, ends 11 + 1 + 2 = 14. t2: starts 14, ends 14 + 1 + 1 = 16.
    # Layerwise: phi_1 = max(6, 11) = 11, forward 11-12; phi_2 = max(12, 16) = 16, 16-17;
    # phi_3 = max(17, 14) = 17, T = 18. Barrier: max(6, 16) + 3 = 19.
    profile = worked_profile()
    plan = Plan.from_groups(profile, [[0], [2], [1]])
    layerwise = simulate(Problem(profile, AlphaBeta(1 * MS, 1e-9), sync="layerwise"), plan)
    barrier = simulate(Problem(profile, AlphaBeta(1 * MS, 1e-9), sync="barrier"), plan)
    assert layerwise.forward_start.tolist() == pytest.approx([11 * MS, 16 * MS, 17 * MS], abs=1e-15)
    assert layerwise.iteration_time == pytest.approx(18 * MS, abs=1e-15)
    assert barrier.iteration_time == pytest.approx(19 * MS, abs=1e-15)
    for sync, value in (("layerwise", 18), ("barrier", 19)):
        assert longest_path_time(Problem(profile, AlphaBeta(1 * MS, 1e-9), sync=sync), plan) == pytest.approx(value * MS, abs=1e-15)


def test_updates_on_the_compute_stream():
    # u = [1, 0, 2] ms on top of the example, WFBP, alpha = 1 ms: C = [11, 6, 4].
    # Barrier: max(6, 11) + 3 + 3 = 17. Layerwise: phi_1 = 11 + 1 = 12, forward to 13;
    # phi_2 = max(13, 6) + 0 = 13, to 14; phi_3 = max(14, 4) + 2 = 16, T = 17.
    base = worked_profile()
    profile = Profile.from_arrays(base.sizes, base.forward, base.backward, update=[1 * MS, 0, 2 * MS])
    plan = Plan.from_groups(profile, WFBP)
    for sync in ("barrier", "layerwise"):
        problem = Problem(profile, AlphaBeta(1 * MS, 1e-9), sync=sync)
        assert simulate(problem, plan).iteration_time == pytest.approx(17 * MS, abs=1e-15)
        assert fusion_iteration_time(problem, plan.cuts(profile)) == pytest.approx(17 * MS, abs=1e-15)
        assert longest_path_time(problem, plan) == pytest.approx(17 * MS, abs=1e-15)
    lw = simulate(Problem(profile, AlphaBeta(1 * MS, 1e-9), sync="layerwise"), plan)
    assert lw.forward_start.tolist() == pytest.approx([12 * MS, 13 * MS, 16 * MS], abs=1e-15)
