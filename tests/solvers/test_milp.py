"""``method="milp"``: the cut-vector MILP (HiGHS) against hand-worked cases and the DP."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, problems

import fusionopt.zoo as zoo
from fusionopt.model import layerwise_slack
from fusionopt.cost import AlphaBeta, PiecewiseLinear, network
from fusionopt.model import Plan, Problem, Profile, simulate, backward_arrays
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import dp, encode_model, milp

MS = 1e-3


def worked(alpha_ms: float, sync: str = "barrier") -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), sync=sync)


def assert_matches_dp(result, problem, **caps):
    """T equals the DP's within the stated tolerance, OPTIMAL, bound below T."""
    reference = dp(problem, **caps).iteration_time
    tolerance = result.stats["tolerance"]
    if layerwise_slack(problem) > 0.0:
        # The MILP minimises the last message's end, which no longer decides T.
        assert reference - 1e-12 * reference <= result.iteration_time
        assert result.lower_bound <= reference + tolerance
        return
    assert reference - 1e-12 * reference <= result.iteration_time <= reference + tolerance
    assert result.status is Status.OPTIMAL
    assert result.lower_bound <= result.iteration_time
    # The plan re-simulates to the claimed T, and the MILP's own end agrees with it.
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    profile = problem.profile
    claimed = max(profile.B, result.stats["communication_end"]) + profile.U + profile.F
    assert result.iteration_time == pytest.approx(claimed, rel=0, abs=tolerance)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_model_section_5_alpha_3ms(sync):
    problem = worked(3, sync)
    result = solve(problem, "milp")
    assert result.plan.groups() == [[2], [1, 0]]              # {t3}, {t2, t1}
    assert result.iteration_time == pytest.approx(17 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL
    assert result.lower_bound <= result.iteration_time
    assert result.stats["communication_end"] == pytest.approx(14 * MS, rel=1e-9)
    assert result.stats["dual_bound"] == pytest.approx(14 * MS, rel=1e-9)
    assert result.stats["big_m_end"] == 0.0 and result.stats["big_m_cap"] == 0.0
    # Columns x_1, x_2, P_2, P_3, E; rows: 3 per P_j and one E row per position.
    assert result.stats["variables"] == 5 and result.stats["constraints"] == 3 * 2 + 3


def test_model_section_5_alpha_1ms_wfbp():
    result = milp(worked(1))
    assert result.plan.groups() == [[2], [1], [0]]
    assert result.iteration_time == pytest.approx(14 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL


def test_caps_on_the_worked_example():
    problem = worked(3)
    # 5 MB allows {t3}, {t2, t1}; 4 MB forbids it (5 MB) and the single message:
    # {t3, t2}, {t1} at 19 ms beats WFBP's 20 ms.
    assert milp(problem, max_message_bytes=5e6).plan.groups() == [[2], [1, 0]]
    capped = milp(problem, max_message_bytes=4e6)
    assert capped.plan.groups() == [[2, 1], [0]]
    assert capped.iteration_time == pytest.approx(19 * MS, rel=1e-12)
    one = milp(problem, max_messages=1)
    assert one.plan.groups() == [[2, 1, 0]] and one.iteration_time == pytest.approx(19 * MS, rel=1e-12)
    assert one.status is Status.OPTIMAL
    with pytest.raises(ValueError, match="infeasible: tensor 't0' has 4000000 bytes, more than max_message_bytes"):
        milp(problem, max_message_bytes=2e6)
    with pytest.raises(ValueError, match="needs at least 2 messages, more than max_messages = 1"):
        milp(problem, max_message_bytes=4e6, max_messages=1)


@settings(deadline=None, max_examples=40)
@given(problem=problems(max_n=12, cost=alpha_beta))
def test_equals_the_dp_on_random_problems(problem):
    assert_matches_dp(milp(problem), problem)


@st.composite
def capped_problems(draw):
    problem = draw(problems(max_n=12, cost=alpha_beta))
    sizes = problem.profile.sizes
    largest, total = int(sizes.max()), int(sizes.sum())
    cap = draw(st.one_of(st.none(), st.integers(largest, max(largest, total))))
    count = draw(st.one_of(st.none(), st.integers(1, problem.profile.n)))
    return problem, cap, count


@settings(deadline=None, max_examples=40)
@given(case=capped_problems())
def test_equals_the_dp_with_caps(case):
    problem, cap, count = case
    try:
        dp(problem, max_message_bytes=cap, max_messages=count)
    except ValueError as exc:                   # a cap needing more than `count` messages
        assert str(exc).startswith("infeasible")
        with pytest.raises(ValueError, match="infeasible"):
            milp(problem, max_message_bytes=cap, max_messages=count)
        return
    result = milp(problem, max_message_bytes=cap, max_messages=count)
    assert_matches_dp(result, problem, max_message_bytes=cap, max_messages=count)
    if cap is not None:
        assert result.plan.message_bytes.max() <= cap
    if count is not None:
        assert result.plan.num_messages <= count


@settings(deadline=None, max_examples=40)
@given(problem=problems(min_n=1, max_n=7, cost=alpha_beta), data=st.data())
def test_the_formulation_is_exact_for_every_cut_vector(problem, data):
    # At a plan's exact (x, P, E), E its simulated last message end, the encoded rows (big-Ms
    # of 0) hold, and lowering E by a hair breaks one: the model's E is the plan's end. A
    # plan with a message over the byte cap breaks a row whatever E is.
    profile = problem.profile
    n = profile.n
    cap = data.draw(st.one_of(st.just(math.inf), st.integers(int(profile.sizes.max()), profile.total_bytes)))
    model = encode_model(problem, problem.cost.affine, float(cap), None)
    _, prefix = backward_arrays(problem)
    tau, total = model.time_scale, prefix[-1]

    def violated(point):
        values = model.matrix @ point
        slack = 1e-12 * max(1.0, np.abs(values).max())
        return np.any(values < model.row_lower - slack) or np.any(values > model.row_upper + slack)

    for cuts in itertools.product([False, True], repeat=n - 1):
        cuts = np.array(cuts, dtype=bool)
        plan = Plan.from_cuts(profile, cuts)
        last_end = [0.0]                                   # P_1, P_2, ..., P_n
        for j in range(1, n):
            last_end.append(prefix[j] if cuts[j - 1] else last_end[-1])
        end = simulate(problem, plan).communication_end
        point = np.concatenate([cuts.astype(float), np.array(last_end[1:]) / total, [end / tau]])
        if plan.message_bytes.max() > cap:
            point[-1] = 10.0                               # E far above any plan's end
            assert violated(point)
            continue
        assert not violated(point)
        point[-1] -= 1e-9
        assert violated(point)


def test_flat_piecewise_linear_is_affine_and_accepted():
    profile = worked(3).profile
    problem = Problem(profile, PiecewiseLinear([1, 1e6], [2 * MS, 2 * MS]))   # c = 2 ms flat
    assert_matches_dp(milp(problem), problem)


def test_bad_input_is_named():
    problem = worked(3)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time_limit must be a positive, finite number of seconds"):
            milp(problem, time_limit=bad)
    with pytest.raises(ValueError, match="^time_limit must be a number of seconds, got '10'$"):
        milp(problem, time_limit="10")
    for bad in (-0.1, 1.5, 1.0, float("nan")):
        with pytest.raises(ValueError, match=r"mip_rel_gap must lie in \[0, 1\)"):
            milp(problem, mip_rel_gap=bad)
    curved = Problem(problem.profile, PiecewiseLinear([1, 2e6, 3e6], [MS, MS, 2 * MS]))
    with pytest.raises(ValueError, match="milp needs an affine cost such as AlphaBeta, got PiecewiseLinear; "
                                         "use method='cpsat' or 'dp'"):
        milp(curved)
    with pytest.raises(ValueError, match="max_messages must be an integer >= 1, got 0"):
        milp(problem, max_messages=0)
    with pytest.raises(ValueError, match="unknown option 'gap' for method 'milp'"):
        solve(problem, "milp", gap=0.1)


def test_resnet50_on_10gbe_matches_the_dp():
    problem = Problem(zoo.profile("resnet50"), network("10gbe", 64))
    result = milp(problem, time_limit=30.0)
    reference = dp(problem).iteration_time
    if result.stats["highs_status"] == 1:       # time limit: a valid plan, no equality owed
        assert result.status in (Status.TIME_LIMIT, Status.OPTIMAL)
        assert result.iteration_time >= reference - 1e-12 * reference
    else:
        assert_matches_dp(result, problem)
    # Zero-backward tensors (biases, norms) never start a message: 53 cuts fixed.
    assert result.stats["fixed_cuts"] == int(np.count_nonzero(np.diff(backward_arrays(problem)[0]) == 0))


def test_time_limit_without_a_plan_or_with_one():
    problem = Problem(zoo.profile("bert-base"), network("100gb-ib", 16))
    reference = dp(problem).iteration_time
    try:
        result = milp(problem, time_limit=1e-9)
    except RuntimeError as exc:
        assert "HiGHS found no feasible plan within time_limit = 1e-09 s" in str(exc)
        assert "use method='dp'" in str(exc)
    else:                                        # HiGHS found a plan before its first clock check
        assert result.status in (Status.TIME_LIMIT, Status.OPTIMAL)
        assert result.iteration_time >= reference - 1e-12 * reference


def test_a_time_limit_before_the_first_incumbent_gives_a_plan_not_a_traceback():
    # DenseNet-201 (V100 estimate, 64 workers on 100 Gb IB): HiGHS finds no plan in 1 us; the
    # result is the fewest-messages plan with TIME_LIMIT and says why.
    from fusionopt import zoo
    from fusionopt.cost import network
    from fusionopt.solvers import solve

    problem = Problem(zoo.profile("densenet201", device="v100"), network("100gb-ib", 64))
    result = solve(problem, "milp", time_limit=1e-6)
    assert str(result.status) == "TIME_LIMIT"
    assert result.stats["plan"].startswith("fewest messages within the caps")
    result.plan.validate(problem.profile)
    assert result.num_messages == 1                       # no cap: one message holds everything
