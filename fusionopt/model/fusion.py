"""Fast evaluation of fusion plans (MODEL.md section 7).

A fusion plan on one channel is a cut vector ``x`` over backward order (see
:meth:`Plan.from_cuts`). Its last message ends at
``E = max_j [ R_j + sum_{k >= j} c(S_k) ]`` and, with FIFO backward order, both sync modes
give ``T = max(B, E) + U + F + W``. :func:`fusion_iteration_time` evaluates one cut vector with
that closed form; :func:`evaluate_cuts` scores a whole batch at once with numpy, for
metaheuristics and exhaustive search. Tests pin both to :func:`simulate`.

The closed form needs the last message to gate every update and forward. Under layerwise
sync that holds when the last tensor in the ready order, ``l``, has no update or forward
work before it (``sum_{i < l} (u_i + f_i) = 0``): always in reverse forward order
(``l = 0``), and for a profile whose layers keep their time on their last tensor. Where it
fails (a layer's weight ready before its bias, with work of its own), tensors of earlier
messages may be updated and run forward while the last message is on the channel;
:func:`layerwise_slack` says by how much at most, and the evaluators here simulate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.model.problem import Problem

# Plans per inner block of the batch evaluator: large enough to amortise numpy's per-call
# overhead, small enough that the working vectors stay in cache.
_BLOCK = 32768
_TILE = 4096


def backward_arrays(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Ready times ``rho_j`` and prefix sizes ``Q_j`` in backward order, the profile's
    ready order (``Q_0 = 0``).

    ``rho`` has ``n`` entries (seconds, non-decreasing), ``Q`` has ``n + 1`` (bytes).
    """
    profile = problem.profile
    order = profile.backward_order
    rho = profile.ready_times[order]
    prefix = np.zeros(profile.n + 1, dtype=np.float64)
    np.cumsum(profile.sizes[order], out=prefix[1:])
    return rho, prefix


def layerwise_slack(problem: Problem) -> float:
    """Seconds of update and forward work that may run before the last message of a fusion
    plan ends: ``sum_{i < l} (u_i + f_i)`` with ``l`` the last tensor in the ready order,
    under layerwise sync; 0 under barrier sync. ``T = max(B, E) + U + F + W`` holds for every
    fusion plan when it is 0, and ``T >= max(B + U + F + W, E + U + F + W - slack)`` always.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> p = Profile.from_arrays([8, 8], [1.0, 2.0], [0.0, 3.0], update=[0.5, 0.5], ready_order=[0, 1])
    >>> layerwise_slack(Problem(p, AlphaBeta(0, 1), sync="layerwise"))
    1.5
    """
    if problem.sync != "layerwise":
        return 0.0
    profile = problem.profile
    last = int(profile.ready_order[-1])
    return float(profile.update[:last].sum() + profile.forward[:last].sum())


def _simulated(problem: Problem, cuts: np.ndarray) -> float:
    from fusionopt.model.plan import Plan
    from fusionopt.model.timeline import simulate

    return simulate(problem, Plan.from_cuts(problem.profile, cuts), validate=False).iteration_time


def time_after_channel(profile: Any, channel_end: float) -> float:
    """``T = max(B, E) + U + F + W`` of a fusion plan whose last message ends at ``E`` (seconds).

    Both sync modes (MODEL.md section 7); also a lower bound on ``T`` from a lower bound on
    ``E``, which is how the exact solvers turn their bounds into iteration times.

    >>> from fusionopt.model.profile import Profile
    >>> time_after_channel(Profile.from_arrays([8, 8], [1.0, 2.0], [4.0, 3.0]), 5.0)
    10.0
    """
    return max(profile.B, float(channel_end)) + profile.U + profile.F + profile.W


def time_bound_after_channel(problem: Problem, channel_end: float) -> float:
    """A lower bound on ``T`` from a lower bound ``channel_end`` on the last message's end
    (seconds): :func:`time_after_channel` less the :func:`layerwise_slack`, never below
    ``B + U + F + W``. Equal to :func:`time_after_channel` when the slack is 0."""
    profile = problem.profile
    exact = time_after_channel(profile, channel_end)
    return max(profile.B + profile.U + profile.F + profile.W, exact - layerwise_slack(problem))


def _check_cuts(problem: Problem, cuts: np.ndarray, batch: bool) -> np.ndarray:
    cuts = np.asarray(cuts)
    n = problem.profile.n
    expected = (n - 1,) if not batch else None
    if not batch and cuts.shape != expected:
        raise ValueError(f"cut vector must have n - 1 = {n - 1} entries, got shape {cuts.shape}")
    if batch and (cuts.ndim != 2 or cuts.shape[1] != n - 1):
        raise ValueError(f"cut matrix must have shape (plans, n - 1 = {n - 1}), got {cuts.shape}")
    if cuts.dtype != bool:
        if cuts.size and not np.isin(cuts, (0, 1)).all():
            raise ValueError("cut vectors hold 0/1 or booleans")
        cuts = cuts.astype(bool)
    return cuts


def fusion_iteration_time(problem: Problem, cuts: np.ndarray) -> float:
    """Iteration time of the fusion plan with cut vector ``cuts``, in seconds.

    Equal to ``simulate(problem, Plan.from_cuts(profile, cuts)).iteration_time``. With copy
    cost or contention on (one channel), :func:`fusion_message_times` gives the last end.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``: WFBP (all cuts) 20 ms, ``{t3},{t2,t1}`` 17 ms.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> round(fusion_iteration_time(problem, [1, 1]) * 1e3, 9)
    20.0
    >>> round(fusion_iteration_time(problem, [1, 0]) * 1e3, 9)
    17.0
    """
    cuts = _check_cuts(problem, cuts, batch=False)
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


def evaluate_cuts(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    """Iteration times of many fusion plans at once.

    Parameters
    ----------
    cuts : array of shape (m, n - 1), bool or 0/1
        One cut vector per row (see :meth:`Plan.from_cuts`).

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
    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> (evaluate_cuts(problem, [[1, 1], [0, 0], [0, 1], [1, 0]]) * 1e3).round(9).tolist()
    [20.0, 19.0, 19.0, 17.0]
    """
    problem.require_plain("evaluate_cuts")
    cuts = _check_cuts(problem, cuts, batch=True)
    profile = problem.profile
    n = profile.n
    m = cuts.shape[0]
    out = np.empty(m)
    if m == 0:
        return out
    if layerwise_slack(problem) > 0.0:
        return np.array([_simulated(problem, row) for row in cuts])
    rho, prefix = backward_arrays(problem)
    affine = problem.cost.affine
    # The sweep reads one contiguous row of cuts per tensor position, so each block is
    # transposed first, in tiles small enough for the cache (a large transpose is slow).
    by_position = np.empty((n - 1, min(m, _BLOCK)), dtype=bool)
    for lo in range(0, m, _BLOCK):
        hi = min(m, lo + _BLOCK)
        block = by_position[:, : hi - lo]
        for tile in range(lo, hi, _TILE):
            block[:, tile - lo: min(hi, tile + _TILE) - lo] = cuts[tile: min(hi, tile + _TILE)].T
        if affine is not None:
            out[lo:hi] = _sweep_affine(rho, prefix, block, *affine)
        else:
            out[lo:hi] = _sweep_general(rho, prefix, block, problem.cost)
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


def arc_times(problem: Problem, ready: np.ndarray, prefix: np.ndarray, tails: np.ndarray,
               heads: np.ndarray) -> dict[str, np.ndarray]:
    """Per arc ``(k, j)``, seconds: ``duration`` ``d_kj`` on the channel, compute ``work``
    ``Delta_kj`` between the ready times of the messages ending at ``k`` and ``j``, the
    earliest ready time ``nominal`` ``rho_j (+ p_kj)`` and the ``packing`` ``p_kj`` on the
    compute stream (0 when it runs on the channel)."""
    sizes = prefix[heads] - prefix[tails]
    durations = np.asarray(problem.cost(sizes), dtype=np.float64)
    packing = problem.copy_cost * sizes * (heads - tails > 1)
    if problem.copy_on == "channel":
        durations = durations + packing
        packing = np.zeros_like(sizes)
    return {"duration": durations, "work": ready[heads] - ready[tails] + packing,
            "nominal": ready[heads] + packing, "packing": packing}


def fusion_message_times(problem: Problem, cuts: Any) -> tuple[np.ndarray, np.ndarray]:
    """Ready times ``R_m`` and ends ``e_m`` of the messages of a fusion plan, seconds.

    For one channel, with copy cost and contention (MODEL.md section 6; the plain model is
    the case ``gamma = 0``, ``kappa = 1``), in the semantics of :mod:`fusionopt.model.events`:
    the channel is FIFO and busy exactly on ``[R_m, e_m]``, the compute stream runs at
    ``1 / kappa`` there, so with ``Delta_m`` the compute work between two ready times,
    ``R_1 = Delta_1``, ``R_{m+1} = R_m + min(kappa Delta, Delta + (1 - 1/kappa)(e_m - R_m))``
    and ``e_m = max(R_m, e_{m-1}) + d_m``; ``T = e_M + U + F + W`` in both sync modes. A fast
    path for :func:`simulate`, which tests pin it to; the CP-SAT model encodes it.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), contention=2.0)
    >>> ready, end = fusion_message_times(problem, [True, True])
    >>> (ready * 1e3).round(9).tolist(), (end * 1e3).round(9).tolist()
    ([1.0, 4.5, 8.5], [4.0, 6.5, 13.5])
    """
    _refuse_ps(problem, "fusion_message_times")
    if problem.channels > 1:
        raise ValueError(f"the fusion recursion models one channel, not channels = {problem.channels}")
    profile = problem.profile
    rho, prefix = backward_arrays(problem)
    ready_at = np.concatenate(([0.0], rho))
    heads = (np.flatnonzero(np.append(np.asarray(cuts, dtype=bool), True)) + 1)
    tails = np.concatenate(([0], heads[:-1]))
    if heads.size and heads[-1] != profile.n:
        raise ValueError(f"cut vector must have n - 1 = {profile.n - 1} entries")
    times = arc_times(problem, ready_at, prefix, tails, heads)
    durations, work = times["duration"], times["work"]
    kappa = problem.contention
    ready = np.empty(len(heads))
    end = np.empty(len(heads))
    for m, (d, delta) in enumerate(zip(durations.tolist(), work.tolist())):
        if m == 0:
            ready[m] = delta                            # the channel is idle before
            end[m] = ready[m] + d
            continue
        backlog = end[m - 1] - ready[m - 1]
        ready[m] = ready[m - 1] + min(kappa * delta, delta + (1.0 - 1.0 / kappa) * backlog)
        end[m] = max(ready[m], end[m - 1]) + d
    return ready, end


def score_cuts(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    """Iteration times of many fusion plans on any problem, seconds: the batch evaluator.

    The entry point for searches over cut vectors (metaheuristics, brute force): the plain
    model uses :func:`evaluate_cuts`; with copy cost or contention on one channel, the
    recursion of :func:`fusion_message_times`; with several channels,
    :func:`~fusionopt.model.sharing.channel_schedule` plan by plan, or with contention too
    :func:`simulate` (event-driven, slower still).

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), contention=2.0)
    >>> (score_cuts(problem, [[1, 1], [0, 1]]) * 1e3).round(9).tolist()
    [16.5, 16.0]
    """
    _refuse_ps(problem, "score_cuts")
    if not problem.extensions:
        return evaluate_cuts(problem, cuts)
    cuts = _check_cuts(problem, cuts, batch=True)
    if problem.channels == 1 and layerwise_slack(problem) > 0.0:
        return np.array([_simulated(problem, row) for row in cuts])
    if problem.channels == 1:
        return _evaluate_extended(problem, cuts)
    if problem.contention == 1.0:
        from fusionopt.model.sharing import channel_schedule

        return np.array([channel_schedule(problem, row)["iteration_time"] for row in cuts])
    from fusionopt.model.plan import Plan
    from fusionopt.model.timeline import simulate

    profile = problem.profile
    return np.array([simulate(problem, Plan.from_cuts(profile, row), validate=False).iteration_time
                     for row in cuts])


def _refuse_ps(problem: Problem, what: str) -> None:
    if problem.ps is not None:
        raise ValueError(f"{what} times all-reduce fusion plans; this problem has a parameter server: "
                         "time its PSPlans with simulate() or fusionopt.model.ps_timing")


def _evaluate_extended(problem: Problem, cuts: np.ndarray) -> np.ndarray:
    # One channel with copy cost and/or contention: the recursion of fusion_message_times,
    # plans advancing together through the positions. Every state variable only grows at
    # a cut (ready time, end, and the prefix size, ready time and position of the last
    # cut), so each update is a maximum with the candidate zeroed where there is no cut.
    profile = problem.profile
    n = profile.n
    m = cuts.shape[0]
    out = np.empty(m)
    by_position = np.empty((n - 1, min(m, _BLOCK)), dtype=bool)
    for lo in range(0, m, _BLOCK):
        hi = min(m, lo + _BLOCK)
        block = by_position[:, : hi - lo]
        for tile in range(lo, hi, _TILE):
            block[:, tile - lo: min(hi, tile + _TILE) - lo] = cuts[tile: min(hi, tile + _TILE)].T
        out[lo:hi] = _sweep_extended(problem, block)
    return out + profile.U + profile.F + profile.W


def _sweep_extended(problem: Problem, block: np.ndarray) -> np.ndarray:
    rho, prefix = backward_arrays(problem)
    n = len(rho)
    width = block.shape[1]
    kappa, gamma = problem.contention, problem.copy_cost
    on_channel = problem.copy_on == "channel"
    affine = problem.cost.affine
    ready, end = np.zeros(width), np.zeros(width)
    last_q, last_rho, last_position = np.zeros(width), np.zeros(width), np.zeros(width)
    always = np.ones(width, dtype=bool)
    for j in range(1, n + 1):
        is_cut = block[j - 1] if j < n else always
        size = prefix[j] - last_q                    # > 0: sizes are positive
        packing = gamma * size * (j - last_position > 1)
        if affine is not None:
            duration = affine[0] + affine[1] * size
        else:
            duration = np.asarray(problem.cost(size), dtype=np.float64)
        work = rho[j - 1] - last_rho
        if on_channel:
            duration += packing
        else:
            work += packing
        new_ready = ready + np.minimum(kappa * work, work + (1.0 - 1.0 / kappa) * (end - ready))
        new_end = np.maximum(new_ready, end) + duration
        np.maximum(ready, new_ready * is_cut, out=ready)
        np.maximum(end, new_end * is_cut, out=end)
        np.maximum(last_q, prefix[j] * is_cut, out=last_q)
        np.maximum(last_rho, rho[j - 1] * is_cut, out=last_rho)
        np.maximum(last_position, j * is_cut, out=last_position)
    return end
