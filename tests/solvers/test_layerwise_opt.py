"""layerwise-opt: its evaluator against the simulator, never slower than its starts, never
below the bounds, and the exact grid optimum on small instances."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, partition_plans, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate, block_iteration_time, fluid_bound, fluid_latency_bound
from fusionopt.solvers import solve
from fusionopt.solvers.searches import LayerwiseEvaluator, layerwise_opt

MS = 1e-3
RTOL = 1e-9


@settings(deadline=None)
@given(st.data())
def test_block_fast_path_matches_the_simulator(data):
    problem = Problem(data.draw(profiles(1, 6)), data.draw(alpha_beta),
                      sync=data.draw(st.sampled_from(["layerwise", "barrier"])))
    plan = data.draw(partition_plans(problem.profile))
    messages = [sorted((c.tensor, c.lo, c.hi) for c in m.chunks) for m in plan.messages]
    expected = simulate(problem, plan).iteration_time
    assert block_iteration_time(problem, messages) == pytest.approx(expected, rel=1e-12, abs=1e-18)
    assert LayerwiseEvaluator(problem)(messages) == block_iteration_time(problem, messages)


def test_three_tensor_case_reaches_the_optimum():
    # tests/solvers/test_cpsat_partition.py: the fusion DP takes 17 ms, US-Byte 15 ms; the
    # optimum is 14 ms (1 MB of t3, then {t1, t2}, then the rest of t3), which CP-SAT proves.
    profile = Profile.from_arrays([1e6, 1e6, 6e6], [2 * MS] * 3, [MS] * 3)
    problem = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")
    result = layerwise_opt(problem)
    assert result.stats["start_times"]["usbyte"] == pytest.approx(15 * MS, rel=1e-12)
    assert result.stats["start_times"]["dp"] == pytest.approx(17 * MS, rel=1e-12)
    assert result.iteration_time == pytest.approx(14 * MS, rel=1e-12)
    assert result.iteration_time == simulate(problem, result.plan).iteration_time


@settings(deadline=None, max_examples=30)
@given(profile=profiles(1, 5), cost=alpha_beta)
def test_never_slower_than_its_starts_nor_below_the_bounds(profile, cost):
    problem = Problem(profile, cost, sync="layerwise")
    result = layerwise_opt(problem, kicks=20)
    for name, t in result.stats["start_times"].items():
        assert result.iteration_time <= t * (1 + 1e-12), name
        assert solve(problem, name).iteration_time == t
    for bound in (fluid_bound(problem), fluid_latency_bound(problem)):
        assert result.iteration_time >= bound * (1 - RTOL)
    result.plan.validate(profile)


def test_the_grid_optimum_on_small_instances():
    # Thirty seeded instances of 1 to 3 tensors cut into 8-byte units: CP-SAT's optimum over
    # the grid (exact) against the search, which may also cut off the grid. The search is a
    # heuristic: this pins how close it gets, so that a weaker search fails here.
    rng = np.random.default_rng(2)
    ratios = []
    for _ in range(30):
        n = int(rng.integers(1, 4))
        sizes = rng.integers(1, 3, n) * 8
        backward = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * MS)
        profile = Profile.from_arrays(sizes, rng.random(n) * MS, backward)
        problem = Problem(profile, AlphaBeta(rng.random() * MS, rng.random() * 2e-4), sync="layerwise")
        exact = solve(problem, "cpsat", unit_parameters=2, workers=1)
        found = layerwise_opt(problem)
        ratios.append((found.iteration_time - exact.stats["rounding_bound"]) / exact.iteration_time)
    # Measured: 29 of 30 at the grid optimum, the other 0.8% above (a local optimum).
    assert sum(r <= 1 for r in ratios) >= 29
    assert max(ratios) < 1.01


def test_bad_input():
    profile = Profile.from_arrays([1e6, 1e6, 6e6], [2 * MS] * 3, [MS] * 3)
    problem = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")
    with pytest.raises(ValueError, match="layerwise-opt is for sync='layerwise' only.*sync='barrier'"):
        solve(Problem(profile, AlphaBeta(MS, 1e-9)), "layerwise-opt")
    with pytest.raises(ValueError, match="^time_limit must be a positive, finite number of seconds, got 0$"):
        layerwise_opt(problem, time_limit=0)
    with pytest.raises(ValueError, match="kicks must be an integer >= 0, got -1"):
        layerwise_opt(problem, kicks=-1)
    with pytest.raises(ValueError, match="starts must name at least one method"):
        layerwise_opt(problem, starts=())
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        layerwise_opt(problem, starts=("nope",))


def test_starts_from_the_command_line_are_method_names(tmp_path):
    # --option starts=wfbp,dp arrives as the text "wfbp,dp": two methods, not seven letters.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    problem = Problem(profile, AlphaBeta(3e-3, 1e-9), sync="layerwise")
    text = solve(problem, "layerwise-opt", starts="wfbp,dp", kicks=0)
    listed = solve(problem, "layerwise-opt", starts=("wfbp", "dp"), kicks=0)
    assert text.stats["start"] == listed.stats["start"] in ("wfbp", "dp")
    assert text.iteration_time == listed.iteration_time
    with pytest.raises(ValueError, match=r"unknown method 'w'"):
        solve(problem, "layerwise-opt", starts=tuple("wfbp"))
