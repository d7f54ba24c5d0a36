"""``method="mgwfbp"``: merged-gradient WFBP (Shi, Chu, Li; INFOCOM 2019, IEEE TPDS 2021)."""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._fifo import fifo_job
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method


@method("mgwfbp", family="paper", summary="MG-WFBP merge rule (a greedy; not optimal in general)")
def mgwfbp(problem: Problem) -> Result:
    """MG-WFBP's merge rule, as the reference code applies it (docs/methods.md, section mgwfbp).

    Start from WFBP and scan the tensors ``l = n .. 2`` (1-based forward indices, as in the
    paper; ``l`` is index ``l - 1`` here) with ``tau_c(l)`` the start and ``t_c(l)`` the
    duration of the message holding ``l``, and ``ready = r_{l-1}``. If
    ``ready < tau_c(l) + t_c(l)`` (tensor ``l - 1`` is ready before that message ends) and
    either ``tau_c(l) > ready`` (it has not started) or ``ready - tau_c(l) < alpha`` (it
    started less than one startup ago), merge: the message of ``l - 1`` now carries ``l``'s
    message too, and every start is recomputed; otherwise the group closes at ``l``.
    Starts come from the model, so the rule runs on every model option: on the plain model
    a message's start and end depend on the messages before it only, so they are kept as
    the scan goes (the simulator's FIFO step, :func:`~fusionopt.model._fifo.fifo_job`; O(n));
    with extensions on, :func:`~fusionopt.model.simulate` runs after each merge (O(n^2)).
    ``alpha`` is the cost model's startup (``c(1 B)`` for a cost that is not affine, our
    choice).

    **It is a greedy, not an optimum.** The paper calls its merge optimal; it is not in
    general: MODEL.md section 5 (``alpha = 3 ms``) is a counter-example where it returns
    ``{t3, t2}, {t1}`` at 19 ms while the optimum (``method="dp"``) is 17 ms. It *is*
    optimal in the closed-form cases of MODEL.md section 7: when every WFBP message ends
    before the next gradient is ready (no merge condition holds, WFBP is kept) and when
    the whole backward after the first gradient is shorter than one ``alpha`` (every step
    merges: one message).

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = mgwfbp(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9)
    ([[2, 1], [0]], 19.0)
    """
    profile = problem.profile
    affine = problem.cost.affine
    alpha = affine[0] if affine is not None else float(problem.cost(1))
    groups = (simulated_merges if problem.extensions else plain_merges)(problem, alpha)
    merges = profile.n - len(groups)
    plan = Plan.from_groups(profile, groups)
    return Outcome(plan, stats={"merges": merges, "alpha": alpha})


def _merge_rule(ready: float, start: float, end: float, alpha: float) -> bool:
    """Does the message starting at ``start`` and ending at ``end`` take the next tensor, ready
    at ``ready``?"""
    return ready < end and (start > ready or ready - start < alpha)


def plain_merges(problem: Problem, alpha: float) -> list[list[int]]:
    """The rule's groups on the plain model, in backward order: the open message's start and
    end from the channel's state before it, as the simulator computes them."""
    profile = problem.profile
    ready_times = profile.ready_times.tolist()
    sizes = profile.sizes.tolist()
    order = list(profile.ready_order)

    def duration(nbytes: int) -> float:
        return float(problem.cost.of_sizes(np.array([float(nbytes)]))[0])

    groups: list[list[int]] = [[order[0]]]
    nbytes = sizes[order[0]]
    free = -math.inf                                   # when the messages before the open one end
    # A message is available at the latest ready time of its tensors and its release (0).
    latest = ready_times[order[0]]                     # the open message's latest ready time
    start, end = fifo_job(max(latest, 0.0), duration(nbytes), free)
    for following in order[1:]:
        ready = ready_times[following]
        if _merge_rule(ready, start, end, alpha):
            groups[-1].append(following)
            nbytes += sizes[following]
            latest = max(latest, ready)
        else:
            free = end
            groups.append([following])
            nbytes, latest = sizes[following], ready
        start, end = fifo_job(max(latest, 0.0), duration(nbytes), free)
    return groups


def simulated_merges(problem: Problem, alpha: float) -> list[list[int]]:
    """The rule's groups with a full simulation after each merge (any model option)."""
    profile = problem.profile
    ready_times = profile.ready_times
    order = profile.ready_order
    groups: list[list[int]] = [[i] for i in order]     # groups[position] holds l
    position = 0
    timeline = simulate(problem, Plan.from_groups(profile, groups), validate=False)
    for following in order[1:]:
        start = float(timeline.message_start[position])
        end = float(timeline.message_end[position])
        if _merge_rule(float(ready_times[following]), start, end, alpha):
            groups[position] = groups[position] + groups.pop(position + 1)
            timeline = simulate(problem, Plan.from_groups(profile, groups), validate=False)
        else:
            position += 1
    return groups
