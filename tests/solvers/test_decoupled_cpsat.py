"""decoupled-cpsat: the decoupled all-reduce's optimum over both groupings and their interleaving."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, profiles, times

from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, DecoupledPlan, Plan, Problem, Profile
from fusionopt.model.bounds import decoupled_lower_bound
from fusionopt.model.simulator import simulate
from fusionopt.solvers import solve

pytest.importorskip("ortools")

from fusionopt.solvers.decoupled_cpsat import _Space  # noqa: E402

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
    return Problem(profile, decoupled=Decoupled(rs, ag, update_after_gather=after), sync=sync)


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
    space = _Space(problem)
    q = data.draw(st.sampled_from([1e-9, 1e-6, 2.0 ** -14]))
    horizon = math.floor(t / q) + 1
    values = space.least_values(space.constants(q, horizon), *space.arcs_of(plan), plan.order.tolist())
    assert values["T"] * q <= t * (1 + 1e-12)
    assert t - values["T"] * q < space.rounding_factor * q * (1 + 1e-9) + 1e-12 * t


def test_options_hints_and_refusals():
    problem = decoupled(HAND, HALF, HALF, "layerwise", True)
    with pytest.raises(ValueError, match=r"^decoupled-cpsat models n \(n \+ 1\) optional messages on one channel "
                                         r"and refuses n = 11 > 10$"):
        solve(decoupled(Profile.from_arrays([8] * 11, [MS] * 11, [MS] * 11), HALF, HALF, "barrier", False),
              "decoupled-cpsat")
    with pytest.raises(ValueError, match="would solve the problem with CP-SAT"):
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
    problem = Problem(profile, decoupled=Decoupled.from_network("10gbe", 8, update_after_gather=True), sync="layerwise")
    stopped = solve(problem, "decoupled-cpsat", hint=None, workers=1, deterministic_time=1e-3)
    assert str(stopped.status) == "TIME_LIMIT" and stopped.stats["plan_source"] == "reference"
    first = solve(problem, "decoupled-cpsat", workers=2, deterministic_time=0.05)
    again = solve(problem, "decoupled-cpsat", workers=2, deterministic_time=0.05)
    assert first.plan == again.plan and first.stats["deterministic_time"] == again.stats["deterministic_time"]
