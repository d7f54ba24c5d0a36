"""The parameter-server step as a step program (``fusionopt.model._ps_program``): the same
floating-point timeline as ``simulate`` (``simulate_ps``, its fast path) on every plan, with
and without partitioned compute, under both sync rules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.model import simulate, PULL, PUSH, ps_program, simulate_ps_program
from ps_strategies import ps_plans, ps_problems

FIELDS = ("message_ready", "message_start", "message_end", "message_bytes", "reduced", "forward_start", "pull_ready",
          "pull_start", "pull_end", "pull_bytes", "server_updated")


@settings(deadline=None)
@given(st.data())
def test_the_program_gives_simulates_timeline_to_the_bit(data):
    problem = data.draw(ps_problems())
    plan = data.draw(ps_plans(problem.profile))
    fast, engine = simulate(problem, plan), simulate_ps_program(problem, plan)
    assert engine.iteration_time == fast.iteration_time
    assert engine.compute_overhead == fast.compute_overhead
    for field in FIELDS:
        assert np.array_equal(getattr(engine, field), getattr(fast, field)), field
    program = ps_program(problem, plan)
    assert program.kind == [PUSH] * plan.push.num_messages + [PULL] * plan.pull.num_messages
    # The pulls on channel 1, each held for the update of exactly the pushes it reads: the
    # pull gates of the fast path are those holds' latest end.
    assert program.channel == [0] * plan.push.num_messages + [1] * plan.pull.num_messages
    pushes = plan.push.num_messages
    for m in range(plan.pull.num_messages):
        after = program.after[pushes + m]
        assert after and max(k for k, _ in after) + 1 == program.collectives[pushes + m].need
        assert fast.pull_ready[m] == max(fast.message_end[k] + s for k, s in after)
