"""DeepSpeed ZeRO-2 on the decoupled all-reduce: its buckets, and its timing with
``overlap_comm`` off (the stage-2 default) and on."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, costs, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, DecoupledPlan, Plan, Problem, Profile, simulate, decoupled_lower_bound
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import ZERO_REDUCE_BUCKET, zero2_buckets

MS = 1e-3


def decoupled(profile, half=AlphaBeta(MS, 1e-9), gather=None):
    return Problem(profile, pattern=Decoupled(half, half if gather is None else gather), sync="barrier")


def cost(c, nbytes):
    return float(c.of_sizes(np.array([float(nbytes)]))[0])


def test_zero2_buckets_and_refusals():
    # 3, 2, 2, 6 float32 elements, ready order 3, 2, 1, 0: a bucket of 5 takes {3} (6 > 5 alone),
    # then {2, 1} (2 + 2), then {0}.
    profile = Profile.from_arrays([12, 8, 8, 24], [0.0] * 4, [MS] * 4)
    problem = decoupled(profile)
    assert zero2_buckets(problem, 5) == [[3], [2, 1], [0]]
    assert zero2_buckets(problem) == [[3, 2, 1, 0]] and ZERO_REDUCE_BUCKET == 500_000_000
    with pytest.raises(ValueError, match="^reduce_bucket_size must be a whole number of elements >= 1, got 0$"):
        zero2_buckets(problem, 0)
    with pytest.raises(ValueError, match="^overlap_comm must be True or False, got 'yes'$"):
        solve(problem, "zero2", overlap_comm="yes")
    after = Problem(Profile.from_arrays([8], [MS], [MS], update=[MS]),
                    pattern=Decoupled(AlphaBeta(MS, 0), AlphaBeta(MS, 0), update_after_gather=True))
    with pytest.raises(ValueError, match="^zero2 updates in the optimiser step, before gathering parameters"):
        solve(after, "zero2", overlap_comm=True)
    with pytest.raises(ValueError, match="^zero2 is for sync='barrier' only"):
        solve(Problem(profile, pattern=Decoupled(AlphaBeta(MS, 0), AlphaBeta(MS, 0)), sync="layerwise"), "zero2")


@settings(deadline=None, max_examples=40)
@given(profiles(max_n=8), alpha_beta, st.integers(1, 3_000_000))
def test_zero2_is_the_backward_then_its_all_reduces_then_one_gather(profile, half, bucket):
    # Its stated timing, written independently: B + sum_k c_AR(S_k) + U + c_AG(all) + F + W.
    problem = decoupled(profile, half)
    result = solve(problem, "zero2", reduce_bucket_size=bucket)
    sizes = [int(profile.sizes[b].sum()) for b in zero2_buckets(problem, bucket)]
    expected = (profile.B + sum(2 * half(s) for s in sizes) + profile.U + half(profile.total_bytes)
                + profile.F + profile.host_overhead)
    assert result.iteration_time == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert result.plan.reduce_with == "all_reduce"
    # The backward is held up by every all-reduce but the epilogue's, run in its hooks.
    assert result.stats["stall"] == pytest.approx(sum(2 * half(s) for s in sizes[:-1]), rel=1e-9, abs=1e-15)


def test_overlap_stalls_the_backward_at_a_flush_by_hand():
    # One float32 element per tensor and reduce_bucket_size=1: a bucket per tensor. Backward
    # times (forward index) 5, 1, 1, 1 ms, so gradients 3, 2, 1, 0 are ready at 1, 2, 3, 8 ms;
    # halves of 1.5 ms: an all-reduce takes 3 ms, the all-gather 1.5 ms; forwards of 1 ms.
    #   {3}: flushed in t2's hook at 2, all-reduced 2-5;
    #   {2}: flushed in t1's hook at 3; the backward waits there for {3} until 5 (stall 2 ms),
    #        and {2} runs 5-8;
    #   {1}: t0's backward runs 5-10; its hook flushes {1} at 10 ({2} ended at 8): 10-13;
    #   {0}: the epilogue flushes it at 10, waiting for {1} until 13: 13-16.
    # All-gather 16-17.5, forward 17.5-21.5: T = 21.5 ms. Without overlap_comm:
    # 8 + 4 x 3 = 20, + 1.5 + 4 = 25.5 ms. Releasing at the hooks without the stall (2, 3, 8, 8)
    # would give 2-5, 5-8, 8-11, 11-14 and T = 19.5 ms: the stall costs 2 ms.
    profile = Profile.from_arrays([4] * 4, [MS] * 4, [5 * MS, MS, MS, MS])
    half = AlphaBeta(1.5 * MS, 0.0)
    problem = decoupled(profile, half)
    on = solve(problem, "zero2", reduce_bucket_size=1, overlap_comm=True)
    assert on.plan.reduce_scatter.groups() == [[3], [2], [1], [0]]
    assert (on.plan.reduce_scatter.release / MS).round(9).tolist() == [2, 3, 10, 10]
    assert (on.timeline.message_start / MS).round(9).tolist() == [2, 5, 10, 13, 16]
    assert (on.timeline.message_end / MS).round(9).tolist() == [5, 8, 13, 16, 17.5]
    assert round(on.iteration_time / MS, 9) == 21.5
    assert round(on.stats["stall"] / MS, 9) == 2 and round(on.stats["backward_end"] / MS, 9) == 10
    assert round(solve(problem, "zero2", reduce_bucket_size=1).iteration_time / MS, 9) == 25.5
    unstalled = DecoupledPlan(Plan.from_groups(profile, [[3], [2], [1], [0]], release=[2 * MS, 3 * MS, 8 * MS, 8 * MS]),
                              on.plan.all_gather, reduce_with="all_reduce")
    assert round(simulate(problem, unstalled).message_end[3] / MS, 9) == 14


def test_overlap_flushes_a_bucket_in_the_hook_of_the_gradient_after_it():
    # 2, 2, 3, 1 float32 elements (8, 8, 12, 4 bytes), backward 1, 10, 1, 1 ms: gradients
    # 3, 2, 1, 0 ready at 1, 2, 12, 13 ms. Buckets of 4 elements: {3, 2} (1 + 3), then t1
    # (3 + 2 > 4) flushes it in its hook at 12 ms, not at 2 when its last gradient is ready;
    # {1, 0} goes in the epilogue at B = 13. Halves of 1 ms + 0.1 ms/B: 16 bytes all-reduced
    # in 2 x (1 + 1.6) = 5.2 ms: 12-17.2, then 17.2-22.4. Updates of 0.5 ms each (U = 2):
    # the step ends at 24.4; the all-gather of 32 bytes takes 1 + 3.2 = 4.2 ms (24.4-28.6);
    # forwards 4 ms: T = 32.6 ms. Without overlap_comm: 13 + 10.4 + 2 + 4.2 + 4 = 33.6 ms.
    profile = Profile.from_arrays([8, 8, 12, 4], [MS] * 4, [MS, 10 * MS, MS, MS], update=[0.5 * MS] * 4)
    problem = decoupled(profile, AlphaBeta(MS, 1e-4))
    on = solve(problem, "zero2", reduce_bucket_size=4, overlap_comm=True)
    assert on.plan.reduce_scatter.groups() == [[3, 2], [1, 0]]
    assert on.plan.reduce_scatter.release / MS == pytest.approx([12, 13], rel=1e-12)
    assert on.timeline.message_end / MS == pytest.approx([17.2, 22.4, 28.6], rel=1e-12)
    assert on.iteration_time / MS == pytest.approx(32.6, rel=1e-12) and on.stats["stall"] == 0
    off = solve(problem, "zero2", reduce_bucket_size=4)
    assert off.iteration_time / MS == pytest.approx(33.6, rel=1e-12)
    assert off.stats["stall"] / MS == pytest.approx(5.2, rel=1e-12)       # {3, 2}'s all-reduce, in t1's hook


def overlapped_end(problem, buckets):
    """The end of the last all-reduce with overlap_comm, stepped by hand: bucket k is flushed
    at the ready time of the first gradient of bucket k + 1 (B for the last), later by the
    backward's stalls so far; at each flush after the first the backward waits for the
    all-reduce before; the channel runs the all-reduces in turn."""
    profile = problem.profile
    halves = problem.pattern
    ready = profile.ready_times
    stall, end = 0.0, 0.0
    for k, bucket in enumerate(buckets):
        hook = (ready[buckets[k + 1][0]] if k + 1 < len(buckets) else profile.B) + stall
        if k > 0 and k + 1 < len(buckets) and end > hook:
            stall += end - hook                            # the backward waits at this hook
        nbytes = int(profile.sizes[bucket].sum())
        end = max(hook, end) + cost(halves.reduce_scatter, nbytes) + cost(halves.all_gather, nbytes)
    return end


@settings(deadline=None, max_examples=60)
@given(profiles(max_n=8), costs, costs, st.integers(1, 3_000_000))
def test_overlap_is_its_stated_timing_and_never_slower(profile, rs, ag, bucket):
    problem = decoupled(profile, rs, ag)
    on = solve(problem, "zero2", reduce_bucket_size=bucket, overlap_comm=True)
    off = solve(problem, "zero2", reduce_bucket_size=bucket)
    buckets = zero2_buckets(problem, bucket)
    # The buckets rule is the same; bucket k waits for the gradient that overflows it.
    assert on.plan.reduce_scatter.groups() == buckets == off.plan.reduce_scatter.groups()
    flush = [profile.ready_times[b[0]] for b in buckets[1:]] + [profile.B]
    assert all(on.plan.reduce_scatter.release >= np.array(flush))
    # T = E + U + c_AG(everything) + F + W, with E stepped independently.
    expected = overlapped_end(problem, buckets) + profile.U + cost(ag, profile.total_bytes) + profile.F \
        + profile.host_overhead
    assert on.iteration_time == pytest.approx(expected, rel=1e-9, abs=1e-15)
    # Each stall is at most the all-reduce before it: never slower than overlap_comm=False,
    # never faster than the same hooks without any stall, never below the bound.
    assert on.iteration_time <= off.iteration_time * (1 + 1e-12) + 1e-15
    unstalled = DecoupledPlan(Plan.from_groups(profile, buckets, release=flush), on.plan.all_gather,
                              reduce_with="all_reduce")
    assert on.iteration_time >= simulate(problem, unstalled).iteration_time * (1 - 1e-12)
    assert on.iteration_time >= decoupled_lower_bound(problem) * (1 - 1e-12)
    if len(buckets) == 1:                                  # one bucket: flushed at B either way
        assert on.iteration_time == pytest.approx(off.iteration_time, rel=1e-12, abs=1e-15)
