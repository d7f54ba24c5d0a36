"""Fusion plans on several channels sharing the bandwidth: an exact, message-level fast path.

With ``channels = K > 1`` and no contention (MODEL.md section 6), the compute stream never
waits for the channels during the backward, so the messages' ready times are known in
advance and the channels can be simulated on their own: up to ``K`` messages in flight,
dispatched in plan order, each a latency phase and then a transfer, the transfers in flight
sharing the bandwidth equally (the semantics of :mod:`fusionopt.model._events`, which tests
pin this module to). :func:`fusionopt.model.score_cuts` uses it for searches, and
the CP-SAT scheme of :mod:`fusionopt.solvers.exact._cpsat_channels` for its cuts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.model._flights import Flight, fly, time_to_next, tolerance, transfers
from fusionopt.model._fusion import arc_times, backward_arrays
from fusionopt.model._problem import Problem
from fusionopt.model._sync import layerwise_forward

# Remaining work below this fraction of the schedule's length counts as finished.


def channel_schedule(problem: Problem, cuts: Any) -> dict[str, Any]:
    """Exact times of a fusion plan on ``problem.channels`` processor-sharing channels.

    The semantics of :mod:`fusionopt.model._events` without contention (the compute stream
    then never waits for the channels during the backward), computed message by message:
    a fast path for :func:`~fusionopt.model.simulate`, which tests pin it to.

    Returns a dict of seconds: ``ready``, ``dispatch`` and ``end`` per message (plan
    order), ``backlog`` (transfer work of earlier messages unfinished at each dispatch),
    ``shared_end`` (a lower bound on each end that depends only on the messages up to it:
    ``_shared_end``), ``iteration_time``.

    MODEL.md section 5 with ``alpha = 3 ms`` and two channels, WFBP: ``t3`` is sent from
    1 to 6 ms (latency, then 2 ms of transfer), ``t2`` from 3 to 7, ``t1`` from 6 to 13
    (its latency overlaps ``t2``'s transfer); ``T = 13 + 3``.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> times = channel_schedule(Problem(profile, AlphaBeta(3e-3, 1e-9), channels=2), [True, True])
    >>> (times["end"] * 1e3).round(9).tolist(), round(times["iteration_time"] * 1e3, 9)
    ([6.0, 7.0, 13.0], 16.0)
    """
    if problem.contention > 1.0 or problem.comm_contention > 1.0:
        raise ValueError("channel_schedule does not model contention; use simulate()")
    if problem.channels < 2:
        raise ValueError("channel_schedule models several channels; for one, use fusion_message_times()")
    profile = problem.profile
    rho, prefix = backward_arrays(problem)
    cuts = np.asarray(cuts, dtype=bool)
    if cuts.shape != (profile.n - 1,):
        raise ValueError(f"cut vector must have n - 1 = {profile.n - 1} entries, got shape {cuts.shape}")
    heads = np.flatnonzero(np.append(cuts, True)) + 1
    tails = np.concatenate(([0], heads[:-1]))
    times = arc_times(problem, np.concatenate(([0.0], rho)), prefix, tails, heads)
    ready = np.cumsum(times["packing"]) + rho[heads - 1]
    latency, transfer = message_phases(problem, prefix[heads] - prefix[tails], heads - tails)
    dispatch, end, backlog, shared = _processor_sharing(ready, latency, transfer, problem.channels)
    iteration_time = _iteration_time(problem, heads, float(ready[-1]), end)
    return {"ready": ready, "dispatch": dispatch, "end": end, "backlog": backlog,
            "shared_end": shared, "iteration_time": iteration_time}


def message_phases(problem: Problem, sizes: np.ndarray, tensors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latency (``alpha`` plus packing on the channel) and transfer (``beta S``) seconds of
    messages of ``sizes`` bytes holding ``tensors`` tensors each."""
    alpha, beta = problem.cost.affine
    sizes = np.asarray(sizes, dtype=np.float64)
    latency = np.where(sizes > 0, alpha, 0.0)
    if problem.copy_on == "channel":
        latency = latency + problem.copy_cost * sizes * (np.asarray(tensors) > 1)
    return latency, beta * sizes


def _processor_sharing(ready: np.ndarray, latency: np.ndarray, transfer: np.ndarray,
                       channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Dispatch and end of each message, the backlog at its dispatch, and its *shared end*:
    a lower bound on its end that holds for every plan with the same messages up to it
    (see :func:`channel_schedule`)."""
    count = len(ready)
    dispatch = np.full(count, np.inf)
    end = np.full(count, np.inf)
    backlog = np.zeros(count)
    shared = np.zeros(count)
    tol = tolerance(float(ready[-1]) + float(latency.sum() + transfer.sum()))
    flights: list[Flight] = []
    clock, following, finished = 0.0, 0, 0
    starting: list[Flight] = []              # flights whose transfer begins now
    while finished < count:
        while following < count and ready[following] <= clock and len(flights) < channels:
            dispatch[following] = clock
            backlog[following] = sum(f.transfer for f in flights)
            flights.append(Flight(following, latency[following], transfer[following]))
            if latency[following] <= 0.0:
                starting.append(flights[-1])
            following += 1
        for f in starting:
            shared[f.message] = _shared_end(f, flights, clock)
        starting.clear()
        done = [f for f in flights if f.done]
        if done:
            for f in done:
                flights.remove(f)
                end[f.message] = clock
            finished += len(done)
            continue
        share = transfers(flights)
        candidates = time_to_next(flights, share)
        if following < count and len(flights) < channels:
            candidates.append(float(ready[following]) - clock)
        step = min(candidates)
        clock += step
        starting.extend(fly(flights, step, share, tol))
    return dispatch, end, backlog, shared


def _shared_end(flight: Flight, flights: list[Flight], clock: float) -> float:
    """While message ``m`` transfers, every other transfer in flight gets the same rate, so
    an earlier message with ``r`` bytes-seconds left takes ``min(r, w_m)`` of the bandwidth
    before ``m`` ends: ``end_m >= s_m + w_m + sum min(r, w_m)``. Later messages may not
    count (another plan with the same prefix need not have them); if one transfers already
    (a shorter latency), the earlier ones' ``r`` may be larger than with the prefix alone,
    and only ``s_m + w_m`` is kept."""
    m, work = flight.message, flight.transfer
    if any(f.message > m and f.latency <= 0.0 and f.transfer > 0.0 for f in flights):
        return clock + work
    return clock + work + sum(min(f.transfer, work) for f in flights if f.message < m and f.latency <= 0.0)


def _iteration_time(problem: Problem, heads: np.ndarray, backward_end: float, end: np.ndarray) -> float:
    profile = problem.profile
    if problem.sync == "barrier":
        return max(backward_end, float(end.max())) + profile.U + profile.F + profile.W
    n = profile.n
    reduced = np.empty(n)
    order = profile.backward_order
    for m, (k, j) in enumerate(zip(np.concatenate(([0], heads[:-1])), heads)):
        reduced[order[k:j]] = end[m]                # backward positions k+1..j
    return layerwise_forward(profile, reduced, backward_end)[1]
