"""The all-reduce pattern (MODEL.md sections 1 to 6): every gradient message is one
all-reduce on one channel, priced by one cost.

:class:`AllReduce` is what ``Problem(profile, cost)`` means. Its plans are
:class:`~fusionopt.model.Plan` s; the plain model runs the recursion of MODEL.md
section 3 on one FIFO channel here, and a problem with extensions on (copy cost, per-message
compute, contention, several channels) runs event by event
(:func:`~fusionopt.model.simulate_events`). Its lower bound is
:func:`~fusionopt.model.best_bound`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fusionopt.model._allreduce_program import allreduce_program
from fusionopt.model._bounds import best_bound
from fusionopt.model._cost import CommCost
from fusionopt.model._events import simulate_events
from fusionopt.model._fifo import fifo_ends
from fusionopt.model._overhead import with_message_overhead
from fusionopt.model._pattern import Pattern
from fusionopt.model._plan import Plan
from fusionopt.model._step_program import Program
from fusionopt.model._sync import barrier_forward, layerwise_forward
from fusionopt.model._timeline import Timeline, build_timeline, reduction_times

__all__ = ["AllReduce"]


@dataclass(frozen=True, eq=False)
class AllReduce(Pattern):
    """All-reduce on one channel: ``cost`` is ``c(S)``, seconds for a message of ``S`` bytes
    (MODEL.md section 2).

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(p, pattern=AllReduce(AlphaBeta(3e-3, 1e-9)))
    >>> problem.pattern.name, problem.cost == AlphaBeta(3e-3, 1e-9), problem.extensions
    ('all-reduce', True, ())
    >>> AllReduce("fast")
    Traceback (most recent call last):
    ...
    ValueError: cost must be a CommCost (e.g. AlphaBeta), got str
    """

    name: ClassVar[str] = "all-reduce"
    words: ClassVar[str] = "all-reduce"
    subject: ClassVar[str] = "the all-reduce"
    plan_type: ClassVar[type] = Plan

    cost: CommCost

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CommCost):
            raise ValueError(f"cost must be a CommCost (e.g. AlphaBeta), got {type(self.cost).__name__}")

    @property
    def collectives(self) -> dict[str, CommCost]:
        return {"all_reduce": self.cost}

    def channel_cost(self, given: Any) -> CommCost:
        if given is not None and given is not self.cost and given != self.cost:
            raise ValueError(f"cost {given!r} differs from the all-reduce's cost {self.cost!r}: "
                             "give the cost once, as cost or in pattern=AllReduce(cost)")
        return self.cost

    def _simulate(self, problem: Any, plan: Plan, *, validate: bool, pieces: list | None) -> Timeline:
        profile = problem.profile
        if validate:
            plan.validate(profile)
        if problem.extensions or pieces is not None:
            return simulate_events(problem, plan, pieces=pieces)
        # A message is ready with its last chunk; it starts once ready, released and the
        # channel is free (the sums run in message order, as the recursion states them).
        ready = np.maximum.reduceat(profile.ready_times[plan.tensor], plan.starts[:-1])
        durations = np.asarray(problem.cost.of_sizes(plan.message_bytes.astype(np.float64)), dtype=np.float64)
        available = np.maximum(ready, plan.release)
        end = fifo_ends(available, durations)
        start = np.maximum(available, np.concatenate(([-np.inf], end[:-1])))
        reduced = reduction_times(plan, end, profile.n)
        if problem.sync == "barrier":
            phi, iteration_time = barrier_forward(profile, float(end.max()))
        else:
            phi, iteration_time = layerwise_forward(profile, reduced)
        return build_timeline(problem, plan, iteration_time, ready, start, end, reduced, phi)

    def lower_bound(self, problem: Any, space: str = "any") -> float:
        return best_bound(problem, space=space)

    def program(self, problem: Any, plan: Plan) -> Program:
        return allreduce_program(problem, plan)

    def plan_in_space(self, problem: Any, plan: Plan, space: str) -> bool:
        return space != "fusion" or plan.is_fusion(problem.profile)

    def with_message_overhead(self, seconds: float, per_byte: float = 0.0) -> "AllReduce":
        return AllReduce(with_message_overhead(self.cost, seconds, per_byte))

    def __repr__(self) -> str:
        return f"AllReduce({self.cost!r})"
