"""Fast evaluators of fusion plans (MODEL.md section 7), each pinned to the simulator.

A fusion plan on one channel is a cut vector over the ready order (:meth:`Plan.from_cuts`).
:func:`fusion_iteration_time` evaluates one cut vector with the closed form of
:mod:`fusionopt.model._fusion`; :func:`evaluate_cuts` scores a whole batch at once with numpy,
for metaheuristics and exhaustive search; :func:`score_cuts` does the same with the
extensions on (the one-channel recursion, the channel schedule of
:mod:`fusionopt.model._sharing`, or the simulator). Where the closed form does not hold
(:func:`~fusionopt.model.layerwise_slack` > 0) they simulate. Tests pin each to
:func:`~fusionopt.model.simulate`.
"""

from __future__ import annotations

import numpy as np

from fusionopt.model._fusion import (backward_arrays, check_cuts, fusion_message_times, layerwise_slack, refuse_ps,
                                    time_after_channel)
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._sharing import channel_schedule
from fusionopt.model._simulator import simulate

# Plans per inner block of the batch evaluator: large enough to amortise numpy's per-call
# overhead, small enough that the working vectors stay in cache.
_BLOCK = 32768
_TILE = 4096


def _simulated(problem: Problem, cuts: np.ndarray) -> float:
    return simulate(problem, Plan.from_cuts(problem.profile, cuts), validate=False).iteration_time


def fusion_iteration_time(problem: Problem, cuts: np.ndarray) -> float:
    """Iteration time of the fusion plan with cut vector ``cuts``, in seconds.

    Equal to ``simulate(problem, Plan.from_cuts(profile, cuts)).iteration_time``. With copy
    cost or contention (either way) on one channel, :func:`fusion_message_times` gives the
    last end.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``: WFBP (all cuts) 20 ms, ``{t3},{t2,t1}`` 17 ms.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> round(fusion_iteration_time(problem, [1, 1]) * 1e3, 9)
    20.0
    >>> round(fusion_iteration_time(problem, [1, 0]) * 1e3, 9)
    17.0
    """
    cuts = check_cuts(problem, cuts, batch=False)
    profile = problem.profile
    if layerwise_slack(problem) > 0.0:
        return _simulated(problem, cuts)
    if problem.extensions:
        if problem.channels > 1:
            problem.require_plain("fusion_iteration_time with several channels")
        _, end = fusion_message_times(problem, cuts)
        return float(end[-1]) + profile.U + profile.F + profile.W
    rho, prefix = backward_arrays(problem)
    ends = np.flatnonzero(np.append(cuts, True))            # last position of each message
    starts = np.concatenate(([0], ends[:-1] + 1))
    costs = problem.cost(prefix[ends + 1] - prefix[starts])
    tail = np.cumsum(costs[::-1])[::-1]                     # sum_{k >= j} c(S_k)
    return time_after_channel(profile, float(np.max(rho[ends] + tail)))


def evaluate_cuts(problem: Problem, cuts: np.ndarray, *, block: int = _BLOCK) -> np.ndarray:
    """Iteration times of many fusion plans at once.

    Parameters
    ----------
    cuts : array of shape (m, n - 1), bool or 0/1
        One cut vector per row (see :meth:`Plan.from_cuts`).
    block : int
        Plans evaluated together (at most; 32768 by default): the working memory is
        ``(n - 1) x block`` booleans. The times do not depend on it.

    Returns
    -------
    ndarray of shape (m,)
        ``T`` of each plan in seconds, equal to :func:`fusion_iteration_time` of each row.

    Notes
    -----
    The plans advance together through the tensors in backward order, one vectorised
    update per tensor, with state per plan: the channel's free time and the prefix size at
    the last cut. The cost of ``n`` numpy calls per block of plans is thus shared by the
    whole block; affine costs avoid evaluating ``c`` altogether.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> (evaluate_cuts(problem, [[1, 1], [0, 0], [0, 1], [1, 0]]) * 1e3).round(9).tolist()
    [20.0, 19.0, 19.0, 17.0]
    """
    problem.require_plain("evaluate_cuts")
    cuts = check_cuts(problem, cuts, batch=True)
    profile = problem.profile
    m = cuts.shape[0]
    out = np.empty(m)
    if m == 0:
        return out
    if layerwise_slack(problem) > 0.0:
        return np.array([_simulated(problem, row) for row in cuts])
    rho, prefix = backward_arrays(problem)
    affine = problem.cost.affine
    if int(block) != block or block < 1:
        raise ValueError(f"evaluate_cuts: block must be a whole number >= 1, not {block!r}")
    for lo, hi, positions in _position_blocks(cuts, int(block)):
        if affine is not None:
            out[lo:hi] = _sweep_affine(rho, prefix, positions, *affine)
        else:
            out[lo:hi] = _sweep_general(rho, prefix, positions, problem.cost)
    np.maximum(out, profile.B, out=out)
    out += profile.U + profile.F + profile.W
    return out


def _sweep_affine(rho: np.ndarray, prefix: np.ndarray, block: np.ndarray,
                  alpha: float, beta: float) -> np.ndarray:
    # At a message's last position j the channel frees at
    #   end <- max(end, rho_j) + alpha + beta (Q_j - Q_last) = max(end, rho_j) + closing_j - beta Q_last.
    # The candidate is never below the current end (c >= 0) and beta Q only grows with j,
    # so the conditional updates are branch-free maxima with the candidate zeroed where
    # there is no cut: masked assignment is an order of magnitude slower in numpy.
    # Times are >= 0, so end may start at 0 instead of -inf without changing max(end, rho_j).
    n = len(rho)
    width = block.shape[1]
    end = np.zeros(width)
    last_beta_q = np.zeros(width)
    candidate = np.empty(width)
    scratch = np.empty(width)
    closing = alpha + beta * prefix[1:]
    beta_q = beta * prefix[1:]
    for j in range(n - 1):
        is_cut = block[j]
        np.maximum(end, rho[j], out=candidate)
        candidate += closing[j]
        candidate -= last_beta_q
        np.multiply(candidate, is_cut, out=candidate)
        np.maximum(end, candidate, out=end)
        np.multiply(is_cut, beta_q[j], out=scratch)
        np.maximum(last_beta_q, scratch, out=last_beta_q)
    np.maximum(end, rho[n - 1], out=candidate)
    candidate += closing[n - 1]
    candidate -= last_beta_q
    return candidate


def _sweep_general(rho: np.ndarray, prefix: np.ndarray, block: np.ndarray, cost) -> np.ndarray:
    n = len(rho)
    width = block.shape[1]
    end = np.full(width, -np.inf)
    last_q = np.zeros(width)
    for j in range(n):
        is_cut = block[j] if j < n - 1 else np.ones(width, dtype=bool)
        if not is_cut.any():
            continue
        candidate = np.maximum(end[is_cut], rho[j]) + cost(prefix[j + 1] - last_q[is_cut])
        end[is_cut] = candidate
        last_q[is_cut] = prefix[j + 1]
    return end


def score_cuts(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    """Iteration times of many fusion plans on any problem, seconds: the batch evaluator.

    The entry point for searches over cut vectors (metaheuristics, brute force): the plain
    model uses :func:`evaluate_cuts`; with copy cost or contention (either way) on one
    channel, the recursion of :func:`fusion_message_times`; with several channels,
    :func:`~fusionopt.model.channel_schedule` plan by plan, or with contention too
    :func:`simulate` (event-driven, slower still).

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), contention=2.0)
    >>> (score_cuts(problem, [[1, 1], [0, 1]]) * 1e3).round(9).tolist()
    [16.5, 16.0]
    """
    refuse_ps(problem, "score_cuts")
    if not problem.extensions:
        return evaluate_cuts(problem, cuts)
    cuts = check_cuts(problem, cuts, batch=True)
    if problem.channels == 1 and layerwise_slack(problem) > 0.0:
        return np.array([_simulated(problem, row) for row in cuts])
    if problem.channels == 1:
        return _evaluate_extended(problem, cuts)
    if problem.contention == 1.0 and problem.comm_contention == 1.0:
        return np.array([channel_schedule(problem, row)["iteration_time"] for row in cuts])
    profile = problem.profile
    return np.array([simulate(problem, Plan.from_cuts(profile, row), validate=False).iteration_time
                     for row in cuts])


def _evaluate_extended(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    # One channel with copy cost and/or contention: the recursion of fusion_message_times,
    # plans advancing together through the positions. The last cut's prefix size, ready time
    # and position only grow at a cut, so each is updated by a maximum with the candidate
    # zeroed where there is no cut.
    profile = problem.profile
    m = cuts.shape[0]
    out = np.empty(m)
    for lo, hi, block in _position_blocks(cuts, _BLOCK):
        out[lo:hi] = _sweep(problem, block)
    return out + profile.U + profile.F + profile.W


def _sweep(problem: Problem, block: np.ndarray) -> np.ndarray:
    # The recursion of fusion._channel_times (one-way contention at mu = 1), plans advancing
    # together: the channel's backlog may shrink at a cut, so it is updated where there is one
    # rather than by a maximum.
    rho, prefix = backward_arrays(problem)
    n = len(rho)
    width = block.shape[1]
    kappa, mu, gamma = problem.contention, problem.comm_contention, problem.copy_cost
    eta, eta_byte = problem.message_compute_terms
    on_channel = problem.copy_on == "channel"
    affine = None if problem.prices_by_content else problem.cost.affine
    ready, backlog = np.zeros(width), np.zeros(width)
    last_q, last_rho, last_position = np.zeros(width), np.zeros(width), np.zeros(width)
    always = np.ones(width, dtype=bool)
    for j in range(1, n + 1):
        is_cut = block[j - 1] if j < n else always
        size = prefix[j] - last_q
        packing = gamma * size * (j - last_position > 1)
        if affine is not None:
            duration = affine[0] + affine[1] * size
        else:
            duration = problem.arc_cost(last_position.astype(np.int64), j, size)
        work = rho[j - 1] - last_rho + eta + eta_byte * size
        if on_channel:
            duration += packing
        else:
            work += packing
        # The first message finds the channel idle (backlog 0), so min() gives its work.
        new_ready = ready + np.minimum(kappa * work, work + (1.0 - 1.0 / kappa) * mu * backlog)
        new_backlog = np.maximum(backlog - kappa * work / mu, 0.0) + duration
        ready = np.where(is_cut, new_ready, ready)
        backlog = np.where(is_cut, new_backlog, backlog)
        np.maximum(last_q, prefix[j] * is_cut, out=last_q)
        np.maximum(last_rho, rho[j - 1] * is_cut, out=last_rho)
        np.maximum(last_position, j * is_cut, out=last_position)
    return ready + backlog          # the compute waits from R_M: the rest runs at full speed


def _position_blocks(cuts: np.ndarray, size: int):
    """``(lo, hi, block)`` for the plans ``lo:hi`` of ``cuts`` (an ``(m, n - 1)`` array, ``size``
    plans a block), the
    block holding their cuts by position (``(n - 1, hi - lo)``). The sweeps read one contiguous
    row of cuts per tensor position, so each block is transposed first, in tiles small
    enough for the cache (a large transpose is slow). The block is reused between steps."""
    m, positions = cuts.shape
    by_position = np.empty((positions, min(m, size)), dtype=bool)
    for lo in range(0, m, size):
        hi = min(m, lo + size)
        block = by_position[:, : hi - lo]
        for tile in range(lo, hi, _TILE):
            block[:, tile - lo: min(hi, tile + _TILE) - lo] = cuts[tile: min(hi, tile + _TILE)].T
        yield lo, hi, block
