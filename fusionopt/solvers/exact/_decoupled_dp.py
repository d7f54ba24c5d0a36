"""The exact decoupled DP (MODEL.md section 8.1; docs/methods.md, decoupled-dp):
:func:`decoupled_dp`, the optimum over :func:`~fusionopt.solvers.exact._decoupled_brute.decoupled_brute`'s
space (reduce-scatters in contiguous groups of the ready order, all-gathers in contiguous
groups of the forward order, every reduce-scatter first) at any size, wherever the two
groupings separate:

* **barrier sync without update time**: ``T = E + sum_k c_AG(S_k) + F + W`` with ``E`` the
  end of the last reduce-scatter;
* **tensor 0's gradient ready last** (last in the ready order), any sync, update times and
  either update semantics: ``T = s + g``, ``s`` set by the reduce-scatters alone and ``g``
  by the all-gathers alone (:func:`decoupled_dp` says why).

Elsewhere (tensor 0 tied at ``B`` with tensors the ready order puts after it, and update time
or layerwise sync) the best reduce-scatter grouping depends on the all-gathers and no DP
separates them; it refuses, naming the tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._fusion_dp import optimal_fusion
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method
from fusionopt.solvers.exact._decoupled_brute import in_grouping_space


@method("decoupled-dp", family="exact",
        summary="decoupled all-reduce, exact over decoupled-brute's space, any n: tensor 0 ready last, or barrier sync "
                "without update time",
        space=in_grouping_space)
@declares(Needs(pattern="decoupled"))
def decoupled_dp(problem: Problem) -> Result:
    """The optimum over :func:`~fusionopt.solvers.exact._decoupled_brute.decoupled_brute`'s space, at any
    size, where the two groupings separate.

    **Barrier sync, no update time** (any ready order): each tensor's update ends at
    ``v_i = max(B, D_j over the tensors ready up to i)``, no later than ``E``, the end of the
    last reduce-scatter (it holds a gradient ready at ``B``). The channel is free at ``E``, so
    the all-gathers run back to back from ``E``: ``T = E + sum_k c_AG(S_k) + F + W``. The
    fusion DP of MODEL.md section 7 with the cost ``c_RS`` minimises ``E``; one message
    minimises the sum for an affine cost, a DP over contiguous groups of the forward order
    any other (O(n^2)).

    **Tensor 0 last in the ready order** (any sync, update times, either update semantics):
    the first all-gather holds tensor 0 and starts at ``s``, tensor 0's update end ``V``
    (the last update, ``v = max(v, D_i) + u_i`` along the ready order from ``B``), or with
    ``update_after_gather`` its reduce-scatter's end ``E``; every other all-gather waits for
    updates (or reduce-scatters) that ended by ``s``, on a channel free from ``s``. So
    ``T = s + g``, with ``g`` the time from the first all-gather's start to the step's end,
    set by the all-gathers alone.

    * ``s``: ``E`` by the fusion DP; ``V = max(B + U_1, max_k (E_k + U_(a_k)))`` over the
      reduce-scatters ``k`` (ready positions ``a_k .. b_k``, end ``E_k``), ``U_a`` the
      updates of positions ``a ..``. Whether some grouping keeps every term within ``tau`` is
      a DP over prefixes (of the groupings within ``tau`` so far, the one whose last end is
      least is best for the rest); a bisection on ``tau`` down to adjacent floating-point
      numbers finds the least, exactly: O(n^2) per step, about 60 steps.
    * ``g``: barrier, the least ``sum_k c_AG(S_k)`` plus ``F + W`` (plus ``U`` when updates
      follow the gathers); layerwise, the all-gather of tensors ``a .. b-1`` ends ``C`` after
      ``s`` (``C``: its cost and those before it) and the work from tensor ``a`` on (its
      forwards, and updates when they follow the gathers) after it, so
      ``h(a) = min_b c_AG(a, b) + max(work from a, h(b))``, ``h(n) = 0``, ``g = h(0) + W``.

    Exact up to floating-point rounding (the DP and the simulator add in different orders);
    tests hold it to :func:`~fusionopt.solvers.exact._decoupled_brute.decoupled_brute`.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_dp(Problem(profile, pattern=Decoupled(half, half)))
    >>> round(r.iteration_time * 1e3, 9), str(r.status), r.plan.all_gather.groups()
    (22.0, 'OPTIMAL', [[0, 1, 2]])

    Tensors of 1 MB ready at 1 and 2.5 ms (tensor 0 last), updates of 3 ms (t1, first ready)
    and 0 (t0), halves of ``2 ms + 1 ns/B``, layerwise. One reduce-scatter (2.5-6.5 ms)
    frees the channel first, but the updates then run 6.5-9.5 ms; two (t1 1-4, t0 4-7) let
    t1's update run 4-7: ``s = 7``. Then one all-gather (7-11 ms) and the forwards:
    ``T = 13`` ms (15.5 with one reduce-scatter).

    >>> profile = Profile.from_arrays([1e6, 1e6], [1e-3] * 2, [1.5e-3, 1e-3], update=[0.0, 3e-3])
    >>> r = decoupled_dp(Problem(profile, pattern=Decoupled(AlphaBeta(2e-3, 1e-9), AlphaBeta(2e-3, 1e-9)),
    ...                          sync="layerwise"))
    >>> r.plan.reduce_scatter.groups(), round(r.stats["first_gather"] * 1e3, 9), round(r.iteration_time * 1e3, 9)
    ([[1], [0]], 7.0, 13.0)
    """
    profile = problem.profile
    halves = problem.pattern
    order = [int(i) for i in profile.ready_order]
    if problem.sync == "barrier" and profile.U == 0:
        fused = optimal_fusion(Problem(profile, halves.reduce_scatter, sync="barrier"))
        reduce_scatter = Plan.from_cuts(profile, fused.cuts)
        groups, gather_time = _least_gather_time(profile, halves.all_gather)
        optimum = fused.communication_end + gather_time + profile.F + profile.W
        return Outcome(DecoupledPlan(reduce_scatter, Plan.from_groups(profile, groups)), lower_bound=optimum, optimal=True,
                       stats={"separation": "barrier, no update time", "reduce_scatter_end": fused.communication_end,
                             "all_gather_time": gather_time})
    if order[-1] != 0:
        tied = order[order.index(0) + 1]
        raise ValueError(
            f"decoupled-dp is exact where the groupings separate (tensor 0's gradient ready last, or barrier sync "
            f"without update time), and tensor {tied} is ready with tensor 0 but after it in the ready order: use "
            f"decoupled-cpsat (interleave=False, n <= 40) or decoupled-brute (n <= 8)")
    after = halves.update_after_gather
    if after:
        fused = optimal_fusion(Problem(profile, halves.reduce_scatter, sync="barrier"))
        reduce_scatter, first = Plan.from_cuts(profile, fused.cuts), float(fused.communication_end)
    else:
        groups, first = _least_last_update(profile, halves.reduce_scatter, order)
        reduce_scatter = Plan.from_groups(profile, groups)
    work = profile.forward + profile.update if after else profile.forward
    if problem.sync == "barrier":
        groups, gather_time = _least_gather_time(profile, halves.all_gather)
        after_first = gather_time + float(work.sum()) + profile.host_overhead
    else:
        groups, after_first = _least_forward_after_gathers(profile, halves.all_gather, work)
        after_first += profile.host_overhead
    plan = DecoupledPlan(reduce_scatter, Plan.from_groups(profile, groups))
    return Outcome(plan, lower_bound=first + after_first, optimal=True,
                   stats={"separation": "tensor 0 ready last", "first_gather": first, "after_first_gather": after_first})


def _least_gather_time(profile: Any, cost: Any) -> tuple[list[list[int]], float]:
    """Contiguous groups of the forward order with the least total ``c(S)`` (seconds): one
    message for an affine cost, else a DP over prefixes."""
    n = profile.n
    if cost.affine is not None:
        return [list(range(n))], float(cost.of_sizes(np.array([float(profile.total_bytes)]))[0])
    prefix = np.concatenate(([0.0], np.cumsum(profile.sizes.astype(np.float64))))
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    parent = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        options = best[:j] + np.asarray(cost.of_sizes(prefix[j] - prefix[:j]), dtype=np.float64)
        parent[j] = int(np.argmin(options))
        best[j] = options[parent[j]]
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(list(range(int(parent[j]), j)))
        j = int(parent[j])
    return groups[::-1], float(best[n])


def _least_forward_after_gathers(profile: Any, cost: Any, work: np.ndarray) -> tuple[list[list[int]], float]:
    """Layerwise: contiguous all-gather groups of the forward order run back to back from 0,
    each tensor's ``work`` (seconds) after its group's end and the work before it; the groups
    with the least end of the work, ``h(0)`` of :func:`decoupled_dp`."""
    n = profile.n
    prefix = np.concatenate(([0.0], np.cumsum(profile.sizes.astype(np.float64))))
    work_from = np.concatenate((np.cumsum(work[::-1])[::-1], [0.0]))
    h = np.zeros(n + 1)
    following = np.full(n + 1, n, dtype=np.int64)
    for a in range(n - 1, -1, -1):
        ends = np.arange(a + 1, n + 1)
        options = np.asarray(cost.of_sizes(prefix[ends] - prefix[a]), dtype=np.float64) + np.maximum(work_from[a], h[ends])
        k = int(np.argmin(options))
        h[a], following[a] = options[k], ends[k]
    groups, a = [], 0
    while a < n:
        groups.append(list(range(a, int(following[a]))))
        a = int(following[a])
    return groups, float(h[0])


def _least_last_update(profile: Any, cost: Any, order: list[int]) -> tuple[list[list[int]], float]:
    """Reduce-scatter groups of the ready order whose last update ends first (seconds):
    ``V = max(B + U_1, max_k (E_k + U_(a_k)))``, minimised by a bisection on a threshold
    ``tau`` over a feasibility DP (:func:`decoupled_dp`)."""
    n = len(order)
    sizes = profile.sizes[order].astype(np.float64)
    prefix = np.concatenate(([0.0], np.cumsum(sizes)))
    ready = profile.ready_times[order].astype(np.float64)
    update = profile.update[order].astype(np.float64)
    after = np.concatenate((np.cumsum(update[::-1])[::-1], [0.0]))     # after[a]: updates of positions a..
    floor = float(profile.B + after[0])
    cost_to = [np.asarray(cost.of_sizes(prefix[b] - prefix[:b]), dtype=np.float64) for b in range(n + 1)]

    def within(tau: float) -> list[int] | None:
        """Cut positions of a grouping whose every term is within ``tau``, or None."""
        best = np.full(n + 1, np.inf)
        best[0] = -np.inf
        parent = np.zeros(n + 1, dtype=np.int64)
        for b in range(1, n + 1):
            ends = np.maximum(ready[b - 1], best[:b]) + cost_to[b]
            ends[ends + after[:b] > tau] = np.inf
            k = int(np.argmin(ends))
            best[b], parent[b] = ends[k], k
        if not np.isfinite(best[n]):
            return None
        cuts = [n]
        while cuts[-1] > 0:
            cuts.append(int(parent[cuts[-1]]))
        return cuts[::-1]

    def value(cuts: list[int]) -> float:
        end, worst = -np.inf, floor
        for a, b in zip(cuts, cuts[1:]):
            end = max(ready[b - 1], end) + cost_to[b][a]
            worst = max(worst, end + after[a])
        return float(worst)

    cuts = within(np.inf)
    low, high = floor, value(cuts)
    if within(low) is not None:                           # the floor is met
        cuts, high = within(low), low
    while high > low:                                     # the least value lies in (low, high]
        middle = low + (high - low) / 2
        if not low < middle < high:
            break                                         # adjacent numbers: high is the least
        found = within(middle)
        if found is None:
            low = middle
        else:
            cuts, high = found, value(found)
    return [[order[p] for p in range(a, b)] for a, b in zip(cuts, cuts[1:])], high


__all__ = ["decoupled_dp"]
