"""The result every solver returns, re-evaluated by the simulator."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._timeline import Timeline
from fusionopt.model._simulator import simulate

# Relative tolerance under which a plan's time is taken to meet a proven bound.
OPTIMALITY_RTOL = 1e-9


class Status(str, Enum):
    """Outcome of a solve, in the words of cvxpy and OR-Tools."""

    OPTIMAL = "OPTIMAL"          # iteration_time meets a proven lower bound
    FEASIBLE = "FEASIBLE"        # a valid plan, optimality not proven
    TIME_LIMIT = "TIME_LIMIT"    # search stopped by its time (or work) limit with a valid plan
    INTERRUPTED = "INTERRUPTED"  # search stopped by Ctrl-C (SIGINT) with a valid plan: Interrupted.result
    INFEASIBLE = "INFEASIBLE"    # no plan satisfies the constraints asked for (solve() raises ValueError
                                 # naming them; milp returns it when its limit leaves only a plan that breaks them)
    ERROR = "ERROR"              # the solve raised: what a sweep records for the cell (solve() raises)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, eq=False)
class Result:
    """A solver's plan with its iteration time as recomputed by :func:`simulate`.

    Attributes
    ----------
    plan : Plan
    iteration_time : float
        ``T`` in seconds, from the simulator, never from the solver's own objective.
    lower_bound : float or None
        The best lower bound known for the problem, in seconds.
    gap : float or None
        ``(iteration_time - lower_bound) / lower_bound``.
    status : Status
    method : str
    solve_seconds : float
        Wall-clock time of the solve.
    stats : mapping
        Solver-specific extras (read-only).
    timeline : Timeline
        The simulated schedule of ``plan``.
    """

    plan: Plan
    iteration_time: float
    lower_bound: float | None
    gap: float | None
    status: Status
    method: str
    solve_seconds: float
    stats: Mapping[str, Any] = field(default_factory=dict)
    timeline: Timeline | None = None

    @property
    def num_messages(self) -> int:
        return self.plan.num_messages

    def __repr__(self) -> str:
        bound = "None" if self.lower_bound is None else f"{self.lower_bound:.6g} s"
        return (
            f"Result(method={self.method!r}, T={self.iteration_time:.6g} s, "
            f"messages={self.num_messages}, lower_bound={bound}, status={self.status})"
        )


@dataclass(frozen=True)
class Outcome:
    """What a registered solver returns: its ``plan`` and what it claims about it, which the
    life cycle every method runs in (:func:`fusionopt.solvers._catalogue.method`) judges with
    :func:`finish`: the solve's seconds, the simulation, the bound and the status.

    ``stats`` (solver-specific figures), ``lower_bound`` (seconds, a bound the solver proved
    for the plans it searches), ``status`` (``FEASIBLE``, or ``TIME_LIMIT``,
    ``INTERRUPTED``, ``INFEASIBLE`` where the search says so; ``OPTIMAL`` is the judge's),
    ``space``, ``tolerance`` and ``optimal``: as :func:`finish` takes them. ``check``: run on
    the judged result (a solver's cross-check of its own schedule against the simulation);
    it raises ``AssertionError`` where they differ.
    """

    plan: Any
    stats: Mapping[str, Any] | None = None
    lower_bound: float | None = None
    status: Status = Status.FEASIBLE
    space: str = "fusion"
    tolerance: float = 0.0
    optimal: bool = False
    check: Callable[[Result], None] | None = None

    @classmethod
    def handed_on(cls, result: Result, **stats: Any) -> "Outcome":
        """Another solve's ``result`` as this method's outcome, ``stats`` added to its own: its
        plan and proven bound (judged again, so ``OPTIMAL`` stands where it did), and its
        status where the search said it stopped early."""
        early = result.status if result.status in (Status.TIME_LIMIT, Status.INTERRUPTED) else Status.FEASIBLE
        return cls(result.plan, stats={**result.stats, **stats}, lower_bound=result.lower_bound, status=early,
                   space="any")

    def judged(self, problem: Problem, method: str, started: float) -> Result:
        """The :class:`Result` of this outcome of ``method`` on ``problem``, whose solve began at
        ``started`` (a ``time.perf_counter()`` reading): :func:`finish`."""
        result = finish(problem, self.plan, method, started, stats=self.stats, lower_bound=self.lower_bound,
                        status=self.status, space=self.space, tolerance=self.tolerance, optimal=self.optimal)
        if self.check is not None:
            self.check(result)
        return result


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT, ``KeyboardInterrupt``) stopped an anytime search after it had a plan.

    ``result`` is the best plan it had evaluated, judged by :func:`finish` like every
    result (validated, simulated, its bound and gap attached) with status ``INTERRUPTED``.
    It is a ``KeyboardInterrupt``, so a caller that does not look for it (a comparison, a
    sweep, a search started from other methods) stops as on any Ctrl-C; one that does
    keeps the plan:

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6], [1e-3] * 2, [1e-3] * 2)
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> best = finish(problem, Plan.from_cuts(profile, [False]), "search", time.perf_counter(),
    ...               status=Status.INTERRUPTED)
    >>> try:
    ...     raise Interrupted(best)
    ... except KeyboardInterrupt as stop:
    ...     kept = stop.result
    >>> str(kept.status), round(kept.iteration_time * 1e3, 9)     # backward 2, one message 1 + 5, forward 2
    ('INTERRUPTED', 10.0)
    """

    def __init__(self, result: "Result | Outcome") -> None:
        if isinstance(result, Outcome):        # a solver's, judged by the life cycle it runs in
            super().__init__("interrupted; the best plan so far is this exception's result")
        else:
            super().__init__(f"{result.method} was interrupted; its best plan so far (T = "
                             f"{result.iteration_time:.6g} s) is this exception's result")
        self.result = result


def finish(
    problem: Problem,
    plan: Plan | PSPlan | DecoupledPlan | ShardedPlan,
    method: str,
    started: float,
    *,
    stats: Mapping[str, Any] | None = None,
    lower_bound: float | None = None,
    status: Status = Status.FEASIBLE,
    space: str = "fusion",
    tolerance: float = 0.0,
    optimal: bool = False,
) -> Result:
    """Validate and simulate ``plan``, attach the best known bound and build the Result: the
    one path every solver's result takes, all-reduce and parameter server alike.

    The model's bound is the pattern's (:meth:`~fusionopt.model.Pattern.lower_bound`:
    :func:`~fusionopt.model.best_bound` for the plans of ``space`` on an all-reduce
    problem; ``space`` does not apply to the other patterns). On a fully sharded problem with a
    memory cap, a plan whose peak memory exceeds the cap is returned with status
    ``INFEASIBLE`` (what a framework's fixed setting would run out of memory on), no gap,
    and its excess bytes in ``stats["over_memory_cap"]``. A plan of another kind (a
    :class:`~fusionopt.model.PSPlan` for an all-reduce problem, or the reverse) is a
    ``ValueError`` from the simulator.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([8], [1e-3], [1e-3])
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 0.0)))
    >>> r = finish(problem, PSPlan.from_offsets(profile), "one", time.perf_counter())
    >>> round(r.iteration_time * 1e3, 9), str(r.status)      # 1 + 1 + 1 + 1: meets the bound
    (4.0, 'OPTIMAL')

    Parameters
    ----------
    started : float
        The ``time.perf_counter()`` reading taken when the solve began.
    lower_bound : float, optional
        A bound in seconds the solver proved itself for the plans it searches; the larger
        of it and the model's bounds for ``space`` is kept.
    space : {"fusion", "any"}
        The plans the method searches: fusion plans only (then the optimal fusion plan's
        time is a bound, and the plan must be a fusion plan) or any plan.
    tolerance : float
        Seconds within which the simulated time counts as meeting the bound (a solver's
        stated rounding bound). ``OPTIMAL`` is reported only when it does.
    optimal : bool
        The solver proved ``plan`` optimal (an exact method) and ``lower_bound`` is its own
        value of the optimum: checked against the simulation, then the simulated time
        itself is the bound reported.
    """
    timeline = simulate(problem, plan, validate=True)      # a plan of the other kind: ValueError
    pattern = problem.pattern
    cap = pattern.memory_cap
    if cap is not None and timeline.peak_memory > cap:
        # The plan breaks the memory cap: what the framework would run out of memory on.
        # The bound the cap gives holds for plans within it only.
        uncapped = Problem(problem.profile, pattern=pattern.without_cap())
        model_bound = uncapped.pattern.lower_bound(uncapped)
        stats = {**(stats or {}), "over_memory_cap": timeline.peak_memory - cap}
        return _conclude(plan, method, started, timeline, model_bound, stats=stats,
                         lower_bound=None, status=Status.INFEASIBLE, tolerance=tolerance, optimal=False,
                         feasible=False)
    if not pattern.plan_in_space(problem, plan, space):
        raise AssertionError(f"{method}: a fusion method returned a plan that is not a fusion plan")
    model_bound = pattern.lower_bound(problem, space=space)
    return _conclude(plan, method, started, timeline, model_bound, stats=stats,
                     lower_bound=lower_bound, status=status, tolerance=tolerance, optimal=optimal)


def _conclude(plan: Any, method: str, started: float, timeline: Timeline, model_bound: float, *,
              stats: Mapping[str, Any] | None = None, lower_bound: float | None = None,
              status: Status = Status.FEASIBLE, tolerance: float = 0.0, optimal: bool = False,
              feasible: bool = True) -> Result:
    """The :class:`Result` of a simulated plan given the model's bound (seconds): the larger
    of it and the solver's ``lower_bound`` is kept, a plan below it or a false optimality
    claim is an ``AssertionError``, and ``OPTIMAL`` is set when the plan meets the bound.
    """
    bound = model_bound
    if lower_bound is not None:
        bound = max(bound, lower_bound)
    iteration_time = timeline.iteration_time
    slack = bound * OPTIMALITY_RTOL + tolerance
    if iteration_time < bound - slack:
        raise AssertionError(
            f"{method}: simulated T = {iteration_time!r} s is below the proven bound {bound!r} s"
        )
    if optimal and (lower_bound is None or iteration_time > bound + slack):
        raise AssertionError(
            f"{method}: claims an optimum of {lower_bound!r} s but its plan simulates to {iteration_time!r} s"
        )
    if feasible and iteration_time <= bound + slack:
        if status is not Status.INTERRUPTED:    # a stopped search stays said; its gap of 0 says the rest
            status = Status.OPTIMAL
        # Bounds and the simulator add in different orders: keep bound <= T exactly, and
        # an exact method's optimum is its plan's simulated time.
        bound = iteration_time if optimal else min(bound, iteration_time)
    gap = (iteration_time - bound) / bound if bound > 0 and feasible else None
    return Result(
        plan=plan,
        iteration_time=iteration_time,
        lower_bound=bound,
        gap=gap,
        status=status,
        method=method,
        solve_seconds=time.perf_counter() - started,
        stats=MappingProxyType(dict(stats or {})),
        timeline=timeline,
    )


def with_bound(result: Result, bound: float, *, source: str) -> Result:
    """``result`` judged again against ``bound`` (seconds), a lower bound another method
    (``source``) proved for a set of plans that holds ``result.plan`` on the same problem:
    the larger bound is kept, ``OPTIMAL`` is set when the plan meets it, and a plan below it
    is an ``AssertionError`` (one of the two claims is false). ``stats["bound_from"]`` names
    ``source``. A result without a gap (over a memory cap) is returned as it is.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6], [1e-3] * 2, [1e-3] * 2)
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> r = finish(problem, Plan.from_cuts(profile, [True]), "two", time.perf_counter())
    >>> str(with_bound(r, r.iteration_time, source="exact").status)
    'OPTIMAL'
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, float, np.integer, np.floating)) \
            or not math.isfinite(bound) or bound < 0:
        raise ValueError(f"bound must be a finite number of seconds >= 0, got {bound!r}")
    if result.gap is None or result.lower_bound is None or bound <= result.lower_bound:
        return result
    iteration_time = result.iteration_time
    slack = bound * OPTIMALITY_RTOL
    if iteration_time < bound - slack:
        raise AssertionError(f"{result.method}: simulated T = {iteration_time!r} s is below the bound "
                             f"{bound!r} s that {source} proved for its plan")
    status = result.status
    if iteration_time <= bound + slack:
        if status is not Status.INTERRUPTED:    # a stopped search stays said; its gap of 0 says the rest
            status = Status.OPTIMAL
        bound = min(bound, iteration_time)
    gap = (iteration_time - bound) / bound if bound > 0 else None
    stats = MappingProxyType({**result.stats, "bound_from": source})
    return replace(result, lower_bound=bound, gap=gap, status=status, stats=stats)
