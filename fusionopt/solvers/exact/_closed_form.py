"""The two closed-form cases of MODEL.md section 7: optimal fusion plans without search."""

from __future__ import annotations

import numpy as np

from fusionopt.model._fusion import layerwise_slack, time_after_channel
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers._result import Outcome


def closed_form(problem: Problem) -> Outcome | None:
    """Recognise a case whose optimal fusion plan is known, and return it as an
    :class:`~fusionopt.solvers.Outcome` claiming the optimum (the life cycle of the
    method that uses it judges the claim); else ``None``.

    * **WFBP is optimal** when every tensor's message ends before the next gradient in
      backward order is ready: ``c(s_i) <= b_{i-1}`` for every forward index ``i >= 1``.
      Each message then starts at its ready time, so the last ends at ``B + c(s_0)``; every
      fusion plan's last message holds all of tensor 0 and is ready at ``B``. Any cost.
    * **A single message is optimal** when the backward after the first ready gradient
      fits in one startup, ``B - r_{n-1} <= alpha``, for an affine cost: a plan of ``K >= 2``
      messages ends no earlier than ``r_{n-1} + K alpha + beta S >= B + alpha + beta S``,
      the single message's end.

    When both hold (one tensor), WFBP is returned. ``stats["case"]`` names the case.
    Problems with extensions on (MODEL.md section 6) are not recognised (``None``).

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> closed_form(Problem(profile, AlphaBeta(3e-3, 1e-9))) is None
    True
    >>> problem = Problem(profile, AlphaBeta(1e-4, 1e-10))          # c(s_i) <= b_{i-1}
    >>> r = closed_form(problem)
    >>> r.stats["case"], r.plan.groups(), str(r.judged(problem, "closed-form", 0.0).status)
    ('wfbp', [[2], [1], [0]], 'OPTIMAL')
    >>> closed_form(Problem(profile, AlphaBeta(6e-3, 1e-9))).stats["case"]   # B - r_2 = 5 ms
    'single'
    """
    if problem.extensions:
        return None             # the two cases are proved for the plain model only
    if layerwise_slack(problem) > 0.0:
        return None             # T is not max(B, E) + U + F + W for every fusion plan
    profile = problem.profile
    order = profile.backward_order
    message_costs = problem.cost(profile.sizes[order])             # WFBP's messages, channel order
    gaps = np.diff(profile.ready_times[order])                     # until the next gradient is ready
    if bool((message_costs[:-1] <= gaps).all()):
        plan = Plan.per_tensor(profile)
        claimed = time_after_channel(profile, profile.B + float(message_costs[-1]))
        return Outcome(plan, stats={"case": "wfbp"}, lower_bound=claimed, optimal=True)
    affine = problem.cost.affine
    if affine is not None and profile.B - float(profile.ready_times.min()) <= affine[0]:
        plan = Plan.from_groups(profile, [list(profile.ready_order)])
        claimed = time_after_channel(profile, profile.B + float(problem.cost(profile.total_bytes)))
        return Outcome(plan, stats={"case": "single"}, lower_bound=claimed, optimal=True)
    return None
