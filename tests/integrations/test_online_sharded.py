"""The fully sharded online planner on a simulated job: what it fits, where it lands, how it
follows a change, and that it does not switch on noise.

The job: five tensors of 4, 2, 3, 2 and 1 MB, 1 ms of forward and 2 ms of backward each, a
unit per tensor, both collectives ``0.1 ms + 1 ns/B``. Over the plans FSDP2 can switch
between with these units (``sharded-brute`` with ``units=``, forward depths from 2, backward
from 1, up to 3), the best keeps every unit but the second whole, with backward depth 3
(28.9 ms); with the bandwidth quartered, every unit whole at depth 1 (100.0 ms); with the
compute halved, the same (26.5 ms, against 27.6 for the plan before); with it 30% slower,
the second and fourth resharded (31.1 ms), which the plan before ties.
"""

import dataclasses

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.integrations import ShardedPlanner, SimulatedShardedJob
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import fsdp2_plan

PROFILE = Profile.from_arrays([4e6, 2e6, 3e6, 2e6, 1e6], [1e-3] * 5, [2e-3] * 5)
UNITS = ShardedPlan([0, 1, 2, 3, 4, 5])
FSDP2_START = UNITS.replace(reshard=[True] * 5, forward_prefetch=2, backward_prefetch=1)


def problem(beta=1e-9, compute=1.0, cap=None):
    profile = dataclasses.replace(PROFILE, forward=PROFILE.forward * compute, backward=PROFILE.backward * compute)
    cost = AlphaBeta(1e-4, beta)
    return Problem(profile, pattern=FullySharded(cost, cost, memory_cap=cap))


def best(p):
    return solve(p, "sharded-brute", units=UNITS, min_forward_prefetch=2, min_backward_prefetch=1)


def run(job, planner, steps, change=None):
    for step in range(steps):
        if change is not None and step == change[0]:
            job.problem = change[1]
        planner.after_step()


def test_the_optima_by_the_exact_method():
    for p, ms, flags, depths in ((problem(), 28.9, [0, 1, 0, 0, 0], (2, 3)),
                                 (problem(beta=4e-9), 100.0, [0, 0, 0, 0, 0], (2, 1)),
                                 (problem(compute=0.5), 26.5, [0, 0, 0, 0, 0], (2, 1)),
                                 (problem(compute=1.3), 31.1, [0, 1, 0, 1, 0], (2, 3))):
        r = best(p)
        assert r.iteration_time * 1e3 == pytest.approx(ms, abs=1e-9)
        assert r.plan.reshard.astype(int).tolist() == flags
        assert (r.plan.forward_prefetch, r.plan.backward_prefetch) == depths


def test_without_noise_it_fits_the_costs_and_lands_on_the_optimum():
    job = SimulatedShardedJob(problem(), FSDP2_START)
    planner = ShardedPlanner(job, every=5, window=10)
    run(job, planner, 5)
    decision = planner.history[0]
    assert decision.switched and job.switches == 1
    for fitted in (decision.all_gather, decision.reduce_scatter):
        assert fitted.alpha == pytest.approx(1e-4, rel=1e-9) and fitted.beta == pytest.approx(1e-9, rel=1e-9)
    assert decision.forward_scale == pytest.approx(1.0) and decision.backward_scale == pytest.approx(1.0)
    assert decision.current == pytest.approx(simulate(problem(), FSDP2_START).iteration_time, rel=1e-12)
    assert simulate(problem(), job.plan).iteration_time == pytest.approx(best(problem()).iteration_time, rel=1e-12)
    run(job, planner, 45)                                 # and stays
    assert job.switches == 1


@pytest.mark.parametrize("changed", [problem(beta=4e-9), problem(compute=0.5)], ids=["link", "compute"])
def test_it_follows_a_change_within_a_window_and_a_period(changed):
    job = SimulatedShardedJob(problem(), FSDP2_START)
    planner = ShardedPlanner(job, every=5, window=10)
    run(job, planner, 40, change=(20, changed))
    target = best(changed).iteration_time
    assert simulate(changed, job.plan).iteration_time == pytest.approx(target, rel=1e-12)
    switched = [d.step for d in planner.history if d.switched]
    assert switched[0] == 5 and 20 < switched[-1] <= 20 + 10 + 5


def test_a_change_the_plan_in_use_ties_makes_no_switch():
    job = SimulatedShardedJob(problem(), FSDP2_START)
    planner = ShardedPlanner(job, every=5, window=10)
    run(job, planner, 40, change=(20, problem(compute=1.3)))
    assert job.switches == 1
    assert simulate(problem(compute=1.3), job.plan).iteration_time * 1e3 == pytest.approx(31.1, abs=1e-9)
    assert planner.history[-1].backward_scale == pytest.approx(1.3)


def test_it_does_not_switch_on_noise_at_the_optimum():
    start = best(problem()).plan
    job = SimulatedShardedJob(problem(), start, noise=0.05, seed=3)
    planner = ShardedPlanner(job, every=5, window=10)
    run(job, planner, 200)
    assert job.switches == 0 and len(planner.history) == 40
    # ...while the noise was there to tempt it: the fitted costs moved.
    assert np.ptp([d.all_gather.beta for d in planner.history]) > 0


def test_a_cap_the_plan_in_use_breaks_is_left_whatever_the_gain():
    whole = UNITS.replace(reshard=[False] * 5, forward_prefetch=2, backward_prefetch=1)
    capped = problem(cap=1.1e7)
    assert simulate(capped, whole).peak_memory > 1.1e7
    job = SimulatedShardedJob(capped, whole)
    planner = ShardedPlanner(job, every=5, window=10, min_gain=0.5)
    run(job, planner, 5)
    assert job.switches == 1 and simulate(capped, job.plan).peak_memory <= 1.1e7


def test_the_suffix_space_on_a_large_job():
    from fusionopt import zoo

    profile = zoo.profile("gpt2", batch=8)
    p = Problem(profile, pattern=FullySharded.from_network("10gbe", 64))
    job = SimulatedShardedJob(p, fsdp2_plan(profile))
    planner = ShardedPlanner(job, every=5, window=10)
    assert planner.reshard == "suffix"                    # 12 blocks outside the root
    run(job, planner, 5)
    expected = solve(p, "sharded-brute", units=fsdp2_plan(profile), reshard="suffix", min_forward_prefetch=2,
                     min_backward_prefetch=1)
    assert simulate(p, job.plan).iteration_time == pytest.approx(expected.iteration_time, rel=1e-9)
    assert expected.iteration_time < simulate(p, fsdp2_plan(profile)).iteration_time


def test_refusals_in_one_line():
    job = SimulatedShardedJob(problem(), FSDP2_START)
    with pytest.raises(ValueError, match="fixes a job's units"):
        job.switch(ShardedPlan([0, 2, 5]))
    for option, value, words in (("every", 0, "every must be"), ("window", 1, "window must be"),
                                 ("min_gain", 1.0, "min_gain must be"), ("reshard", "some", "reshard must be"),
                                 ("max_depth", 0, "max_depth must be")):
        with pytest.raises(ValueError, match=words):
            ShardedPlanner(job, **{option: value})
    with pytest.raises(ValueError, match="FullySharded pattern"):
        SimulatedShardedJob(Problem(PROFILE, AlphaBeta(1e-4, 1e-9)), FSDP2_START)

    class NoGradients(SimulatedShardedJob):
        def end_step(self):
            record = super().end_step()
            record["collectives"] = [c for c in record["collectives"] if c[0] == "all_gather"]
            return record

    planner = ShardedPlanner(NoGradients(problem(), FSDP2_START), every=2)
    planner.after_step()
    with pytest.raises(ValueError, match="no reduce-scatter was timed in the last 2 steps: the job's gradients never"):
        planner.after_step()


def test_the_grid_search_over_fsdp2s_knobs():
    from fusionopt.integrations import FSDP2_GRID, ShardedGridSearch

    # Eight settings of 5 steps each (profiled steps 3 to 5), the best kept after the grid
    # or 5 experiments after the best began; without noise the metric is the model's T.
    job = SimulatedShardedJob(problem(), FSDP2_START)
    grid = ShardedGridSearch(job)
    times = {s: simulate(problem(), grid.plan_of(s)).iteration_time for s in FSDP2_GRID}
    for _ in range(5 * len(FSDP2_GRID)):
        job.end_step()
        grid.after_step()
    assert grid.metrics == pytest.approx([times[s] for s in FSDP2_GRID[:len(grid.metrics)]], rel=1e-12)
    first_best = min(FSDP2_GRID, key=lambda s: (times[s], FSDP2_GRID.index(s)))
    assert grid.best == first_best and job.plan == grid.plan_of(first_best)
    assert grid.plan_of((True, 0, 1)) == FSDP2_START       # FSDP2's defaults first
    # Under a cap that every whole-units setting breaks, those experiments fail (out of memory).
    capped = problem(cap=1.1e7)
    job = SimulatedShardedJob(capped, FSDP2_START)
    grid = ShardedGridSearch(job)
    for _ in range(5 * len(FSDP2_GRID)):
        job.end_step()
        grid.after_step()
    over = [simulate(capped, grid.plan_of(s)).peak_memory > 1.1e7 for s in FSDP2_GRID[:len(grid.metrics)]]
    assert any(over) and all((m == float("inf")) == o for m, o in zip(grid.metrics, over))
    assert simulate(capped, job.plan).peak_memory <= 1.1e7
