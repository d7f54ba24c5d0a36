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


@settings(deadline=None, max_examples=25)
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
