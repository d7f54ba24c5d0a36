"""The one-channel fully sharded step in one pass: the fast path of
:func:`~fusionopt.model.simulate_sharded` (MODEL.md section 8.2).

Where the collectives share one channel and do not block, and the plan has neither
reduce-scatter groups nor persistent tensors, the step's program
(:func:`~fusionopt.model.sharded_program`) is a fixed walk over the units:
the forward issues each unit's all-gather ``d_f`` units ahead, the backward its second
all-gather ``d_b`` units ahead and its reduce-scatter when it ends. :func:`one_pass` walks it
with two clocks (the compute stream's and the channel's) and the same floating-point
operations, in the same order, as the engine (:func:`~fusionopt.model.run_program` over
a channel in issue order), without building the program's ops and labels. It gives the
engine's ``T`` and every collective's times to the last bit
(``tests/model/test_sharded_pass.py``, hypothesis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER
from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_program import NOTHING


@dataclass
class Walk:
    """One step, walked: ``clock`` the step's end (seconds); ``spans``, per unit, the start
    and end of its forward and the start and end of its backward (four rows, seconds);
    ``optimiser`` where the optimiser starts; ``channel``, per collective in issue order, its
    issue, start and end (three rows, seconds), and ``described`` its kind, unsharded bytes
    and unit (three rows); ``roles`` as
    :func:`~fusionopt.model.sharded_program` names them."""

    clock: float
    spans: Sequence[Sequence[float]]
    optimiser: float
    channel: Sequence[Sequence[float]]
    described: Sequence[Sequence[int]]
    roles: dict


def applies(problem: Problem, plan: ShardedPlan) -> bool:
    """Whether :func:`one_pass` times ``plan`` on ``problem``: one channel, collectives that
    do not block, no reduce-scatter groups and no persistent tensors."""
    pattern = problem.pattern
    return (pattern.channels == "one" and not pattern.blocking and plan.reduce_bounds is None
            and (plan.persistent is None or not plan.persistent.any()))


def one_pass(problem: Problem, plan: ShardedPlan) -> Walk:
    """Walk ``plan`` (validated; :func:`applies`) on ``problem``'s one channel: the engine's
    times, to the last bit.

    The channel runs each collective as it is issued: ``start = max(issue, free)``,
    ``free = end = start + c(S)``; the compute stream waits for a collective with
    ``clock = max(clock, end)`` and computes with ``clock += seconds``."""
    profile = problem.profile
    m = plan.num_units
    root = plan.root
    d_f, d_b = plan.forward_prefetch, plan.backward_prefetch
    starts = plan.bounds[:-1]
    forward_total = np.add.reduceat(profile.forward, starts).tolist()
    backward_total = np.add.reduceat(profile.backward, starts).tolist()
    unit_bytes = plan.unit_bytes(profile).tolist()
    root_bytes = unit_bytes[0] + unit_bytes[m - 1]
    # Each collective's seconds, as the engine prices them: the cost of its bytes as float64.
    priced = np.array(unit_bytes + [root_bytes], dtype=np.float64)
    pattern = problem.pattern
    gather_seconds = pattern.all_gather.of_sizes(priced).tolist()
    same = pattern.reduce_scatter == pattern.all_gather              # a ring's halves cost alike
    scatter_seconds = gather_seconds if same else pattern.reduce_scatter.of_sizes(priced).tolist()
    gathers = [size > 0 for size in unit_bytes]
    if root:
        gathers[0] = gathers[m - 1] = root_bytes > 0
    again = [r and g for r, g in zip(plan.reshard.tolist(), gathers)]

    log: list[tuple] = []                                 # (issue, start, end, kind, bytes, unit) per collective
    free = -math.inf

    # Forward: the first max(d_f, 1) units' all-gathers at 0, then each unit's d_f ahead
    # where a unit's forward starts (d_f = 0: where the one before it ends).
    gather = [-1] * m
    for j in range(m):
        if not gathers[j]:
            gather[j] = NOTHING
    if root:                                              # gathered with the first part, first
        gather[m - 1] = NOTHING if gather[0] == NOTHING else 0
    clock = 0.0
    for j in range(min(max(d_f, 1), m)):
        if gather[j] == -1:
            size, seconds = (root_bytes, gather_seconds[m]) if root and j == 0 else (unit_bytes[j], gather_seconds[j])
            gather[j] = len(log)
            free = _send(log, clock, free, seconds, ALL_GATHER, size, j)
    forward_start, forward_end = [0.0] * m, [0.0] * m
    for j in range(m):
        g = gather[j]
        if g != NOTHING:
            ready = log[g][2]
            clock = ready if ready > clock else clock
        k = j + d_f if d_f >= 1 else -1
        if k < m and k >= 0 and gather[k] == -1:
            gather[k] = len(log)
            free = _send(log, clock, free, gather_seconds[k], ALL_GATHER, unit_bytes[k], k)
        forward_start[j] = clock
        clock += forward_total[j]
        forward_end[j] = clock
        if d_f == 0 and j + 1 < m and gather[j + 1] == -1:
            gather[j + 1] = len(log)
            free = _send(log, clock, free, gather_seconds[j + 1], ALL_GATHER, unit_bytes[j + 1], j + 1)

    # Backward: the last max(d_b, 1) resharded units gathered again at its start, last
    # first, the others d_b ahead (d_b = 0: where the one after ends); each unit's
    # reduce-scatter where its backward ends (the root's where the first unit's ends).
    regather = [-1] * m
    for j in range(m - 1, max(m - max(d_b, 1), 0) - 1, -1):
        if again[j]:
            regather[j] = len(log)
            free = _send(log, clock, free, gather_seconds[j], ALL_GATHER, unit_bytes[j], j)
    scatter = [-1] * m
    backward_start, backward_end = [0.0] * m, [0.0] * m
    for j in range(m - 1, -1, -1):
        g = regather[j]
        if g >= 0:
            ready = log[g][2]
            clock = ready if ready > clock else clock
        k = j - d_b
        if d_b >= 1 and k >= 0 and again[k] and regather[k] < 0:
            regather[k] = len(log)
            free = _send(log, clock, free, gather_seconds[k], ALL_GATHER, unit_bytes[k], k)
        backward_start[j] = clock
        clock += backward_total[j]
        backward_end[j] = clock
        if not (root and j == m - 1):                     # the root is reduced with its first part
            size, seconds = (root_bytes, scatter_seconds[m]) if root and j == 0 else (unit_bytes[j], scatter_seconds[j])
            scatter[j] = len(log)
            free = _send(log, clock, free, seconds, REDUCE_SCATTER, size, j)
        if d_b == 0 and j >= 1 and again[j - 1]:
            regather[j - 1] = len(log)
            free = _send(log, clock, free, gather_seconds[j - 1], ALL_GATHER, unit_bytes[j - 1], j - 1)
    if root:
        scatter[m - 1] = scatter[0]

    # The optimiser, after every gradient is reduced, then the step's other parts.
    for c in scatter:
        ready = log[c][2]
        clock = ready if ready > clock else clock
    optimiser = clock
    clock += profile.U
    clock += profile.update_lump
    clock += profile.host_overhead
    issue, start, end, kind, nbytes, unit = zip(*log)   # a step has a reduce-scatter at least
    roles = {"gather": gather, "regather": regather, "scatter": scatter, "persistent": [],
             "gather_bytes": unit_bytes, "gathers": gathers, "again": again}
    return Walk(clock, (forward_start, forward_end, backward_start, backward_end), optimiser,
                (issue, start, end), (kind, nbytes, unit), roles)


def _send(log: list[tuple], clock: float, free: float, seconds: float, kind: int, size: int, unit: int) -> float:
    """Issue a collective of ``seconds`` at ``clock`` on the channel free from ``free``: it
    starts at ``max(clock, free)``; log it and return its end, when the channel is free again."""
    begin = clock if clock > free else free
    end = begin + seconds
    log.append((clock, begin, end, kind, size, unit))
    return end


__all__ = ["Walk", "applies", "one_pass"]
