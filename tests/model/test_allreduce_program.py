"""The all-reduce step as a step program (``fusionopt.model._allreduce_program``): the same
floating-point timeline as ``simulate``'s FIFO recursion and sync rules, which are its fast
paths, on every plan; a hand-worked case; and the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate, ALL_REDUCE, allreduce_program, simulate_program, EMIT
from strategies import partition_plans, problems


@st.composite
def released(draw, plan: Plan) -> Plan:
    """``plan`` with release times on some messages (Horovod's ticks)."""
    times = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 2e-2)), min_size=len(plan.messages),
                          max_size=len(plan.messages)))
    return Plan(tuple(dataclasses.replace(m, release=t) for m, t in zip(plan.messages, times)))


@settings(deadline=None)
@given(st.data())
def test_the_program_gives_simulates_timeline_to_the_bit(data):
    problem = data.draw(problems())
    plan = data.draw(partition_plans(problem.profile))
    if data.draw(st.booleans()):
        plan = data.draw(released(plan))
    fast, engine = simulate(problem, plan), simulate_program(problem, plan)
    assert engine.iteration_time == fast.iteration_time
    for field in ("message_ready", "message_start", "message_end", "reduced", "forward_start"):
        assert np.array_equal(getattr(engine, field), getattr(fast, field)), field


def test_a_hand_worked_layerwise_step():
    # Two tensors, forward t0 then t1; backward t1 (1 ms) then t0 (3 ms): ready at 4 and 1 ms.
    # Messages {t1} then {t0} of 1 ms each: {t1} 1-2 ms, {t0} 4-5 ms. Layerwise from B = 4 ms:
    # t0 waits for 5 ms, updates 0.5 ms, forward 5.5-6.5; t1 updates 6.5-7, forward 7-9 ms.
    profile = Profile.from_arrays([8, 8], [1e-3, 2e-3], [3e-3, 1e-3], update=[5e-4, 5e-4])
    problem = Problem(profile, AlphaBeta(1e-3, 0.0), sync="layerwise")
    plan = Plan.from_groups(profile, [[1], [0]])
    t = simulate_program(problem, plan)
    assert (t.message_end * 1e3).round(9).tolist() == [2.0, 5.0]
    assert (t.forward_start * 1e3).round(9).tolist() == [5.5, 7.0]
    assert round(t.iteration_time * 1e3, 9) == 9.0
    program = allreduce_program(problem, plan)
    assert set(program.kind) == {ALL_REDUCE}
    assert [op[3] * 1e3 for op in program.ops if op[0] == EMIT] == pytest.approx([1.0, 4.0])


def test_what_is_not_a_program_yet_is_refused_in_one_line():
    profile = Profile.from_arrays([8, 8], [1e-3] * 2, [1e-3] * 2)
    plan = Plan.from_groups(profile, [[1, 0]])
    with pytest.raises(ValueError, match=r"an all-reduce with contention runs the event semantics' program"):
        simulate_program(Problem(profile, AlphaBeta(1e-3, 0.0), contention=1.5), plan)
