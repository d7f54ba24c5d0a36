"""Methods for fully sharded problems (MODEL.md 8.2): FSDP2's units, the exact enumeration,
the search, the memory cap and the bound."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, profiles

from fusionopt import zoo
from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, simulate, sharded_lower_bound
from fusionopt.solvers import compare, solve, atom_bounds
from fusionopt.solvers.baselines import fsdp2_plan

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)


def section5(cap=None):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, pattern=FullySharded(HALF, HALF, memory_cap=cap))


def test_brute_hand_worked_optimum_and_the_cap():
    # Without a cap: a kept unit per tensor, gathers issued one ahead, regathers none:
    # 0-5, 5-7, 7-10; forwards 5-6, 7-8, 10-11; backward 11-12, 12-14, 14-17;
    # reduce-scatters 12-15, 15-17, 17-22 ms.
    free = solve(section5(), "sharded-brute")
    assert round(free.iteration_time / MS, 9) == 22 and free.plan.bounds.tolist() == [0, 1, 2, 3]
    assert not free.plan.reshard.any() and str(free.status) == "OPTIMAL"
    assert free.timeline.peak_memory == 11_000_000
    # Every cap between the least peak and the free optimum's: T rises as the cap falls.
    times = []
    for cap in (11e6, 10e6, 9e6, 8e6):
        r = solve(section5(cap), "sharded-brute")
        assert r.timeline.peak_memory <= cap
        times.append(round(r.iteration_time / MS, 9))
    assert times == [22, 27, 27, 30]
    with pytest.raises(ValueError, match="no plan fits the memory cap of 7e\\+06 B: tensor 't0' alone needs 8e\\+06 B"):
        solve(section5(7e6), "sharded-brute")


@settings(deadline=None, max_examples=15)
@given(st.data())
def test_brute_against_search_bound_and_coarser_atoms(data):
    profile = data.draw(profiles(1, 5))
    halves = FullySharded(data.draw(alpha_beta), data.draw(alpha_beta))
    problem = Problem(profile, pattern=halves)
    exact = solve(problem, "sharded-brute")
    search = solve(problem, "sharded-opt", atoms="tensor")
    bound = sharded_lower_bound(problem)
    assert exact.iteration_time >= bound * (1 - 1e-9) - 1e-15
    assert search.iteration_time >= exact.iteration_time * (1 - 1e-12) - 1e-15
    # A cap at the optimum's own peak keeps the optimum.
    capped = Problem(profile, pattern=halves.with_cap(max(exact.timeline.peak_memory, 1)))
    assert solve(capped, "sharded-brute").iteration_time == exact.iteration_time
    coarse = [0, profile.n]
    assert solve(problem, "sharded-brute", atoms=coarse).iteration_time >= exact.iteration_time


def test_fsdp2_units_on_the_zoo_transformers():
    halves = FullySharded.from_network("100gb-ib", 64)
    gpt2 = zoo.profile("gpt2", device="h100", batch=8)
    plan = fsdp2_plan(gpt2)
    assert plan.names == ("(root)", *[f"h.{k}" for k in range(12)], "(root)") and plan.root
    assert gpt2.names[plan.bounds[1] - 1] == "wpe.weight" and gpt2.names[plan.bounds[-2]] == "ln_f.weight"
    assert plan.reshard.tolist() == [False] + [True] * 12 + [False]
    bert = zoo.profile("bert-base", device="h100", batch=8)
    plan = fsdp2_plan(bert)
    assert plan.names == ("(root)", *[f"encoder.layer.{k}" for k in range(12)], "(root)")
    assert bert.names[plan.bounds[-2]] == "pooler.dense.weight"
    r = solve(Problem(gpt2, pattern=halves), "fsdp2")
    # 13 unit gathers (the root's two parts in one), 12 regathers, 13 reduce-scatters.
    assert r.num_messages == 38 and r.timeline.message_kind.tolist().count(0) == 13
    assert r.timeline.message_bytes[0] == gpt2.sizes[[0, 1, gpt2.n - 2, gpt2.n - 1]].sum()
    assert r.timeline.message_kind[-1] == 0 and r.timeline.message_bytes[-1] == r.timeline.message_bytes[0]


def test_framework_settings_over_the_cap_are_infeasible():
    gpt2 = zoo.profile("gpt2", device="h100", batch=8)
    halves = FullySharded.from_network("100gb-ib", 64)
    peak = solve(Problem(gpt2, pattern=halves), "fsdp2").timeline.peak_memory
    r = solve(Problem(gpt2, pattern=halves.with_cap(peak - 1)), "fsdp2")
    assert str(r.status) == "INFEASIBLE" and r.stats["over_memory_cap"] == 1
    searched = solve(Problem(gpt2, pattern=halves.with_cap(peak)), "sharded-opt", max_evaluations=3000)
    assert searched.timeline.peak_memory <= peak
    assert searched.iteration_time <= solve(Problem(gpt2, pattern=halves), "fsdp2").iteration_time


def test_atoms_and_method_errors():
    p = Profile.from_arrays([4] * 4, [0] * 4, [1] * 4, names=["a.weight", "a.bias", "b.0.w", "b.1.w"])
    assert atom_bounds(p, "module") == [0, 2, 3, 4] and atom_bounds(p, "block") == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown atoms 'layer'"):
        atom_bounds(p, "layer")
    problem = Problem(zoo.profile("gpt2", device="h100", batch=8),
                      pattern=FullySharded.from_network("10gbe", 8))
    with pytest.raises(ValueError, match="sharded-brute enumerates every plan over at most 8 atoms and refuses 75"):
        solve(problem, "sharded-brute", atoms="module")
    with pytest.raises(ValueError, match="method .fsdp2. is a fully sharded method and this problem is an all-reduce problem"):
        solve(Problem(p, HALF), "fsdp2")
    with pytest.raises(ValueError, match="method 'wfbp' is an all-reduce method and this problem is a fully sharded problem"):
        solve(section5(), "wfbp")


def test_compare_measures_against_the_unfused_units():
    rows = {r.method: r for r in compare(section5(), ["sharded-wfbp", "sharded-brute"])}
    assert rows["sharded-wfbp"].speedup == 1.0
    unfused = simulate(section5(), ShardedPlan.per_tensor(section5().profile)).iteration_time
    assert rows["sharded-brute"].speedup == pytest.approx(unfused / rows["sharded-brute"].iteration_time)
    assert rows["sharded-brute"].speedup > 1


def test_options_are_checked():
    problem = section5()
    with pytest.raises(ValueError, match="reshard_after_forward must be True or False, got 'no'"):
        solve(problem, "fsdp2", reshard_after_forward="no")
    with pytest.raises(ValueError, match="root must be True, False or None"):
        solve(problem, "sharded-opt", root=1)
    with pytest.raises(ValueError, match="kicks must be a whole number >= 0, got -1"):
        solve(problem, "sharded-opt", kicks=-1)


def _own_enumeration(problem, units, max_depth, min_forward, min_backward):
    """The best plan with ``units``' bounds by this test's own loops: every flag outside the
    root, every pair of depths; None where none fits the cap."""
    import itertools

    m = units.num_units
    cap = problem.pattern.memory_cap
    best = None
    for flags in itertools.product((False, True), repeat=m):
        if units.root and (flags[0] or flags[-1]):
            continue
        for d_f in range(min_forward, max_depth + 1):
            for d_b in range(min_backward, max_depth + 1):
                plan = ShardedPlan(units.bounds, list(flags), forward_prefetch=d_f, backward_prefetch=d_b,
                                   root=units.root)
                t = simulate(problem, plan)
                if (cap is None or t.peak_memory <= cap) and (best is None or t.iteration_time < best):
                    best = t.iteration_time
    return best


@settings(deadline=None, max_examples=30)
@given(st.data())
def test_brute_with_fixed_units_against_its_own_enumeration(data):
    # With units=, sharded-brute's space is the flags and depths a job with those units can
    # switch between (FSDP2 between steps); an enumeration of its own gives the same
    # optimum, the suffix flags never beat every flag, and the space of every grouping
    # (sharded-brute over the units' bounds as atoms, depths from 0 to m - 1) never loses to it.
    profile = data.draw(profiles(2, 5))
    n = profile.n
    inner = data.draw(st.lists(st.integers(1, n - 1), unique=True, max_size=n - 1).map(sorted))
    bounds = [0, *inner, n]
    root = len(bounds) >= 4 and data.draw(st.booleans())
    units = ShardedPlan(bounds, [False] * (len(bounds) - 1), root=root)
    share = data.draw(st.sampled_from([None, 0.7, 0.9]))
    pattern = FullySharded(data.draw(alpha_beta), data.draw(alpha_beta))
    cap = None if share is None else share * simulate(Problem(profile, pattern=pattern), units).peak_memory
    problem = Problem(profile, pattern=pattern if cap is None else pattern.with_cap(cap))
    min_forward, min_backward = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 1))
    expected = _own_enumeration(problem, units, 2, min_forward, min_backward)
    options = dict(units=units, max_depth=2, min_forward_prefetch=min_forward, min_backward_prefetch=min_backward)
    if expected is None:
        with pytest.raises(ValueError, match="no plan|no plan it searched fits"):
            solve(problem, "sharded-brute", **options)
        return
    r = solve(problem, "sharded-brute", **options)
    assert r.iteration_time == pytest.approx(expected, rel=1e-12)
    assert r.plan.bounds.tolist() == bounds and r.plan.root == root and str(r.status) == "OPTIMAL"
    assert cap is None or r.timeline.peak_memory <= cap
    try:
        suffix = solve(problem, "sharded-brute", reshard="suffix", **options).iteration_time
    except ValueError:
        suffix = float("inf")
    assert suffix >= r.iteration_time - 1e-15
    if max(min_forward, min_backward) == 0 and len(bounds) - 1 <= 3:
        every = solve(problem, "sharded-brute", atoms=bounds)
        assert every.iteration_time <= r.iteration_time + 1e-15


def test_brute_with_fixed_units_refusals():
    p = section5()
    with pytest.raises(ValueError, match="units must be a ShardedPlan"):
        solve(p, "sharded-brute", units=[0, 1, 3])
    with pytest.raises(ValueError, match="reshard must be one of any, suffix, got 'some'"):
        solve(p, "sharded-brute", units=ShardedPlan([0, 1, 3]), reshard="some")
    with pytest.raises(ValueError, match="max_depth must be a whole number >= 0"):
        solve(p, "sharded-brute", units=ShardedPlan([0, 1, 3]), max_depth=-1)
    # Nothing given is left unused: atoms with units, the fixed-units options without them.
    with pytest.raises(ValueError, match="atoms make units; with units= the units are given: leave atoms out"):
        solve(p, "sharded-brute", units=ShardedPlan([0, 1, 3]), atoms="tensor")
    for option, value in (("reshard", "suffix"), ("max_depth", 2), ("min_forward_prefetch", 1)):
        with pytest.raises(ValueError, match=f"sharded-brute: {option} goes with units="):
            solve(p, "sharded-brute", **{option: value})
    # A least depth above max_depth is searched alone, never deeper: depths 2 forward, 1 back.
    r = solve(p, "sharded-brute", units=ShardedPlan([0, 1, 2, 3]), max_depth=1, min_forward_prefetch=2,
              min_backward_prefetch=1)
    assert (r.plan.forward_prefetch, r.plan.backward_prefetch) == (2, 1) and r.stats["plans"] == 2 ** 3
    profile = Profile.from_arrays([1e3] * 14, [MS] * 14, [MS] * 14)
    many = Problem(profile, pattern=FullySharded(HALF, HALF))
    with pytest.raises(ValueError, match="at most 12 units and refuses 14; use reshard='suffix'"):
        solve(many, "sharded-brute", units=ShardedPlan(list(range(15))))
    # the suffix space at that size: m + 1 flag vectors, here with depths 1..2 each
    r = solve(many, "sharded-brute", units=ShardedPlan(list(range(15))), reshard="suffix", max_depth=2,
              min_forward_prefetch=1, min_backward_prefetch=1)
    assert r.stats["plans"] == 15 * 2 * 2
