"""``sharded-opt`` with ``reduce_groups=True``: reduce-scatter groups searched apart from the
units (MODEL.md 8.2's ``reduce_bounds``, DeepSpeed ZeRO-3's gradient buckets)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile, simulate, sharded_lower_bound, sharded_memory_floor
from fusionopt.solvers import solve

MS = 1e-3


def two_tensors():
    """Two tensors of 1 MB, forwards of 1 ms, backwards of 4 ms; an all-gather costs 10 ms
    whatever its size, a reduce-scatter 4 ns/B (4 ms a tensor)."""
    profile = Profile.from_arrays([1_000_000] * 2, [MS] * 2, [4 * MS] * 2)
    return Problem(profile, pattern=FullySharded(AlphaBeta(0.0, 4e-9), AlphaBeta(10 * MS, 0.0)))


def test_separate_groups_beat_every_unit_aligned_plan():
    # Reduce-scattered with the units, the best plan takes 28 ms:
    # * one unit (or the root of both, gathered in one message), kept: all-gather 0-10,
    #   forwards 10-12, backwards 12-20, one reduce-scatter of 2 MB 20-28 ms (resharding adds
    #   a 10 ms regather);
    # * a unit per tensor: the second all-gather queues behind the first, 10-20, so the
    #   forwards run 10-11 and 20-21, the backwards 21-25 and 25-29, the reduce-scatters
    #   25-29 and 29-33 ms (33; without prefetch the gather runs 11-21, later still).
    problem = two_tensors()
    brute = solve(problem, "sharded-brute")
    assert round(brute.iteration_time / MS, 9) == 28 and str(brute.status) == "OPTIMAL"
    plain = solve(problem, "sharded-opt")
    assert round(plain.iteration_time / MS, 9) == 28 and plain.plan.reduce_bounds is None
    assert plain.stats["reduce_groups"] is False and "group_evaluations" not in plain.stats
    # One unit kept, gradients in groups {t1} and {t0}: backwards 12-20 as before; t1's
    # gradient is ready at 20 - b_0 = 16, its reduce-scatter runs 16-20, t0's 20-24 ms.
    # That is the bound: ag(s_0) + F + B + rs(s_0) = 10 + 2 + 8 + 4 = 24 ms.
    grouped = solve(problem, "sharded-opt", reduce_groups=True)
    assert round(grouped.iteration_time / MS, 9) == 24
    assert grouped.plan.bounds.tolist() == [0, 2] and grouped.plan.reduce_bounds.tolist() == [0, 1, 2]
    assert (grouped.timeline.message_start / MS).round(9).tolist() == [0, 16, 20]
    assert round(sharded_lower_bound(problem) / MS, 9) == 24 and str(grouped.status) == "OPTIMAL"
    assert grouped.stats["reduce_groups"] is True and grouped.stats["group_evaluations"] > 0
    assert simulate(problem, grouped.plan).iteration_time == grouped.iteration_time


def gpt2_like(workers=1024):
    """Twelve blocks of a weight and a bias after an embedding, one channel of 100 Gb IB."""
    names = ["wte.weight"] + [f"h.{k}.fc.{part}" for k in range(12) for part in ("weight", "bias")] + ["ln_f.weight"]
    sizes = [150_000_000] + [28_000_000, 12_000] * 12 + [3_000]
    forward = [1e-5] + [3e-4, 1e-6] * 12 + [1e-6]
    return Problem(Profile.from_arrays(sizes, forward, [2 * f for f in forward], names=names),
                   pattern=FullySharded.from_network("100gb-ib", workers))


@pytest.mark.parametrize("budget", [150, 20_000])
def test_never_slower_than_without_groups_on_the_same_budget(budget):
    # The search over groups starts where the search without them ends, and takes only
    # better plans: with the budget exhausted by the first search (150) or not, the result
    # is at most the plain one, which the first search reproduces simulation for simulation.
    problem = gpt2_like()
    plain = solve(problem, "sharded-opt", max_evaluations=budget)
    grouped = solve(problem, "sharded-opt", max_evaluations=budget, reduce_groups=True)
    assert grouped.iteration_time <= plain.iteration_time
    assert grouped.stats["evaluations"] - grouped.stats["group_evaluations"] == plain.stats["evaluations"]
    assert grouped.stats["group_evaluations"] <= budget
    assert simulate(problem, grouped.plan).iteration_time == grouped.iteration_time
    again = solve(problem, "sharded-opt", max_evaluations=budget, reduce_groups=True)
    assert again.plan == grouped.plan and again.stats == grouped.stats          # deterministic
    if budget == 150:
        assert plain.stats["stopped"] == "evaluations"


@settings(deadline=None, max_examples=15)
@given(st.data())
def test_random_problems_bound_cap_and_resimulation(data):
    profile = data.draw(profiles(1, 5))
    halves = FullySharded(data.draw(alpha_beta), data.draw(alpha_beta))
    free = Problem(profile, pattern=halves)
    floor, _ = sharded_memory_floor(free)
    unlimited = solve(free, "sharded-opt", atoms="tensor", reduce_groups=True).timeline.peak_memory
    problems = [free]
    if unlimited > floor:                                 # a cap between the floor and the free result's peak
        cap = floor + data.draw(st.floats(0, 1)) * (unlimited - floor)
        problems.append(Problem(profile, pattern=halves.with_cap(max(cap, 1))))
    for problem in problems:
        try:
            plain = solve(problem, "sharded-opt", atoms="tensor")
        except ValueError:
            plain = None                                  # no unit-aligned plan found within the cap
        try:
            grouped = solve(problem, "sharded-opt", atoms="tensor", reduce_groups=True)
        except ValueError:
            assert plain is None                          # never worse: a plan within the cap stays found
            continue
        assert grouped.iteration_time >= sharded_lower_bound(problem) * (1 - 1e-9) - 1e-15
        if plain is not None:
            assert grouped.iteration_time <= plain.iteration_time
        cap = problem.pattern.memory_cap
        assert cap is None or grouped.timeline.peak_memory <= cap
        again = simulate(problem, grouped.plan)
        assert again.iteration_time == grouped.iteration_time and again.peak_memory == grouped.timeline.peak_memory


def test_the_option_is_checked():
    problem = two_tensors()
    with pytest.raises(ValueError, match="reduce_groups must be True or False, got 'yes'"):
        solve(problem, "sharded-opt", reduce_groups="yes")
    with pytest.raises(ValueError, match="reduce_groups=True searches reduce-scatter groups, which a root does not"):
        solve(problem, "sharded-opt", reduce_groups=True, root=True)
    assert solve(problem, "sharded-opt", reduce_groups=True, root=False).plan.reduce_bounds.tolist() == [0, 1, 2]
