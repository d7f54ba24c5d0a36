"""The program of a decoupled all-reduce step (MODEL.md section 8.1): :func:`decoupled_program`.

The channel runs the plan's reduce-scatter and all-gather messages in the plan's order; a
reduce-scatter waits for the emission of its gradients (gate ``emitted``: how many gradients
of the ready order have been emitted), an all-gather for the updates of its tensors (gate
``updated``: how many tensors of the ready order are updated; with ``update_after_gather``
the end of its tensors' last reduce-scatter, earlier on the channel: gate ``CHANNEL``). The
compute stream: the backward's emissions, the sharded updates in the ready order (each after
its tensor's last reduce-scatter), then the forward per ``sync``; as
:func:`~fusionopt.model.simulate_decoupled` says. The executor runs this
program on a rank; :func:`~fusionopt.model.replay` runs it on the model's clock.
"""

from __future__ import annotations

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, KINDS, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import AT, CHANNEL, COMPUTE, FORWARD, MARK, PUBLISH, WAIT, Program

EMITTED, UPDATED = "emitted", "updated"
UPDATE = "update"                         # marks: where tensor i's update starts (UPDATE) and ends (UPDATED)


def decoupled_program(problem: Problem, plan: DecoupledPlan) -> Program:
    """The program of ``plan`` on a decoupled problem (an order that can never run is
    refused by :func:`~fusionopt.model.simulate_decoupled`, which callers
    run first).

    Marks: ``FORWARD`` ``i`` where tensor ``i``'s forward starts, ``"update"`` / ``"updated"``
    ``i`` where its update starts and ends."""
    profile = problem.profile
    n = profile.n
    order = [int(i) for i in profile.ready_order]
    position = {i: p for p, i in enumerate(order)}
    after = problem.pattern.update_after_gather
    program = Program("decoupled", profile.sizes.tolist())
    program.gathers_to_tensors = True
    last = {REDUCE_SCATTER: [-1] * n, ALL_GATHER: [-1] * n}
    counts = [0, 0]
    for kind in plan.order.tolist():
        k = counts[kind]
        counts[kind] += 1
        message = plan.plan(kind).messages[k]
        chunks = tuple((int(c.tensor), int(c.lo), int(c.hi)) for c in message.chunks)
        latest = 1 + max(position[t] for t, _, _ in chunks)
        if kind == REDUCE_SCATTER:
            gate, need = EMITTED, latest
        elif after:
            # It gathers reduced shards: its tensors' last reduce-scatter, earlier on the channel.
            gate, need = CHANNEL, 1 + max(last[REDUCE_SCATTER][t] for t, _, _ in chunks)
        else:
            gate, need = UPDATED, latest
        c = program.collective(kind, k, sum(hi - lo for _, lo, hi in chunks), gate, need, float(message.release),
                               ("{} message {}", KINDS[kind], k), chunks=chunks)
        for t, _, _ in chunks:
            last[kind][t] = c

    ready = profile.ready_times
    update, forward = profile.update.tolist(), profile.forward.tolist()
    ops = program.ops
    # Backward: only the emissions that make a reduce-scatter ready are observable.
    for need in sorted({need for gate, need, *_ in program.meta if gate == EMITTED}):
        ops += [(AT, float(ready[order[need - 1]])), (PUBLISH, EMITTED, need)]
    ops.append((AT, float(profile.B)))
    gathers = sorted({c for c in last[ALL_GATHER] if c >= 0})
    if not after:
        # The sharded updates, in the ready order, each after its last reduce-scatter.
        wakes = {need for gate, need, *_ in program.meta if gate == UPDATED}
        for p, i in enumerate(order):
            if last[REDUCE_SCATTER][i] >= 0:
                ops.append((WAIT, last[REDUCE_SCATTER][i]))
            ops += [(MARK, UPDATE, i), (COMPUTE, update[i]), (MARK, UPDATED, i)]
            if p + 1 in wakes:
                ops.append((PUBLISH, UPDATED, p + 1))
        if problem.sync == "layerwise":
            for i in range(n):
                if last[ALL_GATHER][i] >= 0:
                    ops.append((WAIT, last[ALL_GATHER][i]))
                ops += [(MARK, FORWARD, i), (COMPUTE, forward[i])]
        else:
            ops += [(WAIT, c) for c in gathers]
            for i in range(n):
                ops += [(MARK, FORWARD, i), (COMPUTE, forward[i])]
    elif problem.sync == "layerwise":
        # DeAR: each tensor is updated from its gathered shards just before its forward.
        for i in range(n):
            if last[ALL_GATHER][i] >= 0:
                ops.append((WAIT, last[ALL_GATHER][i]))
            ops += [(MARK, UPDATE, i), (COMPUTE, update[i]), (MARK, UPDATED, i), (MARK, FORWARD, i),
                    (COMPUTE, forward[i])]
    else:
        ops += [(WAIT, c) for c in gathers]
        for i in range(n):
            ops += [(MARK, UPDATE, i), (COMPUTE, update[i]), (MARK, UPDATED, i)]
        for i in range(n):
            ops += [(MARK, FORWARD, i), (COMPUTE, forward[i])]
    ops.append((COMPUTE, float(profile.host_overhead)))
    program.reduced_by = tuple(last[REDUCE_SCATTER])
    program.gathered_by = tuple(last[ALL_GATHER])
    program.forward_mark = np.arange(n)
    program.forward_offset = np.zeros(n)
    return program


__all__ = ["decoupled_program", "EMITTED", "UPDATED", "UPDATE"]
