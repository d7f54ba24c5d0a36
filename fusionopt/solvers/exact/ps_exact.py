"""Exact references for the parameter server (MODEL.md section 6): brute force, the fusion
DP of section 7 adapted to the two directions, and CP-SAT.

They give the greedy methods (iPart, iBatch) a gap to measure. Each searches a stated
**space** of :class:`~fusionopt.model.ps.PSPlan` s, and its ``OPTIMAL`` status and
``lower_bound`` hold over that space, as for the all-reduce ``brute`` and ``dp`` over
fusion plans: ``stats["space"]`` names it and ``stats["bound_all_plans"]`` is
:func:`~fusionopt.model.bounds.ps_lower_bound`, the bound for every PS plan.

The spaces
----------
A plan of the space cuts the **push stream** (the tensors in backward order, MODEL.md
section 7's order) and the **pull stream** (forward order) into contiguous messages
(:meth:`PSPlan.from_offsets <fusionopt.model.ps.PSPlan.from_offsets>`), at candidate
cut points given by ``granularity``:

* ``"tensor"`` (default): tensor boundaries only, so every message carries whole tensors,
  push groups contiguous in backward order and pull groups contiguous in forward order.
  No tensor is ever split, so partitioned compute (``ps.partition_compute``) changes
  nothing in this space;
* an integer ``g``: every tensor is cut into **units** of ``g`` parameters
  (``g * profile.dtype_bytes`` bytes, the last unit of a tensor may be shorter), and a cut
  may fall on any unit boundary, inside a tensor or between two.

Cutting inside a tensor can pay even without partitioned compute: the pull of a tensor's
first part may start while its later parts are still being pushed (a push-pull pipeline),
and with partitioned compute the backward and forward of a split tensor overlap its own
communication. The grid spaces hold such plans; the whole-tensor space does not, so its
optimum can exceed the optimum over all plans (tests show a one-tensor case).

Plans outside both kinds of space (push messages out of backward order, pull messages
out of forward order, priorities) are not searched by any method here.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from fusionopt.model.problem import Problem
from fusionopt.model.ps import PSPlan, stream_offsets
from fusionopt.model.ps_timing import offsets_iteration_time
from fusionopt.model.bounds import ps_lower_bound
from fusionopt.solvers.exact.cpsat_arcs import add_path_constraints, integer_horizon, positive_seconds
from fusionopt.solvers.exact.cpsat_search import raise_if_interrupted, run_search
from fusionopt.solvers.needs import Needs, declares
from fusionopt.solvers.result import Outcome, Result, Status
from fusionopt.solvers.catalogue import method
import fusionopt.solvers.warm as warm

__all__ = ["ps_brute", "ps_dp", "ps_cpsat", "ps_units", "MAX_BRUTE_CUTS"]

# ps_brute scores every pair of cut sets with the fast evaluator (about 0.1 ms a plan):
# 2^16 plans take seconds; every further cut point doubles that.
MAX_BRUTE_CUTS = 16
DEFAULT_MAX_UNITS = 64


# ---------------------------------------------------------------------------- the space
def ps_units(problem: Problem, granularity: Any = "tensor") -> list[tuple[int, int, int]]:
    """The units ``(tensor, lo, hi)`` of a granularity, in forward order.

    ``"tensor"``: one unit per tensor. An integer ``g >= 1``: units of ``g`` parameters
    (``g * dtype_bytes`` bytes; the last unit of a tensor may be shorter).

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> from fusionopt.model.ps import ParameterServer
    >>> profile = Profile.from_arrays([12, 4], [0.0] * 2, [1e-3] * 2)   # float32: 3 and 1 parameters
    >>> problem = Problem(profile, ps=ParameterServer(AlphaBeta(1e-3, 1e-9)))
    >>> ps_units(problem), ps_units(problem, 2)
    ([(0, 0, 12), (1, 0, 4)], [(0, 0, 8), (0, 8, 12), (1, 0, 4)])
    """
    profile = problem.profile
    if isinstance(granularity, str) and granularity == "tensor":
        return [(i, 0, int(s)) for i, s in enumerate(profile.sizes.tolist())]
    if isinstance(granularity, bool) or not isinstance(granularity, numbers.Integral) or granularity < 1:
        raise ValueError(f"granularity must be 'tensor' or an integer >= 1 (parameters per unit), "
                         f"got {granularity!r}")
    unit = int(granularity) * profile.dtype_bytes
    return [(i, lo, min(lo + unit, int(s))) for i, s in enumerate(profile.sizes.tolist())
            for lo in range(0, int(s), unit)]


def _space_label(granularity: Any) -> str:
    if isinstance(granularity, str):
        return "whole tensors (push groups in backward order, pull groups in forward order)"
    return f"contiguous messages on a grid of {int(granularity)}-parameter units, both streams"


def _candidate_cuts(problem: Problem, units: list[tuple[int, int, int]], direction: str) -> list[int]:
    """Byte offsets of the unit boundaries inside a direction's stream, ascending."""
    starts = stream_offsets(problem.profile, direction)
    return sorted(int(starts[i]) + lo for i, lo, _ in units if int(starts[i]) + lo > 0)


def _subsets(points: list[int]) -> list[list[int]]:
    """Every subset of ``points`` (ascending lists), the empty one first."""
    out: list[list[int]] = [[]]
    for x in reversed(points):
        out += [[x] + rest for rest in out]
    return out


def _common_stats(problem: Problem, granularity: Any, units: list[tuple[int, int, int]]) -> dict[str, Any]:
    return {"space": _space_label(granularity), "granularity": granularity, "units": len(units),
            "bound_all_plans": ps_lower_bound(problem)}


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
    :func:`~fusionopt.model.ps_timing.offsets_iteration_time`, which tests pin to the
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
    pulling per tensor (22 ms, :func:`~fusionopt.solvers.baselines.ps.ps_layer`). On a grid of
    1 MB units (250,000 float32 parameters), pushing t1 in two halves (6 -> 9, 9 -> 12 ms)
    lets the pull of its first half (9 -> 12) overlap the push of the second: pulls end at
    12, 16 (the second half with t2) and 19, the forward at 20 ms.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> from fusionopt.model.ps import ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, ps=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> r = ps_brute(problem)
    >>> r.plan.push.groups(), r.plan.pull.groups(), round(r.iteration_time * 1e3, 9), r.stats["plans"]
    ([[2], [1], [0]], [[0, 1], [2]], 21.0, 16)
    >>> round(ps_brute(problem, granularity=250_000).iteration_time * 1e3, 9)
    20.0
    """
    units = ps_units(problem, granularity)
    push_points = _candidate_cuts(problem, units, "push")
    pull_points = _candidate_cuts(problem, units, "pull")
    cuts = len(push_points) + len(pull_points)
    if cuts > MAX_BRUTE_CUTS:
        raise ValueError(
            f"ps-brute enumerates 2^{cuts} plans ({len(push_points)} push and {len(pull_points)} pull cut "
            f"points: n = {problem.profile.n} tensors, {len(units)} units) and refuses more than "
            f"2^{MAX_BRUTE_CUTS} (n <= {MAX_BRUTE_CUTS // 2 + 1} whole tensors); use ps-dp or ps-cpsat"
        )
    push_sets, pull_sets = _subsets(push_points), _subsets(pull_points)
    best_time, best = math.inf, ([], [])
    for push in push_sets:
        for pull in pull_sets:
            t = offsets_iteration_time(problem, push, pull)
            if t < best_time:
                best_time, best = t, (push, pull)
    plan = PSPlan.from_offsets(problem.profile, *best)
    stats = _common_stats(problem, granularity, units)
    stats.update({"plans": len(push_sets) * len(pull_sets), "push_offsets": list(best[0]),
                  "pull_offsets": list(best[1])})
    return Outcome(plan, stats=stats, lower_bound=best_time, optimal=True)


# ---------------------------------------------------------------------------- the DP
class _WholeTensors:
    """The arrays the DPs of :func:`ps_dp` share, whole-tensor space.

    Push positions ``j = 1..n`` run in backward order (tensor ``n - j``), with ready times
    ``rho`` and prefix sizes ``Q``; pull positions ``i = 0..n-1`` in forward order, with
    prefix sizes ``P``. ``work[i] = u_i + f_i`` and ``tail[i] = sum_{l >= i} work[l]``.
    """

    def __init__(self, problem: Problem) -> None:
        profile, ps = problem.profile, problem.ps
        self.problem = problem
        self.n = profile.n
        self.push_cost = problem.cost
        self.pull_cost = ps.pull
        self.server_update = ps.server_update
        self.rho = profile.ready_times[::-1].astype(np.float64)
        self.Q = np.concatenate(([0.0], np.cumsum(profile.sizes[::-1].astype(np.float64))))
        self.P = np.concatenate(([0.0], np.cumsum(profile.sizes.astype(np.float64))))
        self.work = (profile.update + profile.forward).astype(np.float64)
        self.tail = np.concatenate((self.work[::-1].cumsum()[::-1], [0.0])) + profile.W   # + the host's share
        self.B = profile.B
        self.barrier = problem.sync == "barrier"
        self.after = profile.U + profile.F + profile.W               # barrier: after the last pull

    # ------------------------------------------------------------------ plans
    def offsets(self, push_cuts: np.ndarray, pull_cuts: np.ndarray) -> tuple[list[int], list[int]]:
        """Stream offsets of cut vectors (push: after backward position ``j``; pull: after
        forward position ``i``)."""
        push = [int(self.Q[j + 1]) for j in np.flatnonzero(push_cuts)]
        pull = [int(self.P[i + 1]) for i in np.flatnonzero(pull_cuts)]
        return push, pull

    def time(self, push_cuts: np.ndarray, pull_cuts: np.ndarray) -> float:
        return offsets_iteration_time(self.problem, *self.offsets(push_cuts, pull_cuts))

    def gates(self, push_cuts: np.ndarray) -> np.ndarray:
        """Server-update time of each tensor's push message, forward order."""
        ends = np.flatnonzero(np.append(push_cuts, True)) + 1            # positions closing a message
        starts = np.concatenate(([0], ends[:-1]))
        sizes = self.Q[ends] - self.Q[starts]
        durations = np.asarray(self.push_cost(sizes), dtype=np.float64)
        updates = np.asarray(self.server_update(sizes), dtype=np.float64)
        by_position = np.empty(self.n)
        free = -math.inf
        for a, b, d, u in zip(starts.tolist(), ends.tolist(), durations.tolist(), updates.tolist()):
            free = max(free, float(self.rho[b - 1])) + d
            by_position[a:b] = free + u
        return by_position[::-1].copy()

    def tail_lengths(self, pull_cuts: np.ndarray) -> np.ndarray:
        """``lambda_i``: ``T = max(floor, max_i (V_i + lambda_i))`` for gates ``V`` (forward order)."""
        ends = np.flatnonzero(np.append(pull_cuts, True)) + 1
        starts = np.concatenate(([0], ends[:-1]))
        durations = np.asarray(self.pull_cost(self.P[ends] - self.P[starts]), dtype=np.float64).tolist()
        lam = np.empty(self.n)
        later = -math.inf
        for a, b, d in reversed(list(zip(starts.tolist(), ends.tolist(), durations))):
            if self.barrier:
                later = (0.0 if later == -math.inf else later) + d
                lam[a:b] = later + self.after
            else:
                later = d + max(float(self.tail[a]), later)
                lam[a:b] = later
        return lam

    @property
    def floor(self) -> float:
        """``T`` with free communication: ``B + U + F + W``."""
        return self.B + self.after

    # ------------------------------------------------------------------ relaxation
    def relaxation(self) -> tuple[float, np.ndarray, np.ndarray]:
        """The decoupled lower bound over whole-tensor plans and the plans that attain it
        when no gate binds (:func:`ps_dp`, step 1): ``(bound, push_cuts, pull_cuts)``."""
        n = self.n
        # Push: G(j) the earliest end of the first j positions; the last message adds its update.
        G = np.full(n + 1, -math.inf)
        parent = np.zeros(n + 1, dtype=np.int64)
        for j in range(1, n + 1):
            sizes = self.Q[j] - self.Q[:j]
            values = np.maximum(G[:j], self.rho[j - 1]) + np.asarray(self.push_cost(sizes), dtype=np.float64)
            if j == n:
                values = values + np.asarray(self.server_update(sizes), dtype=np.float64)
            k = int(np.argmin(values))
            G[j], parent[j] = values[k], k
        first_gate = float(G[n])
        push_cuts = _cuts_from_parents(parent, n)
        # Pull, every tensor ready at first_gate.
        H = np.full(n + 1, math.inf)
        choice = np.zeros(n + 1, dtype=np.int64)
        if self.barrier:
            # H[j]: least channel time of the first j forward positions; then U + F + W.
            H[0] = 0.0
            for j in range(1, n + 1):
                values = H[:j] + np.asarray(self.pull_cost(self.P[j] - self.P[:j]), dtype=np.float64)
                k = int(np.argmin(values))
                H[j], choice[j] = values[k], k
            pull_cuts = _cuts_from_parents(choice, n)
            tail = float(H[n]) + self.after
        else:
            # H[i]: least max over groups g from i of (channel time up to g + work from g's start).
            H[n] = -math.inf
            for i in range(n - 1, -1, -1):
                durations = np.asarray(self.pull_cost(self.P[i + 1:] - self.P[i]), dtype=np.float64)
                values = durations + np.maximum(float(self.tail[i]), H[i + 1:])
                k = int(np.argmin(values))
                H[i], choice[i] = values[k], i + 1 + k
            pull_cuts = np.zeros(max(n - 1, 0), dtype=bool)
            i = 0
            while choice[i] < n:
                pull_cuts[choice[i] - 1] = True
                i = int(choice[i])
            tail = float(H[0])
        return max(first_gate + tail, self.floor), push_cuts, pull_cuts

    # ------------------------------------------------------------------ best responses
    def best_pull(self, push_cuts: np.ndarray, incumbent: float) -> tuple[float, np.ndarray]:
        """The optimal pull plan for the gates of ``push_cuts`` (exact)."""
        n, V = self.n, self.gates(push_cuts)
        if self.barrier:
            G = np.full(n + 1, -math.inf)
            parent = np.zeros(n + 1, dtype=np.int64)
            for j in range(1, n + 1):
                gate = np.maximum.accumulate(V[j - 1::-1])[::-1]          # max V[i..j-1], i = 0..j-1
                values = np.maximum(G[:j], gate) + np.asarray(self.pull_cost(self.P[j] - self.P[:j]), dtype=np.float64)
                k = int(np.argmin(values))
                G[j], parent[j] = values[k], k
            return max(self.B, float(G[n])) + self.after, _cuts_from_parents(parent, n)
        # Layerwise: Pareto states (pull channel end e, forward clock phi) after each prefix.
        def step(j: int, e: np.ndarray, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            gate = np.maximum.accumulate(V[j:])                              # groups j..k-1
            durations = np.asarray(self.pull_cost(self.P[j + 1:] - self.P[j]), dtype=np.float64)
            e2 = np.maximum(e[:, None], gate[None, :]) + durations[None, :]
            phi2 = np.maximum(phi[:, None], e2) + (self.tail[j] - self.tail[j + 1:])[None, :]
            return e2, phi2

        return _pareto_dp(n, np.array([-math.inf]), np.array([self.B]), step,
                          lambda j, e, phi: phi + self.tail[j], incumbent)

    def best_push(self, pull_cuts: np.ndarray, incumbent: float) -> tuple[float, np.ndarray]:
        """The optimal push plan for the tail lengths of ``pull_cuts`` (exact)."""
        n = self.n
        lam = self.tail_lengths(pull_cuts)[::-1]                            # backward positions
        floor = self.floor

        def step(j: int, end: np.ndarray, worst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            sizes = self.Q[j + 1:] - self.Q[j]
            durations = np.asarray(self.push_cost(sizes), dtype=np.float64)
            updates = np.asarray(self.server_update(sizes), dtype=np.float64)
            end2 = np.maximum(end[:, None], self.rho[j:][None, :]) + durations[None, :]
            term = end2 + (updates + np.maximum.accumulate(lam[j:]))[None, :]
            return end2, np.maximum(worst[:, None], term)

        value, cuts = _pareto_dp(n, np.array([-math.inf]), np.array([-math.inf]), step,
                                 lambda j, end, worst: worst, incumbent)
        return max(floor, value), cuts


def _cuts_from_parents(parent: np.ndarray, n: int) -> np.ndarray:
    """The cut vector of the path ``n -> parent[n] -> ... -> 0`` (a message ends at each node)."""
    cuts = np.zeros(max(n - 1, 0), dtype=bool)
    j = n
    while parent[j] > 0:
        cuts[parent[j] - 1] = True
        j = int(parent[j])
    return cuts


def _pareto_dp(n: int, first: np.ndarray, second: np.ndarray, step, lower, incumbent: float) -> tuple[float, np.ndarray]:
    """A DP over prefixes ``0..n`` whose state is a pair of times, both better smaller.

    ``step(j, a, b)`` maps the states at ``j`` to candidate states at ``j + 1 .. n``
    (arrays of shape ``(states, n - j)``); the objective is the second time at ``n``.
    ``lower(j, a, b)`` bounds the objective of any completion; states above
    ``incumbent`` are dropped (the caller holds a plan that good). Keeps, at each ``j``,
    the states no other state dominates. Returns the least objective and its cut vector,
    or ``(inf, None)`` when nothing beats the incumbent.
    """
    pool: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(n + 1)]
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = [None] * (n + 1)  # type: ignore[list-item]
    pool[0].append((first, second, np.array([-1]), np.array([-1])))
    slack = 1e-12 * max(abs(incumbent), 1.0) if math.isfinite(incumbent) else 0.0
    for j in range(n + 1):
        if not pool[j]:
            kept[j] = (np.empty(0), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
            continue
        a = np.concatenate([p[0] for p in pool[j]])
        b = np.concatenate([p[1] for p in pool[j]])
        from_j = np.concatenate([p[2] for p in pool[j]])
        from_k = np.concatenate([p[3] for p in pool[j]])
        pool[j] = []
        alive = lower(j, a, b) <= incumbent + slack
        order = np.lexsort((b[alive], a[alive]))
        idx = np.flatnonzero(alive)[order]
        a, b, from_j, from_k = a[idx], b[idx], from_j[idx], from_k[idx]
        # Sorted by a then b: keep a state only if its b is below every earlier b.
        best_before = np.minimum.accumulate(np.concatenate(([math.inf], b[:-1])))
        keep = b < best_before
        kept[j] = (a[keep], b[keep], from_j[keep], from_k[keep])
        if j == n or not keep.any():
            continue
        a2, b2 = step(j, kept[j][0], kept[j][1])
        states = len(kept[j][0])
        for offset in range(n - j):
            pool[j + 1 + offset].append((a2[:, offset], b2[:, offset], np.full(states, j),
                                         np.arange(states)))
    a, b, from_j, from_k = kept[n]
    if len(b) == 0:
        return math.inf, None  # type: ignore[return-value]
    k = int(np.argmin(b))
    value = float(b[k])
    cuts = np.zeros(max(n - 1, 0), dtype=bool)
    j, index = n, k
    while True:
        parent_j, parent_k = int(kept[j][2][index]), int(kept[j][3][index])
        if parent_j <= 0:
            break
        cuts[parent_j - 1] = True
        j, index = parent_j, parent_k
    return value, cuts


@method("ps-dp", family="exact",
        summary="parameter server: push and pull DPs (exact over whole tensors when updates cost no time per byte)")
@declares(Needs(pattern="ps"))
def ps_dp(problem: Problem, *, max_rounds: int = 50, exhaustive_up_to: int = 10) -> Result:
    """The fusion DP of MODEL.md section 7 adapted to both directions, over whole tensors.

    The space: push groups of whole tensors contiguous in backward order, pull groups
    contiguous in forward order (``ps_brute``'s default space; partitioned compute never
    splits a piece there). Write ``V_i`` for the server-update time of tensor ``i``'s push
    message (the gate of its pull), ``o + u S`` a message's update (``update_overhead``,
    ``update_per_byte``), ``W_i = sum_{l >= i} (u_l + f_l)``.

    1. **The first gate.** Tensor 0 is pushed last and pulled first, so the first pull
       message waits for the last push message ``K`` and its update, ``U_K``; no pull
       starts earlier. ``min U_K`` over push plans is MODEL.md's DP with the update of
       the last message added: ``G(j) = min_i max(rho_j, G(i-1)) + c_push(Q_j - Q_(i-1))``
       for ``j < n`` and ``U_K* = min_i max(rho_n, G(i-1)) + c_push(Q_n - Q_(i-1)) +
       o + u (Q_n - Q_(i-1))``, exact for any cost (the earliest end of a prefix is the
       only state the rest depends on, monotonically).
    2. **The pull phase, every tensor ready at ``t``.** The pull channel then runs without
       idling. Barrier: ``T = t + min sum c_pull(groups) + U + F + W`` (a min-sum partition
       DP). Layerwise: ``T = t + H(0)`` with ``H(i) = min_j c_pull(P_j - P_i) +
       max(W_i, H(j))``, ``H(n) = -inf`` (the forward of group ``g`` ends no earlier than
       its pull's end plus the work from its first tensor on, and the forward clock,
       which starts at ``B <= t``, never binds beyond that); each exact by the same
       argument.
    3. **The bound.** For every plan of the space, raising each pull gate to ``U_K``
       changes nothing (no pull starts before ``U_K``) and lowering it to ``U_K`` only
       helps, so ``T >= U_K* + tail*``, the ``relaxation_bound``. The two DPs' plans
       attain it when no other gate binds.
    4. **Coupled improvement.** Otherwise (some push message's update ends late, which
       takes ``u > 0``), alternate two exact best responses until ``T`` stops falling,
       from the plan of steps 1-2, from layer-by-layer and from one message each way:

       * pulls for fixed gates ``V`` (forward order): barrier
         ``G'(j) = min_i max(max_{i<=l<=j} V_l, G'(i-1)) + c_pull(P_j - P_(i-1))`` (the
         section 7 DP with unsorted ready times, exact), ``T = max(B, G'(n)) + U + F + W``;
         layerwise a DP whose state is the Pareto set of (pull channel end, forward
         clock) pairs after each prefix (exact: every later time is non-decreasing in both);
       * pushes for a fixed pull plan: ``T = max(B + U + F + W, max_i (V_i + lambda_i))`` with
         ``lambda_i`` the time from tensor ``i``'s pull gate to the end, fixed by the pull
         plan, so a DP over (push channel end, largest ``U_k + max lambda`` so far)
         Pareto pairs (exact).
    5. **Enumeration.** If the plan still misses the bound and ``n <= exhaustive_up_to``,
       every one of the ``2^(n-1)`` pull plans gets its exact push best response: the
       optimum over the space.

    **When the result is optimal** (over the space; ``status`` OPTIMAL, ``lower_bound``
    equal to ``T``):

    * always when ``update_per_byte == 0`` (any ``update_overhead``, push and pull costs,
      sync, partitioned compute): every message then takes the same ``o`` to update, so
      ``U_k <= U_K`` for every ``k`` and no gate binds after the first; steps 1-2 suffice;
    * with ``update_per_byte > 0``, when ``T`` meets the relaxation bound
      (``stats["proved"]``), or when ``n <= exhaustive_up_to`` (step 5).

    Otherwise it is a heuristic, a local optimum of the alternation: ``status`` FEASIBLE,
    ``lower_bound`` the larger of the relaxation bound and
    :func:`~fusionopt.model.bounds.ps_lower_bound`, and ``gap`` its distance (which
    may overstate the true gap: the relaxation ignores every gate but the first). The
    alternation alone can stop above the optimum (tests hold a 4-tensor case). Plans that
    cut tensors are outside the space: use ``ps_cpsat`` or ``ps_brute`` with a
    ``granularity``, or iPart.

    Complexity: steps 1-2 ``O(n^2)`` cost evaluations; each best response ``O(n^2)``
    times the Pareto sets' size (under 30 states on BERT-base, ResNet-50 and VGG-16 with
    a slow server update); step 5 ``2^(n-1)`` push best responses.

    Parameters
    ----------
    max_rounds : int
        Most best-response rounds per start (each round one pull and one push response).
    exhaustive_up_to : int
        The largest ``n`` for step 5 (``0``: never).

    Returns
    -------
    Result
        ``stats``: ``relaxation_bound`` (seconds), ``proved`` (how optimality was shown:
        ``"update_per_byte = 0"``, ``"relaxation bound met"``, ``"every pull plan"`` or
        ``None``), ``rounds``, ``pull_plans`` (enumerated in step 5), ``start`` (where the
        plan came from), ``space``, ``bound_all_plans``.

    Examples
    --------
    MODEL.md section 5's profile, push and pull at ``1 ms + 1 ns/B``, layerwise sync, no
    update time: the least first gate is WFBP's 11 ms; then pulling ``{t1, t2}`` (6 ms)
    and ``{t3}`` (3 ms) gives ``H(0) = max(6 + 2, 6 + 3 + 1) = 10`` ms, so ``T = 21`` ms, as
    brute force finds.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> from fusionopt.model.ps import ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, ps=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> r = ps_dp(problem)
    >>> r.plan.push.groups(), r.plan.pull.groups(), round(r.iteration_time * 1e3, 9), str(r.status)
    ([[2], [1], [0]], [[0, 1], [2]], 21.0, 'OPTIMAL')
    >>> r.stats["proved"]
    'update_per_byte = 0'
    """
    for label, value in (("max_rounds", max_rounds), ("exhaustive_up_to", exhaustive_up_to)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{label} must be an integer >= 0, got {value!r}")
    space = _WholeTensors(problem)
    n = space.n
    bound, push, pull = space.relaxation()
    best_time, best_push, best_pull, source = space.time(push, pull), push, pull, "relaxation"
    meets = lambda t: t <= bound * (1 + 1e-12)          # noqa: E731
    proved = None
    if problem.ps.update_per_byte == 0.0:
        proved = "update_per_byte = 0"
    elif meets(best_time):
        proved = "relaxation bound met"
    rounds = pull_plans = 0
    if proved is None:
        starts = {"relaxation": (push, pull),
                  "layer": (np.ones(n - 1, dtype=bool), np.ones(n - 1, dtype=bool)),
                  "default": (np.zeros(n - 1, dtype=bool), np.zeros(n - 1, dtype=bool))}
        for label, (push, pull) in starts.items():
            current = space.time(push, pull)
            for _ in range(int(max_rounds)):
                rounds += 1
                before = current
                _, cuts = space.best_pull(push, current)
                if cuts is not None and (candidate := space.time(push, cuts)) < current:
                    pull, current = cuts, candidate
                _, cuts = space.best_push(pull, current)
                if cuts is not None and (candidate := space.time(cuts, pull)) < current:
                    push, current = cuts, candidate
                if not current < before or meets(current):
                    break
            if current < best_time:
                best_time, best_push, best_pull, source = current, push, pull, label
            if meets(best_time):
                proved = "relaxation bound met"
                break
    if proved is None and n <= exhaustive_up_to:
        for code in range(1 << (n - 1)):
            pull = ((code >> np.arange(n - 1)) & 1).astype(bool)
            _, cuts = space.best_push(pull, best_time)
            pull_plans += 1
            if cuts is not None and (candidate := space.time(cuts, pull)) < best_time:
                best_time, best_push, best_pull, source = candidate, cuts, pull, "every pull plan"
        proved = "every pull plan"
    plan = PSPlan.from_offsets(problem.profile, *space.offsets(best_push, best_pull))
    stats = _common_stats(problem, "tensor", ps_units(problem))
    stats.update({"relaxation_bound": bound, "proved": proved, "rounds": rounds, "pull_plans": pull_plans,
                  "start": source})
    # An optimum from the theorem or the bound is claimed with the relaxation bound, so
    # finish checks the claim against the simulation; an enumerated one is its own bound.
    if proved == "every pull plan":
        return Outcome(plan, stats=stats, lower_bound=best_time, optimal=True)
    return Outcome(plan, stats=stats, lower_bound=bound, optimal=proved is not None)


# ---------------------------------------------------------------------------- CP-SAT
class _Grid:
    """The units of a granularity laid out on both streams, and the model's constants.

    Push positions ``p = 1..N`` follow the push stream (tensors in backward order), pull
    positions ``q = 1..N`` the pull stream (forward order); node ``m`` is the boundary
    after position ``m``. Times are in whole quanta ``q_s`` (seconds per step), each
    rounded down.
    """

    def __init__(self, problem: Problem, units: list[tuple[int, int, int]]) -> None:
        profile, ps = problem.profile, problem.ps
        self.problem = problem
        self.n, self.N = profile.n, len(units)
        push_units = sorted(units, key=lambda u: (-u[0], u[1]))
        self.push_units, self.pull_units = push_units, list(units)
        self.push_position = {u: p + 1 for p, u in enumerate(push_units)}
        sizes = profile.sizes.astype(np.float64)
        self.push_prefix = np.concatenate(([0.0], np.cumsum([hi - lo for _, lo, hi in push_units])))
        self.pull_prefix = np.concatenate(([0.0], np.cumsum([hi - lo for _, lo, hi in units])))
        # The positions of each tensor: nodes first..last, inner nodes first+1..last-1.
        self.push_span: dict[int, tuple[int, int]] = {}
        self.pull_span: dict[int, tuple[int, int]] = {}
        for layout, span in ((push_units, self.push_span), (units, self.pull_span)):
            for p, (i, _, _) in enumerate(layout, start=1):
                first, _ = span.get(i, (p - 1, p))
                span[i] = (first, p)
        self.split = bool(ps.partition_compute) and any(last - first > 1 for first, last in self.push_span.values())
        # Seconds, unrounded.
        ready = profile.ready_times
        self.push_ready = np.array([0.0] + [ready[i] for i, _, _ in push_units])   # unsplit, by node
        share = np.array([profile.backward[i] * (hi - lo) / sizes[i] for i, lo, hi in push_units])
        self.backward_prefix = np.concatenate(([0.0], np.cumsum(share)))            # split, by node
        self.forward_share = np.array([profile.forward[i] * (hi - lo) / sizes[i] for i, lo, hi in units])
        self.rounding_factor = (5 if self.split else 3) * self.N + self.n + 3

    def cuts_of(self, plan: PSPlan) -> tuple[list[int], list[int]]:
        """The cut nodes of a plan of this space; ``ValueError`` if it is not one."""
        profile = self.problem.profile
        offsets = [np.cumsum(plan.push.message_bytes)[:-1], np.cumsum(plan.pull.message_bytes)[:-1]]
        if PSPlan.from_offsets(profile, *(o.tolist() for o in offsets)) != plan:
            raise ValueError("hint: not a plan of the space (push messages must be contiguous in the push stream, "
                             "backward order; pull messages contiguous in the pull stream, forward order)")
        nodes = []
        for direction, prefix, cut in (("push", self.push_prefix, offsets[0]), ("pull", self.pull_prefix, offsets[1])):
            where = np.minimum(np.searchsorted(prefix, cut), self.N)
            if not np.array_equal(prefix[where], cut):
                raise ValueError(f"hint: its {direction} messages do not end on unit boundaries of the grid")
            nodes.append(where.tolist())
        return nodes[0], nodes[1]

    def plan_of(self, push_nodes: list[int], pull_nodes: list[int]) -> PSPlan:
        return PSPlan.from_offsets(self.problem.profile, [int(self.push_prefix[m]) for m in push_nodes],
                                   [int(self.pull_prefix[m]) for m in pull_nodes])

    # ------------------------------------------------------------------ integer constants
    def constants(self, q: float, horizon: int) -> dict[str, Any]:
        """Every constant of the model in whole quanta, rounded down and capped at
        ``horizon + 1``: a constant past the horizon only appears in plans slower than the
        anchor plan (which set the horizon), and the cap keeps it a 64-bit integer when a
        tiny automatic quantum meets a long duration."""
        problem, profile, ps = self.problem, self.problem.profile, self.problem.ps
        N = self.N

        def quanta(seconds: Any) -> np.ndarray:
            return np.minimum(np.floor(np.asarray(seconds, dtype=np.float64) / q), horizon + 1)

        tails, heads = np.triu_indices(N + 1, k=1)
        push_bytes = self.push_prefix[heads] - self.push_prefix[tails]
        pull_bytes = self.pull_prefix[heads] - self.pull_prefix[tails]
        return {
            "tails": tails.tolist(), "heads": heads.tolist(),
            "push": quanta(problem.cost(push_bytes)), "update": quanta(ps.server_update(push_bytes)),
            "pull": quanta(ps.pull(pull_bytes)),
            "ready": quanta(self.backward_prefix if self.split else self.push_ready),
            "backward": float(quanta(profile.B)),
            "delta": float(quanta(ps.delta)) if self.split else 0.0,
            "after": float(quanta(profile.U + profile.F + profile.W)),
            "host": float(quanta(profile.W)),         # layerwise: the host's share ends the step
            "work": quanta(profile.update + profile.forward),           # per tensor, unsplit forward
            "update_compute": quanta(profile.update),                  # per tensor, split forward
            "forward_share": quanta(self.forward_share),               # per pull unit, split forward
        }

    # ------------------------------------------------------------------ the recursion
    def least_values(self, k: dict[str, Any], push_nodes: list[int], pull_nodes: list[int]) -> dict[str, Any]:
        """The least integer values the model allows for a plan given by its cut nodes:
        the simulator's recursion with every constant rounded down (hints and tests)."""
        N, n = self.N, self.n
        index = {(a, b): t for t, (a, b) in enumerate(zip(k["tails"], k["heads"]))}
        push_path = [0] + sorted(push_nodes) + [N]
        pull_path = [0] + sorted(pull_nodes) + [N]
        z = [0] * (N + 1)
        for m in push_path[1:]:
            z[m] = 1
        pieces_before, split = self._pieces(z)
        delta = int(k["delta"])
        ready = [0] * (N + 1)
        for m in range(1, N + 1):
            ready[m] = int(k["ready"][m]) + delta * pieces_before[m]
        backward_end = int(k["backward"]) + delta * pieces_before[N]
        end, update = [0] * (N + 1), [0] * (N + 1)
        free = 0
        for a, b in zip(push_path[:-1], push_path[1:]):
            t = index[(a, b)]
            free = max(free, ready[b]) + int(k["push"][t])
            end[b], update[b] = free, free + int(k["update"][t])
        gate_of_push = [0] * (N + 2)                  # V_p: update of the message holding p
        for p in range(N, 0, -1):
            gate_of_push[p] = update[p] if z[p] else gate_of_push[p + 1]
        zp = [0] * (N + 1)
        for m in pull_path[1:]:
            zp[m] = 1
        gate = [0] * (N + 2)                          # max V from q to the end of its message
        for q in range(N, 0, -1):
            own = gate_of_push[self.push_position[self.pull_units[q - 1]]]
            gate[q] = own if zp[q] else max(own, gate[q + 1])
        pull_end = [0] * (N + 1)
        free = 0
        for a, b in zip(pull_path[:-1], pull_path[1:]):
            free = max(free, gate[a + 1]) + int(k["pull"][index[(a, b)]])
            pull_end[b] = free
        held = [0] * (N + 2)                          # end of the pull message holding q
        for q in range(N, 0, -1):
            held[q] = pull_end[q] if zp[q] else held[q + 1]
        values = {"z": z, "zp": zp, "split": split, "ready": ready, "end": end, "update": update,
                  "gate_of_push": gate_of_push, "gate": gate, "pull_end": pull_end, "held": held,
                  "backward_end": backward_end}
        if self.problem.sync == "barrier":
            values["T"] = max(backward_end, pull_end[N]) + int(k["after"])
            return values
        if not self.split:
            clock, forward = backward_end, []
            for i in range(n):
                clock = max(clock, held[self.pull_span[i][1]]) + int(k["work"][i])
                forward.append(clock)
            values["forward"], values["T"] = forward, clock + int(k["host"])
            return values
        _, split_pull = self._pieces(zp, direction="pull")
        clock, forward = backward_end, [0] * (N + 1)
        forward[0] = clock
        for q in range(1, N + 1):
            i = self.pull_units[q - 1][0]
            first, last = self.pull_span[i]
            step = int(k["forward_share"][q - 1]) + (int(k["update_compute"][i]) if q == first + 1 else 0)
            ends_piece = zp[q] if q < last else split_pull[i]
            clock = max(clock, held[q]) + step + delta * ends_piece
            forward[q] = clock
        values["split_pull"], values["forward"], values["T"] = split_pull, forward, clock + int(k["host"])
        return values

    def _pieces(self, z: list[int], direction: str = "push") -> tuple[list[int], dict[int, int]]:
        """Per node, the compute pieces of split tensors ended by it (a tensor is split when
        a cut lies inside it), and whether each tensor is split."""
        span = self.push_span if direction == "push" else self.pull_span
        split = {i: int(any(z[m] for m in range(first + 1, last))) for i, (first, last) in span.items()}
        ended = [0] * (self.N + 1)
        layout = self.push_units if direction == "push" else self.pull_units
        count = 0
        for m in range(1, self.N + 1):
            i = layout[m - 1][0]
            first, last = span[i]
            if split[i] and (m == last or z[m]):
                count += 1
            ended[m] = count
        return ended, split

    # ------------------------------------------------------------------ the model
    def build(self, model: Any, k: dict[str, Any], horizon: int, floor_T: int) -> dict[str, Any]:
        """The CP-SAT model of :func:`ps_cpsat` (its docstring states it)."""
        from ortools.sat.python import cp_model

        N, n = self.N, self.n
        tails, heads = k["tails"], k["heads"]
        sum_ = cp_model.LinearExpr.sum
        var = lambda name: model.new_int_var(0, horizon, name)          # noqa: E731
        # Paths: x (push arcs) and y (pull arcs), one message per arc.
        x, y, push_arcs, pull_arcs = {}, {}, [], []
        push_in: list[list[Any]] = [[] for _ in range(N + 1)]
        push_out: list[list[Any]] = [[] for _ in range(N + 1)]
        pull_in: list[list[Any]] = [[] for _ in range(N + 1)]
        pull_out: list[list[Any]] = [[] for _ in range(N + 1)]
        least_ready = k["ready"]
        for t, (a, b) in enumerate(zip(tails, heads)):
            if least_ready[b] + k["push"][t] <= horizon:
                x[(a, b)] = model.new_bool_var(f"x{a}_{b}")
                push_arcs.append((t, a, b))
                push_in[b].append(x[(a, b)])
                push_out[a].append(x[(a, b)])
            if k["pull"][t] <= horizon:
                y[(a, b)] = model.new_bool_var(f"y{a}_{b}")
                pull_arcs.append((t, a, b))
                pull_in[b].append(y[(a, b)])
                pull_out[a].append(y[(a, b)])
        add_path_constraints(model, list(x.values()), push_out, push_in, None)
        add_path_constraints(model, list(y.values()), pull_out, pull_in, None)
        # z[m] / zp[m]: a push / pull message ends at node m (1 at node N).
        z = [None] + [sum_(push_in[m]) for m in range(1, N)] + [1]
        zp = [None] + [sum_(pull_in[m]) for m in range(1, N)] + [1]
        cut = [None] + [model.new_bool_var(f"z{m}") for m in range(1, N)]
        cut_pull = [None] + [model.new_bool_var(f"zp{m}") for m in range(1, N)]
        for m in range(1, N):
            model.add(cut[m] == z[m])
            model.add(cut_pull[m] == zp[m])
        # Ready times (pieces with partitioned compute), push ends and server updates.
        delta = int(k["delta"])
        pieces_ended: list[Any] = [0] * (N + 1)
        split: dict[int, Any] = {}
        backward_end: Any = int(k["backward"])
        if self.split:
            split, pieces_ended = self._piece_expressions(model, cut, self.push_span, self.push_units, "s")
            backward_end = int(k["backward"]) + delta * pieces_ended[N]
        ready = [None] + [int(k["ready"][m]) + delta * pieces_ended[m] for m in range(1, N + 1)]
        end = [model.new_constant(0)] + [var(f"e{m}") for m in range(1, N + 1)]
        update = [None] + [var(f"u{m}") for m in range(1, N + 1)]
        for t, a, b in push_arcs:
            d = int(k["push"][t])
            if a > 0:
                model.add(end[b] >= end[a] + d).only_enforce_if(x[(a, b)])
            model.add(end[b] >= ready[b] + d).only_enforce_if(x[(a, b)])
        # Upd_b >= e_b + (update of the arc entering b): linear, as at most one arc enters b
        # (at a node no message ends, both are free and their least values 0).
        for b in range(1, N + 1):
            entering = [(x[(a, c)], int(k["update"][t])) for t, a, c in push_arcs if c == b]
            model.add(update[b] >= end[b] + cp_model.LinearExpr.weighted_sum([v for v, _ in entering],
                                                                            [w for _, w in entering]))
        # V_p: the update of the push message holding position p.
        held_push = [None] + [var(f"v{p}") for p in range(1, N + 1)]
        model.add(held_push[N] >= update[N])
        for p in range(1, N):
            model.add(held_push[p] >= update[p]).only_enforce_if(cut[p])
            model.add(held_push[p] >= held_push[p + 1]).only_enforce_if(~cut[p])
        # Pull gates: the largest V from q to the end of q's pull message.
        gate = [None] + [var(f"g{q}") for q in range(1, N + 1)]
        for q in range(1, N + 1):
            model.add(gate[q] >= held_push[self.push_position[self.pull_units[q - 1]]])
            if q < N:
                model.add(gate[q] >= gate[q + 1]).only_enforce_if(~cut_pull[q])
        pull_end = [model.new_constant(0)] + [var(f"f{m}") for m in range(1, N + 1)]
        for t, a, b in pull_arcs:
            d = int(k["pull"][t])
            if a > 0:
                model.add(pull_end[b] >= pull_end[a] + d).only_enforce_if(y[(a, b)])
            model.add(pull_end[b] >= gate[a + 1] + d).only_enforce_if(y[(a, b)])
        # The end of the pull message holding q.
        held = [None] + [var(f"h{q}") for q in range(1, N + 1)]
        model.add(held[N] >= pull_end[N])
        for q in range(1, N):
            model.add(held[q] >= pull_end[q]).only_enforce_if(cut_pull[q])
            model.add(held[q] >= held[q + 1]).only_enforce_if(~cut_pull[q])
        total = model.new_int_var(floor_T, horizon, "T")
        forwards: list[Any] = []
        split_pull: dict[int, Any] = {}
        if self.problem.sync == "barrier":
            model.add(total >= pull_end[N] + int(k["after"]))
            model.add(total >= backward_end + int(k["after"]))
        elif not self.split:
            clock: Any = backward_end
            for i in range(n):
                forward = var(f"phi{i}")
                w = int(k["work"][i])
                model.add(forward >= clock + w)
                model.add(forward >= held[self.pull_span[i][1]] + w)
                clock = forward
                forwards.append(forward)
            model.add(total >= clock + int(k["host"]))
        else:
            split_pull, _ = self._piece_expressions(model, cut_pull, self.pull_span, self.pull_units, "sp")
            clock = backward_end
            for q in range(1, N + 1):
                i = self.pull_units[q - 1][0]
                first, last = self.pull_span[i]
                step = int(k["forward_share"][q - 1]) + (int(k["update_compute"][i]) if q == first + 1 else 0)
                ends_piece = cut_pull[q] if q < last else split_pull.get(i, 0)
                forward = var(f"w{q}")
                model.add(forward >= clock + step + delta * ends_piece)
                model.add(forward >= held[q] + step + delta * ends_piece)
                clock = forward
                forwards.append(forward)
            model.add(total >= clock + int(k["host"]))
        # Valid inequalities for the LP relaxation (each holds for every plan's least values):
        # the message holding a position starts no earlier than its gate (its ready time),
        # then it and every later message run one at a time; and the message holding a pull
        # position ends no earlier than the first gate plus the messages up to it, then the
        # forward from there on runs.
        def weighted(arcs: list[tuple[int, int, int]], durations: Any, chosen: dict, keep) -> Any:
            terms = [(chosen[(a, b)], int(durations[t])) for t, a, b in arcs if keep(a, b)]
            return cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [w for _, w in terms])

        for p in range(1, N + 1):
            model.add(pull_end[N] >= gate[p] + weighted(pull_arcs, k["pull"], y, lambda a, b: b >= p))
            if p == 1 or least_ready[p] > least_ready[p - 1]:
                model.add(end[N] >= int(least_ready[p]) + weighted(push_arcs, k["push"], x, lambda a, b: b >= p))
        if self.problem.sync == "layerwise":
            for q, after_q in self._forward_after(k):
                model.add(total >= gate[1] + after_q + weighted(pull_arcs, k["pull"], y, lambda a, b: a < q))
        model.minimize(total)
        # Branch on the cuts, then on the times in the order they are computed, each at its
        # least value: with the cuts fixed, propagation gives each time its least value
        # given the earlier ones (every constraint is a >=), so each branch is one plan at
        # its least T. Left to itself, a single worker assigned some time above its least
        # value and then improved T by one quantum per solution.
        times = (end[1:] + update[1:] + held_push[:0:-1] + gate[:0:-1] + pull_end[1:] + held[:0:-1]
                 + forwards + [total])
        model.add_decision_strategy(cut[1:] + cut_pull[1:] + list(x.values()) + list(y.values()),
                                    cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
        model.add_decision_strategy(times, cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
        return {"x": x, "y": y, "cut": cut, "cut_pull": cut_pull, "split": split, "end": end, "update": update,
                "held_push": held_push, "gate": gate, "pull_end": pull_end, "held": held, "forward": forwards,
                "split_pull": split_pull, "T": total}

    def _forward_after(self, k: dict[str, Any]) -> list[tuple[int, int]]:
        """Layerwise: pairs ``(q, w)``: once the pull message holding position ``q`` ends,
        at least ``w`` quanta of the model's forward chain remain (its rounded constants)."""
        if not self.split:
            work = [int(w) for w in k["work"]]
            tails = np.cumsum(work[::-1])[::-1].tolist()
            return [(self.pull_span[i][1], int(tails[i]) + int(k["host"])) for i in range(self.n)]
        steps = [int(k["forward_share"][q - 1]) + (int(k["update_compute"][self.pull_units[q - 1][0]])
                                                     if q == self.pull_span[self.pull_units[q - 1][0]][0] + 1 else 0)
                 for q in range(1, self.N + 1)]
        tails = np.cumsum(steps[::-1])[::-1].tolist()
        return [(q, int(tails[q - 1]) + int(k["host"])) for q in range(1, self.N + 1)]

    def _piece_expressions(self, model: Any, cut: list[Any], span: dict[int, tuple[int, int]],
                           layout: list[tuple[int, int, int]], name: str) -> tuple[dict[int, Any], list[Any]]:
        """Booleans ``split_i`` (a cut inside tensor ``i``) and, per node, the number of pieces
        of split tensors ended by it, as linear expressions."""
        split: dict[int, Any] = {}
        for i, (first, last) in span.items():
            inner = [cut[m] for m in range(first + 1, last)]
            if inner:
                split[i] = model.new_bool_var(f"{name}{i}")
                for c in inner:
                    model.add_implication(c, split[i])
                model.add_bool_or(inner).only_enforce_if(split[i])
        ended: list[Any] = [0] * (self.N + 1)
        count: Any = 0
        for m in range(1, self.N + 1):
            i = layout[m - 1][0]
            first, last = span[i]
            if i in split:
                count = count + (split[i] if m == last else cut[m])
            ended[m] = count
        return split, ended

    def add_hint(self, model: Any, variables: dict[str, Any], values: dict[str, Any],
                 push_nodes: list[int], pull_nodes: list[int], floor_T: int) -> None:
        """Hint every variable with a plan's least values (a feasible solution)."""
        N = self.N
        push_path = [0] + sorted(push_nodes) + [N]
        pull_path = [0] + sorted(pull_nodes) + [N]
        chosen = set(zip(push_path[:-1], push_path[1:]))
        for arc, v in variables["x"].items():
            model.add_hint(v, arc in chosen)
        chosen = set(zip(pull_path[:-1], pull_path[1:]))
        for arc, v in variables["y"].items():
            model.add_hint(v, arc in chosen)
        for m in range(1, N):
            model.add_hint(variables["cut"][m], bool(values["z"][m]))
            model.add_hint(variables["cut_pull"][m], bool(values["zp"][m]))
        for i, v in variables["split"].items():
            model.add_hint(v, bool(values["split"][i]))
        for i, v in variables["split_pull"].items():
            model.add_hint(v, bool(values["split_pull"][i]))
        for m in range(1, N + 1):
            for name in ("end", "update", "held_push", "gate", "pull_end", "held"):
                key = {"held_push": "gate_of_push"}.get(name, name)
                model.add_hint(variables[name][m], int(values[key][m]))
        forward = values.get("forward", [])
        if self.split and self.problem.sync == "layerwise":
            forward = forward[1:]
        for v, value in zip(variables["forward"], forward):
            model.add_hint(v, int(value))
        model.add_hint(variables["T"], max(int(values["T"]), floor_T))


@method("ps-cpsat", family="exact",
        summary="parameter server, exact: CP-SAT over push and pull groupings, anytime",
        in_default_comparison=False)
@declares(Needs(pattern="ps"))
def ps_cpsat(
    problem: Problem,
    *,
    time_limit: float = 10.0,
    workers: int = 2,
    hint: Any = "best-baseline",
    time_quantum: float | None = None,
    granularity: Any = "tensor",
    random_seed: int = 0,
    max_units: int = DEFAULT_MAX_UNITS,
) -> Result:
    """The optimal plan of the space by a CP-SAT model of both directions, anytime.

    The space is ``ps_brute``'s (module docstring): cuts at tensor boundaries
    (``granularity="tensor"``) or on a grid of units, in both streams; with a grid and
    ``ps.partition_compute`` it includes split compute.

    Formulation
    -----------
    ``N`` units; push positions ``p = 1..N`` in push-stream order, pull positions
    ``q = 1..N`` in pull-stream order, nodes ``0..N`` between them. All times are integers
    (quanta, below), every constraint a ``>=`` (the least solution of a plan is its
    recursion: each right-hand side is non-decreasing in every variable):

    * **Paths** (the arc model of :mod:`fusionopt.solvers.exact.cpsat`): a Boolean ``x_ab`` per
      push arc (a message of push positions ``a+1..b``) and ``y_ab`` per pull arc; each
      set forms one path ``0 -> N``. ``z_m = sum_a x_am`` (``z'_m`` for pulls) says a
      message ends at node ``m``.
    * **Ready times**: without split compute, the ready time ``rho_b`` of the tensor of
      position ``b`` (the last, hence latest, of the message). With partitioned compute
      on a grid, the backward clock at node ``b``: ``Bprefix_b + delta D_b``, where
      ``D_b`` counts the compute pieces of split tensors ended by node ``b``
      (``split_i >= z_m`` for every node ``m`` inside tensor ``i``, ``split_i <= sum z``;
      a piece ends at an inner cut, and at a split tensor's last node), a linear
      expression of the Booleans.
    * **Push channel and updates**, enforced by ``x_ab``: ``e_b >= e_a + d_ab``,
      ``e_b >= R_b + d_ab``, ``Upd_b >= e_b + o + u S_ab``.
    * **Gates**: ``V_p >= Upd_p`` if ``z_p`` and ``V_p >= V_(p+1)`` if not (the update
      of the push message holding ``p``); ``g_q >= V_(push position of q)`` and
      ``g_q >= g_(q+1)`` if not ``z'_q`` (the largest ``V`` from ``q`` to the end of its
      pull message); a pull arc ``(a, b)`` starts after ``g_(a+1)``.
    * **Pull channel**, enforced by ``y_ab``: ``f_b >= f_a + d'_ab``, ``f_b >= g_(a+1) + d'_ab``;
      ``h_q >= f_q`` if ``z'_q`` and ``h_q >= h_(q+1)`` if not (the end of the pull message
      holding ``q``).
    * **Forward** (``sync``): barrier ``T >= f_N + U + F + W`` and ``T >= Bend + U + F + W``
      (``Bend = B + delta D_N``); layerwise ``phi_i >= phi_(i-1) + u_i + f_i`` and
      ``phi_i >= h_(last unit of i) + u_i + f_i``, ``phi_(-1) = Bend``; with split compute
      the same chain per pull unit, each unit adding its byte share of ``f_i`` (plus
      ``u_i`` at a tensor's first unit, plus ``delta`` where a piece ends: an inner pull
      cut, or a split tensor's last unit), and every unit waiting for ``h_q``.
    * ``min T``; ``T >= ps_lower_bound``. Valid inequalities for the LP relaxation (each
      holds for every plan's least values, so none changes a plan's value):
      ``e_N >= rho_p + sum_(push arcs ending at or after p) d x`` (the push cuts of
      :mod:`fusionopt.solvers.exact.cpsat`; with split compute ``rho_p`` is the backward share
      before ``p``), ``f_N >= g_p + sum_(pull arcs ending at or after p) d' y``,
      ``Upd_b >= e_b + sum_a (o + u S_ab) x_ab`` (linear: one arc at most enters ``b``),
      and, layerwise, ``T >= g_1 + sum_(pull arcs starting before q) d' y + (forward
      work from q on)`` for each tensor's last pull unit ``q`` (each unit with split
      compute): on whole tensors with the paths fixed, they give :func:`ps_dp`'s relaxation bound.

    Search: the model branches on the cuts first, then sets each time to its least value
    in the order they are computed; CP-SAT's presolve is off (it turned the valid
    inequalities into a form whose LP bound stayed near half the optimum), and a single
    worker follows that strategy (``FIXED_SEARCH``).

    Integer time and the rounding bound
    -----------------------------------
    With a quantum of ``q_s`` seconds every constant (ready times, durations, updates,
    compute shares, ``delta``) is rounded down. Every time in the model is a ``max`` and
    ``+`` of constants (and ``delta`` times Booleans), so a plan's least integer ``T`` is
    at most its true ``T / q_s``: CP-SAT's bound times ``q_s`` is a lower bound on the
    optimum over the space. A plan's least ``T`` is a longest path through at most
    ``N`` push arcs, one update, ``N`` pull arcs, the ready time (one constant plus at
    most ``N`` deltas), and the forward (per tensor one constant, or per unit a share and
    a delta plus ``n`` updates), each constant short by less than one quantum: the true
    ``T`` exceeds ``q_s`` times the least one by less than ``rounding_bound = (3 N + n + 3)
    q_s`` without split compute and ``(5 N + n + 3) q_s`` with it. A plan CP-SAT proves
    optimal is within that of the optimum over the space. The automatic ``q_s`` is the
    largest power of two with ``rounding_bound <= 1e-7`` of the hint's ``T`` unless that
    takes the horizon past ``2^29`` quanta (``MAX_INTEGER_TIME`` of
    :mod:`fusionopt.solvers.exact.cpsat`); the hint's ``T`` is the horizon.

    Parameters
    ----------
    time_limit : float
        Seconds CP-SAT may search (positive, finite).
    workers : int
        CP-SAT search workers, ``>= 1``.
    hint : str, PSPlan or None
        A first solution: ``"best-baseline"`` (the fastest of ``ps-default``, ``ps-layer``
        and ``ps-dp``), a method's name (its plan must lie in the space), a PSPlan of the
        space, or ``None``. The result is never slower than the hint.
    time_quantum : float, optional
        Seconds per integer step; default automatic.
    granularity : "tensor" or int
        The space (module docstring).
    random_seed : int
        CP-SAT's random seed.
    max_units : int
        Largest ``N`` accepted (the model has ``N (N + 1)`` arcs).

    Returns
    -------
    Result
        The plan re-simulated. ``status`` OPTIMAL when ``T`` is within the rounding bound
        of CP-SAT's bound (optimal over the space), TIME_LIMIT when the time limit
        stopped CP-SAT, else FEASIBLE. ``stats``: ``time_quantum``, ``rounding_bound``,
        ``cpsat_status``, ``objective`` and ``bound`` (seconds, CP-SAT's), ``arcs``,
        ``wall_time``, ``hint``, ``hint_used``, ``plan_source`` (``"cpsat"``, ``"hint"``
        or ``"reference"``), ``space``, ``granularity``, ``units``, ``bound_all_plans``.

    Examples
    --------
    >>> from fusionopt.model import AlphaBeta, Profile
    >>> from fusionopt.model.ps import ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, ps=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> r = ps_cpsat(problem, workers=1, hint=None)
    >>> r.plan.push.groups(), r.plan.pull.groups(), round(r.iteration_time * 1e3, 6), str(r.status)
    ([[2], [1], [0]], [[0, 1], [2]], 21.0, 'OPTIMAL')
    >>> r = ps_cpsat(problem, workers=1, granularity=250_000)     # 1 MB units: a push-pull pipeline
    >>> round(r.iteration_time * 1e3, 6), str(r.status), r.stats["units"]
    (20.0, 'OPTIMAL', 7)
    """
    time_limit = positive_seconds("time_limit", time_limit)
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if time_quantum is not None:
        time_quantum = positive_seconds("time_quantum", time_quantum)
    if isinstance(random_seed, bool) or not isinstance(random_seed, numbers.Integral) or not -2**31 <= random_seed < 2**31:
        raise ValueError(f"random_seed must be a 32-bit integer, got {random_seed!r}")
    if isinstance(max_units, bool) or not isinstance(max_units, numbers.Integral) or max_units < 1:
        raise ValueError(f"max_units must be an integer >= 1, got {max_units!r}")
    units = ps_units(problem, granularity)
    if len(units) > max_units:
        raise ValueError(
            f"granularity = {granularity!r} gives {len(units)} units ({problem.profile.n} tensors), more than "
            f"max_units = {max_units}: the model has N (N + 1) arcs; choose a coarser grid or raise max_units"
        )
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("ps-cpsat needs OR-Tools: pip install ortools") from exc
    grid = _Grid(problem, units)
    hint_plan, hint_label = _ps_hint(problem, hint, grid)
    reference = PSPlan.from_offsets(problem.profile)
    anchor = hint_plan if hint_plan is not None else reference
    upper = offsets_iteration_time(problem, *_offsets_of(grid, anchor))
    factor = grid.rounding_factor
    q, horizon = integer_horizon(upper, factor, time_quantum, "hint" if hint_plan is not None else "reference")
    constants = grid.constants(q, horizon)
    floor_T = min(int(math.floor(ps_lower_bound(problem) / q)), horizon)
    model = cp_model.CpModel()
    variables = grid.build(model, constants, horizon, floor_T)
    anchor_nodes = grid.cuts_of(anchor)
    grid.add_hint(model, variables, grid.least_values(constants, *anchor_nodes), *anchor_nodes, floor_T)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(random_seed)
    # As in cpsat: probing spends the time limit on the arc model's implications.
    solver.parameters.cp_model_probing_level = 0
    # Presolve rewrote the valid inequalities into a form whose LP bound stayed near half
    # the optimum (n = 32 whole tensors: not proved in 10 s with it, 1.7 s without).
    solver.parameters.cp_model_presolve = False
    if workers == 1:
        # One worker follows the model's decision strategy only when told to; its default
        # search stepped T down one quantum per solution (Grid.build).
        solver.parameters.search_branching = cp_model.FIXED_SEARCH
    outcome, interrupted = run_search(solver, model)
    status_name = solver.status_name(outcome)
    if outcome == cp_model.MODEL_INVALID:
        raise RuntimeError(f"ps-cpsat: CP-SAT rejected the model: {model.validate()}")
    if outcome == cp_model.INFEASIBLE:
        raise RuntimeError("ps-cpsat: CP-SAT found the model infeasible, but the hint plan is a solution")
    candidates: list[tuple[str, PSPlan]] = []
    objective = bound = time_bound = None
    if outcome in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        objective = solver.objective_value * q
        nodes = []
        for arcs in (variables["x"], variables["y"]):
            successor = {a: b for (a, b), v in arcs.items() if solver.boolean_value(v)}
            path, node = [], successor[0]
            while node != grid.N:
                path.append(node)
                node = successor[node]
            nodes.append(path)
        candidates.append(("cpsat", grid.plan_of(*nodes)))
        if math.isfinite(solver.best_objective_bound):
            bound = max(0.0, solver.best_objective_bound) * q
            time_bound = bound
    candidates.append(("hint" if hint_plan is not None else "reference", anchor))
    # CP-SAT ranks plans by rounded times; the simulator has the last word (ties: CP-SAT).
    source, plan = min(candidates, key=lambda c: offsets_iteration_time(problem, *_offsets_of(grid, c[1])))
    stats = _common_stats(problem, granularity, units)
    stats.update({
        "time_quantum": q, "rounding_bound": factor * q, "cpsat_status": status_name,
        "objective": objective, "bound": bound,
        "arcs": len(variables["x"]) + len(variables["y"]), "wall_time": solver.wall_time,
        "hint": hint_label, "hint_used": hint_plan is not None, "plan_source": source,
    })
    status = Status.INTERRUPTED if interrupted else (
        Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT)
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=time_bound,
                                        status=status, tolerance=factor * q))


def _offsets_of(grid: _Grid, plan: PSPlan) -> tuple[list[int], list[int]]:
    push_nodes, pull_nodes = grid.cuts_of(plan)
    return [int(grid.push_prefix[m]) for m in push_nodes], [int(grid.pull_prefix[m]) for m in pull_nodes]


HINT_METHODS = ("ps-default", "ps-layer", "ps-dp")


def _ps_hint(problem: Problem, hint: Any, grid: _Grid) -> tuple[PSPlan | None, str]:
    """The hint as a plan of the space, and a label for ``stats``
    (:func:`fusionopt.solvers.warm.hint_plan`)."""
    def check(plan: PSPlan) -> None:
        grid.cuts_of(plan.validate(problem.profile))

    return warm.hint_plan(problem, hint, method="ps-cpsat", plan_type=PSPlan, best_of=HINT_METHODS, check=check)
