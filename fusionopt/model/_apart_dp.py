"""The exact DP over plans that send the tensors kept exact apart (MODEL.md sections 2.2 and 7).

With ``exact_tensors`` (an error budget per tensor), a fusion plan's message that carries one
of them goes in a lossless encoding, and in a fusion plan (contiguous groups of the ready
order) the tensors kept exact lie between the others: a model's biases and norms between its
weights. A plan may instead send them apart, as DDP keeps a bucket per dtype: split the
ready order into its exact tensors ``E_1 .. E_a`` and the others ``O_1 .. O_b`` (each in ready
order), and let every message take a run of each, ``E_{i0+1} .. E_i`` and
``O_{j0+1} .. O_j`` (either run may be empty, not both), in any interleaving on the one
channel. A message with an exact tensor costs :attr:`Problem.exact_cost`, any other
:attr:`Problem.cost`; it is ready when its last tensor is. This space holds every fusion
plan (a contiguous group is a run of each), so its optimum is never slower than the fusion
DP's.

With ``G(i, j)`` the earliest the channel can have sent ``E_1..E_i`` and ``O_1..O_j``
(``G(0, 0) = -inf``),

    G(i, j) = min over (i0, j0) <= (i, j), (i0, j0) != (i, j), of
              max(G(i0, j0), rho(i, j; i0, j0)) + c(S_E(i0..i) + S_O(j0..j)),

``rho`` the latest ready time of the tensors taken and ``c`` the exact cost where
``i0 < i``, the cost otherwise. The channel's end only grows with the time it is free, so
``G`` is exact, and under barrier sync ``T* = max(B, G(a, b)) + U + F + W``
(:func:`~fusionopt.model._fusion.time_after_channel`). Row by row:
the messages with exact tensors into row ``i`` are evaluated at once, then the runs of the
others alone along the row; a best plan is read back from ``G``. Layerwise sync
is refused: a plan of this space may end with a message that no early layer waits for, so
the forward can overlap it and the channel's end no longer decides ``T``.
``O(a^2 b^2)`` cost evaluations, in ``a`` numpy steps and ``a b`` small ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionopt.model._fusion import backward_arrays, time_after_channel
from fusionopt.model._problem import Problem


@dataclass(frozen=True)
class ApartOptimum:
    """An optimal plan of the space above: its messages (profile indices, in channel order,
    each in ready order) and its figures (seconds)."""

    groups: tuple[tuple[int, ...], ...]
    communication_end: float
    iteration_time: float


def optimal_apart(problem: Problem, *, max_message_bytes: float | None = None) -> ApartOptimum:
    """The optimal plan whose messages each take a run of the exact tensors and a run of the
    others (module docstring), exactly; ``max_message_bytes`` caps every message.

    Examples
    --------
    MODEL.md section 5's timings with t0 and t2 of 4 MB, t1 of 100 kB kept exact, on
    ``3 ms + 2 ns/B`` with fp16 on offer (free casts). Ready order t2 (1 ms), t1 (3 ms), t0
    (6 ms). The best fusion plan sends each alone: t2 in fp16 1 -> 8 ms, t1 in fp32 8 ->
    11.2, t0 in fp16 11.2 -> 18.2, ``T`` 21.2 ms (fusing t1 with either puts 4 MB in fp32).
    Apart: t1 alone 3 -> 6.2, then t2 and t0 in one fp16 message 6.2 -> 17.2, ``T`` 20.2 ms.

    >>> from fusionopt.cost import AlphaBeta, Cheapest
    >>> from fusionopt.model import Profile
    >>> from fusionopt.model._fusion_dp import optimal_fusion
    >>> profile = Profile.from_arrays([4e6, 1e5, 4e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, Cheapest(AlphaBeta(3e-3, 2e-9), ["fp32", "fp16"]), exact_tensors=[1])
    >>> best = optimal_apart(problem)
    >>> best.groups, round(best.iteration_time * 1e3, 9)
    (((1,), (2, 0)), 20.2)
    >>> round(optimal_fusion(problem).iteration_time * 1e3, 9)
    21.2
    """
    problem.require_plain("the apart DP", allowing=("exact_tensors",))
    if problem.sync != "barrier":
        raise ValueError("the apart DP needs sync='barrier': under layerwise sync a plan that sends the exact "
                         "tensors apart may end with a message no early layer waits for (use simulate)")
    profile = problem.profile
    if max_message_bytes is not None and (isinstance(max_message_bytes, bool) or not isinstance(
            max_message_bytes, (int, float, np.integer, np.floating))):
        raise ValueError(f"max_message_bytes must be a number of bytes, got {max_message_bytes!r}")
    cap = math.inf if max_message_bytes is None else float(max_message_bytes)
    if not cap > 0:
        raise ValueError(f"max_message_bytes must be > 0, got {max_message_bytes!r}")
    rho, prefix = backward_arrays(problem)
    order = np.asarray(profile.backward_order)
    sizes = np.diff(prefix)
    if np.any(sizes > cap):
        k = int(np.argmax(sizes > cap))
        raise ValueError(f"tensor {profile.names[order[k]]!r} ({int(sizes[k])} B) is larger than max_message_bytes "
                         f"({cap:g} B): a message never splits a tensor here")
    exact = np.isin(order, problem.exact_tensors)
    streams = (order[exact], order[~exact])
    ready = (np.concatenate(([-math.inf], rho[exact])), np.concatenate(([-math.inf], rho[~exact])))
    sums = (np.concatenate(([0.0], np.cumsum(sizes[exact]))), np.concatenate(([0.0], np.cumsum(sizes[~exact]))))
    a, b = len(streams[0]), len(streams[1])

    # The pairs j0 <= j of the others' runs, ordered by j: what each run weighs and costs alone.
    tail, head = (np.asarray(x) for x in np.triu_indices(b + 1))
    by_head = np.lexsort((tail, head))
    tail, head = tail[by_head], head[by_head]
    starts = np.searchsorted(head, np.arange(b + 1))
    run = sums[1][head] - sums[1][tail]                         # bytes of O_{j0+1..j}
    alone = np.full((b + 1, b + 1), math.inf)
    alone[tail, head] = np.where(tail < head, _priced(problem.cost, run, cap), math.inf)
    G = np.full((a + 1, b + 1), math.inf)
    for i in range(a + 1):
        if i == 0:
            best = np.full(b + 1, math.inf)
            best[0] = -math.inf
        else:
            # A message with E_{i0+1..i}: every i0 < i and pair (j0, j) at once.
            latest = np.where(tail < head, np.maximum(ready[0][i], ready[1][head]), ready[0][i])
            weight = (sums[0][i] - sums[0][:i])[:, None] + run[None, :]
            value = np.maximum(G[:i, tail], latest[None, :]) + _priced(problem.exact_cost, weight, cap)
            best = np.minimum.reduceat(value.min(axis=0), starts)
        # Then runs of the others alone, from this row's own earlier states.
        G[i, 0] = best[0]
        for j in range(1, b + 1):
            G[i, j] = min(best[j], float(np.min(np.maximum(G[i, :j], ready[1][j]) + alone[:j, j])))
    groups, i, j = [], a, b
    while (i, j) != (0, 0):
        i0, j0 = _last_message(problem, G, ready, sums, cap, i, j)
        taken = np.concatenate((streams[0][i0:i], streams[1][j0:j]))
        groups.append(tuple(int(t) for t in taken[np.argsort(_positions(order, taken))]))
        i, j = i0, j0
    end = float(G[a, b])
    return ApartOptimum(tuple(reversed(groups)), end, time_after_channel(profile, end))


def _last_message(problem: Problem, G: np.ndarray, ready: tuple, sums: tuple, cap: float, i: int,
                  j: int) -> tuple[int, int]:
    """The state ``(i0, j0)`` before the last message of a best plan to ``(i, j)``."""
    best, arg = math.inf, (i, j)
    if j > 0:                                                   # the others alone: i0 = i
        size = sums[1][j] - sums[1][:j]
        value = np.maximum(G[i, :j], ready[1][j]) + _priced(problem.cost, size, cap)
        k = int(np.argmin(value))
        best, arg = float(value[k]), (i, k)
    if i > 0:                                                   # with a run of the exact tensors
        size = (sums[0][i] - sums[0][:i])[:, None] + (sums[1][j] - sums[1][: j + 1])[None, :]
        latest = np.full(j + 1, max(ready[0][i], ready[1][j]))
        latest[j] = ready[0][i]
        value = np.maximum(G[:i, : j + 1], latest[None, :]) + _priced(problem.exact_cost, size, cap)
        k = int(np.argmin(value))
        if value.flat[k] < best:
            arg = divmod(k, j + 1)
    return arg


def _priced(cost, size: np.ndarray, cap: float) -> np.ndarray:
    """``cost`` of messages of ``size`` bytes, infinite above the cap."""
    return np.where(size <= cap, cost(size), math.inf)


def _positions(order: np.ndarray, tensors: np.ndarray) -> np.ndarray:
    """Each of ``tensors``' position in the ready ``order``."""
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    return where[tensors]


__all__ = ["ApartOptimum", "optimal_apart"]
