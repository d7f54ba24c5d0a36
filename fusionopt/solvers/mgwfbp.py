"""``method="mgwfbp"``: merged-gradient WFBP (Shi, Chu, Li; INFOCOM 2019, IEEE TPDS 2021)."""

from __future__ import annotations

import time

from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.simulator import simulate
from fusionopt.solvers.result import Result, finish


def mgwfbp(problem: Problem) -> Result:
    """MG-WFBP's merge rule, as the reference code applies it (docs/methods.md, section mgwfbp).

    Start from WFBP and scan the tensors ``l = n .. 2`` (1-based forward indices, as in the
    paper; ``l`` is index ``l - 1`` here) with ``tau_c(l)`` the start and ``t_c(l)`` the
    duration of the message holding ``l``, and ``ready = r_{l-1}``. If
    ``ready < tau_c(l) + t_c(l)`` (tensor ``l - 1`` is ready before that message ends) and
    either ``tau_c(l) > ready`` (it has not started) or ``ready - tau_c(l) < alpha`` (it
    started less than one startup ago), merge: the message of ``l - 1`` now carries ``l``'s
    message too, and every start is recomputed; otherwise the group closes at ``l``.
    Starts come from :func:`~fusionopt.model.simulate`, so the rule runs on every model
    option; ``alpha`` is the cost model's startup (``c(1 B)`` for a cost that is not
    affine, our choice). O(n^2): a simulation of O(n) after each merge.

    **It is a greedy, not an optimum.** The paper calls its merge optimal; it is not in
    general: MODEL.md section 5 (``alpha = 3 ms``) is a counter-example where it returns
    ``{t3, t2}, {t1}`` at 19 ms while the optimum (``method="dp"``) is 17 ms. It *is*
    optimal in the closed-form cases of MODEL.md section 7: when every WFBP message ends
    before the next gradient is ready (no merge condition holds, WFBP is kept) and when
    the whole backward after the first gradient is shorter than one ``alpha`` (every step
    merges: one message).

    Examples
    --------
    >>> from fusionopt.model import AlphaBeta, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = mgwfbp(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9)
    ([[2, 1], [0]], 19.0)
    """
    started = time.perf_counter()
    profile = problem.profile
    affine = problem.cost.affine
    alpha = affine[0] if affine is not None else float(problem.cost(1))
    ready_times = profile.ready_times
    # Groups in backward order; groups[-1] is the open group that l belongs to.
    order = profile.ready_order
    groups: list[list[int]] = [[i] for i in order]
    merges = 0
    position = 0                      # index in groups of the message holding l
    timeline = simulate(problem, Plan.from_groups(profile, groups), validate=False)
    for following in order[1:]:
        start = float(timeline.message_start[position])
        end = float(timeline.message_end[position])
        ready = float(ready_times[following])
        if ready < end and (start > ready or ready - start < alpha):
            groups[position] = groups[position] + groups.pop(position + 1)
            merges += 1
            timeline = simulate(problem, Plan.from_groups(profile, groups), validate=False)
        else:
            position += 1
    plan = Plan.from_groups(profile, groups)
    return finish(problem, plan, "mgwfbp", started, stats={"merges": merges, "alpha": alpha})
