"""Ready order and release times: hand-worked timelines and cross-checks between methods."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate, simulate_events, Chunk, Message, PSPlan
from fusionopt.solvers import solve


def _conv_profile() -> Profile:
    # forward order: conv.weight, conv.bias, fc.weight, fc.bias. The conv layer's 2 ms sit on
    # its last tensor (conv.bias), the fc layer's 1 ms on fc.bias. Ready times (ms):
    # fc.bias 1, fc.weight 1, conv.bias 3, conv.weight 3. Autograd gives conv.weight first.
    return Profile.from_arrays(
        [4e6, 1e3, 2e6, 1e3], [0.0] * 4, [0.0, 2e-3, 0.0, 1e-3],
        names=["conv.weight", "conv.bias", "fc.weight", "fc.bias"],
        ready_order=["fc.bias", "fc.weight", "conv.weight", "conv.bias"],
    )


def test_ready_order_drives_wfbp_and_cuts():
    profile = _conv_profile()
    assert profile.ready_order == (3, 2, 0, 1)
    assert Plan.per_tensor(profile).groups() == [[3], [2], [0], [1]]
    plan = Plan.from_cuts(profile, [False, True, False])
    assert plan.groups() == [[3, 2], [0, 1]]
    assert plan.is_fusion(profile)
    assert plan.cuts(profile).tolist() == [False, True, False]
    # The same groups in reverse forward order are not a fusion plan of this profile.
    assert not Plan.from_groups(profile, [[3, 2], [1, 0]]).is_fusion(profile)


def test_wfbp_timeline_in_ready_order_hand_worked():
    # alpha = 1 ms, beta = 1 ns/B (1 KB costs 1.001 ms). Messages: fc.bias ready at 1 ms ->
    # 2.001, fc.weight (2 MB, 3 ms) -> 5.001, conv.weight (4 MB, 5 ms) -> 10.001, conv.bias
    # -> 11.002 ms. In reverse forward order conv.bias would go before conv.weight.
    profile = _conv_profile()
    timeline = simulate(Problem(profile, AlphaBeta(1e-3, 1e-9)), Plan.per_tensor(profile))
    assert (timeline.message_end * 1e3).round(9).tolist() == [2.001, 5.001, 10.001, 11.002]


def test_exact_methods_agree_on_a_ready_order():
    profile = _conv_profile()
    problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    brute = solve(problem, "brute")
    dp = solve(problem, "dp")
    assert brute.plan.is_fusion(profile) and dp.plan.is_fusion(profile)
    assert dp.iteration_time == pytest.approx(brute.iteration_time, abs=1e-12)


def test_release_delays_start_in_both_simulators():
    # Two messages of 1 MB, ready at 0 and 1 ms, cost 2 ms each; the second released at 5 ms.
    profile = Profile.from_arrays([1e6, 1e6], [0.0, 0.0], [0.0, 1e-3])
    problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    plan = Plan.from_groups(profile, [[1], [0]], release=[0.0, 5e-3])
    timeline = simulate(problem, plan)
    assert (timeline.message_start * 1e3).round(9).tolist() == [1.0, 5.0]
    assert (timeline.message_end * 1e3).round(9).tolist() == [3.0, 7.0]
    events = simulate_events(problem, plan)
    assert events.message_start.tolist() == pytest.approx(timeline.message_start.tolist(), abs=1e-12)
    assert events.iteration_time == pytest.approx(timeline.iteration_time, abs=1e-12)


def test_release_round_trips_through_json_and_refuses_bad_values(tmp_path):
    profile = Profile.from_arrays([1e6, 1e6], [0.0, 0.0], [0.0, 1e-3])
    plan = Plan.from_groups(profile, [[1], [0]], release=[0.0, 5e-3])
    doc = plan.to_dict()
    assert doc["version"] == 2 and doc["release"] == [0.0, 5e-3]
    assert Plan.from_dict(json.loads(json.dumps(doc))) == plan
    assert Plan.from_groups(profile, [[1], [0]]).to_dict()["version"] == 1
    with pytest.raises(ValueError, match="needs plan version 2"):
        Plan.from_dict({**doc, "version": 1})
    with pytest.raises(ValueError, match=r"release\[1\]"):
        Plan.from_dict({**doc, "release": [0.0, -1.0]})
    with pytest.raises(ValueError, match="finite"):
        Message((Chunk(0, 0, 10),), float("nan"))
    assert not plan.is_fusion(profile) and plan.without_release().is_fusion(profile)
    with pytest.raises(ValueError, match="release times"):
        PSPlan(plan, plan.without_release())


def test_a_single_message_waits_for_its_release():
    profile = Profile.from_arrays([1e6, 1e6], [0.0, 0.0], [0.0, 1e-3])
    plan = Plan.from_groups(profile, [[1, 0]], release=[4e-3])
    t = simulate(Problem(profile, AlphaBeta(1e-3, 1e-9)), plan).message_start
    assert np.allclose(t, [4e-3])


def test_dp_is_exact_when_the_last_tie_group_has_work_before_its_last_tensor():
    # Seeded random profiles whose final tie group is reordered and carries update/forward
    # work: T = max(B, E) + U + F fails there, and the DP's tail enumeration must still equal
    # brute force over every fusion plan (with and without message caps).
    import itertools

    from fusionopt.model import layerwise_slack, optimal_fusion

    rng = np.random.default_rng(0)
    checked = 0
    while checked < 150:
        n = int(rng.integers(2, 7))
        backward = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(1e-4, 3e-3, n))
        profile = Profile.from_arrays(rng.integers(1, 4_000_000, n), rng.uniform(0, 2e-3, n), backward,
                                      update=rng.uniform(0, 2e-3, n))
        ready, order, run = profile.ready_times, [], []
        for i in range(n - 1, -1, -1):
            if run and ready[i] != ready[run[0]]:
                order += list(rng.permutation(run))
                run = []
            run.append(i)
        order += list(rng.permutation(run))
        problem = Problem(profile.with_orders(ready_order=[int(i) for i in order]),
                          AlphaBeta(float(rng.uniform(0, 3e-3)), 1e-9), sync="layerwise")
        if layerwise_slack(problem) == 0.0:
            continue
        checked += 1
        limit = int(rng.integers(1, n + 1)) if rng.random() < 0.3 else None
        best = min(simulate(problem, plan).iteration_time
                   for cuts in itertools.product([False, True], repeat=n - 1)
                   for plan in [Plan.from_cuts(problem.profile, cuts)]
                   if limit is None or plan.num_messages <= limit)
        found = optimal_fusion(problem, max_messages=limit)
        assert simulate(problem, Plan.from_cuts(problem.profile, found.cuts)).iteration_time == \
            pytest.approx(found.iteration_time, rel=1e-12, abs=1e-15)
        assert found.iteration_time == pytest.approx(best, rel=1e-12, abs=1e-15)
