"""Fully sharded steps on two channels, all-gathers and reduce-scatters apart, sharing the
bandwidth (MODEL.md section 8.2's option, ``FullySharded(channels="two")``)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import alpha_beta, profiles, sharded_plans

from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.executor import build_program
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, compute_pieces, simulate, sharded_lower_bound

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                               # 1 ms + 1 ns/B for each collective


def section5(channels="two", cap=None):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, pattern=FullySharded(HALF, HALF, memory_cap=cap, channels=channels))


def ms(values):
    return [round(v / MS, 9) for v in np.asarray(values).tolist()]


def test_a_regather_shares_the_bandwidth_with_the_reduce_scatter_before_it():
    # Units {t1, t2} (5 MB, resharded) and {t3} (2 MB, kept); 1 ms + 1 ns/B each way.
    # Forward as on one channel: gathers 0-6 and 6-9, forwards 6-8 and 9-10.
    # Backward: unit 0's regather is issued at 10 (unit 1's backward starts), its startup
    # 10-11, then it transfers alone 11-12 (1 of its 5 ms). Unit 1's backward 10-11 issues its
    # reduce-scatter (2 MB) at 11 on the other channel: startup 11-12, then 12-16 the two
    # transfers share the bandwidth, each at half speed (the reduce-scatter's 2 ms take 4, the
    # regather does 2 of its 4 left); the regather ends alone 16-18. Unit 0's backward 18-23,
    # its reduce-scatter 23-29: T = 29 ms (one channel: 27, the reduce-scatter waiting 11-16
    # behind the regather 10-16, then 16-19, the backward 16-21, the last scatter 21-27).
    # Memory: unit 0's parameters (5 MB) and gradients (5 MB) during 18-23: 10 MB (one
    # channel: 12 MB, unit 1's gradients whole until 19 with unit 0's from 16).
    plan = ShardedPlan([0, 2, 3], [True, False])
    t = simulate(section5(), plan)
    assert t.message_kind.tolist() == [1, 1, 1, 0, 0] and t.message_unit.tolist() == [0, 1, 0, 1, 0]
    assert ms(t.message_ready) == [0, 6, 10, 11, 23]
    assert ms(t.message_start) == [0, 6, 10, 11, 23]
    assert ms(t.message_end) == [6, 9, 18, 16, 29]
    assert ms(t.forward_start) == [6, 7, 9]
    assert round(t.iteration_time / MS, 9) == 29
    assert t.peak_memory == 10_000_000
    one = simulate(section5("one"), plan)
    assert round(one.iteration_time / MS, 9) == 27 and one.peak_memory == 12_000_000
    assert ms(one.message_end) == [6, 9, 16, 19, 27]
    pieces = compute_pieces(section5(), plan)
    assert pieces[-1].end == pytest.approx(t.iteration_time, rel=1e-12)


def test_no_overlap_is_the_one_channel_step_to_the_bit():
    # Two kept units: gathers 0-6, 6-9, reduce-scatters 11-14, 16-22: no two collectives
    # ever run at once, so two channels change nothing.
    plan = ShardedPlan([0, 2, 3], [False, False])
    one, two = simulate(section5("one"), plan), simulate(section5("two"), plan)
    for field in ("message_ready", "message_start", "message_end", "message_bytes", "message_kind", "message_unit",
                  "gathered", "reduced", "forward_start", "memory_time", "memory_bytes"):
        assert np.array_equal(getattr(one, field), getattr(two, field)), field
    assert one.iteration_time == two.iteration_time and one.peak_memory == two.peak_memory


def _overlap(t):
    """Whether some collective starts before one issued earlier has ended (on one channel it
    would wait for it)."""
    ends = t.message_end.tolist()
    return any(start < max(ends[:j]) for j, start in enumerate(t.message_start.tolist()) if j)


@settings(deadline=None, max_examples=200)
@given(st.data())
def test_without_overlap_two_channels_are_one(data):
    profile = data.draw(profiles(1, 6))
    rs, ag = data.draw(alpha_beta), data.draw(alpha_beta)
    plan = data.draw(sharded_plans(profile.n))
    two = simulate(Problem(profile, pattern=FullySharded(rs, ag, channels="two")), plan)
    one = simulate(Problem(profile, pattern=FullySharded(rs, ag)), plan)
    if _overlap(two):
        return
    assert np.array_equal(one.message_start, two.message_start)
    assert np.array_equal(one.message_end, two.message_end)
    assert one.iteration_time == two.iteration_time and one.peak_memory == two.peak_memory


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_two_channels_keep_the_rules_and_the_bound(data):
    # Each channel first in, first out in issue order; a collective never beats its own cost
    # nor the bandwidth's share of it; the compute waits as on one channel; no plan beats
    # the bound, with or without a cap it keeps to.
    profile = data.draw(profiles(1, 7))
    halves = FullySharded(data.draw(alpha_beta), data.draw(alpha_beta), channels="two")
    plan = data.draw(sharded_plans(profile.n))
    if not plan.root and data.draw(st.booleans()):
        n = profile.n
        cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
        plan = plan.replace(reduce_bounds=[0, *cuts, profile.n])
    problem = Problem(profile, pattern=halves)
    t = simulate(problem, plan)
    kinds = np.asarray(t.message_kind)
    assert len(kinds) == plan.num_messages and np.all(np.diff(t.message_ready) >= 0)
    scale = 1e-12 * max(t.iteration_time, 1e-9)
    for kind, cost in ((0, halves.reduce_scatter), (1, halves.all_gather)):
        on = np.flatnonzero(kinds == kind)
        starts, ends, issue = t.message_start[on], t.message_end[on], t.message_ready[on]
        free = np.concatenate(([-math.inf], ends[:-1]))
        assert np.allclose(starts, np.maximum(issue, free), rtol=1e-12, atol=1e-15)
        assert np.all(ends - starts >= np.asarray(cost(t.message_bytes[on].astype(float))) - scale)
    # Bytes share one bandwidth: all the transfers take at least their sum from the first start.
    transfer = sum(halves.reduce_scatter.affine[1] * b if k == 0 else halves.all_gather.affine[1] * b
                   for k, b in zip(kinds.tolist(), t.message_bytes.tolist()))
    if len(kinds):
        assert t.message_end.max() - t.message_start.min() >= transfer * (1 - 1e-9) - 1e-15
    pieces = compute_pieces(problem, plan)
    assert pieces[-1].end == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)
    assert t.iteration_time >= sharded_lower_bound(problem) * (1 - 1e-9) - 1e-15
    # Within a cap the plan keeps, the capped bound holds too.
    cap = max(t.peak_memory, 1) * data.draw(st.sampled_from([1.0, 1.0001, 1.5, 3.0]))
    capped = Problem(profile, pattern=halves.with_cap(cap))
    assert capped.pattern.channels == "two"
    assert simulate(capped, plan).iteration_time >= sharded_lower_bound(capped) * (1 - 1e-9) - 1e-15


def test_the_bound_keeps_the_startups_that_cannot_overlap():
    # Uncapped, section 5: the first gather's and tensor 0's reduce-scatter's startups run
    # while nothing transfers, so the channel term is unchanged: 1 + 7 + 1 + 7 = 16 ms; the
    # largest term is ag(s_0) + F + B + rs(s_0) = 5 + 3 + 6 + 5 = 19 ms either way.
    two, one = sharded_lower_bound(section5("two")), sharded_lower_bound(section5("one"))
    assert two == one and round(two / MS, 9) == 19
    # Startups only (alpha = 1 ms, beta = 0), four 1 MB tensors without compute, capped at
    # 1 MB: at least 4 gathers and 4 scatters. One channel runs them in a row: 8 ms. Two
    # channels: the 4 forward gathers' and tensor 0's scatter's startups (5 ms), the gather
    # channel's 4 then tensor 0's scatter (5 ms), or ag(s_0) then the scatter channel's 4
    # (5 ms): 5 ms.
    profile = Profile.from_arrays([1e6] * 4, [0.0] * 4, [0.0] * 4)
    alpha = AlphaBeta(MS, 0.0)
    one = Problem(profile, pattern=FullySharded(alpha, alpha, memory_cap=1e6))
    two = Problem(profile, pattern=FullySharded(alpha, alpha, memory_cap=1e6, channels="two"))
    assert round(sharded_lower_bound(one) / MS, 9) == 8
    assert round(sharded_lower_bound(two) / MS, 9) == 5
    # A unit per tensor, resharded, no prefetch: no faster than the bound.
    t = simulate(two, ShardedPlan.per_tensor(profile, forward_prefetch=0, backward_prefetch=0))
    assert t.iteration_time >= sharded_lower_bound(two)


def test_refusals():
    with pytest.raises(ValueError, match="channels must be 'one' or 'two', got 'three'"):
        FullySharded(HALF, HALF, channels="three")
    with pytest.raises(ValueError, match="channels must be 'one' or 'two', got 2"):
        FullySharded(HALF, HALF, channels=2)
    curve = PiecewiseLinear([1e3, 1e6, 1e7], [1e-4, 1e-3, 2e-2])
    assert curve.affine is None
    with pytest.raises(ValueError, match="channels='two' needs affine costs.*all_gather"):
        FullySharded(HALF, curve, channels="two")
    FullySharded(HALF, curve)                             # one channel takes any cost
    problem = section5()
    with pytest.raises(ValueError, match="one communicator"):
        build_program(problem, ShardedPlan([0, 2, 3]))
    assert FullySharded.from_network("10gbe", 2, channels="two").channels == "two"
    assert section5().pattern.with_cap(1e9).channels == "two"
