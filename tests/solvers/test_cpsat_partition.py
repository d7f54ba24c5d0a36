"""CP-SAT over partition plans on a unit grid: a hand-worked layerwise case, every grid plan
enumerated on tiny instances, hints and bad input."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta
from fusionopt.model import Chunk, Message, Plan, Problem, Profile, simulate, fluid_bound, fluid_latency_bound
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import grid_plan, unit_grid

MS = 1e-3
MB = 1_000_000
RTOL = 1e-9


def layerwise_case() -> Problem:
    # Three tensors in forward order: t1 = 1 MB, t2 = 1 MB, t3 = 6 MB; backward 1 ms each
    # (t3 ready at 1 ms, t2 at 2, t1 at 3; B = 3), forward 2 ms each, alpha 1 ms, 1 ms/MB.
    profile = Profile.from_arrays([MB, MB, 6 * MB], [2 * MS] * 3, [MS] * 3)
    return Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")


def message(*chunks: tuple[int, int, int]) -> Message:
    return Message(tuple(Chunk(*c) for c in chunks))


def test_hand_worked_layerwise_case():
    problem = layerwise_case()
    T = lambda plan: simulate(problem, plan).iteration_time / MS   # noqa: E731
    # WFBP: t3 1-8, t2 8-10, t1 10-12; phi_1 = 12, forward to 14; phi_2 = 14, to 16;
    # phi_3 = 16, to 18.
    assert T(Plan.per_tensor(problem.profile)) == pytest.approx(18.0, abs=1e-9)
    # t1 before t2 (priority by forward index): t3 1-8, t1 8-10, t2 10-12: 10+2, 12+2, 14+2 = 16.
    assert T(Plan.per_tensor(problem.profile, order=[2, 0, 1])) == pytest.approx(16.0, abs=1e-9)
    # 1 MB of t3 first (1-3), then {t1, t2} (3-6), then the other 5 MB of t3 (6-12):
    # phi_1 = 6, to 8; phi_2 = 8, to 10; phi_3 = max(10, 12) = 12, to 14.
    split = Plan((message((2, 0, MB)), message((0, 0, MB), (1, 0, MB)), message((2, MB, 6 * MB))))
    assert T(split) == pytest.approx(14.0, abs=1e-9)
    # 14 ms is optimal: one message ends at 3 + 1 + 8 = 12 and holds t1 (18 ms); with two or
    # more, the last one ends at >= 1 + 2 + 8 = 11 and holding t1 or t2 gives >= 15; holding
    # only t3, with two messages the first (with t1, t2) is ready at 3 and t3's rest ends at
    # 13 (15 ms), with three or more it ends at >= 1 + 3 + 8 = 12 (14 ms).
    result = solve(problem, "cpsat", unit_parameters=MB // 4, workers=1)   # 1 MB units of float32
    assert result.iteration_time / MS == pytest.approx(14.0, abs=1e-9)
    assert result.status is Status.OPTIMAL
    assert result.stats["units"] == 8 and result.stats["cpsat_status"] == "OPTIMAL"
    assert fluid_bound(problem) <= result.lower_bound <= result.iteration_time


def every_grid_plan(problem: Problem, unit: int) -> float:
    units = unit_grid(problem, unit)
    count, best = len(units), np.inf
    for cuts in itertools.product((False, True), repeat=count - 1):
        nodes = [0] + [k + 1 for k, cut in enumerate(cuts) if cut] + [count]
        for order in itertools.permutations(list(zip(nodes[:-1], nodes[1:]))):
            plan = grid_plan(units, list(order), problem.profile.n)
            best = min(best, simulate(problem, plan, validate=False).iteration_time)
    return best


@st.composite
def tiny_problems(draw) -> Problem:
    n = draw(st.integers(1, 3))
    units = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n).filter(lambda u: sum(u) <= 5))
    last = draw(st.lists(st.integers(1, 8), min_size=n, max_size=n))   # bytes in each last unit
    sizes = [8 * (u - 1) + b for u, b in zip(units, last)]
    times = st.one_of(st.just(0.0), st.floats(1e-5, 2e-3))
    profile = Profile.from_arrays(sizes, draw(st.lists(times, min_size=n, max_size=n)),
                                  draw(st.lists(times, min_size=n, max_size=n)))
    cost = AlphaBeta(draw(st.one_of(st.just(0.0), st.floats(1e-6, 1e-3))), draw(st.floats(1e-6, 3e-4)))
    return Problem(profile, cost, sync=draw(st.sampled_from(["layerwise", "barrier"])))


@settings(deadline=None, max_examples=40)
@given(tiny_problems())
def test_cpsat_equals_every_grid_plan_enumerated(problem):
    result = solve(problem, "cpsat", unit_parameters=2, workers=1)    # 8-byte units
    optimum = every_grid_plan(problem, 2)
    assert result.status is Status.OPTIMAL
    assert result.iteration_time <= optimum + result.stats["rounding_bound"] + RTOL * optimum
    assert result.lower_bound <= optimum * (1 + RTOL)
    assert simulate(problem, result.plan).iteration_time == result.iteration_time
    assert fluid_latency_bound(problem) <= optimum * (1 + RTOL)


def test_never_worse_than_the_hint_and_reorders_under_layerwise_sync():
    problem = layerwise_case()
    dp = solve(problem, "dp")
    result = solve(problem, "cpsat", unit_parameters=MB // 4, hint="dp", workers=1)
    # The fusion optimum: {t3}, {t2, t1} or {t3, t2}, {t1}, 17 ms (no reordering in a fusion plan).
    assert dp.iteration_time / MS == pytest.approx(17.0, abs=1e-9)
    assert result.iteration_time / MS == pytest.approx(14.0, abs=1e-9)
    assert result.stats["hint"] == "dp"


def test_bad_input():
    problem = layerwise_case()
    with pytest.raises(ValueError, match="unit_parameters must be an integer >= 1, got 0"):
        solve(problem, "cpsat", unit_parameters=0)
    with pytest.raises(ValueError, match="cuts the 3 tensors into 800 units, more than max_units = 40"):
        solve(problem, "cpsat", unit_parameters=2500)
    with pytest.raises(ValueError, match="max_message_bytes = 1000 is smaller than a unit"):
        solve(problem, "cpsat", unit_parameters=MB // 4, max_message_bytes=1000)
    off_grid = Plan((message((0, 0, MB)), message((1, 0, MB)), message((2, 0, 3)), message((2, 3, 6 * MB))))
    with pytest.raises(ValueError, match="message 2 cuts tensor 2 off the unit grid"):
        solve(problem, "cpsat", unit_parameters=MB // 4, hint=off_grid)
    with pytest.raises(ValueError, match="plain model"):
        solve(Problem(problem.profile, problem.cost, sync="layerwise", channels=2), "cpsat", unit_parameters=MB // 4)


@st.composite
def unit_multiple_problems(draw) -> Problem:
    # Every tensor a whole number of 8-byte units (2 float32 parameters), so that P3's
    # slices, ByteScheduler's partitions and US-Byte's units of 2 parameters fall on the grid.
    n = draw(st.integers(1, 3))
    units = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n).filter(lambda u: sum(u) <= 5))
    times = st.one_of(st.just(0.0), st.floats(1e-5, 2e-3))
    profile = Profile.from_arrays([8 * u for u in units], draw(st.lists(times, min_size=n, max_size=n)),
                                  draw(st.lists(times, min_size=n, max_size=n)))
    cost = AlphaBeta(draw(st.one_of(st.just(0.0), st.floats(1e-6, 1e-3))), draw(st.floats(1e-6, 3e-4)))
    return Problem(profile, cost, sync="layerwise")


@settings(deadline=None, max_examples=40)
@given(unit_multiple_problems())
def test_cpsat_optimum_is_at_most_every_layerwise_scheduler_on_the_grid(problem):
    exact = solve(problem, "cpsat", unit_parameters=2, workers=1)
    assert exact.status is Status.OPTIMAL
    slack = exact.stats["rounding_bound"] + RTOL * exact.iteration_time
    for name, options in (("p3", {"slice_parameters": 2}),
                          ("bytescheduler", {"partition_parameters": 2, "credit_parameters": 4}),
                          ("usbyte", {"unit_parameters": 2}),
                          ("wfbp", {}), ("dp", {})):
        heuristic = solve(problem, name, **options)
        assert exact.iteration_time <= heuristic.iteration_time + slack, name
