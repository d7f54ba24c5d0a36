"""Exact parameter-server methods: brute force, the two-direction DP and CP-SAT.

Hand-worked cases, the DP's exactness theorem (update_per_byte = 0) and its heuristic case,
CP-SAT against brute force on whole tensors and on unit grids (with partitioned compute),
the rounding claim of the CP-SAT model, anytime behaviour and bad input.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ps_strategies import parameter_servers, ps_problems
from strategies import times

from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import (
    Plan, Problem, Profile, simulate, ParameterServer, PSPlan, offsets_iteration_time, ps_lower_bound,
)
from fusionopt.solvers import Status, solve
from fusionopt.solvers.baselines import ps_default, ps_layer
from fusionopt.solvers.exact import MAX_BRUTE_CUTS, ps_brute, candidate_cuts, ps_units, PSGrid, ps_cpsat, ps_dp

MS = 1e-3
REL = 1e-9


def ms(value: float) -> float:
    return round(value / MS, 9)


def worked(sync: str = "layerwise", **options) -> Problem:
    # MODEL.md section 5's profile; push and pull both 1 ms + 1 ms/MB.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, pattern=ParameterServer(AlphaBeta(MS, 1e-9), **options), sync=sync)


def same(a: float, b: float, slack: float = 0.0) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b)) + slack + 1e-15


# ---------------------------------------------------------------------------- by hand
def test_worked_example_layerwise_all_three_agree():
    # Pushes (WFBP, the least first gate): t3 1 -> 4, t2 4 -> 6, t1 6 -> 11 ms.
    # Pull {t1, t2} 11 -> 17, {t3} 17 -> 20; forward t1 17 -> 18, t2 18 -> 19, t3 20 -> 21.
    # Per tensor (ps-layer): pulls end 16, 18, 21, T = 22; one pull: 11 -> 19, T = 22.
    problem = worked()
    for result in (ps_brute(problem), ps_dp(problem), ps_cpsat(problem, workers=1, hint=None)):
        assert result.plan.push.groups() == [[2], [1], [0]]
        assert result.plan.pull.groups() == [[0, 1], [2]]
        assert ms(result.iteration_time) == pytest.approx(21.0, abs=1e-6)
        assert result.status is Status.OPTIMAL
        assert ms(result.lower_bound) == pytest.approx(21.0, abs=1e-6)
        assert result.stats["space"].startswith("whole tensors")
    assert ms(ps_layer(problem).iteration_time) == 22.0
    assert ps_brute(problem).stats["plans"] == 16
    assert [ps_brute(problem).method, ps_dp(problem).method, ps_cpsat(problem).method] == \
        ["ps-brute", "ps-dp", "ps-cpsat"]


def test_worked_example_barrier():
    # Barrier: the forward waits for every pull, so one pull after WFBP pushes is best:
    # 11 -> 19 (1 + 7 ms), forward 19 -> 22 ms. The DP's relaxation: U_K = 11, tail 8 + 3.
    problem = worked("barrier")
    brute, dp = ps_brute(problem), ps_dp(problem)
    assert ms(brute.iteration_time) == 22.0 and brute.plan.pull.groups() == [[0, 1, 2]]
    assert ms(dp.iteration_time) == 22.0 and ms(dp.stats["relaxation_bound"]) == 22.0
    assert dp.stats["proved"] == "update_per_byte = 0"


def test_cutting_inside_tensors_pipelines_push_and_pull():
    # The worked example on a grid of 1 MB units: t1 pushed in two halves (6 -> 9, 9 -> 12),
    # its first half pulled 9 -> 12 while the second is pushed; pulls end 12, 16, 19 and the
    # forward at 20 ms, below the whole-tensor optimum of 21.
    problem = worked()
    grid = ps_brute(problem, granularity=250_000)
    assert ms(grid.iteration_time) == 20.0 and grid.stats["units"] == 7
    assert grid.stats["push_offsets"] == [2_000_000, 3_000_000, 5_000_000]
    assert grid.stats["pull_offsets"] == [2_000_000, 5_000_000]
    assert [ms(t) for t in grid.timeline.pull_end] == [12.0, 16.0, 19.0]
    cp = ps_cpsat(problem, workers=1, granularity=250_000)
    assert ms(cp.iteration_time) == pytest.approx(20.0, abs=1e-6) and cp.status is Status.OPTIMAL
    # The whole-tensor optimum is no bound for all plans: bound_all_plans is.
    assert ps_dp(problem).lower_bound > grid.iteration_time >= grid.stats["bound_all_plans"]


@pytest.mark.parametrize("partition, expected", [(False, 8.0), (True, 7.0)])
def test_one_tensor_in_two_halves(partition, expected):
    # One 4 MB tensor, b = f = 1 ms, push and pull 1 ms/MB, no latency. Whole: push 1 -> 5,
    # pull 5 -> 9, forward 9 -> 10 ms. Two halves: pushes 1 -> 3, 3 -> 5, pulls 3 -> 5, 5 -> 7,
    # forward 7 -> 8. With partitioned compute (delta 0) the backward halves end at 0.5 and 1:
    # pushes 0.5 -> 2.5 -> 4.5, pulls 2.5 -> 4.5 -> 6.5, forward halves 4.5 -> 5 and 6.5 -> 7.
    profile = Profile.from_arrays([4_000_000], [MS], [MS])
    problem = Problem(profile, pattern=ParameterServer(AlphaBeta(0.0, 1e-9), partition_compute=partition),
                      sync="layerwise")
    assert ms(ps_brute(problem).iteration_time) == 10.0
    assert ms(ps_dp(problem).iteration_time) == 10.0
    halves = ps_brute(problem, granularity=500_000)
    assert ms(halves.iteration_time) == expected
    assert halves.stats["push_offsets"] == [2_000_000] and halves.stats["pull_offsets"] == [2_000_000]
    assert ms(ps_cpsat(problem, granularity=500_000).iteration_time) == pytest.approx(expected, abs=1e-6)


def coupled_case() -> Problem:
    # Sizes 0.1, 2, 0.4, 6 MB; f 0, 0, 3, 2 ms; b 2, 0, 0, 3 ms (ready: t3, t2, t1 at 3, t0 at 5).
    # Push 0.2 ms + 0.5 ms/MB, pull 0.1 ms + 2 ms/MB, update 0.1 ms + 0.5 ms/MB; layerwise.
    profile = Profile.from_arrays([100_000, 2_000_000, 400_000, 6_000_000], [0, 0, 3 * MS, 2 * MS],
                                  [2 * MS, 0, 0, 3 * MS])
    ps = ParameterServer(AlphaBeta(0.2 * MS, 0.5e-9), AlphaBeta(0.1 * MS, 2e-9),
                         update_per_byte=0.5e-9, update_overhead=0.1 * MS)
    return Problem(profile, pattern=ps, sync="layerwise")


def test_the_alternation_alone_can_miss_and_enumeration_closes_the_gap():
    # Optimum (brute force): pushes {t3, t2} 3 -> 6.4 (updated 9.7), {t1} 6.4 -> 7.6 (8.7),
    # {t0} 7.6 -> 7.85 (8.0); pulls per tensor: t0 8.0 -> 8.3, t1 8.7 -> 12.8, t2 12.8 -> 13.7,
    # t3 13.7 -> 25.8; forward t0, t1 at 12.8, t2 13.7 -> 16.7, t3 25.8 -> 27.8 ms.
    # The relaxation: least first gate 7.8 ({t3, t2, t1}, {t0}), pulls {t0, t1, t2} 5.1 ms
    # then {t3} 12.1 ms: 7.8 + max(5.1 + 5, 17.2 + 2) = 27.0 ms; the {t3, t2} update binds.
    problem = coupled_case()
    brute = ps_brute(problem)
    assert ms(brute.iteration_time) == 27.8
    assert brute.plan.push.groups() == [[3, 2], [1], [0]] and brute.plan.pull.groups() == [[0], [1], [2], [3]]
    assert [ms(t) for t in brute.timeline.server_updated] == [9.7, 8.7, 8.0]
    local = ps_dp(problem, exhaustive_up_to=0)
    assert ms(local.iteration_time) == 27.9 and local.status is Status.FEASIBLE
    assert ms(local.stats["relaxation_bound"]) == 27.0 and ms(local.lower_bound) == 27.0
    assert local.stats["proved"] is None and local.gap == pytest.approx(0.9 / 27.0)
    exact = ps_dp(problem)
    assert ms(exact.iteration_time) == 27.8 and exact.status is Status.OPTIMAL
    assert exact.stats["proved"] == "every pull plan" and exact.stats["pull_plans"] == 8
    cp = ps_cpsat(problem, hint=local.plan)
    assert ms(cp.iteration_time) == pytest.approx(27.8, abs=1e-6) and cp.status is Status.OPTIMAL


# ---------------------------------------------------------------------------- properties
@settings(deadline=None, max_examples=60)
@given(ps_problems(1, 5))
def test_dp_is_exact_without_per_byte_updates_and_never_below_brute_force(problem):
    brute, dp = ps_brute(problem), ps_dp(problem, exhaustive_up_to=0)
    assert dp.iteration_time >= brute.iteration_time * (1 - REL) - 1e-15
    assert dp.lower_bound <= brute.iteration_time * (1 + REL) + 1e-15
    assert dp.stats["relaxation_bound"] <= brute.iteration_time * (1 + REL) + 1e-15
    if problem.pattern.update_per_byte == 0.0:
        assert dp.stats["proved"] == "update_per_byte = 0"
    if dp.stats["proved"] is not None:
        assert dp.status is Status.OPTIMAL and same(dp.iteration_time, brute.iteration_time)
    assert dp.iteration_time <= min(ps_default(problem).iteration_time, ps_layer(problem).iteration_time) * (1 + REL)
    # With enumeration (n <= 10) the DP is exact for every update cost.
    full = ps_dp(problem)
    assert full.status is Status.OPTIMAL and same(full.iteration_time, brute.iteration_time)


@settings(deadline=None, max_examples=40)
@given(ps_problems(1, 5), st.sampled_from([None, "best-baseline", "ps-layer"]), st.integers(1, 2))
def test_cpsat_matches_brute_force_on_whole_tensors(problem, hint, workers):
    brute = ps_brute(problem)
    cp = ps_cpsat(problem, hint=hint, workers=workers)
    rounding = cp.stats["rounding_bound"]
    assert cp.status is Status.OPTIMAL and cp.stats["cpsat_status"] == "OPTIMAL"
    assert brute.iteration_time * (1 - REL) - 1e-15 <= cp.iteration_time <= brute.iteration_time + rounding + 1e-15
    assert cp.stats["bound"] <= brute.iteration_time * (1 + REL) + 1e-15
    assert cp.lower_bound <= brute.iteration_time * (1 + REL) + 1e-15


@st.composite
def grid_problems(draw):
    """Tiny problems whose tensors span 1-3 units of 1-2 parameters (at most 6 units)."""
    n = draw(st.integers(1, 3))
    unit = draw(st.integers(1, 2))
    counts = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n).filter(lambda c: sum(c) <= 6))
    sizes = [4 * unit * c - draw(st.integers(0, 3)) for c in counts]
    profile = Profile.from_arrays(sizes, draw(st.lists(times, min_size=n, max_size=n)),
                                  draw(st.lists(times, min_size=n, max_size=n)),
                                  update=draw(st.lists(times, min_size=n, max_size=n)) if draw(st.booleans()) else None)
    per_byte = st.builds(AlphaBeta, alpha=st.one_of(st.just(0.0), st.floats(1e-7, 5e-3)),
                         beta=st.one_of(st.just(0.0), st.floats(1e-6, 1e-3)))
    ps = draw(parameter_servers(cost=per_byte))
    return Problem(profile, pattern=ps, sync=draw(st.sampled_from(["barrier", "layerwise"]))), unit


@settings(deadline=None, max_examples=40)
@given(grid_problems())
def test_cpsat_matches_brute_force_on_unit_grids(case):
    problem, unit = case
    brute = ps_brute(problem, granularity=unit)
    cp = ps_cpsat(problem, granularity=unit, workers=2)
    rounding = cp.stats["rounding_bound"]
    assert cp.status is Status.OPTIMAL
    assert brute.iteration_time * (1 - REL) - 1e-15 <= cp.iteration_time <= brute.iteration_time + rounding + 1e-15
    assert cp.lower_bound <= brute.iteration_time * (1 + REL) + 1e-15
    # The grid holds every whole-tensor plan.
    assert brute.iteration_time <= ps_brute(problem).iteration_time * (1 + REL)


@settings(deadline=None, max_examples=60)
@given(grid_problems(), st.data())
def test_cpsat_rounding_claim(case, data):
    # For any plan of the space: q * (least integer T) <= T < q * (least T) + rounding bound.
    problem, unit = case
    units = ps_units(problem, unit)
    grid = PSGrid(problem, units)
    q = data.draw(st.sampled_from([2.0 ** -20, 2.0 ** -14, 2.0 ** -9]))
    push = sorted(data.draw(st.sets(st.sampled_from(candidate_cuts(problem, units, "push")))) if len(units) > 1 else [])
    pull = sorted(data.draw(st.sets(st.sampled_from(candidate_cuts(problem, units, "pull")))) if len(units) > 1 else [])
    true = offsets_iteration_time(problem, push, pull)
    # A horizon this plan fits in, as the anchor plan's does in ps_cpsat: none of its constants capped.
    constants = grid.constants(q, math.floor(true / q) + 1)
    nodes = ([int(np.searchsorted(grid.push_prefix, x)) for x in push],
             [int(np.searchsorted(grid.pull_prefix, x)) for x in pull])
    least = grid.least_values(constants, *nodes)["T"]
    assert least * q <= true * (1 + 1e-12)
    assert true < (least + grid.rounding_factor) * q
    assert grid.plan_of(*nodes) == PSPlan.from_offsets(problem.profile, push, pull)


# ---------------------------------------------------------------------------- larger cases
def bert_prefix(n: int, sync: str, update_per_byte: float) -> Problem:
    import fusionopt.zoo

    base = fusionopt.zoo.profile("bert-base", device="h100", batch=64)
    keep = slice(base.n - n, base.n)
    profile = Profile.from_arrays(base.sizes[keep], base.forward[keep], base.backward[keep], base.names[keep])
    ps = ParameterServer.from_network("10gbe", 16, 16, colocated=True, update_per_byte=update_per_byte,
                                      update_overhead=1e-5)
    return Problem(profile, pattern=ps, sync=sync)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_dp_on_a_whole_model(sync):
    # All of BERT-base's tensors: exact by the theorem without per-byte updates; with a slow
    # server update it stays at least as good as both baselines and reports its gap.
    exact = ps_dp(bert_prefix(199, sync, 0.0))
    assert exact.status is Status.OPTIMAL and exact.gap == 0.0
    problem = bert_prefix(199, sync, 1e-9)
    result = ps_dp(problem)
    assert result.iteration_time <= min(ps_default(problem).iteration_time, ps_layer(problem).iteration_time)
    assert result.lower_bound >= max(result.stats["relaxation_bound"], ps_lower_bound(problem)) * (1 - REL)
    assert (result.status is Status.OPTIMAL) == (result.stats["proved"] is not None)


def test_cpsat_confirms_the_dp_where_the_dp_cannot_prove():
    # 12 tensors with a slow server update: the relaxation is not met, and without
    # enumeration the DP cannot prove its plan; CP-SAT proves it optimal.
    problem = bert_prefix(12, "barrier", 1e-9)
    dp = ps_dp(problem, exhaustive_up_to=0)
    assert dp.stats["proved"] is None
    cp = ps_cpsat(problem, hint=dp.plan)
    assert cp.status is Status.OPTIMAL
    assert cp.iteration_time <= dp.iteration_time
    assert dp.iteration_time <= cp.iteration_time + cp.stats["rounding_bound"]


def test_cpsat_is_anytime():
    problem = bert_prefix(40, "layerwise", 1e-9)
    layer = ps_layer(problem).iteration_time
    result = ps_cpsat(problem, time_limit=0.05, hint="ps-layer")
    assert result.status in (Status.TIME_LIMIT, Status.OPTIMAL)
    assert result.iteration_time <= layer
    assert result.lower_bound <= result.iteration_time
    assert result.stats["hint"] == "ps-layer" and result.stats["hint_used"]


# ---------------------------------------------------------------------------- bad input
def test_brute_force_refuses_large_spaces():
    problem = bert_prefix(MAX_BRUTE_CUTS // 2 + 2, "barrier", 0.0)
    with pytest.raises(ValueError, match=r"ps-brute enumerates 2\^18 plans \(9 push and 9 pull cut points: "
                                         r"n = 10 tensors, 10 units\) and refuses more than 2\^16"):
        ps_brute(problem)
    with pytest.raises(ValueError, match=r"2\^18 plans \(9 push and 9 pull cut points: n = 3 tensors, 10 units\)"):
        ps_brute(worked(), granularity=200_000)          # 800 kB units: 5 + 2 + 3


@pytest.mark.parametrize("granularity", ["layer", 0, -2, 1.5, True])
def test_bad_granularity(granularity):
    with pytest.raises(ValueError, match="granularity must be 'tensor' or an integer >= 1"):
        ps_brute(worked(), granularity=granularity)
    with pytest.raises(ValueError, match="granularity must be 'tensor' or an integer >= 1"):
        ps_cpsat(worked(), granularity=granularity)


@pytest.mark.parametrize("limit", [0, -1.0, math.nan, math.inf, "10"])
def test_bad_time_limit(limit):
    with pytest.raises(ValueError, match="time_limit must be"):
        ps_cpsat(worked(), time_limit=limit)


def test_other_bad_options():
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        ps_cpsat(worked(), workers=0)
    with pytest.raises(ValueError, match="more than max_units = 4"):
        ps_cpsat(worked(), granularity=250_000, max_units=4)
    with pytest.raises(ValueError, match="max_rounds must be an integer >= 0, got -1"):
        ps_dp(worked(), max_rounds=-1)
    with pytest.raises(ValueError, match="exhaustive_up_to must be an integer >= 0, got 2.5"):
        ps_dp(worked(), exhaustive_up_to=2.5)
    with pytest.raises(ValueError, match="^hint 'ps-cpsat' would solve the problem with ps-cpsat to hint ps-cpsat"):
        ps_cpsat(worked(), hint="ps-cpsat")
    with pytest.raises(ValueError, match="hint must be 'best-baseline', a method name, a PSPlan or None; got int"):
        ps_cpsat(worked(), hint=3)
    with pytest.raises(ValueError, match="time_quantum must be positive"):
        ps_cpsat(worked(), time_quantum=0.0)


def test_a_hint_outside_the_space_is_named():
    problem = worked()
    profile = problem.profile
    # Pushing in forward order is a valid plan, but not one of the space.
    forward_push = PSPlan.from_groups(profile, push=[[0], [1], [2]], pull=[[0], [1], [2]])
    with pytest.raises(ValueError, match="hint: not a plan of the space"):
        ps_cpsat(problem, hint=forward_push)
    off_grid = PSPlan.from_offsets(profile, push=[1_500_000], pull=[])
    with pytest.raises(ValueError, match="hint: its push messages do not end on unit boundaries of the grid"):
        ps_cpsat(problem, hint=off_grid)
    # The same plan lies on a grid of 500,000-byte units.
    result = ps_cpsat(problem, hint=off_grid, granularity=125_000, max_units=14, time_limit=5)
    assert result.stats["hint"] == "plan"


@pytest.mark.parametrize("method", [ps_brute, ps_dp, ps_cpsat])
def test_all_reduce_problems_are_refused(method):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    name = method.__name__.replace("_", "-")
    with pytest.raises(ValueError, match=f"{name} needs a parameter-server problem"):
        method(Problem(profile, AlphaBeta(MS, 1e-9)))
    with pytest.raises(ValueError, match="problem must be a Problem, got Profile"):
        method(profile)


def test_piecewise_costs_are_fine():
    # The DPs take any cost model; brute force agrees.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    push = PiecewiseLinear([1e6, 2e6, 4e6], [2 * MS, 2.5 * MS, 5 * MS])
    problem = Problem(profile, pattern=ParameterServer(push, AlphaBeta(0.5 * MS, 1e-9)), sync="layerwise")
    brute = ps_brute(problem)
    assert same(ps_dp(problem).iteration_time, brute.iteration_time)
    cp = ps_cpsat(problem)
    assert brute.iteration_time <= cp.iteration_time <= brute.iteration_time + cp.stats["rounding_bound"]
    assert simulate(problem, brute.plan).iteration_time == brute.iteration_time
    assert isinstance(brute.plan.push, Plan)


def test_cpsat_with_a_zero_time_anchor_caps_its_constants():
    # Found by hypothesis: every time 0 but the piece overhead, so the anchor plan takes 0 s,
    # the automatic quantum is the smallest one and delta / q was 2.5e27, past CP-SAT's 64-bit
    # integers. Constants are now capped just past the horizon; the optimum is still 0.
    profile = Profile.from_arrays([8], [0.0], [0.0])
    ps = ParameterServer(push=AlphaBeta(0.0, 0.0), pull=AlphaBeta(0.0, 0.0), partition_compute=True,
                         delta=2.0 ** -9)
    problem = Problem(profile, pattern=ps)
    result = solve(problem, "ps-cpsat", granularity=1)
    assert result.iteration_time == solve(problem, "ps-brute", granularity=1).iteration_time == 0.0
    assert result.status == Status.OPTIMAL
