"""``decoupled-brute``: every pair of contiguous groupings of a decoupled all-reduce
(reduce-scatters along the ready order, all-gathers along the forward order), exact over that
space for small ``n`` (MODEL.md section 8.1; docs/methods.md). The same optimum at any size
where the two groupings separate: :func:`~fusionopt.solvers.exact._decoupled_dp.decoupled_dp`.
"""

from __future__ import annotations

import itertools

from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._groupings import groups_of
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result


BRUTE_MAX_TENSORS = 8


def in_grouping_space(problem: Problem, plan: object) -> bool:
    """Whether ``plan`` is one of :func:`decoupled_brute`'s space (the space
    :func:`~fusionopt.solvers.exact._decoupled_dp.decoupled_dp` is exact over too): whole tensors,
    reduce-scatters in contiguous groups of the ready order, all-gathers in contiguous groups
    of the forward order, each kind in that order, every reduce-scatter before the first
    all-gather, no release times, gradients reduce-scattered. An optimum over the space then
    bounds the plan's ``T`` on the same problem.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> from fusionopt.solvers.baselines._megatron import decoupled_wfbp
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, pattern=Decoupled(AlphaBeta(1e-3, 1e-9), AlphaBeta(1e-3, 1e-9)))
    >>> in_grouping_space(problem, decoupled_wfbp(problem).plan)
    True
    >>> in_grouping_space(problem, DecoupledPlan.from_groups(profile, [[2, 1, 0]], [[0], [1, 2]], order=[1, 0, 1]))
    False
    """
    if not isinstance(plan, DecoupledPlan):
        return False
    profile = problem.profile
    rs, ag = plan.reduce_scatter.groups(), plan.all_gather.groups()
    if [i for g in rs for i in g] != [int(i) for i in profile.ready_order]:
        return False
    if [i for g in ag for i in g] != list(range(profile.n)):
        return False
    return DecoupledPlan.from_groups(profile, rs, ag) == plan          # whole tensors, no release, RS first


@method("decoupled-brute", family="exact",
        summary="decoupled all-reduce, exact: every pair of contiguous groupings, n <= 8",
        in_default_comparison=False,
        space=in_grouping_space)
@declares(Needs(pattern="decoupled", max_tensors=BRUTE_MAX_TENSORS,
                size_reason="enumerates 4^(n-1) pairs of groupings"))
def decoupled_brute(problem: Problem) -> Result:
    """Every pair of contiguous groupings (reduce-scatters along the ready order, all-gathers
    along the forward order, every reduce-scatter first), the fastest kept (ties: the first
    found): exact over that space, for ``n <= 8``.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_brute(Problem(profile, pattern=Decoupled(half, half), sync="barrier"))
    >>> round(r.iteration_time * 1e3, 9), str(r.status), r.stats["plans"]
    (22.0, 'OPTIMAL', 16)
    """
    profile = problem.profile
    n = profile.n
    ready_order = list(profile.ready_order)
    best: tuple[float, DecoupledPlan] | None = None
    plans = 0
    for rs_cuts in itertools.product((False, True), repeat=n - 1):
        reduce_scatter = Plan.from_groups(profile, groups_of(ready_order, rs_cuts))
        for ag_cuts in itertools.product((False, True), repeat=n - 1):
            plan = DecoupledPlan(reduce_scatter, Plan.from_groups(profile, groups_of(list(range(n)), ag_cuts)))
            value = simulate(problem, plan, validate=False).iteration_time
            plans += 1
            if best is None or value < best[0]:
                best = (value, plan)
    assert best is not None
    return Outcome(best[1], lower_bound=best[0], optimal=True,
                   stats={"plans": plans})


__all__ = ["BRUTE_MAX_TENSORS", "in_grouping_space", "decoupled_brute"]
