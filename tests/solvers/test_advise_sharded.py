"""Settings for sharded data parallelism: FSDP2's calls for a plan, read back to the plan."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt import zoo
from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.advise_sharded import fsdp2_plan_of, fsdp2_settings, unit_modules
from fusionopt.solvers.sharded import atom_bounds, fsdp2_plan

NAMES = ["emb.weight", "h.0.a.weight", "h.0.a.bias", "h.0.b.weight", "h.1.a.weight", "h.1.b.weight",
         "h.1.b.bias", "h.2.a.weight", "ln.weight", "ln.bias"]


def named_problem(cap=None):
    n = len(NAMES)
    profile = Profile.from_arrays([4e6 + 1e5 * i for i in range(n)], [1e-4] * n, [2e-4] * n, names=NAMES)
    return Problem(profile, fully_sharded=FullySharded(AlphaBeta(2e-4, 1e-10), AlphaBeta(2e-4, 1e-10),
                                                       memory_cap=cap))


def test_unit_modules_are_the_coarsest_whole_modules():
    profile = named_problem().profile
    assert unit_modules(profile, 1, 8) == ["h"]
    assert unit_modules(profile, 1, 4) == ["h.0"]
    assert unit_modules(profile, 3, 7) == ["h.0.b", "h.1"]
    assert unit_modules(profile, 8, 10) == ["ln"]
    with pytest.raises(ValueError, match="splits module 'h.0.a'"):
        unit_modules(profile, 2, 4)


def test_fsdp2_defaults_read_back_to_the_fsdp2_baseline():
    # FSDP2's own default plan needs no prefetch lists and every block resharded.
    problem = Problem(zoo.profile("gpt2", device="h100", batch=8),
                      fully_sharded=FullySharded.from_network("100gb-ib", 64))
    plan = fsdp2_plan(problem.profile)
    s = fsdp2_settings(problem, plan)
    assert s.units == [[f"h.{k}"] for k in range(12)] + [[""]]
    assert s.reshard_after_forward == [True] * 12 + [False]
    assert s.forward_prefetch == {} and s.backward_prefetch == {}
    assert s.iteration_time == solve(problem, "fsdp2").iteration_time
    assert s.code().splitlines()[-1] == "fully_shard(model, reshard_after_forward=False)"


def test_deeper_prefetch_becomes_lists():
    problem = named_problem()
    plan = ShardedPlan([0, 1, 4, 7, 8, 10], [False, True, False, True, False], forward_prefetch=4,
                       backward_prefetch=2, root=True)
    s = fsdp2_settings(problem, plan)
    assert s.units == [["h.0"], ["h.1"], ["h.2"], [""]]
    # Depth 4: each unit lists the next three blocks (the root, the model, lists from its first
    # part); depth 2 backward: each lists the two blocks before (the root from its last part).
    assert s.forward_prefetch == {"": ["h.0", "h.1", "h.2"], "h.0": ["h.1", "h.2"], "h.1": ["h.2"]}
    assert s.backward_prefetch == {"": ["h.2", "h.1"], "h.2": ["h.1", "h.0"], "h.1": ["h.0"]}
    # A list is capped by the units there are, so the depth read back is the plan's
    # where it matters: the same schedule.
    assert simulate(problem, s.plan).iteration_time == simulate(problem, plan).iteration_time
    with pytest.raises(ValueError, match="FSDP2 prefetches at least 2 and 1"):
        fsdp2_settings(problem, plan.replace(forward_prefetch=1))
    with pytest.raises(ValueError, match="splits module 'h.0.a'"):
        fsdp2_settings(problem, ShardedPlan([0, 2, 10], forward_prefetch=2))


@st.composite
def module_plans(draw):
    atoms = atom_bounds(named_problem().profile, "module")
    inner = draw(st.sets(st.sampled_from(atoms[1:-1])))
    bounds = sorted({0, len(NAMES), *inner})
    m = len(bounds) - 1
    root = m >= 3 and draw(st.booleans())
    reshard = draw(st.lists(st.booleans(), min_size=m, max_size=m))
    if root:
        reshard[0] = reshard[-1] = False
    return ShardedPlan(bounds, reshard, forward_prefetch=draw(st.integers(2, m + 2)),
                       backward_prefetch=draw(st.integers(1, m + 1)), root=root)


@settings(deadline=None, max_examples=60)
@given(module_plans())
def test_settings_build_the_plan_they_were_made_from(plan):
    # What FSDP2 builds from the settings runs the same schedule as the plan: the same
    # collectives at the same times and the same peak memory.
    problem = named_problem()
    s = fsdp2_settings(problem, plan)
    again = fsdp2_plan_of(problem.profile, s.units, s.reshard_after_forward, s.forward_prefetch, s.backward_prefetch)
    assert again == s.plan
    want, got = simulate(problem, plan), simulate(problem, s.plan)
    assert got.message_start.tolist() == want.message_start.tolist()
    assert got.message_bytes.tolist() == want.message_bytes.tolist()
    assert (s.iteration_time, s.peak_memory) == (want.iteration_time, want.peak_memory)
