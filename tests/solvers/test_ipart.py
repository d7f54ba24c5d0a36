"""iBatch and iPart (PAPERS.md, seed 4): hand-worked greedies, the guarantees against the
baselines, the greedy's own times against the evaluator, cuts, bounds and bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ps_strategies import ps_problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate, ParameterServer, PSPlan, offsets_iteration_time, ps_lower_bound
from fusionopt.solvers.papers import (
    NEXT_TENSOR, ipart_cuts, IPartGates, ipart_lookaheads, ipart_pull_greedy, ipart_push_greedy, IPartStream,
    ibatch, ipart,
)
from fusionopt.solvers.baselines import ps_default, ps_layer

MS = 1e-3
MB = 1_000_000
REL = 1e-9


def ms(values):
    return [round(float(v) / MS, 9) for v in values]


def chunks(plan):
    return [[(c.tensor, c.lo, c.hi) for c in m.chunks] for m in plan.messages]


# ---------------------------------------------------------------------------- iBatch by hand
def three_tensors() -> Profile:
    # MODEL.md section 5: forward order s = 4, 1, 2 MB, f = 1 ms each, b = 3, 2, 1 ms.
    return Profile.from_arrays([4 * MB, MB, 2 * MB], [MS] * 3, [3 * MS, 2 * MS, MS])


def cheap_pulls(**options) -> ParameterServer:
    # Pushes 1 ms + 1 ms/MB, pulls 0.2 ms + 0.2 ms/MB, no server update time.
    return ParameterServer(AlphaBeta(MS, 1e-9), AlphaBeta(0.2 * MS, 0.2e-9), **options)


def test_ibatch_by_hand_pushes_after_the_backward():
    # One push of 7 MB when the backward ends: 6 -> 14 ms; every pull waits for it.
    # Walk from t1: [t1] would be pulled 14 -> 15 and run forward 15 -> 16; the next
    # tensor's pull (t2, 0.4 ms) would end at 15.4 <= 16: close batch [t1].
    # Fit: the channel is free at 15, the forward needs more at 16: [t2] alone would end at
    # 15.4, [t2, t3] (0.2 + 0.6 ms) at 15.8 <= 16: the whole rest is batch 2.
    # Forward: t1 15 -> 16, t2 16 -> 17, t3 17 -> 18 ms. ps-default: pull 14 -> 15.6, 18.6 ms.
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    r = ibatch(problem)
    t = r.timeline
    assert r.plan.push.groups() == [[2, 1, 0]] and r.plan.pull.groups() == [[0], [1, 2]]
    assert ms(t.message_start) == [6.0] and ms(t.message_end) == [14.0]
    assert ms(t.pull_start) == [14.0, 15.0] and ms(t.pull_end) == [15.0, 15.8]
    assert ms(t.forward_start) == [15.0, 16.0, 17.0]
    assert round(r.iteration_time / MS, 9) == 18.0
    assert round(ps_default(problem).iteration_time / MS, 9) == 18.6
    assert r.method == "ibatch" and r.num_messages == 3
    assert r.stats["chosen"] == "greedy" and r.stats["batches"] == 2 and r.stats["pushes"] == "after-backward"
    assert round(r.stats["ps_default_time"] / MS, 9) == 18.6


def test_ibatch_by_hand_pushes_per_tensor():
    # Pushes as layer by layer: t3 1 -> 4, t2 4 -> 6, t1 6 -> 11 ms (their pulls' gates).
    # Walk from t1: pulled 11 -> 12, forward 12 -> 13; t2's pull would end at 12.4 <= 13:
    # batch [t1]. Fit: [t2, t3] waits for updates at 6 and 4 (long past), pulled
    # 12 -> 12.8 <= 13: batch 2. Forward t1 12 -> 13, t2 13 -> 14, t3 14 -> 15 ms.
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    r = ibatch(problem, pushes="per-tensor")
    t = r.timeline
    assert r.plan.push.groups() == [[2], [1], [0]] and r.plan.pull.groups() == [[0], [1, 2]]
    assert ms(t.message_end) == [4.0, 6.0, 11.0]
    assert ms(t.pull_ready) == [11.0, 6.0] and ms(t.pull_end) == [12.0, 12.8]
    assert ms(t.forward_start) == [12.0, 13.0, 14.0]
    assert round(r.iteration_time / MS, 9) == 15.0
    assert r.stats == {"pushes": "per-tensor", "batches": 2, "greedy_time": r.iteration_time,
                       "ps_default_time": pytest.approx(18.6 * MS, rel=REL), "chosen": "greedy"}


def test_ibatch_falls_back_to_the_default_ps():
    # Per-tensor pushes with a 10 ms startup: t3 1 -> 13, t2 13 -> 24, t1 24 -> 38 ms; the
    # greedy pulls [t1] 38 -> 39 and [t2, t3] 39 -> 39.8, forward 39 -> 42 ms. The default
    # plan (push 6 -> 23, pull 23 -> 24.6, forward 24.6 -> 27.6 ms) is returned.
    ps = ParameterServer(AlphaBeta(10 * MS, 1e-9), AlphaBeta(0.2 * MS, 0.2e-9))
    problem = Problem(three_tensors(), sync="layerwise", pattern=ps)
    r = ibatch(problem, pushes="per-tensor")
    assert r.stats["chosen"] == "ps-default" and round(r.stats["greedy_time"] / MS, 9) == 42.0
    assert r.plan == PSPlan.from_offsets(problem.profile)
    assert round(r.iteration_time / MS, 9) == 27.6


def test_ibatch_under_barrier_sync_is_the_default_ps():
    # No forward overlaps a pull: one pull message, the ps-default plan (the greedy's, on a tie).
    problem = Problem(three_tensors(), pattern=cheap_pulls())
    r = ibatch(problem)
    assert r.plan == PSPlan.from_offsets(problem.profile) and r.stats["batches"] == 1
    assert r.iteration_time == ps_default(problem).iteration_time and r.stats["chosen"] == "greedy"


# ---------------------------------------------------------------------------- iPart by hand
def one_large_tensor() -> Problem:
    # One 8 MB tensor, b = f = 8 ms (1 ms/MB), both directions 1 ms + 1 ms/MB, partitioned
    # compute with delta = 0, layerwise sync.
    profile = Profile.from_arrays([8 * MB], [8 * MS], [8 * MS])
    return Problem(profile, sync="layerwise", pattern=ParameterServer(AlphaBeta(MS, 1e-9), partition_compute=True))


def test_ipart_greedy_by_hand():
    # Pieces of at least 1 MB; look-ahead g = 2 MB (one of the sizes ipart tries).
    # Push phase, positions in MB, times in ms:
    #   walk from 0 (channel idle): the whole tensor is the last one, so look inside: a cut at y
    #   is ready at y and pushed by 2y + 1; the next 2 MB are computed by y + 2: hidden while
    #   y <= 1. The largest such cut: [0, 1), ready 1, pushed 1 -> 3.
    #   fit: the channel frees at 3, the backward has reached 3 MB: [1, 3), pushed 3 -> 6;
    #   then [3, 6), 6 -> 10; at 10 the backward is over: the rest [6, 8), 10 -> 13.
    problem = one_large_tensor()
    push_stream, pull_stream = IPartStream.build(problem, "push"), IPartStream.build(problem, "pull")
    push_cuts = ipart_cuts(problem, "push", True, MB)
    pull_cuts = ipart_cuts(problem, "pull", True, MB)
    assert push_cuts.min_piece == MB and push_cuts.allowed
    push = ipart_push_greedy(problem, push_stream, push_cuts, 2 * MB)
    assert push == [1 * MB, 3 * MB, 6 * MB]
    gates = IPartGates.of(problem, push)
    assert gates.starts == [0, 1 * MB, 3 * MB, 6 * MB] and ms(gates.times) == [3.0, 6.0, 10.0, 13.0]
    assert round(gates.backward_end / MS, 9) == 8.0
    # Pull phase (the forward may start at 8, when the backward ends):
    #   fit: [0, 1) is up to date at 3 and pulled by 5 <= 8; a longer piece waits for the
    #   update at 6 and ends after 8: [0, 1), pulled 3 -> 5, forward 8 -> 9.
    #   fit: [1, 3) (update 6) pulled 6 -> 9 <= 9: forward 9 -> 11.
    #   fit: the next bytes are updated at 10, 10 + 1 + S > 11: nothing fits. Walk: the push
    #   partition ending at 6 MB is a boundary: [3, 6) pulled 10 -> 14, forward 14 -> 17, and
    #   the look-ahead [6, 8) pulled 14 -> 17 <= 17: close at 6.
    #   fit: [6, 8) ends at 17 <= 17: the rest. Forward 17 -> 19 ms.
    pull = ipart_pull_greedy(problem, pull_stream, pull_cuts, gates, 2 * MB)
    assert pull == [1 * MB, 3 * MB, 6 * MB]
    assert round(offsets_iteration_time(problem, push, pull) / MS, 9) == 19.0


def test_ipart_by_hand():
    # The plan of the greedy above is what ipart returns; the baselines send the tensor whole:
    # push 8 -> 17, pull 17 -> 26, forward 26 -> 34 ms.
    problem = one_large_tensor()
    r = ipart(problem, min_partition_bytes=MB)
    t = r.timeline
    pieces = [[(0, 0, MB)], [(0, MB, 3 * MB)], [(0, 3 * MB, 6 * MB)], [(0, 6 * MB, 8 * MB)]]
    assert chunks(r.plan.push) == pieces and chunks(r.plan.pull) == pieces
    assert ms(t.message_ready) == [1.0, 3.0, 6.0, 8.0]
    assert ms(t.message_start) == [1.0, 3.0, 6.0, 10.0]
    assert ms(t.message_end) == [3.0, 6.0, 10.0, 13.0]
    assert ms(t.pull_start) == [3.0, 6.0, 10.0, 14.0]
    assert ms(t.pull_end) == [5.0, 9.0, 14.0, 17.0]
    assert ms(t.forward_start) == [8.0]
    assert round(r.iteration_time / MS, 9) == 19.0
    assert r.stats["chosen"] == "greedy" and r.stats["push_lookahead"] == 2 * MB
    assert r.stats["push_cuts_inside"] and r.stats["tensors_cut"] == 1
    assert (r.stats["push_partitions"], r.stats["pull_partitions"]) == (4, 4)
    for name in ("ps_default_time", "ps_layer_time"):
        assert round(r.stats[name] / MS, 9) == 34.0
    assert round(ps_layer(problem).iteration_time / MS, 9) == 34.0
    assert r.lower_bound <= r.iteration_time


def test_ipart_without_partitioned_compute_cuts_no_tensor():
    # The same tensor without partitioned compute: a piece is ready only when the whole
    # backward ends and the forward waits for every piece, so the greedy does not cut, and
    # the plans are the baselines' (34 ms).
    profile = one_large_tensor().profile
    problem = Problem(profile, sync="layerwise", pattern=ParameterServer(AlphaBeta(MS, 1e-9)))
    r = ipart(problem, min_partition_bytes=MB)
    assert r.plan == PSPlan.from_offsets(profile) and r.stats["tensors_cut"] == 0
    assert round(r.iteration_time / MS, 9) == 34.0


def test_ipart_on_three_tensors_by_hand():
    # The ibatch profile with the same costs and per-tensor pushes. Nothing beats layer by
    # layer here: pushes end at 4, 6 and 11 ms (WFBP: each push ends before the next
    # gradient is ready but the last), pulls t1 11 -> 12, t2 12 -> 12.4, t3 12.4 -> 12.8,
    # forward 12 -> 15 ms, the forward never waits after t1: 15 ms, the bound of a plan
    # whose pulls start at 11 (11 + 1 + 3).
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    r = ipart(problem)
    assert round(r.iteration_time / MS, 9) == 15.0
    assert round(r.stats["ps_layer_time"] / MS, 9) == 15.0 and round(r.stats["ps_default_time"] / MS, 9) == 18.6
    assert ms(r.timeline.message_end)[-1] == 11.0


# ---------------------------------------------------------------------------- guarantees
@settings(deadline=None)
@given(problem=ps_problems())
def test_ipart_is_never_slower_than_either_baseline(problem):
    r = ipart(problem)
    default, layer = ps_default(problem).iteration_time, ps_layer(problem).iteration_time
    assert r.iteration_time <= min(default, layer)
    assert r.stats["ps_default_time"] == default and r.stats["ps_layer_time"] == layer
    assert r.iteration_time == min(r.stats["greedy_time"], default, layer)
    r.plan.validate(problem.profile)
    assert r.iteration_time == simulate(problem, r.plan).iteration_time
    assert ps_lower_bound(problem) <= r.iteration_time * (1 + REL)
    assert r.lower_bound <= r.iteration_time and r.method == "ipart"


@settings(deadline=None)
@given(problem=ps_problems(), pushes=st.sampled_from(["after-backward", "per-tensor"]))
def test_ibatch_is_never_slower_than_the_default_ps(problem, pushes):
    r = ibatch(problem, pushes=pushes)
    default = ps_default(problem).iteration_time
    assert r.iteration_time <= default and r.stats["ps_default_time"] == default
    r.plan.validate(problem.profile)
    assert ps_lower_bound(problem) <= r.iteration_time * (1 + REL)
    # iBatch batches whole tensors: every chunk is a whole tensor, pulls in forward order.
    assert [i for group in r.plan.pull.groups() for i in group] == list(range(problem.profile.n))
    for message in r.plan.pull.messages:
        assert all(c.lo == 0 and c.hi == problem.profile.sizes[c.tensor] for c in message.chunks)
    if problem.sync == "barrier":
        assert r.plan.pull.num_messages == 1


@settings(deadline=None, max_examples=30)
@given(problem=ps_problems(partition=True), min_partition=st.integers(10_000, 3_000_000))
def test_ipart_pieces_respect_the_smallest_piece_and_delta(problem, min_partition):
    # Every chunk of a cut tensor keeps min_partition_bytes and at least delta of compute.
    r = ipart(problem, min_partition_bytes=min_partition)
    profile, delta = problem.profile, problem.pattern.delta
    for plan, compute in ((r.plan.push, profile.backward), (r.plan.pull, profile.forward)):
        pieces = [[] for _ in range(profile.n)]
        for message in plan.messages:
            for c in message.chunks:
                pieces[c.tensor].append(c.hi - c.lo)
        for i, lengths in enumerate(pieces):
            if len(lengths) > 1:
                assert min(lengths) >= min_partition
                assert all(compute[i] * n / profile.sizes[i] >= delta * (1 - REL) for n in lengths)


@settings(deadline=None)
@given(problem=ps_problems(partition=False))
def test_without_partitioned_compute_no_tensor_is_cut(problem):
    r = ipart(problem)
    assert r.stats["tensors_cut"] == 0 and not r.stats["push_cuts_inside"]
    for plan in (r.plan.push, r.plan.pull):
        for message in plan.messages:
            assert all(c.lo == 0 and c.hi == problem.profile.sizes[c.tensor] for c in message.chunks)


@settings(deadline=None)
@given(problem=ps_problems(sync="layerwise"), allowed=st.booleans(),
       lookahead=st.sampled_from([NEXT_TENSOR, 4, 1000, 100_000, 10_000_000]))
def test_the_greedy_times_its_partitions_as_the_model_does(problem, allowed, lookahead):
    # Replay each greedy's own clock over the partitions it chose: push ready and end times
    # equal the simulator's, and the pull greedy's last forward is the evaluator's T.
    profile = problem.profile
    push_stream, pull_stream = IPartStream.build(problem, "push"), IPartStream.build(problem, "pull")
    push = ipart_push_greedy(problem, push_stream, ipart_cuts(problem, "push", allowed, None), lookahead)
    gates = IPartGates.of(problem, push)
    pull = ipart_pull_greedy(problem, pull_stream, ipart_cuts(problem, "pull", allowed, None), gates, lookahead)
    timeline = simulate(problem, PSPlan.from_offsets(profile, push, pull))
    x, clock, free, ready, ends = 0, 0.0, -math.inf, [], []
    for y in push + [profile.total_bytes]:
        clock += push_stream.work_between(x, y)
        free = max(clock, free) + float(problem.cost(y - x))
        ready.append(clock)
        ends.append(free)
        x = y
    assert np.allclose(ready, timeline.message_ready, rtol=REL, atol=1e-15)
    assert np.allclose(ends, timeline.message_end, rtol=REL, atol=1e-15)
    p, free, forward = 0, -math.inf, gates.backward_end
    for y in pull + [profile.total_bytes]:
        free = max(free, gates.between(p, y)) + float(problem.pattern.pull(y - p))
        forward = max(forward, free) + pull_stream.work_between(p, y)
        p = y
    assert forward == pytest.approx(timeline.iteration_time, rel=REL, abs=1e-15)


def test_lookahead_sizes():
    # The next tensor, then sizes from the smallest piece to the whole stream.
    assert ipart_lookaheads(8 * MB, MB, 4) == [NEXT_TENSOR, MB, 2_828_427, 8 * MB]       # ratio 2 ** 1.5
    assert ipart_lookaheads(8 * MB, MB, 1) == [NEXT_TENSOR]
    assert ipart_lookaheads(8 * MB, MB, 2) == [NEXT_TENSOR, 8 * MB]
    assert ipart_lookaheads(8 * MB, MB, 8) == [NEXT_TENSOR, MB, 1414214, 2 * MB, 2828427, 4 * MB, 5656854, 8 * MB]
    assert ipart_lookaheads(10, 100, 5) == [NEXT_TENSOR, 10]


def test_a_cut_only_pays_when_its_delta_is_covered():
    # delta = 1 ms per piece on the 8 ms tensor (1 ms/MB): a piece needs 1 MB of compute to
    # cover its overhead; with pieces of at least 3 MB the tensor splits at most in two.
    profile = one_large_tensor().profile
    ps = ParameterServer(AlphaBeta(MS, 1e-9), partition_compute=True, delta=MS)
    problem = Problem(profile, sync="layerwise", pattern=ps)
    r = ipart(problem, min_partition_bytes=3 * MB)
    assert r.plan.push.num_messages <= 2 and r.plan.pull.num_messages <= 2
    assert r.iteration_time <= 34 * MS


# ---------------------------------------------------------------------------- zoo scale
def test_ipart_on_a_zoo_model_at_72_nodes():
    # GoogLeNet on V100s (the roofline estimate, which makes it communication-bound), batch
    # 64, 72 workers and 72 co-located servers on 10GbE (BigDL's layout). Greedy partitions
    # beat both baselines by a clear margin (measured: 1.27x over ps-default, 1.20x over
    # ps-layer).
    from fusionopt import zoo

    profile = zoo.profile("googlenet", device="v100", batch=64, compute="roofline")
    ps = ParameterServer.from_network("10gbe", 72, 72, colocated=True, partition_compute=True)
    problem = Problem(profile, sync="layerwise", pattern=ps)
    r = ipart(problem)
    assert r.stats["chosen"] == "greedy"
    assert r.stats["ps_default_time"] / r.iteration_time > 1.2
    assert r.stats["ps_layer_time"] / r.iteration_time > 1.15
    assert ibatch(problem).iteration_time < ps_default(problem).iteration_time


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("method, name", [(ipart, "ipart"), (ibatch, "ibatch")])
def test_a_parameter_server_is_required(method, name):
    problem = Problem(three_tensors(), AlphaBeta(MS, 1e-9))
    with pytest.raises(ValueError, match=rf"^{name} needs a parameter-server problem: Problem\(profile, "
                                         r"pattern=ParameterServer\(...\)\)$"):
        method(problem)
    with pytest.raises(ValueError, match="^problem must be a Problem, got Profile$"):
        method(three_tensors())


@pytest.mark.parametrize("value", [0, -4, 2.5, "1MB", True])
def test_bad_min_partition_bytes(value):
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls(partition_compute=True))
    with pytest.raises(ValueError, match=r"^min_partition_bytes must be"):
        ipart(problem, min_partition_bytes=value)


@pytest.mark.parametrize("value", [0, -1, 2.0, None, False])
def test_bad_lookahead_sizes(value):
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    with pytest.raises(ValueError, match=rf"^lookahead_sizes must be an integer >= 1, got {value!r}$"):
        ipart(problem, lookahead_sizes=value)


@pytest.mark.parametrize("value", ["after", "", None, 1])
def test_bad_pushes(value):
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    with pytest.raises(ValueError, match=rf"^pushes must be 'after-backward' or 'per-tensor', got {value!r}$"):
        ibatch(problem, pushes=value)


def test_options_are_keyword_only():
    problem = Problem(three_tensors(), sync="layerwise", pattern=cheap_pulls())
    with pytest.raises(TypeError):
        ipart(problem, 1000)
    with pytest.raises(TypeError):
        ibatch(problem, "per-tensor")
