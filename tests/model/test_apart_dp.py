"""The tensors kept exact sent apart (MODEL.md sections 2.2 and 7): the DP over plans whose
messages each take a run of the exact tensors and a run of the others, held to a hand-worked
case, to every plan of that space replayed by the simulator, and to the fusion DP."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import FP16, FP32, AlphaBeta, Cheapest
from fusionopt.model import Plan, Problem, Profile, optimal_fusion, simulate
from fusionopt.solvers import Status, solve
from strategies import alpha_beta, profiles

# t0 and t2 of 4 MB, t1 of 100 kB; backward 3, 2, 1 ms (ready t2 1, t1 3, t0 6 ms); forward 1 ms each.
PROFILE = Profile.from_arrays([4e6, 1e5, 4e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
LINK = Cheapest(AlphaBeta(3e-3, 2e-9), ["fp32", "fp16"])


def test_sending_the_exact_tensor_apart_by_hand():
    problem = Problem(PROFILE, LINK, exact_tensors=[1])
    # Fusion plans: each tensor alone is best, t2 in fp16 1 -> 8 ms (3 + 4), t1 in fp32 8 -> 11.2,
    # t0 in fp16 11.2 -> 18.2; T = 18.2 + 3 ms of forward.
    assert optimal_fusion(problem).iteration_time == pytest.approx(21.2e-3)
    # Apart: t1 alone 3 -> 6.2 ms, then t2 and t0 in one fp16 message (3 + 8 ms) 6.2 -> 17.2.
    result = solve(problem, "dp-apart")
    assert result.plan.groups() == [[1], [2, 0]] and result.stats["encodings"] == ["fp32", "fp16"]
    assert result.iteration_time == pytest.approx(20.2e-3) == result.stats["space_optimum"]
    # Exact over its space only: the result carries the model's bound for any plan (15.1 ms),
    # so it claims no optimum.
    assert result.lower_bound == pytest.approx(problem.pattern.lower_bound(problem, space="any"), rel=1e-12)
    assert result.lower_bound < result.iteration_time and result.status == Status.FEASIBLE


def apart_plans(problem: Problem):
    """Every plan of the space, by brute force: each message a run of each stream (not both empty)."""
    order = list(problem.profile.backward_order)
    exact = [t for t in order if t in problem.exact_tensors]
    others = [t for t in order if t not in problem.exact_tensors]

    def paths(i, j):
        if (i, j) == (len(exact), len(others)):
            yield []
            return
        for i2 in range(i, len(exact) + 1):
            for j2 in range(j, len(others) + 1):
                if (i2, j2) != (i, j):
                    group = sorted(exact[i:i2] + others[j:j2], key=order.index)
                    for rest in paths(i2, j2):
                        yield [group] + rest
    for groups in paths(0, 0):
        yield Plan.from_groups(problem.profile, groups)


@settings(max_examples=40, deadline=None)
@given(profile=profiles(max_n=5), link=alpha_beta, cast=st.floats(0.0, 2e-3), data=st.data())
def test_the_apart_dp_is_the_best_plan_of_its_space(profile, link, cast, data):
    exact = data.draw(st.lists(st.sampled_from(range(profile.n)), unique=True, max_size=profile.n))
    problem = Problem(profile, Cheapest(link, [FP32, FP16.with_costs(seconds_per_message=cast)]), exact_tensors=exact)
    result = solve(problem, "dp-apart")
    brute = min(simulate(problem, plan).iteration_time for plan in apart_plans(problem))
    assert result.iteration_time == pytest.approx(brute, rel=1e-9, abs=1e-15)
    # Every fusion plan lies in the space; without an exact tensor it is the fusion space.
    fusion = optimal_fusion(problem).iteration_time
    assert result.iteration_time <= fusion * (1 + 1e-12)
    if not exact:
        assert result.iteration_time == pytest.approx(fusion, rel=1e-12)


def test_a_cap_and_what_is_refused():
    problem = Problem(PROFILE, LINK, exact_tensors=[1])
    capped = solve(problem, "dp-apart", max_message_bytes=4.5e6)      # t2 and t0 can no longer travel together
    assert max(capped.plan.message_bytes) <= 4.5e6 and capped.iteration_time == pytest.approx(21.2e-3)
    with pytest.raises(ValueError, match=r"^tensor 't2' \(4000000 B\) is larger than max_message_bytes \(1e\+06 B\)"):
        solve(problem, "dp-apart", max_message_bytes=1e6)
    with pytest.raises(ValueError, match=r"^dp-apart is for sync='barrier' only"):
        solve(Problem(PROFILE, LINK, exact_tensors=[1], sync="layerwise"), "dp-apart")
    with pytest.raises(ValueError, match=r"^dp-apart applies to the plain model only, and this problem has "
                                         r"message_compute on"):
        solve(Problem(PROFILE, LINK, message_compute=1e-4), "dp-apart")
