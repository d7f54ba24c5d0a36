"""DeepSpeed PR #8431's adaptive prefetch bucket (the follow-up's own unit-test cases) and the
simulated ZeRO-3 job's fetches, worked by hand."""

from __future__ import annotations

import math

import pytest

from fusionopt.integrations import AdaptivePrefetch, SimulatedZero3Job, fetch_events
from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, FullySharded
from fusionopt.solvers.baselines import zero3_plan


def drive(controller, ratio, steps=10, forward=True):
    """``steps`` iteration boundaries, each sampled step a 10 ms interval stalled ``ratio`` of it."""
    for _ in range(steps):
        controller.end_step([(0.0, 0.01 * (1 - ratio), 0.01, forward)] if controller.sampling else [])
    return controller.bucket


@pytest.mark.parametrize("ratio, expected", [(0.3, 62_500_000), (0.01, 45_000_000), (0.09, 50_000_000)])
def test_it_resizes_only_at_the_tenth_boundary(ratio, expected):
    c = AdaptivePrefetch(50_000_000)
    assert drive(c, ratio, 9) == 50_000_000
    assert drive(c, ratio, 1) == expected
    assert c.history == [50_000_000] * 10 + [expected]


@pytest.mark.parametrize("ratio, expected", [(0.99, 60_000_000), (0.001, 40_000_000)])
def test_repeated_updates_stay_within_the_bounds(ratio, expected):
    c = AdaptivePrefetch(50_000_000, minimum=40_000_000, maximum=60_000_000)
    assert drive(c, ratio, 100) == expected


def test_initial_buckets_are_clamped_and_the_live_budget_caps_them():
    assert AdaptivePrefetch(0).bucket == 10_000_000
    assert AdaptivePrefetch(1_000_000_000).bucket == 500_000_000
    for budget in (0, 100, 100_000_000):
        c = AdaptivePrefetch(1_000_000_000, max_live_parameters=budget)
        assert c.bucket == budget and drive(c, 0.9, 30) == budget


def test_a_zero_window_grows_to_one_element():
    assert drive(AdaptivePrefetch(0, minimum=0), 0.9) == 1


def test_backward_stalls_are_not_diluted_by_the_forward():
    c = AdaptivePrefetch(50_000_000)
    drive(c, 0.0, 9)
    assert c.sampling
    c.end_step([(0.0, 0.0099, 0.01, True), (0.01, 0.011, 0.02, False)])
    assert c.ratio == pytest.approx(0.9) and c.bucket == 62_500_000


def test_without_samples_nothing_changes_and_bad_bounds_are_refused():
    c = AdaptivePrefetch(50_000_000)
    assert drive(c, 0.9, 0) == 50_000_000
    for _ in range(30):
        c.end_step([])
    assert c.bucket == 50_000_000 and math.isnan(c.ratio)
    with pytest.raises(ValueError, match=r"^minimum \(20\) must be at most maximum \(10\)$"):
        AdaptivePrefetch(15, minimum=20, maximum=10)
    with pytest.raises(ValueError, match=r"^minimum must be a whole number of elements >= 0, got -1$"):
        AdaptivePrefetch(15, minimum=-1)


def small_job():
    # Modules a (4000 + 400 B) and b (4000 B); gathers of 1 ms + 1 us/B, forward 1 ms, backward 2 ms.
    profile = Profile.from_arrays([4000, 400, 4000], [1e-3] * 3, [2e-3] * 3, names=["a.weight", "a.bias", "b.weight"])
    cost = AlphaBeta(1e-3, 1e-6)
    return Problem(profile, pattern=FullySharded(cost, cost))


def test_fetches_are_timed_on_the_compute_stream_by_hand():
    problem = small_job()
    plan = zero3_plan(problem.profile, prefetch_bucket_size=0, param_persistence_threshold=0)
    # a gathered 0 -> 5.4 ms (its fetch, the step's first, untimed); its forward 5.4 -> 7.4; b's hook at
    # 7.4 gathers 7.4 -> 12.4 (prefetch 0): a wait of 5 ms in an interval of 7; the backward of b at
    # 13.4 and of a at 15.4 wait for nothing.
    events = [tuple(round(v * 1e3, 9) if isinstance(v, float) else v for v in e) for e in fetch_events(problem, plan)]
    assert events == [(5.4, 7.4, 12.4, True), (12.4, 13.4, 13.4, False), (13.4, 15.4, 15.4, False)]
    c = AdaptivePrefetch(0, minimum=0)
    drive(c, 0.0, 9)
    c.end_step(fetch_events(problem, plan))
    assert c.ratio == pytest.approx(5 / 7) and c.bucket == 1


def test_the_simulated_job_plays_zero3_and_refuses_another_pattern():
    problem = small_job()
    job = SimulatedZero3Job(problem, 0, options={"param_persistence_threshold": 0})
    assert job.step() == fetch_events(problem, job.plan()) and job.step_time == job.time()
    assert job.time() == pytest.approx(28.8e-3)         # the reduce-scatter of 8400 B from 19.4 ms
    noisy = SimulatedZero3Job(problem, 0, options={"param_persistence_threshold": 0}, deviations=[0.5], seed=3)
    (_, start, end, _), *_ = noisy.step()
    assert end - start == pytest.approx(7.5e-3) and noisy.step_time == pytest.approx(1.5 * job.time())
    with pytest.raises(ValueError, match=r"^options holds prefetch_bucket_size: give the prefetch bucket as bucket$"):
        SimulatedZero3Job(problem, 0, options={"prefetch_bucket_size": 9})
    with pytest.raises(ValueError, match=r"^a ZeRO-3 job runs a fully sharded problem, not an all-reduce one$"):
        SimulatedZero3Job(Problem(problem.profile, AlphaBeta(1e-3, 1e-6)))
