"""The one-channel pass of a fully sharded step (``fusionopt.model._sharded_pass``): the same
floating-point timeline, memory account and compute stream as the step program's engine, on
every plan it takes; and the plans it leaves to the engine."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    HSDP, FullySharded, Problem, Profile, ShardedPlan, simulate, applies, one_pass, simulate_sharded_program,
)
from strategies import costs, profiles, sharded_plans, times

FIELDS = ("message_ready", "message_start", "message_end", "message_bytes", "message_kind", "message_unit",
          "reduced", "gathered", "forward_start", "memory_time", "memory_bytes")


@st.composite
def problems(draw, n_max: int = 9) -> Problem:
    """A fully sharded problem of one channel: FSDP's halves, or HSDP's (replicas x shards);
    the step's other parts half the time."""
    profile = draw(profiles(1, n_max))
    if draw(st.booleans()):
        profile = profile.with_step_parts(update_lump=draw(times), host_overhead=draw(times))
    if draw(st.booleans()):
        pattern = FullySharded(draw(costs), draw(costs))
    else:
        pattern = HSDP(draw(costs), draw(costs), draw(costs), shards=draw(st.integers(2, 8)),
                       replicas=draw(st.integers(1, 4)))
    return Problem(profile, pattern=pattern)


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_the_pass_gives_the_engines_timeline_to_the_bit(data):
    problem = data.draw(problems())
    plan = data.draw(sharded_plans(problem.profile.n)).replace(persistent=None)
    assert applies(problem, plan)
    fast_pieces, engine_pieces = [], []
    fast = problem.pattern.simulate(problem, plan, validate=True, pieces=fast_pieces)
    engine = simulate_sharded_program(problem, plan, pieces=engine_pieces)
    assert fast.iteration_time == engine.iteration_time
    assert fast.peak_memory == engine.peak_memory
    for field in FIELDS:
        assert np.array_equal(getattr(fast, field), getattr(engine, field)), field
    assert fast_pieces == engine_pieces
    assert simulate(problem, plan).iteration_time == engine.iteration_time
    assert len(one_pass(problem, plan).channel[2]) == plan.num_messages


def test_a_hand_worked_step_by_the_pass():
    # MODEL.md 8.2's two units {t1, t2}, {t3}, neither resharded, ring halves of 1 ms + 1 ns/B:
    # gathers 0-6 and 6-9 ms (5 MB, issued at 0; 2 MB, issued where the first forward starts),
    # forwards 6-8 and 9-10, backwards 11-16 (first unit) and 10-11 (second), reduce-scatters
    # 11-14 and 16-22 (issued where each backward ends): T = 22 ms.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    half = AlphaBeta(1e-3, 1e-9)
    problem = Problem(profile, pattern=FullySharded(half, half))
    walk = one_pass(problem, ShardedPlan([0, 2, 3], [False, False]))
    issue, start, end = ([round(t * 1e3, 9) for t in row] for row in walk.channel)
    assert (issue, start, end) == ([0.0, 6.0, 11.0, 16.0], [0.0, 6.0, 11.0, 16.0], [6.0, 9.0, 14.0, 22.0])
    assert [[round(t * 1e3, 9) for t in row] for row in walk.spans] == [[6.0, 9.0], [8.0, 10.0], [11.0, 10.0],
                                                                        [16.0, 11.0]]
    assert round(walk.clock * 1e3, 9) == 22.0


def test_what_the_pass_leaves_to_the_engine():
    profile = Profile.from_arrays([8, 8, 8], [1e-3] * 3, [1e-3] * 3)
    half = AlphaBeta(1e-3, 1e-9)
    one = Problem(profile, pattern=FullySharded(half, half))
    plan = ShardedPlan([0, 1, 3])
    assert applies(one, plan)
    assert not applies(Problem(profile, pattern=FullySharded(half, half, channels="two")), plan)
    assert not applies(Problem(profile, pattern=FullySharded(half, half, blocking=True)), plan)
    assert not applies(one, plan.replace(reduce_bounds=[0, 2, 3]))
    assert not applies(one, plan.replace(persistent=[True, False, False]))
    assert applies(one, plan.replace(persistent=[False, False, False]))
