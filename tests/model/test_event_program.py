"""The extensions' event semantics as a step program and a channel policy
(``fusionopt.model._events``): the program's gates and waits, MODEL.md section 6's worked
example with two-way contention run by the engine, and the plain model's recursion."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Plan, Problem, Profile, simulate, EMITTED, PACKED, EventChannels, event_program, simulate_events, COMPUTE, WAIT,
    run_program as run,
)
from strategies import partition_plans, problems

SECTION5 = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])


def test_messages_packed_on_the_stream_wait_for_their_packing():
    # {t3} then {t2, t1}: the single-tensor message needs no packing and is gated on the
    # backward of t3 (first in the ready order); the fused one on its packing task, which
    # runs on the stream right after t1's backward (the last of its tensors).
    problem = Problem(SECTION5, AlphaBeta(1e-3, 1e-9), copy_cost=1e-10, copy_on="compute")
    plan = Plan.from_groups(SECTION5, [[2], [1, 0]])
    program = event_program(problem, plan)
    assert [(spec.gate, spec.need) for spec in program.collectives] == [(EMITTED, 1), (PACKED, 1)]
    labels = [op[2][:2] for op in program.ops if op[0] == COMPUTE]
    assert labels[:4] == [("backward", 2), ("backward", 1), ("backward", 0), ("pack", 0)]
    # Barrier sync: the stream waits for both messages before the first update.
    waits = [op[1] for op in program.ops if op[0] == WAIT]
    assert waits == [0, 1]


def test_two_way_contention_worked_example():
    # MODEL.md section 6, kappa = mu = 2, WFBP, alpha = 1 ms: t1 is ready at 11 ms and sent
    # 11-16, T = 19 ms; the stream's pieces say where the backward slowed.
    problem = Problem(SECTION5, AlphaBeta(1e-3, 1e-9), contention=2.0, comm_contention=2.0)
    plan = Plan.from_groups(SECTION5, [[2], [1], [0]])
    pieces: list = []
    t = simulate_events(problem, plan, pieces=pieces)
    assert round(t.iteration_time * 1e3, 9) == 19.0
    assert (t.message_ready * 1e3).round(9).tolist() == [1.0, 5.0, 11.0]
    assert round(t.message_end[-1] * 1e3, 9) == 16.0
    backward = [(p.tensor, round(p.start * 1e3, 9), round(p.end * 1e3, 9)) for p in pieces if p.kind == "backward"]
    assert backward == [(2, 0.0, 1.0), (1, 1.0, 5.0), (0, 5.0, 11.0)]
    assert pieces[-1].end == t.iteration_time


def test_the_policy_runs_the_stream_at_its_own_clock():
    problem = Problem(SECTION5, AlphaBeta(1e-3, 1e-9), contention=1.5, channels=2)
    plan = Plan.from_groups(SECTION5, [[2], [1, 0]])
    program = event_program(problem, plan)
    channels = EventChannels(problem, plan, program)
    clock, _ = run(program, channels)
    assert clock == channels.clock
    with pytest.raises(AssertionError, match="at the policy's clock"):
        channels.compute(clock + 1.0, 1e-3)


@settings(deadline=None)
@given(st.data())
def test_without_extensions_the_policy_gives_the_recursion(data):
    problem = data.draw(problems())
    plan = data.draw(partition_plans(problem.profile))
    events, plain = simulate_events(problem, plan), simulate(problem, plan)
    assert events.iteration_time == pytest.approx(plain.iteration_time, rel=1e-9, abs=1e-15)
    assert np.allclose(events.message_end, plain.message_end, rtol=1e-9, atol=1e-15)
