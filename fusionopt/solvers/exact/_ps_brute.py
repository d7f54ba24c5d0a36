"""``ps-brute``: every push and pull grouping of a parameter server's plan space, exact over
it for small problems (MODEL.md section 6; the spaces: :mod:`fusionopt.solvers.exact._ps_spaces`).
"""

from __future__ import annotations

import math
from typing import Any

from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._ps_timing import offsets_iteration_time
from fusionopt.solvers._catalogue import method
from fusionopt.solvers.exact._ps_spaces import candidate_cuts, common_stats, ps_units, subsets
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result


# ps_brute scores every pair of cut sets with the fast evaluator (about 0.1 ms a plan):
# 2^16 plans take seconds; every further cut point doubles that.
MAX_BRUTE_CUTS = 16


# ---------------------------------------------------------------------------- brute force
@method("ps-brute", family="exact",
        summary="parameter server, exact: every push and pull grouping (whole tensors or a unit grid), small n",
        in_default_comparison=False)
@declares(Needs(pattern="ps"))
def ps_brute(problem: Problem, *, granularity: Any = "tensor") -> Result:
    """Every plan of the space, scored by the fast evaluator; the fastest (ties: the first).

    The space (module docstring): with ``granularity="tensor"`` every pair of a push plan
    of whole tensors in contiguous groups in backward order and a pull plan of whole
    tensors in contiguous groups in forward order, ``2^(n-1) * 2^(n-1)`` plans; with a
    unit grid every pair of cut sets on the ``N - 1`` inner unit boundaries of each
    stream, ``4^(N-1)`` plans, which includes plans that split tensors (and so, with
    ``ps.partition_compute``, split their backward and forward). Each plan is scored by
    :func:`~fusionopt.model.offsets_iteration_time`, which tests pin to the
    simulator. Refuses more than ``2^16`` plans (``MAX_BRUTE_CUTS`` cut points in all:
    ``n <= 9`` whole tensors).

    Returns
    -------
    Result
        ``status`` OPTIMAL and ``lower_bound == iteration_time``: optimal **over the space**
        (``stats["space"]``); ``stats["plans"]`` counts the plans scored and
        ``stats["bound_all_plans"]`` is the bound for every PS plan.

    Examples
    --------
    MODEL.md section 5's profile, push and pull at ``1 ms + 1 ns/B``, layerwise sync:
    pushes ``{t3}, {t2}, {t1}`` end at 4, 6 and 11 ms; pulling ``{t1, t2}`` (11 -> 17) and
    then ``{t3}`` (17 -> 20) lets the forward run 17 -> 19 and 20 -> 21 ms, faster than
    pulling per tensor (22 ms, :func:`~fusionopt.solvers.baselines.ps_layer`). On a grid of
    1 MB units (250,000 float32 parameters), pushing t1 in two halves (6 -> 9, 9 -> 12 ms)
    lets the pull of its first half (9 -> 12) overlap the push of the second: pulls end at
    12, 16 (the second half with t2) and 19, the forward at 20 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> r = ps_brute(problem)
    >>> r.plan.push.groups(), r.plan.pull.groups(), round(r.iteration_time * 1e3, 9), r.stats["plans"]
    ([[2], [1], [0]], [[0, 1], [2]], 21.0, 16)
    >>> round(ps_brute(problem, granularity=250_000).iteration_time * 1e3, 9)
    20.0
    """
    units = ps_units(problem, granularity)
    push_points = candidate_cuts(problem, units, "push")
    pull_points = candidate_cuts(problem, units, "pull")
    cuts = len(push_points) + len(pull_points)
    if cuts > MAX_BRUTE_CUTS:
        raise ValueError(
            f"ps-brute enumerates 2^{cuts} plans ({len(push_points)} push and {len(pull_points)} pull cut "
            f"points: n = {problem.profile.n} tensors, {len(units)} units) and refuses more than "
            f"2^{MAX_BRUTE_CUTS} (n <= {MAX_BRUTE_CUTS // 2 + 1} whole tensors); use ps-dp or ps-cpsat"
        )
    push_sets, pull_sets = subsets(push_points), subsets(pull_points)
    best_time, best = math.inf, ([], [])
    for push in push_sets:
        for pull in pull_sets:
            t = offsets_iteration_time(problem, push, pull)
            if t < best_time:
                best_time, best = t, (push, pull)
    plan = PSPlan.from_offsets(problem.profile, *best)
    stats = common_stats(problem, granularity, units)
    stats.update({"plans": len(push_sets) * len(pull_sets), "push_offsets": list(best[0]),
                  "pull_offsets": list(best[1])})
    return Outcome(plan, stats=stats, lower_bound=best_time, optimal=True)


__all__ = ["MAX_BRUTE_CUTS", "ps_brute"]
