"""The program of a fully sharded step (MODEL.md section 8.2): :func:`sharded_program`.

The step runs on one compute stream: the forward of units ``0 .. m-1``, their backward in
reverse, then the optimiser; every collective is issued at a point of that program (gate
``issued``: collective ``c`` is issued when the counter reaches ``c + 1``), so the channel's
order is the issue order. :func:`~fusionopt.model.simulate_sharded` runs it on
the model's clock and the executor on a rank; the rules are those of ``simulate_sharded``'s
docstring. With blocking collectives (``FullySharded(blocking=True)``) the stream waits for
each collective where it issues it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER
from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._step_program import COMPUTE, FORWARD, MARK, PUBLISH, SPAN, WAIT, Program

ISSUED = "issued"
NOTHING = -2
"""The forward all-gather of a unit that gathers nothing (no bytes)."""
BACKWARD, OPTIMISER = "backward", "optimiser"


def sharded_program(problem: Problem, plan: ShardedPlan) -> Program:
    """The program of ``plan`` (validated by the caller) on a fully sharded problem.

    Marks: ``FORWARD`` / ``"backward"`` ``j`` where unit ``j``'s forward and backward start
    (each ends its unit's total forward or backward seconds later: :func:`unit_ends`),
    ``"optimiser"`` 0 where the optimiser starts. ``program.roles`` names each unit's collectives: ``"gather"`` (its forward
    all-gather; -2 when it gathers nothing), ``"regather"`` (its backward all-gather, or
    -1), ``"scatter"`` (its reduce-scatter, or with ``reduce_bounds`` each group's), and
    ``"persistent"`` (each persistent tensor's own all-gather).
    """
    profile = problem.profile
    n, m = profile.n, plan.num_units
    bounds = plan.bounds.tolist()
    sizes = profile.sizes.tolist()
    unit_bytes = plan.unit_bytes(profile).tolist()
    root = plan.root
    reshard = plan.reshard.tolist()
    d_f, d_b = plan.forward_prefetch, plan.backward_prefetch
    starts = plan.bounds[:-1]
    forward_total = np.add.reduceat(profile.forward, starts).tolist()
    backward_total = np.add.reduceat(profile.backward, starts).tolist()
    unit_of = plan.unit_of()
    program = Program("fully-sharded", sizes)
    ops = program.ops
    blocking = problem.pattern.blocking
    if blocking and plan.reduce_bounds is not None:
        raise ValueError("blocking collectives (FullySharded(blocking=True)) with reduce-scatter groups "
                         "(plan.reduce_bounds, ZeRO-3's buckets) are not modelled: a group's reduce-scatter would "
                         "split its unit's backward on the training thread; plan without reduce_bounds")

    kept = [False] * n if plan.persistent is None else plan.persistent.tolist()
    persistent = [i for i in range(n) if kept[i]]
    if persistent:
        gather_bytes = np.add.reduceat(np.where(plan.persistent, 0, profile.sizes), starts).astype(np.int64).tolist()
        carried = [[i for i in range(bounds[j], bounds[j + 1]) if not kept[i]] for j in range(m)]
    else:
        gather_bytes = unit_bytes
        carried = [range(bounds[j], bounds[j + 1]) for j in range(m)]
    gathers = [gather_bytes[j] > 0 for j in range(m)]     # a unit of persistent tensors only gathers nothing
    if root:
        gathers[0] = gathers[m - 1] = gather_bytes[0] + gather_bytes[m - 1] > 0

    def send(kind: int, unit: int, nbytes: int, tensors, label: tuple) -> int:
        c = program.collective(kind, unit, nbytes, ISSUED, len(program.kind) + 1, 0.0, label, tensors)
        ops.append((PUBLISH, ISSUED, c + 1))
        if blocking:
            ops.append((WAIT, c))
        return c

    # The persistent tensors, gathered one by one after the last step's optimiser: first,
    # and the forward waits for them.
    alone = [send(ALL_GATHER, int(unit_of[i]), sizes[i], (i,), ("all-gather of persistent tensor {}", i))
             for i in persistent]

    # Forward.
    gather = [-1] * m                                     # each unit's forward all-gather

    def gather_forward(j: int) -> None:
        if j < m and gather[j] == -1:
            if not gathers[j]:
                gather[j] = NOTHING
            elif root and j == 0:
                gather[j] = send(ALL_GATHER, 0, gather_bytes[0] + gather_bytes[m - 1],
                                 list(carried[0]) + list(carried[m - 1]), ("all-gather of the root (units 0 and {})", m - 1))
            else:
                gather[j] = send(ALL_GATHER, j, gather_bytes[j], carried[j], ("all-gather of unit {} (forward)", j))
            if root and j == 0:
                gather[m - 1] = gather[0]

    for j in range(min(max(d_f, 1), m)):
        gather_forward(j)
    ops.extend((WAIT, c) for c in alone)
    for j in range(m):
        if gather[j] != NOTHING:
            ops.append((WAIT, gather[j]))
        if d_f >= 1:
            gather_forward(j + d_f)
        ops.append((MARK, FORWARD, j))                    # after the prefetch: it may block
        ops.append((COMPUTE, forward_total[j]))
        if d_f == 0:
            gather_forward(j + 1)

    # Backward.
    regather = [-1] * m
    again = [reshard[j] and gathers[j] for j in range(m)]     # gathered again for the backward

    def gather_backward(j: int) -> None:
        regather[j] = send(ALL_GATHER, j, gather_bytes[j], carried[j], ("all-gather of unit {} (backward)", j))

    for j in range(m - 1, max(m - max(d_b, 1), 0) - 1, -1):     # the last max(d_b, 1) units
        if again[j]:
            gather_backward(j)
    grouped = plan.reduce_bounds is not None
    if grouped:
        group_bounds = plan.reduce_bounds.tolist()
        prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64)))
        group_bytes = (prefix[plan.reduce_bounds[1:]] - prefix[plan.reduce_bounds[:-1]]).tolist()
        issuing = group_issue_points(profile, bounds, group_bounds)
    scatter = [-1] * (len(group_bounds) - 1 if grouped else m)
    for j in range(m - 1, -1, -1):
        if regather[j] >= 0:
            ops.append((WAIT, regather[j]))
        k = j - d_b
        if d_b >= 1 and k >= 0 and again[k] and regather[k] < 0:
            gather_backward(k)
        ops.append((MARK, BACKWARD, j))
        if grouped:
            issues = []
            for g, before in issuing[j]:              # groups whose last gradient is ready in this unit
                scatter[g] = program.collective(REDUCE_SCATTER, g, group_bytes[g], ISSUED, len(program.kind) + 1, 0.0,
                                                ("reduce-scatter of group {}", g),
                                                range(group_bounds[g], group_bounds[g + 1]))
                issues.append((before, ISSUED, scatter[g] + 1))
            ops.append((SPAN, backward_total[j], tuple(issues)))
        else:
            ops.append((COMPUTE, backward_total[j]))
            if root and j == 0:
                scatter[0] = send(REDUCE_SCATTER, 0, unit_bytes[0] + unit_bytes[m - 1],
                                  list(range(bounds[0], bounds[1])) + list(range(bounds[m - 1], bounds[m])),
                                  ("reduce-scatter of the root (units 0 and {})", m - 1))
            elif not (root and j == m - 1):           # the root is reduced with its first part
                scatter[j] = send(REDUCE_SCATTER, j, unit_bytes[j], range(bounds[j], bounds[j + 1]),
                                  ("reduce-scatter of unit {}", j))
        if d_b == 0 and j >= 1 and again[j - 1]:
            gather_backward(j - 1)
    if root:
        scatter[m - 1] = scatter[0]

    # The optimiser, after every gradient is reduced, then the step's other parts.
    ops.extend((WAIT, c) for c in scatter)
    ops += [(MARK, OPTIMISER, 0), (COMPUTE, profile.U), (COMPUTE, profile.update_lump),
            (COMPUTE, profile.host_overhead)]

    program.roles = {"gather": gather, "regather": regather, "scatter": scatter, "persistent": alone,
                     "gather_bytes": gather_bytes, "gathers": gathers, "again": again}
    reduced_by, gathered_by = tensor_collectives(plan, program.roles, unit_of)
    program.reduced_by, program.gathered_by = tuple(reduced_by.tolist()), tuple(gathered_by.tolist())
    program.forward_mark, program.forward_offset = unit_of, forward_offsets(profile, plan, unit_of)
    return program


def tensor_collectives(plan: ShardedPlan, roles: dict, unit_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per tensor (``unit_of`` its unit), from a step's ``roles``: the collective whose end
    is its ``D_i`` (its unit's or group's reduce-scatter) and the one whose end is its
    gathered time (its own all-gather if persistent, else its unit's forward all-gather; -1
    where nothing is gathered)."""
    scatter = np.asarray(roles["scatter"])
    if plan.reduce_bounds is None:
        reduced_by = scatter[unit_of]
    else:
        reduced_by = scatter[np.repeat(np.arange(scatter.size), np.diff(plan.reduce_bounds))]
    gathered_by = np.maximum(np.asarray(roles["gather"])[unit_of], -1)    # NOTHING: -1
    if roles["persistent"]:
        gathered_by[plan.persistent] = roles["persistent"]
    return reduced_by, gathered_by


def forward_offsets(profile, plan: ShardedPlan, unit_of: np.ndarray) -> np.ndarray:
    """Per tensor (``unit_of`` its unit): the seconds of forward of its unit's tensors before
    it, which its forward starts after its unit's."""
    before = profile.forward_before
    return before - before[plan.bounds[:-1]][unit_of]


def group_issue_points(profile, bounds: list[int], group_bounds: list[int]) -> list[list[tuple[int, float]]]:
    """Per unit ``j``: the reduce-scatter groups whose last gradient is ready in its
    backward, in program order, each with the seconds of backward of the unit's tensors
    before its last-ready tensor (forward order), which its issue precedes the unit's end by.

    A group's gradients are all ready when its first tensor's is (ready times fall along the
    forward order), in the unit holding that tensor; the groups completing in one unit are
    issued in the profile's ready order restricted to the unit."""
    m = len(bounds) - 1
    backward = profile.backward.tolist()
    group_of = np.repeat(np.arange(len(group_bounds) - 1), np.diff(group_bounds)).tolist()
    unit_of = np.repeat(np.arange(m), np.diff(bounds)).tolist()
    before = [0.0] * len(backward)                        # backward of the unit's tensors before i
    for j in range(m):
        total = 0.0
        for i in range(bounds[j], bounds[j + 1]):
            before[i] = total
            total += backward[i]
    left = np.diff(group_bounds).tolist()                 # tensors of each group not yet ready
    points: list[list[tuple[int, float]]] = [[] for _ in range(m)]
    for i in profile.ready_order:                         # non-decreasing ready times
        g = group_of[i]
        left[g] -= 1
        if left[g] == 0:
            first = group_bounds[g]
            points[unit_of[first]].append((g, before[first]))
    return points


def unit_ends(profile, plan: ShardedPlan, forward: Sequence[float], backward: Sequence[float]) -> tuple[list, list]:
    """Where each unit's forward and backward end (seconds), given where each starts: its
    start plus its tensors' total, the clock's own addition."""
    starts = plan.bounds[:-1]
    forward_total = np.add.reduceat(profile.forward, starts).tolist()
    backward_total = np.add.reduceat(profile.backward, starts).tolist()
    return ([forward[j] + forward_total[j] for j in range(plan.num_units)],
            [backward[j] + backward_total[j] for j in range(plan.num_units)])


__all__ = ["sharded_program", "group_issue_points", "unit_ends", "tensor_collectives", "forward_offsets", "NOTHING",
           "ISSUED", "BACKWARD", "OPTIMISER"]
