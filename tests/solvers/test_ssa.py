"""Sparrow search (``ssa``) and our GradSSA (``gradssa``): the paper's moves, seeds, optima,
extensions, caps, determinism and the anytime history."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta, network
from fusionopt.model import Problem, Profile, simulate
from fusionopt.solvers import Status, solve
from fusionopt.solvers.searches import GRADSSA_SEEDS, GradSSA, SparrowSearch, decode, encode, gradssa, ssa
from fusionopt.zoo import profile as zoo_profile

MS = 1e-3
SMALL = {"population": 6, "iterations": 4}
QUICK = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def worked(alpha_ms: float) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9))


def extended(problem: Problem, **options) -> Problem:
    return Problem(problem.profile, problem.cost, sync=problem.sync, **options)


def best_seed(problem: Problem, names) -> float:
    return min(solve(problem, name).iteration_time for name in names)


# ---------------------------------------------------------------------------- hand-worked
@pytest.mark.parametrize("method", ["ssa", "gradssa"])
def test_model_section_5_optimum(method):
    # alpha = 3 ms: WFBP 20, single 19, MG-WFBP's {t3,t2},{t1} 19, optimum {t3},{t2,t1} 17 ms.
    result = solve(worked(3), method, population=8, iterations=5, rng=1)
    assert result.plan.groups() == [[2], [1, 0]]
    assert result.iteration_time == pytest.approx(17 * MS, rel=1e-12)
    assert result.status is Status.OPTIMAL
    seeds = result.stats["seeds"]
    assert seeds["wfbp"] == pytest.approx(20 * MS, rel=1e-12)
    assert seeds["single"] == pytest.approx(19 * MS, rel=1e-12)
    if method == "gradssa":
        assert seeds["mgwfbp"] == pytest.approx(19 * MS, rel=1e-12)


def test_gradssa_reaches_the_dp_on_a_zoo_model():
    problem = Problem(zoo_profile("vgg16"), network("10gbe", 8))
    result = solve(problem, "gradssa", rng=0)
    assert result.iteration_time == pytest.approx(solve(problem, "dp").iteration_time, rel=1e-9)
    assert result.status is Status.OPTIMAL


# ---------------------------------------------------------------------------- the paper's moves
def _population_after_init(search: SparrowSearch, fitness) -> None:
    search.tell(np.asarray(fitness, dtype=float)[: len(search.ask())])


def test_producers_follow_equation_3():
    rng = np.random.default_rng(3)
    initial = np.random.default_rng(0).uniform(0.3, 0.7, size=(10, 5))
    # ST = 1: the alarm R2 < ST always, so producers shrink by exp(-i / (a iter_max)).
    search = SparrowSearch(5, population=10, iterations=7, safety_threshold=1.0, initial=initial, rng=rng)
    _population_after_init(search, np.arange(10.0))
    moved = search.ask()
    assert len(moved) == search.num_producers == 2
    ratio = moved / initial[:2]
    assert np.allclose(ratio, ratio[:, :1])                         # one factor per sparrow
    for i, factor in enumerate(ratio[:, 0], start=1):
        a = i / (-math.log(factor) * 7)                             # solve for a
        assert 0 < a <= 1
    # ST = 0: x + Q L, one normal Q added to every coordinate (before clipping to the box).
    search = SparrowSearch(5, population=10, iterations=7, safety_threshold=0.0, initial=initial,
                           rng=np.random.default_rng(4))
    _population_after_init(search, np.arange(10.0))
    moved, rows = search._producer_moves()
    assert rows.tolist() == [0, 1]
    shift = moved - initial[:2]
    assert np.allclose(shift, shift[:, :1]) and not np.allclose(shift[0, 0], shift[1, 0])


def test_scroungers_follow_equation_4_and_keep_only_improvements():
    initial = np.random.default_rng(0).uniform(0.3, 0.7, size=(10, 6))
    search = SparrowSearch(6, population=10, iterations=5, scouts=0.0, initial=initial,
                           rng=np.random.default_rng(5))
    assert search.num_scouts == 1                  # at least one scout, as documented
    _population_after_init(search, np.arange(10.0))
    producers = search.ask()
    search.tell(np.full(len(producers), 100.0))    # no producer improves: none moves
    assert np.array_equal(search.positions[:2], initial[:2])
    followers = search.ask()
    rows = search._asked_rows
    x_producer = initial[0]                        # the best producer's position
    for position, i in zip(followers, rows.tolist()):
        if 2 <= i < 5 and (0 < position).all() and (position < 1).all():
            # x_P + |x - x_P| A+ L: one scalar offset from the producer, |offset| <= mean |x - x_P|
            offset = position - x_producer
            assert np.allclose(offset, offset[0])
            assert abs(offset[0]) <= np.abs(initial[i] - x_producer).mean() + 1e-12
    before = search.fitness.copy()
    search.tell(np.full(len(followers), -1.0))     # every follower improves: all move
    assert (search.fitness[rows] == -1.0).all() and search.n_iter == 1
    assert np.array_equal(np.delete(search.fitness, rows), np.delete(before, rows))


def test_ask_tell_protocol_errors():
    search = SparrowSearch(3, population=4, iterations=1, rng=np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="needs a preceding ask"):
        search.tell([1.0])
    positions = search.ask()
    with pytest.raises(RuntimeError, match="before asking again"):
        search.ask()
    with pytest.raises(ValueError, match="expected 4 fitness values"):
        search.tell([1.0])
    with pytest.raises(ValueError, match="NaN"):
        search.tell([1.0, np.nan, 1.0, 1.0])
    assert not positions.flags.writeable
    assert ((positions >= 0) & (positions <= 1)).all()
    with pytest.raises(ValueError, match="population must be an integer >= 2"):
        SparrowSearch(3, population=1)
    with pytest.raises(ValueError, match="neighbours must be an integer >= 1"):
        GradSSA(3, neighbours=0)


def test_encoding_round_trip():
    cuts = np.array([[True, False, True], [False, False, False]])
    assert np.array_equal(decode(encode(cuts)), cuts)
    assert decode(np.array([0.5, 0.5000001])).tolist() == [False, True]


# ---------------------------------------------------------------------------- seeds and optima
@QUICK
@given(problem=problems(min_n=1, max_n=8), seed=st.integers(0, 2**32 - 1))
def test_never_worse_than_the_best_seed(problem, seed):
    result = ssa(problem, **SMALL, rng=seed)
    assert result.iteration_time <= best_seed(problem, ["wfbp", "single"]) * (1 + 1e-9)
    result = gradssa(problem, **SMALL, rng=seed)
    assert result.iteration_time <= best_seed(problem, GRADSSA_SEEDS) * (1 + 1e-9)
    assert result.plan.is_fusion(problem.profile)


@settings(max_examples=100, deadline=None)
@given(problem=problems(min_n=1, max_n=8), seed=st.integers(0, 2**32 - 1))
def test_gradssa_equals_the_dp_on_small_problems(problem, seed):
    result = gradssa(problem, population=8, iterations=6, rng=seed)
    optimum = solve(problem, "dp").iteration_time
    assert result.iteration_time == pytest.approx(optimum, rel=1e-9, abs=1e-15)


@QUICK
@given(problem=problems(min_n=2, max_n=7, cost=alpha_beta), seed=st.integers(0, 1000),
       copy_on=st.sampled_from(["channel", "compute"]))
def test_gradssa_equals_brute_force_with_contention_and_copy_cost(problem, seed, copy_on):
    problem = extended(problem, contention=1.5, copy_cost=1e-10, copy_on=copy_on)
    result = gradssa(problem, population=8, iterations=6, rng=seed)
    exact = solve(problem, "brute")
    assert result.iteration_time == pytest.approx(exact.iteration_time, rel=1e-9, abs=1e-15)
    assert result.iteration_time == simulate(problem, result.plan).iteration_time


@settings(max_examples=10, deadline=None)
@given(problem=problems(min_n=2, max_n=6, cost=alpha_beta), seed=st.integers(0, 1000))
def test_several_channels_give_valid_plans_no_worse_than_the_seeds(problem, seed):
    problem = extended(problem, channels=2)
    for method, names in (("ssa", ["wfbp", "single"]), ("gradssa", GRADSSA_SEEDS)):
        result = solve(problem, method, population=4, iterations=2, rng=seed)
        result.plan.validate(problem.profile)
        assert result.plan.is_fusion(problem.profile)
        assert result.iteration_time <= best_seed(problem, names) * (1 + 1e-9)
    assert result.stats["neighbours"] == 32       # sampled neighbourhoods when simulating


# ---------------------------------------------------------------------------- caps
@QUICK
@given(problem=problems(min_n=2, max_n=8), seed=st.integers(0, 1000), data=st.data())
def test_caps_are_respected(problem, seed, data):
    sizes = problem.profile.sizes
    cap = data.draw(st.floats(float(sizes.max()), float(sizes.sum())))
    most = data.draw(st.integers(1, problem.profile.n))
    try:
        exact = solve(problem, "dp", max_message_bytes=cap, max_messages=most)
    except ValueError as error:            # the caps are infeasible together
        assert "infeasible" in str(error)
        with pytest.raises(ValueError, match="infeasible"):
            gradssa(problem, **SMALL, rng=seed, max_message_bytes=cap, max_messages=most)
        return
    for method in (ssa, gradssa):
        result = method(problem, population=8, iterations=6, rng=seed, max_message_bytes=cap, max_messages=most)
        assert result.plan.message_bytes.max() <= cap
        assert result.num_messages <= most
        assert result.iteration_time >= exact.iteration_time * (1 - 1e-9)
    # GradSSA finds the capped optimum of these small problems too.
    assert result.iteration_time == pytest.approx(exact.iteration_time, rel=1e-9, abs=1e-15)


def test_infeasible_caps_raise():
    with pytest.raises(ValueError, match="infeasible: tensor 't0' has 4000000 bytes"):
        solve(worked(3), "gradssa", max_message_bytes=2e6)
    with pytest.raises(ValueError, match="needs at least 2 messages, more than max_messages = 1"):
        solve(worked(3), "ssa", max_message_bytes=4e6, max_messages=1)
    # A 5 MB cap forbids the single message (7 MB); the repair closes the message before
    # t1 (backward sizes 2, 1, 4 MB): {t3, t2}, {t1} at 19 ms. The search finds 17 ms.
    capped = solve(worked(3), "ssa", population=4, iterations=2, rng=0, max_message_bytes=5e6)
    assert capped.stats["seeds"]["single"] == pytest.approx(19 * MS, rel=1e-12)
    assert capped.plan.groups() == [[2], [1, 0]]


# ---------------------------------------------------------------------------- options
@pytest.mark.parametrize("method", ["ssa", "gradssa"])
@pytest.mark.parametrize("option, value, message", [
    ("population", 1, "population must be an integer >= 2"),
    ("population", 2.5, "population must be an integer >= 2"),
    ("iterations", 0, "iterations must be an integer >= 1"),
    ("iterations", True, "iterations must be an integer >= 1"),
    ("time_limit", 0, "time_limit must be a positive, finite number"),
    ("time_limit", math.inf, "time_limit must be a positive, finite number"),
    ("time_limit", math.nan, "time_limit must be a positive, finite number"),
    ("rng", "seven", "rng must be None, a non-negative int seed or a numpy.random.Generator"),
    ("rng", -1, "rng must be None"),
    ("max_message_bytes", -1, "max_message_bytes must be positive"),
    ("max_messages", 0, "max_messages must be an integer >= 1"),
])
def test_bad_options_are_named(method, option, value, message):
    with pytest.raises(ValueError, match=message):
        solve(worked(3), method, **{option: value})


@pytest.mark.parametrize("option, value", [("neighbours", 0), ("kick", -1)])
def test_bad_gradssa_options_are_named(option, value):
    with pytest.raises(ValueError, match=f"{option} must be an integer"):
        solve(worked(3), "gradssa", **{option: value})
    with pytest.raises(ValueError, match=f"unknown option '{option}' for method 'ssa'"):
        solve(worked(3), "ssa", **{option: 1})


# ---------------------------------------------------------------------------- determinism, history
@pytest.mark.parametrize("method, options", [
    ("ssa", {}), ("gradssa", {}), ("gradssa", {"neighbours": 5}), ("gradssa", {"kick": 0}),
])
def test_a_fixed_rng_is_deterministic(method, options):
    problem = Problem(zoo_profile("googlenet"), network("100gb-ib", 8))
    runs = [solve(problem, method, population=6, iterations=8, rng=seed, **options)
            for seed in (11, 11, np.random.default_rng(11))]
    for run in runs[1:]:
        assert run.plan == runs[0].plan
        assert run.iteration_time == runs[0].iteration_time
        assert run.stats["evaluations"] == runs[0].stats["evaluations"]
        assert run.stats["history"] == runs[0].stats["history"]
    assert runs[0].stats["rng_seed"] == 11 and runs[2].stats["rng_seed"] is None
    # A time limit that is not reached changes nothing.
    limited = solve(problem, method, population=6, iterations=8, rng=11, time_limit=3600, **options)
    assert limited.plan == runs[0].plan and limited.status == runs[0].status


@pytest.mark.parametrize("method", ["ssa", "gradssa"])
def test_anytime_history(method):
    problem = Problem(zoo_profile("resnet50"), network("25gbe", 8))
    result = solve(problem, method, population=10, iterations=12, rng=5)
    history = np.array(result.stats["history"])
    assert len(history) == result.stats["iterations"] + 1 == 13
    assert (np.diff(history) <= 0).all()
    assert history[-1] == pytest.approx(result.iteration_time, rel=1e-9)
    assert history[0] <= min(result.stats["seeds"].values())
    evaluations = np.array(result.stats["history_evaluations"])
    assert (np.diff(evaluations) > 0).all() and evaluations[-1] == result.stats["evaluations"]
    assert (np.diff(result.stats["history_seconds"]) >= 0).all()


def test_gradssa_improves_on_ssa_and_the_baselines_on_a_zoo_model():
    problem = Problem(zoo_profile("googlenet"), network("10gbe", 8))
    grad = solve(problem, "gradssa", population=10, iterations=10, rng=0)
    plain = solve(problem, "ssa", population=10, iterations=10, rng=0)
    assert grad.iteration_time <= plain.iteration_time
    assert grad.iteration_time < best_seed(problem, GRADSSA_SEEDS)
    assert grad.stats["descents"] >= 1


def test_time_limit_stops_between_iterations():
    problem = Problem(zoo_profile("resnet50"), network("10gbe", 8))
    result = solve(problem, "gradssa", rng=0, time_limit=1e-9)
    assert result.status is Status.TIME_LIMIT
    assert result.stats["iterations"] == 0 and len(result.stats["history"]) == 1
    assert result.iteration_time <= best_seed(problem, GRADSSA_SEEDS) * (1 + 1e-9)


def test_one_tensor_is_one_message():
    problem = Problem(Profile.from_arrays([10], [MS], [MS]), AlphaBeta(MS, 1e-9))
    for method in ("ssa", "gradssa"):
        result = solve(problem, method, rng=0)
        assert result.num_messages == 1 and result.stats["history"] == (result.iteration_time,)


def test_gradssa_does_not_overrun_its_time_limit_while_seeding():
    # DenseNet-201 (604 tensors): MG-WFBP's seed alone took 1.4 s against a 10 ms limit.
    import time

    from fusionopt import zoo
    from fusionopt.cost import network
    from fusionopt.model import Problem

    problem = Problem(zoo.profile("densenet201", device="v100"), network("100gb-ib", 64))
    started = time.perf_counter()
    result = solve(problem, "gradssa", time_limit=0.01, rng=0)
    assert time.perf_counter() - started < 1.0
    assert result.stats["seeds_skipped"] == ["mgwfbp"] and "mgwfbp" not in result.stats["seeds"]
    assert solve(Problem(zoo.profile("alexnet"), network("10gbe", 8)), "gradssa", rng=0).stats["seeds_skipped"] == []
