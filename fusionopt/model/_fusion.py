"""The one-channel fusion model in closed form (MODEL.md section 7): its arrays and recursion.

A fusion plan on one channel is a cut vector ``x`` over the ready order (see
:meth:`Plan.from_cuts`). Its last message ends at
``E = max_j [ R_j + sum_{k >= j} c(S_k) ]`` and, with FIFO backward order, both sync modes
give ``T = max(B, E) + U + F + W`` (:func:`time_after_channel`). Here are the pieces every
evaluator and exact method builds on: the ready times and prefix sizes in the ready order
(:func:`backward_arrays`), the per-arc times (:func:`arc_times`) and the one-channel
recursion with the extensions (:func:`fusion_message_times`). The evaluators that score cut
vectors are in :mod:`fusionopt.model._fusion_eval`.

The closed form needs the last message to gate every update and forward. Under layerwise
sync that holds when the last tensor in the ready order, ``l``, has no update or forward
work before it (``sum_{i < l} (u_i + f_i) = 0``): always in reverse forward order
(``l = 0``), and for a profile whose layers keep their time on their last tensor. Where it
fails (a layer's weight ready before its bias, with work of its own), tensors of earlier
messages may be updated and run forward while the last message is on the channel;
:func:`layerwise_slack` says by how much at most, and the evaluators simulate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.model._plan import cut_vectors
from fusionopt.model._problem import Problem


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

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> p = Profile.from_arrays([8, 8], [1.0, 2.0], [0.0, 3.0], update=[0.5, 0.5], ready_order=[0, 1])
    >>> layerwise_slack(Problem(p, AlphaBeta(0, 1), sync="layerwise"))
    1.5
    """
    if problem.sync != "layerwise":
        return 0.0
    profile = problem.profile
    last = int(profile.ready_order[-1])
    return float(profile.update[:last].sum() + profile.forward[:last].sum())


def time_after_channel(profile: Any, channel_end: float) -> float:
    """``T = max(B, E) + U + F + W`` of a fusion plan whose last message ends at ``E`` (seconds).

    Both sync modes (MODEL.md section 7); also a lower bound on ``T`` from a lower bound on
    ``E``, which is how the exact solvers turn their bounds into iteration times.

    >>> from fusionopt.model import Profile
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


def check_cuts(problem: Problem, cuts: np.ndarray, batch: bool) -> np.ndarray:
    return cut_vectors(cuts, problem.profile.n, batch=batch)


def arc_times(problem: Problem, ready: np.ndarray, prefix: np.ndarray, tails: np.ndarray,
               heads: np.ndarray) -> dict[str, np.ndarray]:
    """Per arc ``(k, j)``, seconds: ``duration`` ``d_kj`` on the channel, compute ``work``
    ``Delta_kj`` between the ready times of the messages ending at ``k`` and ``j``, the
    earliest ready time ``nominal`` ``rho_j (+ p_kj)`` and the ``packing`` ``p_kj`` on the
    compute stream: the packing when it runs there (on the channel it lengthens the duration
    instead) plus the ``message_compute`` (and ``message_compute_per_byte``) every message
    costs the compute stream."""
    sizes = prefix[heads] - prefix[tails]
    durations = problem.arc_cost(tails, heads, sizes)
    if problem.copy_on == "channel":
        durations = durations + problem.copy_cost * sizes * (heads - tails > 1)
    packing = problem.compute_per_message(heads - tails, sizes)
    return {"duration": durations, "work": ready[heads] - ready[tails] + packing,
            "nominal": ready[heads] + packing, "packing": packing}


def fusion_message_times(problem: Problem, cuts: Any) -> tuple[np.ndarray, np.ndarray]:
    """Ready times ``R_m`` and ends ``e_m`` of the messages of a fusion plan, seconds.

    For one channel, with copy cost and contention (MODEL.md section 6; the plain model is
    the case ``gamma = 0``, ``kappa = 1``), in the semantics of :mod:`fusionopt.model._events`:
    the channel is FIFO and busy exactly on ``[R_m, e_m]``, the compute stream runs at
    ``1 / kappa`` there, so with ``Delta_m`` the compute work between two ready times,
    ``R_1 = Delta_1``, ``R_{m+1} = R_m + min(kappa Delta, Delta + (1 - 1/kappa)(e_m - R_m))``
    and ``e_m = max(R_m, e_{m-1}) + d_m``; ``T = e_M + U + F + W`` in both sync modes. With
    ``comm_contention = mu > 1`` the channel also slows while the backward computes (until
    ``R_M``; the compute stream then waits for the last message), and the recursion carries
    the channel's backlog instead (:func:`_channel_times`, which is also the
    one-way recursion at ``mu = 1``). Under layerwise sync with a
    positive :func:`layerwise_slack`, forward work may overlap the last messages and slow
    them: the ready times stay exact and the ends are then lower bounds. A fast path for
    :func:`simulate`, which tests pin it to; the CP-SAT model encodes it.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), contention=2.0)
    >>> ready, end = fusion_message_times(problem, [True, True])
    >>> (ready * 1e3).round(9).tolist(), (end * 1e3).round(9).tolist()
    ([1.0, 4.5, 8.5], [4.0, 6.5, 13.5])

    Messages at half speed while the backward computes instead (MODEL.md section 6): t3's
    3 ms from 1 ms end at 6.5, after the backward.

    >>> ready, end = fusion_message_times(Problem(profile, AlphaBeta(1e-3, 1e-9), comm_contention=2.0), [True, True])
    >>> (ready * 1e3).round(9).tolist(), (end * 1e3).round(9).tolist()
    ([1.0, 3.0, 6.0], [6.5, 8.5, 13.5])
    """
    refuse_ps(problem, "fusion_message_times")
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
    return _channel_times(problem.contention, problem.comm_contention, durations, work)


def _channel_times(kappa: float, mu: float, durations: np.ndarray, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fusion_message_times`' recursion: the channel runs at ``1 / mu`` (``mu >= 1``)
    while the backward computes, that is until ``R_M``, and at full speed after.

    With ``G_m`` the channel seconds (at full speed) left at ``R_m``, message ``m``'s included:
    ``G_1 = d_1``; between ``R_m`` and ``R_{m+1}`` the channel stays busy exactly when
    ``kappa Delta <= mu G_m``, so ``R_{m+1} = R_m + min(kappa Delta, Delta + (1 - 1/kappa) mu G_m)``
    and ``G_{m+1} = max(G_m - kappa Delta / mu, 0) + d_{m+1}``. Message ``m`` ends when its
    ``G_m`` is sent: ``R_m + mu G_m`` if that is by ``R_M``, else ``R_M + G_m - (R_M - R_m) / mu``.
    With ``mu = 1`` (no slowdown of the channel) ``G_m = e_m - R_m`` and this is the one-way
    recursion ``e_m = max(R_m, e_{m-1}) + d_m``: ``G_{m+1} = max(e_m - R_{m+1}, 0) + d_{m+1}``.
    """
    ready = np.empty(len(durations))
    backlog = np.empty(len(durations))
    for m, (d, delta) in enumerate(zip(durations.tolist(), work.tolist())):
        if m == 0:
            ready[m], backlog[m] = delta, d
            continue
        left = backlog[m - 1]
        ready[m] = ready[m - 1] + min(kappa * delta, delta + (1.0 - 1.0 / kappa) * mu * left)
        backlog[m] = max(left - kappa * delta / mu, 0.0) + d
    backward_end = ready[-1]
    slow_end = ready + mu * backlog
    end = np.where(slow_end <= backward_end, slow_end, backward_end + backlog - (backward_end - ready) / mu)
    return ready, end


def refuse_ps(problem: Problem, what: str) -> None:
    """Raise ``ValueError`` for a problem that is not an all-reduce (a parameter server, a
    decoupled all-reduce, a fully sharded problem): ``what`` times all-reduce fusion plans."""
    pattern = problem.pattern
    if pattern.extension is not None:
        raise ValueError(f"{what} times all-reduce fusion plans; this problem is {pattern.article()} {pattern.words} "
                         f"problem: time its {pattern.plan_type.__name__}s with simulate()")
