"""Tensors kept exact (``Problem(exact_tensors=...)``, MODEL.md section 2.2): an error budget of
"at most the other tensors compressed". Every message carrying one travels in a lossless
encoding; the DP chooses grouping and encodings under that budget, held to brute force over
every grouping and every allowed encoding, and every engine prices it alike."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import BF16, FP16, FP32, AlphaBeta, Cheapest, Encoded
from fusionopt.model import (Plan, Problem, Profile, allreduce_program, fusion_iteration_time, optimal_fusion, replay,
                             score_cuts, simulate)
from fusionopt.solvers import solve
from strategies import alpha_beta, profiles
from test_encoding import groupings

LINK = AlphaBeta(25e-6, 0.8e-9)
FP16_CAST = FP16.with_costs(seconds_per_message=40e-6)
# t0..t3 of 4 MB, 1 MB, 2 MB and 4 kB; backward 3, 2, 1, 0.1 ms (ready at 6.1, 3.1, 1.1 and
# 0.1 ms), forward 1 ms each.
PROFILE = Profile.from_arrays([4e6, 1e6, 2e6, 4e3], [1e-3] * 4, [3e-3, 2e-3, 1e-3, 1e-4])


def test_an_exact_tensor_by_hand():
    cost = Cheapest(LINK, [FP32, FP16_CAST])
    # Free to choose: t0's 4 MB in fp16 from 6.1 ms takes 25 + 40 + 1600 us; T = 7.765 + 4 ms.
    assert solve(Problem(PROFILE, cost), "dp").iteration_time == pytest.approx(11.765e-3)
    # t0 exact: its message goes in fp32, 25 + 3200 us from 6.1 ms: T = 9.325 + 4 = 13.325 ms,
    # whatever it is fused with (a larger fp32 message only ends later).
    exact = Problem(PROFILE, cost, exact_tensors=[0])
    assert exact.extensions == ("exact_tensors",)
    result = solve(exact, "dp")
    assert result.iteration_time == pytest.approx(13.325e-3)
    wfbp = Plan.from_cuts(PROFILE, [True] * 3)
    assert simulate(exact, wfbp).iteration_time == pytest.approx(13.325e-3)
    assert exact.message_encodings(wfbp.message_bytes, [m.tensors for m in wfbp.messages]) == \
        ["fp32", "fp16", "fp16", "fp32"]
    # t2 exact: its 2 MB in fp32 (1.625 ms from 1.1) still ends before t1 is ready: T unchanged.
    assert solve(Problem(PROFILE, cost, exact_tensors=[2]), "dp").iteration_time == pytest.approx(11.765e-3)
    # The price of a message: fp32 where it carries t0, the cheapest otherwise.
    assert exact.message_cost([4e6, 4e6], [[0], [1, 2]]).tolist() == pytest.approx([3.225e-3, 1.665e-3])


def test_a_budget_no_plan_meets_and_a_cost_it_cannot_restrict_are_refused():
    with pytest.raises(ValueError, match=r"^exact_tensors: tensor 1 must travel exactly, and every encoding of the "
                                         r"cost \(fp16, bf16\) is lossy: add fp32$"):
        Problem(PROFILE, Cheapest(LINK, [FP16, BF16]), exact_tensors=[1])
    with pytest.raises(ValueError, match=r"^exact_tensors restricts a choice of encodings \(Cheapest\), and the cost "
                                         r"Encoded sends every message in 'fp16'"):
        Problem(PROFILE, Encoded(LINK, FP16), exact_tensors=[1])
    with pytest.raises(ValueError, match=r"^exact_tensors: 4 is not a tensor index of profile"):
        Problem(PROFILE, Cheapest(LINK, [FP32, FP16]), exact_tensors=[4])
    # On a cost that sends every message losslessly the budget holds already: no extension.
    assert Problem(PROFILE, LINK, exact_tensors=[1]).extensions == ()


@settings(deadline=None, max_examples=40)
@given(profiles(max_n=5), alpha_beta, st.floats(0.0, 2e-3), st.floats(0.0, 1e-9),
       st.sampled_from(["barrier", "layerwise"]), st.data())
def test_the_dp_under_a_budget_is_the_joint_optimum(profile, link, overhead, per_byte, sync, data):
    profile = profile.with_orders(ready_order=list(range(profile.n - 1, -1, -1)))
    exact = data.draw(st.sets(st.integers(0, profile.n - 1)))
    encodings = [FP32, FP16.with_costs(seconds_per_message=overhead, seconds_per_byte=per_byte), BF16]
    problem = Problem(profile, Cheapest(link, encodings), sync=sync, exact_tensors=sorted(exact))
    result = solve(problem, "dp")
    # Brute force: every grouping, every message in every encoding the budget allows it.
    best = np.inf
    for groups in groupings(profile.n):
        plan = Plan.from_groups(profile, groups)
        program = allreduce_program(Problem(profile, link, sync=sync), plan)
        allowed = [[FP32] if exact.intersection(group) else encodings for group in groups]
        for chosen in itertools.product(*allowed):
            durations = [Encoded(link, e)(float(s)) for e, s in zip(chosen, plan.message_bytes)]
            best = min(best, replay(program, durations)["iteration_time"])
    assert result.iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)
    # Each engine prices a plan as the event simulator does.
    cuts = data.draw(st.lists(st.booleans(), min_size=profile.n - 1, max_size=profile.n - 1))
    timed = simulate(problem, Plan.from_cuts(profile, cuts)).iteration_time
    assert fusion_iteration_time(problem, cuts) == pytest.approx(timed, rel=1e-9, abs=1e-15)
    if profile.n > 1:
        assert score_cuts(problem, [cuts])[0] == pytest.approx(timed, rel=1e-9, abs=1e-15)
    # Kept exact, a plan never runs faster than free to choose.
    assert timed >= simulate(Problem(profile, problem.cost, sync=sync), Plan.from_cuts(profile, cuts)
                             ).iteration_time * (1 - 1e-12)


@settings(deadline=None, max_examples=25)
@given(profiles(max_n=5), alpha_beta, st.floats(0.0, 1e-3), st.floats(0.0, 1e-3), st.data())
def test_the_dp_by_message_count_keeps_the_budget(profile, link, overhead, eta, data):
    profile = profile.with_orders(ready_order=list(range(profile.n - 1, -1, -1)))
    exact = sorted(data.draw(st.sets(st.integers(0, profile.n - 1))))
    problem = Problem(profile, Cheapest(link, [FP32, FP16.with_costs(seconds_per_message=overhead)]),
                      message_compute=eta, exact_tensors=exact)
    best = optimal_fusion(problem).iteration_time
    every = score_cuts(problem, list(itertools.product([False, True], repeat=profile.n - 1))) if profile.n > 1 else \
        [simulate(problem, Plan.from_cuts(profile, [])).iteration_time]
    assert best == pytest.approx(min(every), rel=1e-9, abs=1e-15)
    assert solve(problem, "brute").iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)


def test_cpsat_keeps_the_budget_as_the_dp_does():
    pytest.importorskip("ortools", reason="CP-SAT needs the solvers extra (OR-Tools)")
    profile = Profile.from_arrays([4e6, 1e6, 2e6, 4e3, 3e5], [1e-3] * 5, [3e-3, 2e-3, 1e-3, 1e-4, 5e-4])
    cost = Cheapest(LINK, [FP32, FP16_CAST, BF16.with_costs(seconds_per_message=60e-6)])
    for exact in ([], [0], [1, 4], [0, 1, 2, 3, 4]):
        problem = Problem(profile, cost, exact_tensors=exact)
        times = {method: solve(problem, method).iteration_time for method in ("dp", "cpsat", "brute")}
        assert times["cpsat"] == pytest.approx(times["dp"], rel=1e-9) == times["brute"]
    # Every tensor exact: the fp32 optimum.
    assert times["dp"] == pytest.approx(solve(Problem(profile, LINK), "dp").iteration_time, rel=1e-12)


@pytest.mark.parametrize("method", ["bytescheduler", "p3"])
def test_the_policies_that_time_their_own_messages_price_the_budget(method):
    # The life cycle holds each policy's own message ends to the simulator's (solvers'
    # _policy_checks); kept exact, t0's message is the fp32 one. (Horovod sends every
    # gradient with one compression, and refuses a choice per message.)
    problem = Problem(PROFILE, Cheapest(LINK, [FP32, FP16_CAST]), sync="layerwise", exact_tensors=[0])
    result = solve(problem, method)
    plan = result.plan
    chosen = problem.message_encodings(plan.message_bytes, [m.tensors for m in plan.messages])
    assert all(name == "fp32" for name, m in zip(chosen, plan.messages) if 0 in m.tensors)
    assert "fp16" in chosen
