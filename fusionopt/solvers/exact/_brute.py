"""``method="brute"``: every fusion plan, scored with the batch evaluator."""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._fusion_eval import evaluate_cuts, fusion_iteration_time
from fusionopt.model._fusion_dp import check_caps, backward_arrays
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method

MAX_TENSORS = 20
# Several channels are simulated event by event, plan by plan: a smaller limit.
MAX_TENSORS_EVENT_DRIVEN = 14
_BATCH = 1 << 16


def in_fusion_space(problem: Problem, plan: object) -> bool:
    """Whether ``plan`` is one of the plans :func:`brute` searches: a fusion plan of
    ``problem``'s profile (:meth:`~fusionopt.model.Plan.is_fusion`). Its optimum then
    bounds the plan's ``T`` under the same problem, model options included.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6], [1e-3] * 2, [1e-3] * 2)
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> in_fusion_space(problem, Plan.from_cuts(profile, [True]))
    True
    >>> in_fusion_space(problem, Plan.from_groups(profile, [[0, 1]]))   # forward order: tensor 1 is ready first
    False
    """
    return isinstance(plan, Plan) and plan.is_fusion(problem.profile)


@method("brute", family="exact",
        summary="exact: every fusion plan, n <= 20 (any model option)",
        in_default_comparison=False,
        space=in_fusion_space)
@declares(Needs(max_tensors=MAX_TENSORS, max_tensors_channels=MAX_TENSORS_EVENT_DRIVEN,
               size_reason="enumerates 2^(n-1) plans", plain_alternative="dp"))
def brute(
    problem: Problem,
    *,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
) -> Result:
    """Enumerate all ``2^(n-1)`` fusion plans and keep the fastest (ties: the first found).

    Refuses ``n > 20`` (over half a million plans). The reference the DP, CP-SAT and the
    MILP are tested against; the same caps as :func:`fusionopt.solvers.exact.dp`. It also
    accepts the extensions of MODEL.md section 6, where it is the exact reference for
    small ``n``: plans are then scored with the one-channel fast path of
    :func:`~fusionopt.model.fusion_iteration_time` or, with several channels, by
    :func:`~fusionopt.model.simulate` one by one (``n <= 14``).

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = brute(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), result.stats["plans"]
    ([[2], [1, 0]], 17.0, 4)
    """
    n = problem.profile.n
    cap, max_messages = check_caps(problem, max_message_bytes, max_messages)
    _, prefix = backward_arrays(problem)
    total = 1 << (n - 1)
    best_time, best_cuts, feasible = math.inf, None, 0
    bits = np.arange(n - 1, dtype=np.int64)
    for lo in range(0, total, _BATCH):
        codes = np.arange(lo, min(total, lo + _BATCH), dtype=np.int64)
        cuts = ((codes[:, None] >> bits) & 1).astype(bool)
        keep = np.ones(len(cuts), dtype=bool)
        if max_messages is not None:
            keep &= cuts.sum(axis=1) + 1 <= max_messages
        if cap < math.inf:
            keep &= _largest_message(cuts, prefix) <= cap
        if not keep.any():
            continue
        cuts = cuts[keep]
        feasible += len(cuts)
        times = _score(problem, cuts)
        k = int(np.argmin(times))
        if times[k] < best_time:
            best_time, best_cuts = float(times[k]), cuts[k]
    plan = Plan.from_cuts(problem.profile, best_cuts)
    return Outcome(plan, lower_bound=best_time, optimal=True,
                   stats={"plans": feasible})


def _score(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    if not problem.extensions:
        return evaluate_cuts(problem, cuts)
    if problem.channels == 1:
        return np.array([fusion_iteration_time(problem, row) for row in cuts])
    profile = problem.profile
    return np.array([simulate(problem, Plan.from_cuts(profile, row), validate=False).iteration_time
                     for row in cuts])


def _largest_message(cuts: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    # Boundaries: the start (Q_0 = 0), every cut and the end. Prefix sizes grow, so the
    # running maximum of the boundary sizes is the last boundary at or before each point.
    m = len(cuts)
    ends = np.concatenate([np.ones((m, 1), dtype=bool), cuts, np.ones((m, 1), dtype=bool)], axis=1)
    at_boundary = np.where(ends, prefix[None, :], 0.0)
    last_boundary = np.maximum.accumulate(at_boundary, axis=1)
    sizes = prefix[None, 1:] - last_boundary[:, :-1]
    return np.where(ends[:, 1:], sizes, 0.0).max(axis=1)
