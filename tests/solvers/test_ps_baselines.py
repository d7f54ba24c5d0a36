"""Parameter-server baselines (ps-default, ps-layer) and the result path of their plans."""

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ps_strategies import ps_problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate, ParameterServer, PSPlan, ps_lower_bound
from fusionopt.solvers import Status
from fusionopt.solvers.baselines import wfbp, ps_default, ps_layer
from fusionopt.solvers import finish

MS = 1e-3
REL = 1e-9


def worked_profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])


def worked_server(**options) -> ParameterServer:
    # push 1 ms + 1 ms/MB; pull 0.5 ms + 0.5 ms/MB; update 0.1 ms/MB.
    return ParameterServer(AlphaBeta(MS, 1e-9), AlphaBeta(0.5 * MS, 0.5e-9), update_per_byte=1e-10, **options)


def ms(values):
    return [round(float(v) / MS, 9) for v in values]


def test_ps_default_by_hand():
    # Push 7 MB at 6 ms: 6 -> 14; update 0.7 ms: 14.7; pull 14.7 -> 18.7; forward 18.7 -> 21.7.
    for sync in ("barrier", "layerwise"):
        r = ps_default(Problem(worked_profile(), sync=sync, pattern=worked_server()))
        assert r.plan.push.groups() == [[2, 1, 0]] and r.plan.pull.groups() == [[0, 1, 2]]
        assert ms(r.timeline.message_end) == [14.0] and ms(r.timeline.pull_end) == [18.7]
        assert round(r.iteration_time / MS, 9) == 21.7
        assert r.method == "ps-default" and r.num_messages == 2


def test_ps_layer_by_hand():
    # Pushes (WFBP): t3 1 -> 4, t2 4 -> 6, t1 6 -> 11; updated 4.2, 6.1, 11.4.
    # Pulls in forward order: t1 11.4 -> 13.9, t2 13.9 -> 14.9, t3 14.9 -> 16.4.
    # Layerwise forward: t1 13.9 -> 14.9, t2 14.9 -> 15.9, t3 16.4 -> 17.4. Barrier: 16.4 + 3.
    problem = Problem(worked_profile(), sync="layerwise", pattern=worked_server())
    r = ps_layer(problem)
    t = r.timeline
    assert r.plan.push.groups() == [[2], [1], [0]] and r.plan.pull.groups() == [[0], [1], [2]]
    assert ms(t.message_end) == [4.0, 6.0, 11.0]
    assert ms(t.server_updated) == [4.2, 6.1, 11.4]
    assert ms(t.pull_end) == [13.9, 14.9, 16.4]
    assert ms(t.forward_start) == [13.9, 14.9, 16.4]
    assert round(r.iteration_time / MS, 9) == 17.4
    assert round(ps_layer(Problem(worked_profile(), pattern=worked_server())).iteration_time / MS, 9) == 19.4
    # Layer by layer beats the default here: 17.4 < 21.7.
    assert r.iteration_time < ps_default(problem).iteration_time
    assert r.lower_bound <= r.iteration_time and r.status in (Status.FEASIBLE, Status.OPTIMAL)


@given(problem=ps_problems())
def test_ps_default_closed_form(problem):
    # T = B + c_push(total) + update(total) + c_pull(total) + U + F: nothing overlaps.
    profile, ps = problem.profile, problem.pattern
    total = profile.total_bytes
    expected = (profile.B + float(problem.cost(total)) + ps.server_update(total) + float(ps.pull(total))
                + profile.U + profile.F)
    r = ps_default(problem)
    assert r.iteration_time == pytest.approx(expected, rel=REL)
    assert r.timeline.compute_overhead == 0.0
    assert r.lower_bound <= r.iteration_time


@given(problem=ps_problems())
def test_ps_layer_pushes_like_wfbp_and_never_splits_compute(problem):
    r = ps_layer(problem)
    # The parameter-server model pushes in reverse forward order, whatever the ready order.
    plain = problem.plain()
    reverse = plain.profile.with_orders(ready_order=range(plain.profile.n - 1, -1, -1))
    allreduce = wfbp(Problem(reverse, plain.cost, sync=plain.sync)).timeline
    assert np.allclose(r.timeline.message_end, allreduce.message_end, rtol=REL)
    assert r.timeline.compute_overhead == 0.0
    assert r.iteration_time == simulate(problem, r.plan).iteration_time
    assert r.lower_bound <= r.iteration_time * (1 + REL)


def test_ps_methods_need_a_parameter_server():
    problem = Problem(worked_profile(), AlphaBeta(MS, 1e-9))
    with pytest.raises(ValueError, match=r"ps-default needs a parameter-server problem: Problem\(profile, "
                                         r"pattern=ParameterServer\(...\)\)"):
        ps_default(problem)
    with pytest.raises(ValueError, match="ps-layer needs a parameter-server problem"):
        ps_layer(problem)
    # And all-reduce methods refuse a parameter-server problem when their plan is simulated.
    with pytest.raises(ValueError, match="needs a PSPlan"):
        wfbp(Problem(worked_profile(), pattern=worked_server()))


def test_finish_checks_the_claims_of_a_ps_method():
    profile = worked_profile()
    problem = Problem(profile, sync="layerwise", pattern=worked_server())
    plan = PSPlan.from_offsets(profile)
    with pytest.raises(AssertionError, match="claims an optimum"):
        finish(problem, plan, "liar", time.perf_counter(), lower_bound=ps_lower_bound(problem), optimal=True)
    with pytest.raises(AssertionError, match="below the proven bound"):
        finish(problem, plan, "liar", time.perf_counter(), lower_bound=1.0)
    with pytest.raises(ValueError, match="needs a PSPlan"):
        finish(problem, Plan.per_tensor(profile), "confused", time.perf_counter())
    r = finish(problem, plan, "mine", time.perf_counter(), stats={"note": 1})
    assert r.stats["note"] == 1 and r.gap == pytest.approx((r.iteration_time - r.lower_bound) / r.lower_bound)


def test_default_ps_on_one_tensor_meets_the_bound():
    # One tensor and startup-only costs: no plan beats one push and one pull, and the
    # last-chunk bound (B, a byte pushed, updated and pulled, then U + F) is tight:
    # 2 + 1 + 0.5 + 1 = 4.5 ms.
    profile = Profile.from_arrays([1e6], [MS], [2 * MS])
    ps = ParameterServer(AlphaBeta(MS, 0.0), AlphaBeta(0.5 * MS, 0.0))
    r = ps_default(Problem(profile, pattern=ps))
    assert round(r.iteration_time / MS, 9) == 4.5
    assert r.status == Status.OPTIMAL and r.gap == 0.0
    # With bandwidth terms the bound is not tight (pipelining chunks could pay off).
    assert ps_default(Problem(profile, pattern=worked_server())).status == Status.FEASIBLE


@given(delta=st.floats(0.0, 1e-3))
def test_partitioned_compute_is_moot_for_the_baselines(delta):
    profile = worked_profile()
    plain = Problem(profile, sync="layerwise", pattern=worked_server())
    split = Problem(profile, sync="layerwise", pattern=worked_server(partition_compute=True, delta=delta))
    for method in (ps_default, ps_layer):
        assert method(split).iteration_time == method(plain).iteration_time


def test_the_registry_keeps_parameter_server_and_all_reduce_methods_apart():
    from fusionopt.model import score_cuts
    from fusionopt.solvers import compare, solve, default_methods

    problem = Problem(worked_profile(), sync="layerwise", pattern=worked_server())
    assert default_methods(problem) == ["ps-default", "ps-layer", "ibatch", "ipart", "ps-dp"]
    rows = {row.method: row for row in compare(problem)}
    # Speedups are over ps-default on a parameter server: 21.7 / 17.4 ms (hand values above).
    assert rows["ps-default"].speedup == 1.0
    assert rows["ps-layer"].speedup == pytest.approx(21.7 / 17.4, rel=1e-9)
    with pytest.raises(ValueError, match=r"method 'wfbp' is an all-reduce method and this problem is a "
                                         r"parameter-server problem \(pattern=ParameterServer\(\.\.\.\)\); methods for it: ps-default, ps-layer, ibatch, ipart, ps-brute, ps-dp, ps-cpsat"):
        solve(problem, "wfbp")
    with pytest.raises(ValueError, match=r"method 'ps-layer' is a parameter-server method and this problem "
                                         r"is an all-reduce problem"):
        solve(Problem(worked_profile(), AlphaBeta(MS, 1e-9)), "ps-layer")
    assert "ps-default" not in default_methods(Problem(worked_profile(), AlphaBeta(MS, 1e-9)))
    with pytest.raises(ValueError, match="score_cuts times all-reduce fusion plans; this problem is a parameter-server problem"):
        score_cuts(problem, np.ones((1, 2), dtype=bool))
