"""P3 and ByteScheduler (fusionopt.solvers.papers._priority): hand-worked timelines, the policies
checked against the simulator's timeline, bounds, the tuner and bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, problems, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Chunk, Problem, Profile, simulate, fluid_bound
from fusionopt.solvers import Status
from fusionopt.solvers.papers import (
    bytescheduler as deployed, bytescheduler_slices, bytescheduler_tuned as deployed_tuned, p3, p3_slices,
)

# The unfused policy: no Horovod fusion, no cycle, the credit as given.
UNFUSED = {"fusion_threshold_bytes": 0, "cycle_time": 0}


def bytescheduler(problem, **options):
    return deployed(problem, **UNFUSED, credit_tuning=False, **options)


def bytescheduler_tuned(problem, **options):
    return deployed_tuned(problem, **UNFUSED, **options)

MS = 1e-3
MB = 1_000_000                       # bytes: 250,000 float32 parameters
QUARTER = 250_000                    # parameters in 1 MB


def worked_example(alpha: float, **extensions) -> Problem:
    # MODEL.md section 5: ready times t2 1 ms, t1 3 ms, t0 6 ms; B = 6, F = 3 ms.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha, 1e-9), sync="layerwise", **extensions)


def overtaking_case(**extensions) -> Problem:
    # t1 (4 MB) is ready at 1 ms, t0 (1 MB) at 2 ms; t0's forward is long (3 ms), so the
    # sooner t0 is reduced, the sooner the step ends. No startup: 1 MB takes 1 ms.
    profile = Profile.from_arrays([MB, 4 * MB], [3 * MS, MS], [MS, MS])
    return Problem(profile, AlphaBeta(0.0, 1e-9), sync="layerwise", **extensions)


def chunks(result):
    return [[(c.tensor, c.lo, c.hi) for c in m.chunks] for m in result.plan.messages]


def ms(values):
    return (np.asarray(values) * 1e3).round(9).tolist()


# ---------------------------------------------------------------------------- hand-worked
def test_p3_worked_example_timeline():
    # 1 MB slices, 2 ms each with alpha = 1 ms. t=1: t2's first slice (1-3). t=3: t1 is
    # ready and has priority over t2's second slice: t1 3-5, t2 5-7. t0 (ready at 6)
    # waits for the channel: 7-9, 9-11, 11-13, 13-15. C = [15, 5, 7] ms; the forward
    # runs t0 15-16, t1 16-17, t2 17-18: T = 18 ms.
    result = p3(worked_example(1 * MS), slice_parameters=QUARTER)
    assert chunks(result) == [
        [(2, 0, MB)], [(1, 0, MB)], [(2, MB, 2 * MB)],
        [(0, 0, MB)], [(0, MB, 2 * MB)], [(0, 2 * MB, 3 * MB)], [(0, 3 * MB, 4 * MB)],
    ]
    timeline = result.timeline
    assert ms(timeline.message_start) == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0]
    assert ms(timeline.message_end) == [3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]
    assert ms(timeline.reduced) == [15.0, 5.0, 7.0]
    assert ms(timeline.forward_start) == [15.0, 16.0, 17.0]
    assert round(result.iteration_time * 1e3, 9) == 18.0
    assert result.stats["policy_iteration_time"] == result.iteration_time
    assert result.stats["slices"] == 7 and result.stats["slice_bytes"] == MB
    assert result.stats["slice_parameters"] == QUARTER


def test_p3_without_startup_meets_the_fluid_bound():
    # alpha = 0: t2 1-2, 2-3; t1 3-4; t0 6-7 .. 9-10; T = 10 + 3 = 13 ms, the fluid bound.
    problem = worked_example(0.0)
    result = p3(problem, slice_parameters=QUARTER)
    assert ms(result.timeline.message_start) == [1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0]
    assert round(result.iteration_time * 1e3, 9) == 13.0
    assert result.iteration_time == pytest.approx(fluid_bound(problem), rel=1e-12)
    assert result.status == Status.OPTIMAL


def test_bytescheduler_worked_example_credit_of_two_partitions():
    # Both of t2's slices are posted at 1 ms (2 MB = the credit): 1-3, 3-5. t1, ready at
    # 3 ms, is posted when t2's first slice completes and queues behind the second: 5-7.
    # t0's slices 7-15. Same T as P3 (t0 is last either way), other order.
    result = bytescheduler(worked_example(1 * MS), partition_parameters=QUARTER, credit_parameters=2 * QUARTER)
    assert result.plan.groups() == [[2], [2], [1], [0], [0], [0], [0]]
    assert ms(result.timeline.message_start) == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0]
    assert ms(result.timeline.reduced) == [15.0, 7.0, 5.0]
    assert round(result.iteration_time * 1e3, 9) == 18.0


T1 = [(1, 0, MB)], [(1, MB, 2 * MB)], [(1, 2 * MB, 3 * MB)], [(1, 3 * MB, 4 * MB)]
T0 = [(0, 0, MB)]


@pytest.mark.parametrize("credit, order, reduced, iteration_ms", [
    # One partition: t0, ready at 2 ms, goes next (2-3): C0 = 3, forward 3-6, 6-7: T = 7.
    (QUARTER, [T1[0], T0, T1[1], T1[2], T1[3]], [3.0, 6.0], 7.0),
    # Two: at 1 ms t1's slices 1-2 and 2-3 are posted; t0 queues behind the second (3-4).
    (2 * QUARTER, [T1[0], T1[1], T0, T1[2], T1[3]], [4.0, 6.0], 8.0),
    (3 * QUARTER, [T1[0], T1[1], T1[2], T0, T1[3]], [5.0, 6.0], 9.0),
    # The whole tensor is posted at 1 ms: t0 goes last (5-6), as with WFBP.
    (4 * QUARTER, [T1[0], T1[1], T1[2], T1[3], T0], [6.0, 5.0], 10.0),
])
def test_bytescheduler_credit_delays_the_urgent_tensor(credit, order, reduced, iteration_ms):
    # t1 is 1M parameters, above the 250,000 partition: 4 slices of 1 MB, 1 ms each; the
    # five slices run back to back from 1 to 6 ms. T = max(C0 + 3, C1) + 1.
    result = bytescheduler(overtaking_case(), partition_parameters=QUARTER, credit_parameters=credit)
    assert chunks(result) == order
    assert ms(result.timeline.message_start) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert ms(result.timeline.reduced) == reduced
    assert round(result.iteration_time * 1e3, 9) == iteration_ms
    assert result.stats["credit_parameters"] == credit and result.stats["slices"] == 5


def test_credit_of_one_partition_is_p3_and_meets_the_fluid_bound_here():
    problem = overtaking_case()
    one = bytescheduler(problem, partition_parameters=QUARTER, credit_parameters=QUARTER)
    assert chunks(p3(problem, slice_parameters=QUARTER)) == chunks(one)
    assert one.iteration_time == pytest.approx(fluid_bound(problem), rel=1e-12)
    assert one.status == Status.OPTIMAL


def test_bytescheduler_on_two_channels():
    # A free channel always takes a ready slice; the credit (one partition) holds back
    # only what would queue. t=1: t1's slices 1 and 2 take both channels, sharing the
    # bandwidth: 1-3. t0, ready at 2, waits (2 slices posted, 2 MB > the credit). t=3:
    # t0 and t1's third slice share 3-5, the fourth runs alone 5-6. C0 = 5 ms: T = 9 ms.
    result = bytescheduler(overtaking_case(channels=2), partition_parameters=QUARTER, credit_parameters=QUARTER)
    assert chunks(result) == [T1[0], T1[1], T0, T1[2], T1[3]]
    assert ms(result.timeline.message_end) == pytest.approx([3.0, 3.0, 5.0, 5.0, 6.0], rel=1e-12)
    assert result.iteration_time == pytest.approx(9 * MS, rel=1e-12)
    # A credit of the whole tensor posts t1 at once: t0 queues behind it (5-6), T = 10 ms.
    whole = bytescheduler(overtaking_case(channels=2), partition_parameters=QUARTER, credit_parameters=4 * QUARTER)
    assert chunks(whole) == [T1[0], T1[1], T1[2], T1[3], T0]
    assert whole.iteration_time == pytest.approx(10 * MS, rel=1e-12)
    for r in (result, whole):
        assert r.stats["policy_iteration_time"] == pytest.approx(r.iteration_time, rel=1e-12)


# ---------------------------------------------------------------------------- slicing
def test_p3_slices_cut_every_tensor_with_a_shorter_last_slice():
    # float32: 10 parameters (40 B) and 4 parameters (16 B); slices of 4 parameters.
    profile = Profile.from_arrays([40, 16], [0.0] * 2, [MS] * 2)
    slices = p3_slices(Problem(profile, AlphaBeta(0, 1e-9), sync="layerwise"), 4)
    assert slices == [Chunk(0, 0, 16), Chunk(0, 16, 32), Chunk(0, 32, 40), Chunk(1, 0, 16)]


def test_bytescheduler_splits_only_tensors_above_the_partition_into_nearly_equal_slices():
    # Partition 4 parameters: 10 parameters -> 3 slices of 3, 3 and 4; exactly 4 stays
    # whole; 5 -> 2 and 3; a 2-byte tensor (half an element) stays whole.
    profile = Profile.from_arrays([40, 16, 20, 2], [0.0] * 4, [MS] * 4, dtype_bytes=4)
    slices = bytescheduler_slices(Problem(profile, AlphaBeta(0, 1e-9), sync="layerwise"), 4)
    assert [(c.tensor, c.nbytes // 4) for c in slices] == [(0, 3), (0, 3), (0, 4), (1, 4), (2, 2), (2, 3), (3, 0)]
    assert slices[-1] == Chunk(3, 0, 2)


@settings(deadline=None)
@given(profiles(), st.integers(20_000, 3_000_000))
def test_bytescheduler_slice_count_and_sizes(profile, partition):
    slices = bytescheduler_slices(Problem(profile, AlphaBeta(0, 1e-9), sync="layerwise"), partition)
    limit = partition * profile.dtype_bytes
    for i, size in enumerate(profile.sizes.tolist()):
        mine = [c.nbytes for c in slices if c.tensor == i]
        assert len(mine) == math.ceil(size / limit) and sum(mine) == size
        assert max(mine) <= limit + profile.dtype_bytes and max(mine) - min(mine) <= profile.dtype_bytes


# ---------------------------------------------------------------------------- properties
parameters = st.integers(50_000, 3_000_000)


def check_result(problem, result):
    result.plan.validate(problem.profile)
    assert result.iteration_time == simulate(problem, result.plan).iteration_time
    if problem.cost.affine is not None:
        assert result.iteration_time >= fluid_bound(problem) * (1 - 1e-9)
    assert all(len(m.chunks) == 1 for m in result.plan.messages)


@settings(deadline=None, max_examples=60)
@given(problems(sync="layerwise"), parameters, st.integers(1, 8))
def test_plans_are_valid_and_the_simulator_reproduces_the_policy(problem, partition, credit_multiple):
    for result in (p3(problem, slice_parameters=partition),
                   bytescheduler(problem, partition_parameters=partition,
                                 credit_parameters=partition * credit_multiple)):
        check_result(problem, result)
        # The policy's own T, exactly (each call also checks every message's times).
        assert result.iteration_time == result.stats["policy_iteration_time"]


@settings(deadline=None, max_examples=60)
@given(problems(sync="layerwise"), parameters)
def test_p3_sends_the_best_ready_slice_whenever_the_channel_frees(problem, slice_parameters):
    # Read off the simulator's timeline, independently of the policy's code: a message
    # starting at t has the best priority among the unsent slices ready at t, and the
    # channel idles only while no unsent slice is ready.
    result = p3(problem, slice_parameters=slice_parameters)
    priority = [(m.chunks[0].tensor, m.chunks[0].lo) for m in result.plan.messages]
    ready = result.timeline.message_ready
    start, end = result.timeline.message_start, result.timeline.message_end
    for k in range(len(priority)):
        waiting = [j for j in range(k + 1, len(priority)) if ready[j] <= start[k]]
        assert all(priority[k] < priority[j] for j in waiting)
        if k == 0 or start[k] > end[k - 1]:
            assert start[k] == min(ready[k:])


@settings(deadline=None, max_examples=40)
@given(problems(sync="layerwise"), parameters)
def test_a_credit_of_the_whole_model_posts_in_ready_order(problem, partition):
    result = bytescheduler(problem, partition_parameters=partition,
                           credit_parameters=int(problem.profile.total_bytes) + partition)
    ready = problem.profile.ready_times
    sent = [(m.chunks[0].tensor, m.chunks[0].lo) for m in result.plan.messages]
    assert sent == sorted(sent, key=lambda s: (ready[s[0]], s))


@settings(deadline=None, max_examples=40)
@given(profiles(), alpha_beta, st.integers(1, 40), st.lists(st.integers(1, 4), min_size=8, max_size=8))
def test_a_credit_of_one_partition_is_p3_when_every_slice_is_full(profile, cost, partition, multiples):
    # Sizes whole multiples of the partition: ByteScheduler's slices are P3's, and a
    # credit of one partition admits one slice at a time.
    bytes_per = partition * profile.dtype_bytes
    full = Profile.from_arrays([bytes_per * multiples[i] for i in range(profile.n)],
                               profile.forward, profile.backward, update=profile.update)
    problem = Problem(full, cost, sync="layerwise")
    assert chunks(bytescheduler(problem, partition_parameters=partition, credit_parameters=partition)) \
        == chunks(p3(problem, slice_parameters=partition))


@settings(deadline=None, max_examples=60)
@given(profiles(), alpha_beta, st.sampled_from([1, 2, 3]), st.sampled_from([1.0, 1.5]),
       st.sampled_from([0.0, 1e-10]), st.sampled_from(["channel", "compute"]), parameters, st.integers(1, 8))
def test_extensions_the_simulator_follows_the_policy(profile, cost, channels, contention, copy_cost, copy_on,
                                                     partition, credit_multiple):
    problem = Problem(profile, cost, sync="layerwise", channels=channels, contention=contention,
                      copy_cost=copy_cost, copy_on=copy_on)
    for result in (p3(problem, slice_parameters=partition),
                   bytescheduler(problem, partition_parameters=partition,
                                 credit_parameters=partition * credit_multiple)):
        check_result(problem, result)
        # Event by event in both: equal up to the rounding of their time steps.
        assert result.stats["policy_iteration_time"] == pytest.approx(result.iteration_time, rel=1e-9, abs=1e-15)


# ---------------------------------------------------------------------------- the tuner
@settings(deadline=None, max_examples=15)
@given(problems(sync="layerwise", max_n=6))
def test_tuned_is_never_worse_than_the_presets(problem):
    tuned = bytescheduler_tuned(problem)
    default = bytescheduler(problem)
    assert tuned.iteration_time <= default.iteration_time
    assert tuned.iteration_time <= bytescheduler(problem, preset="advised").iteration_time
    assert tuned.stats["default_iteration_time"] == default.iteration_time
    assert tuned.stats["evaluated"] == 38
    check_result(problem, tuned)


def test_tuned_finds_the_small_credit_and_reports_it():
    problem = overtaking_case()
    # Defaults: no tensor is above 1M parameters, WFBP's order, 10 ms.
    assert round(bytescheduler(problem).iteration_time * 1e3, 9) == 10.0
    tuned = bytescheduler_tuned(problem, partitions=[QUARTER, 4 * QUARTER], credits=[QUARTER, 2 * QUARTER, 4 * QUARTER])
    # The presets, then (250k: 250k, 500k, 1M) and (1M: 1M): 6 candidates.
    assert tuned.stats["evaluated"] == 6
    assert (tuned.stats["partition_parameters"], tuned.stats["credit_parameters"]) == (QUARTER, QUARTER)
    assert round(tuned.iteration_time * 1e3, 9) == 7.0
    assert tuned.method == "bytescheduler-tuned"
    # The default grid's finest setting, 2^16 parameters of partition and credit, cuts t0
    # into 4 and t1 into 16 slices of 62,500 parameters (0.25 ms); a credit of 65,536
    # admits two of them, so t0 (ready at 2 ms) waits behind one more slice: its slices
    # run 2.25-3.25, T = 3.25 + 3 + 1 ms.
    default_grid = bytescheduler_tuned(problem)
    assert (default_grid.stats["partition_parameters"], default_grid.stats["credit_parameters"]) == (2**16, 2**16)
    assert default_grid.iteration_time == pytest.approx(7.25 * MS, rel=1e-12)


# ---------------------------------------------------------------------------- presets and errors
def test_presets():
    problem = worked_example(1 * MS)
    advised = bytescheduler(problem, preset="advised")
    assert (advised.stats["partition_parameters"], advised.stats["credit_parameters"]) == (8_000_000, 16_000_000)
    assert advised.stats["preset"] == "advised"
    default = bytescheduler(problem, preset="default")
    assert (default.stats["partition_parameters"], default.stats["credit_parameters"]) == (1_000_000, 4_000_000)
    with pytest.raises(ValueError, match="unknown preset 'fast'"):
        bytescheduler(problem, preset="fast")
    with pytest.raises(ValueError, match="preset='advised' sets partition_parameters"):
        bytescheduler(problem, preset="advised", partition_parameters=2_000_000)


@pytest.mark.parametrize("solver, method", [(p3, "p3"), (deployed, "bytescheduler"),
                                            (deployed_tuned, "bytescheduler-tuned")])
def test_barrier_sync_is_refused(solver, method):
    problem = Problem(worked_example(MS).profile, AlphaBeta(MS, 1e-9), sync="barrier")
    with pytest.raises(ValueError, match=f"^{method} is for sync='layerwise' only"):
        solver(problem)


@pytest.mark.parametrize("bad", [0, -40_000, 1.5, "40000", True, float("nan"), float("inf"), None])
def test_bad_slice_partition_and_credit(bad):
    problem = worked_example(MS)
    with pytest.raises(ValueError, match="slice_parameters must be a positive whole number"):
        p3(problem, slice_parameters=bad)
    with pytest.raises(ValueError, match="partition_parameters must be a positive whole number"):
        bytescheduler(problem, partition_parameters=bad)
    with pytest.raises(ValueError, match="credit_parameters must be a positive whole number"):
        bytescheduler(problem, credit_parameters=bad)
    with pytest.raises(ValueError, match="partitions must be a positive whole number"):
        bytescheduler_tuned(problem, partitions=[QUARTER, bad])
    with pytest.raises(ValueError, match="credits must be a positive whole number"):
        bytescheduler_tuned(problem, credits=[bad])


def test_whole_floats_are_accepted():
    problem = worked_example(MS)
    assert chunks(p3(problem, slice_parameters=250_000.0)) == chunks(p3(problem, slice_parameters=QUARTER))


def test_credit_below_one_partition_is_an_error():
    problem = worked_example(MS)
    with pytest.raises(ValueError, match="credit_parameters = 999999 is smaller than one partition"):
        bytescheduler(problem, credit_parameters=999_999)
    with pytest.raises(ValueError, match="no credit in \\[1000\\] is at least one of the partitions"):
        bytescheduler_tuned(problem, partitions=[2_000], credits=[1_000])
    with pytest.raises(ValueError, match="partitions is empty"):
        bytescheduler_tuned(problem, partitions=[])
    with pytest.raises(ValueError, match="credits is empty"):
        bytescheduler_tuned(problem, credits=[])
