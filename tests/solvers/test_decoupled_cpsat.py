"""decoupled-cpsat: the decoupled all-reduce's optimum over both groupings and their interleaving,
or, with ``interleave=False``, over both groupings with every reduce-scatter first."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, costs, profiles, times

from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, DecoupledPlan, Plan, Problem, Profile, decoupled_lower_bound, simulate
from fusionopt.solvers import solve

pytest.importorskip("ortools")

from fusionopt.solvers.exact import MAX_TENSORS_SEQUENTIAL, SPACE_SEQUENTIAL, DecoupledSpace  # noqa: E402

MS = 1e-3
BUDGET = {"workers": 1, "deterministic_time": 5.0, "time_limit": 60.0}


def groupings(sequence):
    for cuts in itertools.product((False, True), repeat=len(sequence) - 1):
        groups = [[sequence[0]]]
        for i, cut in zip(sequence[1:], cuts):
            if cut:
                groups.append([])
            groups[-1].append(i)
        yield groups


def every_plan(profile):
    """Every plan of the space: both groupings and every interleaving the simulator runs."""
    for rs in groupings(list(profile.ready_order)):
        for ag in groupings(list(range(profile.n))):
            m = len(rs) + len(ag)
            for places in itertools.combinations(range(m), len(rs)):
                order = [1] * m
                for k in places:
                    order[k] = 0
                yield DecoupledPlan.from_groups(profile, rs, ag, order=order)


def exhaustive(problem):
    best = math.inf
    for plan in every_plan(problem.profile):
        try:
            best = min(best, simulate(problem, plan).iteration_time)
        except ValueError:                    # an all-gather queued before its reduce-scatter
            continue
    return best


@st.composite
def tied_profiles(draw, max_n):
    """Profiles whose first tensors may all be ready at ``B`` in a shuffled ready order (where
    an interleaving can pay), with or without update times."""
    n = draw(st.integers(1, max_n))
    backward = draw(st.lists(times, min_size=n, max_size=n))
    tied = draw(st.integers(0, n - 1))
    backward[:tied] = [0.0] * tied                        # tensors 0..tied ready at B together
    update = draw(st.one_of(st.none(), st.lists(times, min_size=n, max_size=n)))
    profile = Profile.from_arrays(draw(st.lists(st.integers(1, 10_000_000), min_size=n, max_size=n)),
                                  draw(st.lists(times, min_size=n, max_size=n)), backward, update=update)
    ready = profile.ready_times
    order, run = [], []
    for i in range(n - 1, -1, -1):
        if run and ready[i] != ready[run[0]]:
            order.extend(draw(st.permutations(run)))
            run = []
        run.append(i)
    order.extend(draw(st.permutations(run)))
    return profile.with_orders(ready_order=order)


def decoupled(profile, rs, ag, sync, after):
    return Problem(profile, pattern=Decoupled(rs, ag, update_after_gather=after), sync=sync)


# The hand-worked case of the docstring: tensors of 1 and 3 MB ready at 0 (tensor 0 first),
# forwards of 10 and 1 ms, halves of 1 ms + 1 ns/B, DeAR's semantics, layerwise sync.
HAND = Profile.from_arrays([1e6, 3e6], [10 * MS, MS], [0.0, 0.0], ready_order=[0, 1])
HALF = AlphaBeta(MS, 1e-9)


def test_an_interleaved_order_beats_every_reduce_scatter_first_by_hand():
    problem = decoupled(HAND, HALF, HALF, "layerwise", True)
    result = solve(problem, "decoupled-cpsat", **BUDGET)
    # RS {t0} 0-2, AG {t0} 2-4, RS {t1} 4-8, AG {t1} 8-12; forwards 4-14 and 14-15 ms.
    assert round(result.iteration_time / MS, 6) == 15 and str(result.status) == "OPTIMAL"
    assert result.plan.order.tolist() == [0, 1, 0, 1] and result.stats["interleaved"]
    assert result.plan.reduce_scatter.groups() == [[0], [1]] and result.plan.all_gather.groups() == [[0], [1]]
    assert (result.timeline.forward_start / MS).round(6).tolist() == [4, 14]
    # Every reduce-scatter first, the best is 18 ms: RS {t0, t1} 0-5, AG 5-7 and 7-11, forwards 7-17, 17-18.
    brute = solve(problem, "decoupled-brute")
    assert round(brute.iteration_time / MS, 6) == 18
    assert brute.plan.reduce_scatter.groups() == [[0, 1]] and brute.plan.all_gather.groups() == [[0], [1]]
    assert round(exhaustive(problem) / MS, 6) == 15
    # Updating before the gathers (ZeRO), the forward waits for the last update: no gain.
    zero = decoupled(HAND, HALF, HALF, "layerwise", False)
    assert solve(zero, "decoupled-cpsat", **BUDGET).iteration_time == pytest.approx(
        solve(zero, "decoupled-brute").iteration_time, rel=1e-9)


def test_the_default_ready_order_leaves_only_every_reduce_scatter_first():
    # Tensor 0 is the last gradient: the first all-gather (which holds it) waits for the last
    # reduce-scatter, so every order the simulator runs puts the reduce-scatters first.
    profile = Profile.from_arrays([1e6, 3e6], [10 * MS, MS], [0.0, 0.0])
    problem = decoupled(profile, HALF, HALF, "layerwise", True)
    runnable = []
    for plan in every_plan(profile):
        try:
            simulate(problem, plan)
        except ValueError as exc:
            assert "can never run it" in str(exc)
            continue
        runnable.append(plan.order.tolist())
    assert all(order == sorted(order) for order in runnable)
    assert not solve(problem, "decoupled-cpsat", **BUDGET).stats["interleaved"]


cases = st.tuples(st.one_of(tied_profiles(3), profiles(max_n=3)), alpha_beta, alpha_beta,
                  st.sampled_from(["barrier", "layerwise"]), st.booleans())


@settings(deadline=None, max_examples=60)
@given(cases)
def test_equals_the_exhaustive_search_over_groupings_and_interleavings(case):
    profile, rs, ag, sync, after = case
    problem = decoupled(profile, rs, ag, sync, after)
    result = solve(problem, "decoupled-cpsat", hint=None, **BUDGET)
    best = exhaustive(problem)
    assert str(result.status) == "OPTIMAL"
    assert abs(result.iteration_time - best) <= result.stats["rounding_bound"] + 1e-12 * best
    assert result.lower_bound <= best * (1 + 1e-12) + 1e-15


@settings(deadline=None, max_examples=30)
@given(st.tuples(st.one_of(tied_profiles(5), profiles(max_n=5)), alpha_beta, alpha_beta,
                 st.sampled_from(["barrier", "layerwise"]), st.booleans()))
def test_contains_brute_force_and_is_proved_within_a_deterministic_budget(case):
    profile, rs, ag, sync, after = case
    problem = decoupled(profile, rs, ag, sync, after)
    result = solve(problem, "decoupled-cpsat", hint=None, **BUDGET)
    brute = solve(problem, "decoupled-brute")
    assert str(result.status) == "OPTIMAL" and result.stats["cpsat_status"] == "OPTIMAL"
    assert result.iteration_time <= brute.iteration_time + result.stats["rounding_bound"] + 1e-12 * brute.iteration_time
    assert result.iteration_time >= decoupled_lower_bound(problem) * (1 - 1e-12) - 1e-15
    assert result.lower_bound <= brute.iteration_time * (1 + 1e-12) + 1e-15
    # With brute force's plan as the hint, never slower than it at all.
    assert solve(problem, "decoupled-cpsat", hint=brute.plan, **BUDGET).iteration_time <= brute.iteration_time


@settings(deadline=None, max_examples=30)
@given(st.one_of(tied_profiles(4), profiles(max_n=4)), alpha_beta, alpha_beta,
       st.sampled_from(["barrier", "layerwise"]), st.booleans(), st.data())
def test_rounded_recursion_brackets_the_simulation(profile, rs, ag, sync, after, data):
    # A plan's least integer T, times q, is at most its simulated T and short of it by
    # less than the stated rounding bound: the claim the bound and OPTIMAL rest on.
    problem = decoupled(profile, rs, ag, sync, after)
    plans = []
    for plan in every_plan(profile):
        try:
            plans.append((plan, simulate(problem, plan).iteration_time))
        except ValueError:
            continue
    plan, t = data.draw(st.sampled_from(plans))
    space = DecoupledSpace(problem)
    q = data.draw(st.sampled_from([1e-9, 1e-6, 2.0 ** -14]))
    horizon = math.floor(t / q) + 1
    values = space.least_values(space.constants(q, horizon), *space.arcs_of(plan), plan.order.tolist())
    assert values["T"] * q <= t * (1 + 1e-12)
    assert t - values["T"] * q < space.rounding_factor * q * (1 + 1e-9) + 1e-12 * t


def test_options_hints_and_refusals():
    problem = decoupled(HAND, HALF, HALF, "layerwise", True)
    with pytest.raises(ValueError, match=r"^decoupled-cpsat, interleaving reduce-scatters and all-gathers \(the "
                                         r"default\), models n \(n \+ 1\) optional messages on one channel and "
                                         r"takes n <= 10, and this problem has n = 11: interleave=False \(every "
                                         r"reduce-scatter first\) takes n <= 40$"):
        solve(decoupled(Profile.from_arrays([8] * 11, [MS] * 11, [MS] * 11), HALF, HALF, "barrier", False),
              "decoupled-cpsat")
    with pytest.raises(ValueError, match="^hint .decoupled-cpsat. would solve the problem with decoupled-cpsat to hint decoupled-cpsat"):
        solve(problem, "decoupled-cpsat", hint="decoupled-cpsat")
    released = DecoupledPlan(Plan.from_groups(HAND, [[0], [1]]), Plan.from_groups(HAND, [[0, 1]], release=[MS]))
    with pytest.raises(ValueError, match="^hint: not a plan of the space: it splits tensors, has release times"):
        solve(problem, "decoupled-cpsat", hint=released)
    with pytest.raises(ValueError, match="^hint: not a plan of the space: its all-gathers"):
        solve(problem, "decoupled-cpsat", hint=DecoupledPlan.from_groups(HAND, [[0], [1]], [[1], [0]]))
    with pytest.raises(ValueError, match="outside the space"):
        solve(problem, "decoupled-cpsat", hint="dear")                   # its gathers have release times
    with pytest.raises(ValueError, match="^workers must be an integer >= 1"):
        solve(problem, "decoupled-cpsat", workers=0)
    with pytest.raises(ValueError, match="^deterministic_time must be a positive"):
        solve(problem, "decoupled-cpsat", deterministic_time=0)
    interleaved = DecoupledPlan.from_groups(HAND, [[0], [1]], [[0], [1]], order=[0, 1, 0, 1])
    result = solve(problem, "decoupled-cpsat", hint=interleaved, **BUDGET)
    assert result.stats["hint"] == "plan" and result.stats["hint_used"]
    assert round(result.iteration_time / MS, 6) == 15
    assert solve(problem, "decoupled-cpsat", hint="decoupled-wfbp", **BUDGET).stats["hint"] == "decoupled-wfbp"


def test_a_deterministic_budget_reproduces_and_a_tiny_one_stops_early():
    from fusionopt import zoo

    profile = zoo.profile("resnet18", device="h100", batch=32).tail(10, name="")
    problem = Problem(profile, pattern=Decoupled.from_network("10gbe", 8, update_after_gather=True), sync="layerwise")
    stopped = solve(problem, "decoupled-cpsat", hint=None, workers=1, deterministic_time=1e-3)
    assert str(stopped.status) == "TIME_LIMIT" and stopped.stats["plan_source"] == "reference"
    first = solve(problem, "decoupled-cpsat", workers=2, deterministic_time=0.05)
    again = solve(problem, "decoupled-cpsat", workers=2, deterministic_time=0.05)
    assert first.plan == again.plan and first.stats["deterministic_time"] == again.stats["deterministic_time"]


# ---------------------------------------------------------------------- interleave=False

def sequential(problem, **options):
    return solve(problem, "decoupled-cpsat", interleave=False, **{**BUDGET, **options})


def assert_resimulates(problem, result):
    again = simulate(problem, result.plan).iteration_time
    assert again == pytest.approx(result.iteration_time, rel=1e-12, abs=1e-15)


def within_rounding(result, value):
    return abs(result.iteration_time - value) <= result.stats["rounding_bound"] + 1e-12 * value


@settings(deadline=None, max_examples=40)
@given(st.tuples(st.one_of(tied_profiles(4), profiles(max_n=4)), costs, costs,
                 st.sampled_from(["barrier", "layerwise"]), st.booleans()))
def test_without_interleaving_equals_brute_force_and_never_beats_the_interleaved_optimum(case):
    profile, rs, ag, sync, after = case
    problem = decoupled(profile, rs, ag, sync, after)
    result = sequential(problem, hint=None)
    brute = solve(problem, "decoupled-brute")
    assert str(result.status) == "OPTIMAL" and result.stats["cpsat_status"] == "OPTIMAL"
    assert within_rounding(result, brute.iteration_time)
    assert result.lower_bound <= brute.iteration_time * (1 + 1e-12) + 1e-15
    assert result.stats["space"] == SPACE_SEQUENTIAL and result.stats["intervals"] == 0
    assert result.plan.order.tolist() == sorted(result.plan.order.tolist())
    assert_resimulates(problem, result)
    # Its space is part of interleave=True's: never faster than that optimum, to its rounding.
    interleaved = solve(problem, "decoupled-cpsat", hint=None, **BUDGET)
    assert result.iteration_time >= interleaved.iteration_time - interleaved.stats["rounding_bound"] \
        - 1e-12 * interleaved.iteration_time
    # With the default hint (and the separated plan when tensor 0 is last): the same optimum.
    hinted = sequential(problem)
    assert within_rounding(hinted, brute.iteration_time) and str(hinted.status) == "OPTIMAL"
    assert hinted.stats["structure"] == ("none" if profile.ready_order[-1] != 0 else hinted.stats["structure"])
    assert_resimulates(problem, hinted)


@settings(deadline=None, max_examples=12)
@given(profiles(max_n=12, with_updates=False), costs, costs, st.booleans())
def test_without_interleaving_equals_the_separable_dp_beyond_brute_force(profile, rs, ag, after):
    # Barrier sync without update time: decoupled-dp is exact at any n (E, then every gather).
    problem = decoupled(profile, rs, ag, "barrier", after)
    result = sequential(problem)
    dp = solve(problem, "decoupled-dp")
    assert str(result.status) == "OPTIMAL"
    assert within_rounding(result, dp.iteration_time)
    assert_resimulates(problem, result)


def all_groupings_times(problem):
    """By enumeration and MODEL.md 8.1's rules (not the solver's code), with tensor 0 last in
    the ready order and every reduce-scatter first: the least start of the first all-gather
    (``V_n``, or ``E_n`` with update_after_gather) over every reduce-scatter grouping, and the
    least time from it to ``T`` over every all-gather grouping run back to back, each with
    its grouping."""
    profile, halves = problem.profile, problem.pattern
    ready, order = profile.ready_times, list(profile.ready_order)
    assert order[-1] == 0
    after = halves.update_after_gather
    best_start = (math.inf, None)
    for groups in groupings(order):
        end, done = 0.0, {}
        for g in groups:
            end = max(end, max(ready[i] for i in g)) + halves.reduce_scatter.of_sizes(
                np.array([float(sum(profile.sizes[i] for i in g))]))[0]
            done.update({i: end for i in g})
        update = profile.B
        for i in order:
            update = max(update, done[i]) + profile.update[i]
        best_start = min(best_start, (end if after else update, groups), key=lambda pair: pair[0])
    work = profile.forward + (profile.update if after else 0.0)
    best_rest = (math.inf, None)
    for groups in groupings(list(range(profile.n))):
        gathered, worst = 0.0, 0.0
        for g in groups:
            gathered += halves.all_gather.of_sizes(np.array([float(sum(profile.sizes[i] for i in g))]))[0]
            worst = max(worst, gathered + float(work[g[0]:].sum()))
        rest = (worst if problem.sync == "layerwise" else gathered + float(work.sum())) + profile.W
        best_rest = min(best_rest, (rest, groups), key=lambda pair: pair[0])
    return best_start, best_rest


@st.composite
def tensor_zero_last(draw, min_n, max_n):
    """Profiles whose tensor 0 takes backward time, so its gradient is the last one ready."""
    n = draw(st.integers(min_n, max_n))
    backward = [draw(st.floats(1e-6, 1e-2))] + draw(st.lists(times, min_size=n - 1, max_size=n - 1))
    update = draw(st.one_of(st.none(), st.lists(times, min_size=n, max_size=n)))
    return Profile.from_arrays(draw(st.lists(st.integers(1, 10_000_000), min_size=n, max_size=n)),
                               draw(st.lists(times, min_size=n, max_size=n)), backward, update=update)


@settings(deadline=None, max_examples=8)
@given(tensor_zero_last(9, 11), alpha_beta, alpha_beta, st.sampled_from(["barrier", "layerwise"]), st.booleans())
def test_with_tensor_zero_last_the_groupings_separate(profile, rs, ag, sync, after):
    # T = (least first-gather start) + (least rest): the plan of the two enumerated groupings
    # runs at that sum, and decoupled-cpsat (past decoupled-brute's n <= 8) finds it.
    problem = decoupled(profile, rs, ag, sync, after)
    (start, rs_groups), (rest, ag_groups) = all_groupings_times(problem)
    plan = DecoupledPlan.from_groups(profile, rs_groups, ag_groups)
    assert simulate(problem, plan).iteration_time == pytest.approx(start + rest, rel=1e-9, abs=1e-15)
    for interleave in (False, True):
        if interleave and profile.n > 10:
            continue
        result = solve(problem, "decoupled-cpsat", interleave=interleave, hint=None, **BUDGET)
        assert str(result.status) == "OPTIMAL" and within_rounding(result, start + rest)
        assert_resimulates(problem, result)
    assert sequential(problem).stats["structure"] in ("hint", "candidate")


# With update time the reduce-scatter grouping that ends the reduce-scatters first is not the
# optimum's. Tensors t0, t1 of 1 MB, forwards of 1 ms, backwards 1.5 and 1 ms (t1 ready at
# 1 ms, t0 at B = 2.5 ms), updates 0 and 3 ms; halves c(S) = 2 ms + 1 ns/B: c(1 MB) = 3 ms,
# c(2 MB) = 4 ms, so one all-gather (4 ms) beats two (6 ms) and waits for the last update.
UPDATE_CASE = Profile.from_arrays([1e6, 1e6], [MS, MS], [1.5 * MS, MS], update=[0.0, 3 * MS])
HALF_2MS = AlphaBeta(2 * MS, 1e-9)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_the_least_reduce_scatter_end_is_not_the_optimum_with_update_time(sync):
    problem = decoupled(UPDATE_CASE, HALF_2MS, HALF_2MS, sync, False)
    # One reduce-scatter {t1, t0} 2.5-6.5 ms: E = 6.5, the least (two take 1-4 and 4-7, E = 7),
    # as the fusion DP on c_RS finds. Updates t1 6.5-9.5, t0 9.5; the gather 9.5-13.5; the
    # forwards 13.5-14.5-15.5: T = 15.5 ms.
    fused = solve(Problem(UPDATE_CASE, HALF_2MS, sync="barrier"), "dp").plan.groups()
    assert fused == [[1, 0]]
    least_end = DecoupledPlan.from_groups(UPDATE_CASE, fused, [[0, 1]])
    assert round(simulate(problem, least_end).iteration_time / MS, 9) == 15.5
    # Two: {t1} 1-4, {t0} 4-7, and t1's update (4-7) runs under t0's reduce-scatter: the
    # last update ends at 7, the gather 7-11, the forwards 11-12-13: T = 13 ms, the optimum.
    brute = solve(problem, "decoupled-brute")
    assert round(brute.iteration_time / MS, 9) == 13
    assert brute.plan.reduce_scatter.groups() == [[1], [0]] and brute.plan.all_gather.groups() == [[0, 1]]
    for interleave in (False, True):
        result = solve(problem, "decoupled-cpsat", interleave=interleave, **BUDGET)
        assert round(result.iteration_time / MS, 6) == 13 and str(result.status) == "OPTIMAL"
        assert result.stats["structure"] == "hint"


# With tensor 0 tied at B before other tensors, the best reduce-scatter grouping depends on
# the all-gather costs. Tensors of 2, 1 and 1 MB, all ready at B = 1 ms in the ready order
# t0, t1, t2, forwards of 1 ms (F = 3), updates 0, 2 and 0 ms, barrier sync, reduce-scatters
# at 1 ms + 1 ns/B:
# * one reduce-scatter {t0, t1, t2} (4 MB) 1-6: t0 updated by 6, t1 6-8, t2 by 8;
# * {t0, t1} 1-5 and {t2} 5-7: t0 by 5, t1 5-7, t2 by 7.
# Cheap gathers (1 ns/B): after the single reduce-scatter, {t0} (2 ms) runs 6-8 while t1
# updates, {t1, t2} 8-10: T = 10 + 3 = 13 ms; after the two, the channel is busy until 7
# and the gathers' 4 ms end at 11 at best: T = 14 ms.
# Costly gathers (4 ms + 1 ns/B, so one gather of 8 ms): it waits for the last update, 8 or
# 7: T = 8 + 8 + 3 = 19 ms or 7 + 8 + 3 = 18 ms (a second gather adds 4 ms).
TIED = Profile.from_arrays([2e6, 1e6, 1e6], [MS] * 3, [0.0, 0.0, MS], update=[0.0, 2 * MS, 0.0],
                           ready_order=[0, 1, 2])


@pytest.mark.parametrize("gather, best, reduce_scatters, gathers", [
    (AlphaBeta(0.0, 1e-9), 13, [[0, 1, 2]], [[0], [1, 2]]),
    (AlphaBeta(4 * MS, 1e-9), 18, [[0, 1], [2]], [[0, 1, 2]]),
])
def test_with_tensor_zero_tied_the_best_reduce_scatters_depend_on_the_gathers(gather, best, reduce_scatters, gathers):
    problem = decoupled(TIED, AlphaBeta(MS, 1e-9), gather, "barrier", False)
    brute = solve(problem, "decoupled-brute")
    assert round(brute.iteration_time / MS, 9) == best
    assert brute.plan.reduce_scatter.groups() == reduce_scatters and brute.plan.all_gather.groups() == gathers
    other = [[0, 1], [2]] if reduce_scatters == [[0, 1, 2]] else [[0, 1, 2]]
    others = [simulate(problem, DecoupledPlan.from_groups(TIED, other, g)).iteration_time
              for g in groupings([0, 1, 2])]
    assert round(min(others) / MS, 9) == best + 1
    result = sequential(problem)
    assert round(result.iteration_time / MS, 6) == best and str(result.status) == "OPTIMAL"
    assert result.stats["structure"] == "none"


def test_without_interleaving_refusals():
    big = decoupled(Profile.from_arrays([8] * 41, [MS] * 41, [MS] * 41), HALF, HALF, "barrier", False)
    for options in ({"interleave": False}, {}):            # the limit, whether interleave was given or not
        with pytest.raises(ValueError, match=r"^decoupled-cpsat takes n <= 10 tensors interleaving reduce-scatters "
                                             r"and all-gathers \(the default\) and n <= 40 with interleave=False "
                                             r"\(every reduce-scatter first, n \(n \+ 1\) arcs on a known channel "
                                             r"order\), and refuses n = 41 > 40$"):
            solve(big, "decoupled-cpsat", **options)
    assert MAX_TENSORS_SEQUENTIAL == 40
    problem = decoupled(HAND, HALF, HALF, "layerwise", True)
    with pytest.raises(ValueError, match="^interleave must be True or False, got 'no'$"):
        solve(problem, "decoupled-cpsat", interleave="no")
    interleaved = DecoupledPlan.from_groups(HAND, [[0], [1]], [[0], [1]], order=[0, 1, 0, 1])
    with pytest.raises(ValueError, match="^hint: not a plan of the space: with interleave=False every "
                                         "reduce-scatter runs before the all-gathers$"):
        solve(problem, "decoupled-cpsat", interleave=False, hint=interleaved)
