"""``decoupled-opt``: a local search over the two groupings of a decoupled all-reduce from the
best of the other methods, for any size, with its gap to
:func:`~fusionopt.model.decoupled_lower_bound` (MODEL.md section 8.1; docs/methods.md).
"""

from __future__ import annotations

import time

import numpy as np

from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._fusion_dp import optimal_fusion
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers.baselines._megatron import megatron_buckets
from fusionopt.solvers._catalogue import deadline as solve_deadline, method
from fusionopt.solvers._groupings import cuts_of, dear_groups, groups_of
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result


@method("decoupled-opt", family="search",
        summary="decoupled all-reduce: local search over both groupings from the best of the others, any n")
@declares(Needs(pattern="decoupled"))
def decoupled_opt(problem: Problem, *, evaluations: int = 4000, kicks: int = 40, rng: int = 0,
                  time_limit: float = 10.0) -> Result:
    """The best pair of contiguous groupings found by local search (the space of
    :func:`decoupled_brute`: reduce-scatters along the ready order, all-gathers along the
    forward order, every reduce-scatter first), for any size.

    Starts: one message per tensor each way, one message each way, the reduce-scatter
    grouping of :func:`~fusionopt.solvers.exact._decoupled_dp.decoupled_dp` (barrier sync, no update time), and Megatron's buckets
    and DeAR's groups where they are contiguous in both orders. From the best start, a
    first-improvement descent flips one cut at a time; then ``kicks`` times, a few random
    cuts are flipped and the descent runs again, the result kept if faster. Every candidate
    is timed by :func:`~fusionopt.model.simulate`.

    Parameters
    ----------
    evaluations : int
        Candidates timed at most (a deterministic budget: the result depends only on it and
        ``rng`` unless ``time_limit`` stops the search first).
    kicks : int
        Perturbations after the first descent.
    rng : int
        Seed of the kicks.
    time_limit : float
        Seconds, a safeguard checked between candidates.

    Returns
    -------
    Result
        ``stats``: ``start`` (the start kept), ``evaluations``, ``kicks_kept``.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_opt(Problem(profile, pattern=Decoupled(half, half)))
    >>> round(r.iteration_time * 1e3, 9), str(r.status)
    (22.0, 'OPTIMAL')
    """
    for label, value in (("evaluations", evaluations), ("kicks", kicks)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{label} must be an integer >= 0, got {value!r}")
    profile = problem.profile
    n = profile.n
    ready_order = [int(i) for i in profile.ready_order]
    deadline = solve_deadline()
    count = 0

    def evaluate(cuts: tuple[np.ndarray, np.ndarray]) -> float:
        nonlocal count
        count += 1
        plan = DecoupledPlan(Plan.from_cuts(profile, cuts[0]), Plan.from_groups(profile, groups_of(list(range(n)), cuts[1])))
        return simulate(problem, plan, validate=False).iteration_time

    starts: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "one per tensor": (np.ones(n - 1, bool), np.ones(n - 1, bool)),
        "one message": (np.zeros(n - 1, bool), np.zeros(n - 1, bool)),
    }
    if problem.sync == "barrier" and profile.U == 0:
        fused = optimal_fusion(Problem(profile, problem.pattern.reduce_scatter, sync="barrier"))
        starts["decoupled-dp"] = (np.array(fused.cuts, bool), np.zeros(n - 1, bool))
    for name, groups in (("megatron", megatron_buckets(problem)[0]), ("dear", dear_groups(problem))):
        cuts = (cuts_of(groups, ready_order), cuts_of(groups, list(range(n))))
        if cuts[0] is not None and cuts[1] is not None:
            starts[name] = cuts
    values = {name: evaluate(cuts) for name, cuts in starts.items()}
    start = min(values, key=values.get)
    current, value = (starts[start][0].copy(), starts[start][1].copy()), values[start]

    def descend(cuts: tuple[np.ndarray, np.ndarray], value: float) -> tuple[tuple[np.ndarray, np.ndarray], float]:
        improved = True
        while improved:
            improved = False
            for side in (0, 1):
                for j in range(n - 1):
                    if count >= evaluations or time.perf_counter() > deadline:
                        return cuts, value
                    cuts[side][j] = not cuts[side][j]
                    candidate = evaluate(cuts)
                    if candidate < value * (1 - 1e-12):
                        value, improved = candidate, True
                    else:
                        cuts[side][j] = not cuts[side][j]
        return cuts, value

    current, value = descend(current, value)
    generator = np.random.default_rng(rng)
    kept = 0
    for _ in range(kicks if n > 1 else 0):
        if count >= evaluations or time.perf_counter() > deadline:
            break
        trial = (current[0].copy(), current[1].copy())
        for _ in range(int(generator.integers(2, 5))):
            side, j = int(generator.integers(2)), int(generator.integers(n - 1))
            trial[side][j] = not trial[side][j]
        trial, trial_value = descend(trial, evaluate(trial))
        if trial_value < value * (1 - 1e-12):
            current, value, kept = trial, trial_value, kept + 1
    plan = DecoupledPlan(Plan.from_cuts(profile, current[0]),
                         Plan.from_groups(profile, groups_of(list(range(n)), current[1])))
    return Outcome(plan,
                   stats={"start": start, "start_times": values, "evaluations": count, "kicks_kept": kept})


__all__ = ["decoupled_opt"]
