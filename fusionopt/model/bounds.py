"""Lower bounds on the iteration time of every plan (MODEL.md section 7).

This module holds the bounds that need no search. Each is valid for every plan of the
problem, fusion or partition (chunks are whole bytes), in both sync modes.
"""

from __future__ import annotations

from fusionopt.model.problem import Problem


def compute_bound(problem: Problem) -> float:
    """``B + F + U`` in seconds: no plan finishes a step before its compute does.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(compute_bound(Problem(profile, AlphaBeta(1e-3, 1e-9))), 9)
    0.009
    """
    return problem.profile.compute_time


def last_message_bound(problem: Problem) -> float:
    """``B + c(1) + U + F``: tensor 0's last chunk is ready at ``B`` and its message carries
    at least one byte; its update and every forward follow it in both sync modes.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(last_message_bound(Problem(profile, AlphaBeta(1e-3, 1e-9))) * 1e3, 6)
    10.000001
    """
    return problem.profile.compute_time + float(problem.cost(1))


def channel_bound(problem: Problem) -> float | None:
    """For affine costs, every byte crosses the channel after the first gradient is ready,
    in messages whose costs add up to at least ``c(total bytes)`` (``alpha >= 0``), and at
    least the update and forward of the tensor reduced last follow the end of the channel.
    ``None`` for costs not known to be affine.
    """
    if problem.cost.affine is None:
        return None
    profile = problem.profile
    channel_end = float(profile.ready_times.min()) + float(problem.cost(profile.total_bytes))
    if problem.sync == "barrier":
        return channel_end + profile.U + profile.F
    # The tensor i reduced last is then updated and runs forward i .. n-1.
    forward_suffix = profile.forward[::-1].cumsum()[::-1]
    return channel_end + float((profile.update + forward_suffix).min())


def best_bound(problem: Problem) -> float:
    """The largest lower bound this module proves for ``problem``, in seconds."""
    bounds = [last_message_bound(problem), channel_bound(problem)]
    return max(b for b in bounds if b is not None)
