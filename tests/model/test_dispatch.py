"""The dynamic policies of the model: priority dispatch with a window, cycle-tick fusion.

Each policy times its own messages; the simulator, judging the static plan it emits, must
give the same times on the plain model, exactly."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Plan, Problem, Profile, simulate, PriorityChannels, credit_window, dispatch_program, free_channel_window,
    priority_dispatch, run_program as run, Chunk, credit_ticks, cycle_ticks, tick_policy, TickChannels,
)
from fusionopt.solvers import solve

MS = 1e-3
MB = 1_000_000


def section5(alpha_ms: float, sync: str = "layerwise") -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), sync=sync)


def megabyte_slices(problem: Problem) -> list[Chunk]:
    return [Chunk(i, lo, min(lo + MB, size)) for i, size in enumerate(problem.profile.sizes.tolist())
            for lo in range(0, size, MB)]


def tensors(slices, order):
    return [slices[s].tensor for s in order]


def test_windows_by_hand():
    problem = section5(1)
    slices = megabyte_slices(problem)
    # P3: only a free channel takes a slice, so t1 (ready at 3 ms) overtakes t2's second.
    p3 = priority_dispatch(problem, slices, free_channel_window(1))
    assert tensors(slices, p3.order) == [2, 1, 2, 0, 0, 0, 0]
    assert (p3.start / MS).round(9).tolist() == [1, 3, 5, 7, 9, 11, 13]
    # A credit of 2 MB: t2's two slices are posted at 1 ms, and t1 queues behind them.
    credit = priority_dispatch(problem, slices, credit_window(1, 2 * MB))
    assert tensors(slices, credit.order) == [2, 2, 1, 0, 0, 0, 0]
    # The window is a plug-in: one that always posts is the same schedule here.
    always = priority_dispatch(problem, slices, lambda count, nbytes: True)
    assert always.order == credit.order and np.array_equal(always.end, credit.end)
    assert round(p3.iteration_time / MS, 9) == round(credit.iteration_time / MS, 9) == 18.0


def test_cycle_ticks_by_hand():
    problem = section5(3, sync="barrier")
    alone = lambda batch: [[i] for i in batch]                  # noqa: E731
    # GPU: ticks at 0, 3, 6 ms; t1 (ready at 6) is released at 6 and waits for the channel.
    gpu = cycle_ticks(problem, alone, 3 * MS)
    assert gpu.groups == [[2], [1], [0]] and gpu.cycles == 2
    assert [round(t / MS, 9) for t in gpu.release] == [3, 3, 6]
    assert [round(t / MS, 9) for t in gpu.ends] == [8, 12, 19]
    # CPU: the thread runs the cycle's collectives itself, so its next tick is at 12 ms.
    cpu = cycle_ticks(problem, alone, 3 * MS, wait_for_collectives=True)
    assert [round(t / MS, 9) for t in cpu.release] == [3, 3, 12]
    assert [round(t / MS, 9) for t in cpu.ends] == [8, 12, 19]
    # The fuse rule is a plug-in: everything of a cycle in one message.
    together = cycle_ticks(problem, lambda batch: [list(batch)], 3 * MS)
    assert together.groups == [[2, 1], [0]]
    assert [round(t / MS, 9) for t in together.ends] == [3 + 3 + 3, 9 + 3 + 4]


@settings(deadline=None)
@given(problem=problems(max_n=8, sync="layerwise"), credit=st.integers(1, 4), p3=st.booleans())
def test_simulator_reproduces_priority_dispatch(problem, credit, p3):
    problem = problem.plain()
    slices = megabyte_slices(problem)
    window = free_channel_window(1) if p3 else credit_window(1, credit * MB)
    run = priority_dispatch(problem, slices, window)
    timeline = simulate(problem, run.plan(slices))
    assert np.array_equal(timeline.message_start, run.start) and np.array_equal(timeline.message_end, run.end)
    assert timeline.iteration_time == run.iteration_time


@settings(deadline=None)
@given(problem=problems(max_n=8), cycle_ms=st.sampled_from([0.5, 1.0, 5.0]), cpu=st.booleans())
def test_simulator_reproduces_cycle_ticks(problem, cycle_ms, cpu):
    problem = problem.plain()
    run = cycle_ticks(problem, lambda batch: [list(batch[k:k + 2]) for k in range(0, len(batch), 2)],
                      cycle_ms * MS, wait_for_collectives=cpu)
    plan = Plan.from_groups(problem.profile, run.groups, release=run.release)
    assert np.array_equal(simulate(problem, plan).message_end, np.asarray(run.ends))


@settings(deadline=None)
@given(problem=problems(max_n=8, sync="layerwise"), credit=st.integers(1, 4), cycle_ms=st.sampled_from([0.0, 1.0, 5.0]))
def test_simulator_reproduces_credit_ticks(problem, credit, cycle_ms):
    from fusionopt.model import Message
    problem = problem.plain()
    slices = megabyte_slices(problem)
    run = credit_ticks(problem, slices, list(range(problem.profile.n)), credit * MB,
                       lambda posted: [list(posted)], cycle_ms * MS)
    assert sorted(s for group in run.groups for s in group) == list(range(len(slices)))
    plan = Plan(tuple(Message(tuple(slices[s] for s in g), t) for g, t in zip(run.groups, run.release)))
    assert np.array_equal(simulate(problem, plan).message_end, np.asarray(run.ends))


def test_tick_settings_refused_in_one_line():
    problem = section5(1)
    with pytest.raises(ValueError, match="credit_bytes must be positive"):
        credit_ticks(problem, megabyte_slices(problem), [0, 1, 2], 0, lambda p: [list(p)], 5 * MS)
    with pytest.raises(ValueError, match="cycle must be a number of seconds >= 0"):
        credit_ticks(problem, megabyte_slices(problem), [0, 1, 2], MB, lambda p: [list(p)], -1.0)
    with pytest.raises(ValueError, match="cycle must be a positive number"):
        cycle_ticks(problem, lambda batch: [batch], 0.0)


@settings(deadline=None)
@given(problem=problems(max_n=8, sync="layerwise"), credit=st.integers(1, 4), p3=st.booleans())
def test_the_priority_channel_policy_gives_the_serial_recursion(problem, credit, p3):
    # On one channel without contention the policy's own recursion is the fast path of the
    # engine's priority channel policy: the same posts, times to rounding.
    problem = problem.plain()
    slices = megabyte_slices(problem)
    window = free_channel_window(1) if p3 else credit_window(1, credit * MB)
    serial = priority_dispatch(problem, slices, window)
    channels = PriorityChannels(problem, slices, window, list(range(problem.profile.n)))
    clock, _ = run(dispatch_program(problem, slices), channels)
    assert channels.order == serial.order
    assert np.allclose(np.asarray(channels.end)[channels.order], serial.end, rtol=1e-12, atol=1e-15)
    assert clock + problem.profile.W == pytest.approx(serial.iteration_time, rel=1e-12, abs=1e-15)


# ------------------------------------------------------------- the tick policies on the engine
def whole_tensors(problem: Problem) -> list[Chunk]:
    return [Chunk(i, 0, size) for i, size in enumerate(problem.profile.sizes.tolist())]


def in_pairs(batch):
    return [list(batch[k:k + 2]) for k in range(0, len(batch), 2)]


@settings(deadline=None)
@given(problem=problems(max_n=8), cycle_ms=st.sampled_from([0.5, 1.0, 5.0]), cpu=st.booleans(),
       phase=st.sampled_from([0.0, 0.3]))
def test_the_cycle_tick_loop_is_the_fast_path_of_the_channel_policy(problem, cycle_ms, cpu, phase):
    # On the plain model the loop and the engine's policy send the same messages at the same
    # ticks; their ends and T agree to rounding (the engine's clock steps through each event).
    problem = problem.plain()
    loop = cycle_ticks(problem, in_pairs, cycle_ms * MS, phase=phase * cycle_ms * MS, wait_for_collectives=cpu)
    run = tick_policy(problem, whole_tensors(problem), in_pairs, cycle_ms * MS, phase=phase * cycle_ms * MS,
                      wait_for_collectives=cpu)
    assert (run.groups, run.cycles) == (loop.groups, loop.cycles) and loop.iteration_time is None
    assert np.allclose(run.release, loop.release, rtol=1e-12, atol=1e-15)
    assert np.allclose(run.ends, loop.ends, rtol=1e-12, atol=1e-15)
    plan = Plan.from_groups(problem.profile, loop.groups, release=loop.release)
    assert simulate(problem, plan).iteration_time == pytest.approx(run.iteration_time, rel=1e-12, abs=1e-15)


@settings(deadline=None)
@given(problem=problems(max_n=8, sync="layerwise"), credit=st.integers(1, 4),
       cycle_ms=st.sampled_from([0.0, 1.0, 5.0]), cpu=st.booleans())
def test_the_credit_tick_loop_is_the_fast_path_of_the_channel_policy(problem, credit, cycle_ms, cpu):
    problem = problem.plain()
    slices = megabyte_slices(problem)
    rank = list(range(problem.profile.n))
    loop = credit_ticks(problem, slices, rank, credit * MB, in_pairs, cycle_ms * MS, wait_for_collectives=cpu)
    run = tick_policy(problem, slices, in_pairs, cycle_ms * MS, rank=rank, credit_bytes=credit * MB,
                      wait_for_collectives=cpu)
    assert (run.groups, run.cycles) == (loop.groups, loop.cycles)
    assert np.allclose(run.release, loop.release, rtol=1e-12, atol=1e-15)
    assert np.allclose(run.ends, loop.ends, rtol=1e-12, atol=1e-15)


def test_under_contention_a_tick_finds_what_the_slowed_backward_made_ready():
    # MODEL.md section 5 with alpha = 1 ms (c = 3, 2, 5 ms for t2, t1, t0) and 3 ms ticks. On
    # the plain model t2 and t1 go at the 3 ms tick (3 -> 6, 6 -> 8) and t0, ready at 6 ms,
    # at the 6 ms tick (8 -> 13).
    plain = section5(1, sync="barrier")
    alone = lambda batch: [[i] for i in batch]                  # noqa: E731
    loop = cycle_ticks(plain, alone, 3 * MS)
    assert [round(t / MS, 9) for t in loop.release] == [3, 3, 6] and [round(t / MS, 9) for t in loop.ends] == [6, 8, 13]
    # With the stream at a quarter of its speed while a message is in flight, t0's 3 ms of
    # backward from 3 ms gets 1.25 ms done beside t2's and t1's messages (3 -> 8 ms) and the
    # rest by 9.75 ms: the 6 and 9 ms ticks find nothing, t0 goes at the 12 ms tick
    # (12 -> 17), and T = 17 + 3 ms of forward = 20 ms.
    slowed = Problem(plain.profile, plain.cost, sync="barrier", contention=4.0)
    run = cycle_ticks(slowed, alone, 3 * MS)
    assert run.groups == [[2], [1], [0]] and run.cycles == 2
    assert [round(t / MS, 9) for t in run.release] == [3, 3, 12]
    assert [round(t / MS, 9) for t in run.ends] == [6, 8, 17]
    assert round(run.iteration_time / MS, 9) == 20.0
    # The simulator reproduces it from the plan. The plain loop's plan, judged the same way,
    # releases t0 at 6 ms, before its gradient (9.75 ms), and says 17.75 ms: not Horovod's step.
    judged = simulate(slowed, Plan.from_groups(plain.profile, run.groups, release=run.release))
    assert np.allclose(judged.message_end, run.ends, rtol=1e-12) and judged.iteration_time == pytest.approx(20 * MS)
    stale = simulate(slowed, Plan.from_groups(plain.profile, loop.groups, release=loop.release))
    assert stale.iteration_time == pytest.approx(17.75 * MS)
    horovod = solve(slowed, "horovod", cycle_time=3 * MS, fusion_threshold_bytes=1)
    assert (horovod.plan.release / MS).round(9).tolist() == [3, 3, 12]
    assert horovod.iteration_time == pytest.approx(20 * MS, rel=1e-12)


@settings(deadline=None)
@given(problem=problems(max_n=8), cycle_ms=st.sampled_from([0.5, 1.0, 5.0]), cpu=st.booleans(),
       kappa=st.sampled_from([1.0, 1.3, 4.0]), mu=st.sampled_from([1.0, 1.5]), copy=st.sampled_from([0.0, 1e-10]))
def test_the_simulator_reproduces_the_tick_policy_under_contention(problem, cycle_ms, cpu, kappa, mu, copy):
    problem = Problem(problem.profile, problem.cost, sync=problem.sync, contention=kappa, comm_contention=mu,
                      copy_cost=copy)
    run = cycle_ticks(problem, in_pairs, cycle_ms * MS, wait_for_collectives=cpu)
    judged = simulate(problem, Plan.from_groups(problem.profile, run.groups, release=run.release))
    if problem.extensions:
        assert np.allclose(judged.message_end, run.ends, rtol=1e-9, atol=1e-15)
        assert judged.iteration_time == pytest.approx(run.iteration_time, rel=1e-9, abs=1e-15)
    else:
        assert np.array_equal(judged.message_end, run.ends)


def test_the_tick_policy_refuses_a_credit_without_priorities():
    problem = section5(1)
    with pytest.raises(ValueError, match="^tick_policy: a credit posts by priority: give rank, one per tensor$"):
        tick_policy(problem, megabyte_slices(problem), in_pairs, MS, credit_bytes=MB)
    assert issubclass(TickChannels, PriorityChannels.__mro__[1])      # a channel policy of the engine
