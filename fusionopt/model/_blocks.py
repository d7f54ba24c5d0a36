"""A fast path for plans given as lists of byte ranges: the time of a partition plan without
building a :class:`~fusionopt.model.Plan`.

For searches that try thousands of partition plans (``layerwise-opt``). The recursion of
MODEL.md sections 3 and 4 on one channel, written as cumulative maxima; tests pin it to
:func:`~fusionopt.model.simulate`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusionopt.model._problem import Problem

Block = tuple[int, int, int]          # (tensor, lo, hi) bytes


def block_iteration_time(problem: Problem, messages: Sequence[Sequence[Block]]) -> float:
    """``T`` in seconds of the plan whose messages, in channel order, hold the byte ranges
    ``(tensor, lo, hi)`` given (no validation: the caller keeps every byte exactly once).

    Plain model only (``problem.require_plain``): ``end_k = max(R_k, end_(k-1)) + c(S_k)``
    is ``D_k + max_(j <= k) (R_j - D_(j-1))`` with ``D`` the cumulative durations, and the
    forward chain ``phi_i = max(phi_(i-1) + f_(i-1), C_i) + u_i`` (layerwise; barrier waits
    for every ``C_i``) likewise.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> wfbp = [[(2, 0, 2_000_000)], [(1, 0, 1_000_000)], [(0, 0, 4_000_000)]]
    >>> round(block_iteration_time(Problem(profile, AlphaBeta(1e-3, 1e-9)), wfbp) * 1e3, 9)
    14.0
    """
    problem.require_plain("block_iteration_time")
    return BlockTimes(problem)(messages)


class BlockTimes:
    """:func:`block_iteration_time` for many plans of one problem: what depends on the
    problem alone (ready times, the layerwise offsets) is computed once, so each call does
    only the plan's part (the same operations, so the same ``T``), and each message's
    chunks are read once."""

    KEPT = 65_536
    """Messages remembered before the memory is cleared."""

    def __init__(self, problem: Problem) -> None:
        problem.require_plain("block_iteration_time")
        profile = problem.profile
        self.problem, self.profile = problem, profile
        self.ready = profile.ready_times
        self.barrier = problem.sync == "barrier"
        # phi_i = A_i + max_(j <= i) (C_j + u_j - A_j) with A_i = sum_(j <= i) (f_(j-1) + u_j),
        # f_(-1) = 0, and B joining C_0 (phi_0 = max(B, C_0) + u_0).
        self.offsets = np.cumsum(profile.update + np.concatenate(([0.0], profile.forward[:-1])))
        self._rows: dict[tuple[Block, ...], tuple[int, int, np.ndarray]] = {}

    def __call__(self, messages: Sequence[Sequence[Block]]) -> float:
        profile = self.profile
        rows = [self._message(m) for m in messages]
        counts = [row[2].size for row in rows]
        tensors = np.concatenate([row[2] for row in rows])
        first = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        sizes = np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows))
        durations = np.asarray(self.problem.cost.of_sizes(sizes), dtype=np.float64)
        total = np.cumsum(durations)
        ends = total + np.maximum.accumulate(self.ready[first] - (total - durations))
        reduced = np.full(profile.n, -np.inf)
        np.maximum.at(reduced, tensors, np.repeat(ends, counts))
        if self.barrier:
            return float(max(profile.B, float(reduced.max()))) + profile.U + profile.F + profile.W
        reduced[0] = max(reduced[0], profile.B)
        phi = self.offsets + np.maximum.accumulate(reduced + profile.update - self.offsets)
        return float(phi[-1] + profile.forward[-1]) + profile.W     # layerwise: the host's share

    def _message(self, message: Sequence[Block]) -> tuple[int, int, np.ndarray]:
        """``(first tensor, bytes, tensors of its chunks)`` of one message, kept for the
        messages a search meets again (most of a neighbour plan is the plan it came from)."""
        key = tuple(message)
        row = self._rows.get(key)
        if row is None:
            if len(self._rows) >= self.KEPT:
                self._rows.clear()
            tensors = np.fromiter((tensor for tensor, _, _ in key), dtype=np.int64, count=len(key))
            row = self._rows[key] = (int(tensors.min()), sum(hi - lo for _, lo, hi in key), tensors)
        return row
