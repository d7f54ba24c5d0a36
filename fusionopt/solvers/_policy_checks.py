"""Cross-checks of a scheduling policy against the simulator that judges its plan: a policy
that times its own messages (Horovod's cycles, P3's and ByteScheduler's priority dispatch)
must agree with :func:`~fusionopt.model.simulate`, exactly on the plain model. Run by the
life cycle on the judged result (``Outcome(check=...)``)."""

from __future__ import annotations

import numpy as np

from fusionopt.model._dispatch import PolicyRun
from fusionopt.model._problem import Problem
from fusionopt.model._ticks import on_the_engine
from fusionopt.solvers._result import Result


def check_message_ends(problem: Problem, result: Result, ends: list[float], method: str) -> None:
    """A policy that timed its own messages (to return a credit, to start a cycle) must agree
    with the simulator that judges its plan: on the plain model exactly, and to rounding where
    the policy ran on the engine (the tick policies under contention or a copy cost on the
    channel, :func:`~fusionopt.model.tick_policy`) or the simulator did (tensors kept exact:
    the policy's own FIFO channel, the event engine's prices)."""
    simulated = result.timeline.message_end
    if not problem.extensions:
        agree = np.array_equal(simulated, np.asarray(ends))
    elif on_the_engine(problem) or not problem.timing_extensions:
        agree = np.allclose(simulated, ends, rtol=1e-9, atol=1e-15)
    else:
        return
    if not agree:
        raise AssertionError(f"{method}: the simulator does not reproduce the policy's message ends")


def check_reproduced(problem: Problem, result: Result, schedule: PolicyRun, method: str) -> None:
    """On the plain model the policy's recursion is the simulator's, term for term: its
    starts, ends and ``T`` must be the simulator's exactly."""
    if problem.extensions:
        return
    timeline = result.timeline
    if not (np.array_equal(timeline.message_start, schedule.start)
            and np.array_equal(timeline.message_end, schedule.end)
            and timeline.iteration_time == schedule.iteration_time):
        raise AssertionError(f"{method}: the simulator does not reproduce the policy's timeline")


__all__ = ["check_message_ends", "check_reproduced"]
