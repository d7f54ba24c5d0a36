"""One FIFO server: when each job in a queue ends (MODEL.md sections 3 and 4).

Jobs run one at a time in their given order; job ``k`` starts once it is available and the
server is free: ``e_k = max(a_k, e_(k-1)) + d_k``, with ``e_(-1)`` the time the server is first
free. The one-channel simulation is this recursion over the messages, and the layerwise
forward is it over the compute stream's updates and forwards (:mod:`fusionopt.model._sync`).

:func:`fifo_ends` computes it in exactly the floating-point operations of the sequential
loop, so every caller gets the same ``T`` to the last bit, but in a few array passes on long
queues: the server's busy periods are found by refining a superset of their first jobs, and
the running sums within each busy period are one ``np.add.accumulate`` (a sequential scan:
``x + d`` in order, the loop's own additions). Where the busy periods start is guessed from
the exact-arithmetic closed form and then checked against the ends it gives, so the
result never rests on the guess.
"""

from __future__ import annotations

import math

import numpy as np

VECTOR_MIN = 512
"""Queues shorter than this run the loop itself: fewer operations than the array passes."""

ROUNDS = 4
"""Guesses of the busy periods tried before the loop finishes the queue instead."""


def fifo_ends(available: np.ndarray, durations: np.ndarray, free_at: float = -math.inf, *,
              vector_min: int = VECTOR_MIN, rounds: int = ROUNDS) -> np.ndarray:
    """``e_k = max(a_k, e_(k-1)) + d_k`` for every job, seconds, with ``e_(-1) = free_at``.

    Bit for bit the sequential loop: each ``e_k`` is one rounded ``max(...) + d_k``.

    Parameters
    ----------
    available : array of float
        ``a_k``, when job ``k`` may start (seconds; ``-inf`` for "whenever the server is free").
    durations : array of float
        ``d_k``, how long it keeps the server (seconds, non-negative).
    free_at : float
        When the server is first free (seconds).
    vector_min, rounds : int
        The fast path's thresholds (:data:`VECTOR_MIN`, :data:`ROUNDS`): the same ends with
        any values, only the work differs (the tests hold the array passes to the loop so).

    Examples
    --------
    >>> fifo_ends(np.array([0.0, 1.0, 5.0]), np.array([2.0, 2.0, 1.0])).tolist()
    [2.0, 4.0, 6.0]
    >>> fifo_ends(np.array([0.0, 1.0]), np.array([2.0, 2.0]), free_at=3.0).tolist()
    [5.0, 7.0]
    """
    a = np.asarray(available, dtype=np.float64)
    d = np.asarray(durations, dtype=np.float64)
    if a.shape != d.shape or a.ndim != 1:
        raise ValueError(f"available and durations must be two 1-D arrays of one length, not {a.shape} and {d.shape}")
    if a.size < vector_min:
        return _loop(a, d, free_at)
    first = a.copy()
    first[0] = a[0] if a[0] > free_at else free_at          # the first job starts a busy period
    # Guess where the busy periods start from the ends in exact arithmetic,
    # e_k = max_(j <= k) (first_j + d_j + ... + d_k), then check the guess: the ends it gives
    # are the loop's exactly when every job that starts a period is available no earlier than
    # the end before it and every job available later than that end starts one (then each
    # end is the loop's own rounded max(...) + d_k). A guess that fails is mended from what
    # it gave, a few times, and the loop runs where that does not settle it.
    with np.errstate(invalid="ignore"):
        total = np.cumsum(d)
        reach = np.maximum.accumulate(first - (total - d)) + total
    candidate = np.empty(a.size, dtype=bool)
    candidate[0] = True
    candidate[1:] = a[1:] >= reach[:-1]
    for _ in range(rounds):
        ends = _busy_period_ends(first, d, np.flatnonzero(candidate))
        restart = a[1:] >= ends[:-1]
        late = a[1:] > ends[:-1]
        wrong = (candidate[1:] & ~restart) | (~candidate[1:] & late)
        if not wrong.any():
            return ends
        candidate[1:] = restart
    return _loop(a, d, free_at)


def fifo_job(available: float, duration: float, free_at: float) -> tuple[float, float]:
    """``(start, end)`` of one job on the server, seconds: ``start = max(a, free_at)``,
    ``end = start + d``; the step :func:`fifo_ends` repeats, for callers that build the queue
    as they go.

    >>> fifo_job(1.0, 2.0, 2.5)
    (2.5, 4.5)
    """
    start = available if available > free_at else free_at
    return start, start + duration


def _loop(a: np.ndarray, d: np.ndarray, free_at: float) -> np.ndarray:
    ends: list[float] = []
    free = free_at
    for ak, dk in zip(a.tolist(), d.tolist()):
        free = (ak if ak > free else free) + dk
        ends.append(free)
    return np.array(ends, dtype=np.float64)


def _busy_period_ends(first: np.ndarray, d: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Ends when each job in ``starts`` begins a busy period at ``first`` and every other job
    follows the one before it: per period, ``first_s + d_s + d_(s+1) + ...`` summed in order.

    The periods are scanned together as the rows of a zero-padded array, one array per
    power-of-two length (adding the padding's zeros changes no sum that is kept)."""
    n = d.size
    lengths = np.diff(np.append(starts, n))
    widths = np.left_shift(1, np.ceil(np.log2(lengths + 1)).astype(np.int64))   # >= length + 1
    ends = np.empty(n, dtype=np.float64)
    for width in np.unique(widths).tolist():
        rows = np.flatnonzero(widths == width)
        period_start, length = starts[rows], lengths[rows]
        block = np.zeros((rows.size, width), dtype=np.float64)
        block[:, 0] = first[period_start]
        column = np.arange(1, width)
        kept = column[None, :] <= length[:, None]
        job = (period_start[:, None] + column[None, :] - 1)[kept]
        block[:, 1:][kept] = d[job]
        np.add.accumulate(block, axis=1, out=block)
        ends[job] = block[:, 1:][kept]
    return ends
