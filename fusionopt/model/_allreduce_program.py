"""The all-reduce step as a step program (MODEL.md sections 3 and 4): the plain model's
recursion stated in the engine the sharded patterns run on
(:mod:`fusionopt.model._step_program`).

The program of a plan on an all-reduce problem:

* **collectives**: the plan's messages in plan order, each an all-reduce (kind
  :data:`ALL_REDUCE`) of its chunks, gated on the backward's emissions: message ``k`` needs
  counter ``"emitted"`` to reach the position, in the ready order, of its last tensor, plus
  one, and its release ``Q_k``. On one channel in issue order (the engine's
  :class:`~fusionopt.model.Fifo`) it then starts at ``max(R_k, Q_k, end_{k-1})``
  and lasts ``c(S_k)``: the recursion of :func:`fusionopt.model.simulate`;
* **ops**: the backward emits the gradients at their ready times ``r_i`` (``EMIT``: a publish
  at a given time), counted where some message becomes ready; the compute clock then stands
  at ``B``. Under ``sync="barrier"`` the stream waits for every message, then runs the
  post-backward work, the optimiser and the forward; under ``sync="layerwise"`` each tensor
  waits for the messages carrying it, is updated and runs forward
  (:mod:`fusionopt.model._sync`'s rules, in its order of operations); the host's share ends
  the step.

:func:`simulate_program` runs it and gives the same :class:`~fusionopt.model.Timeline`
as :func:`fusionopt.model.simulate` does on the plain model, to the last bit (the FIFO
recursion and the sync rules are fast paths of this engine; ``tests/model`` pins them
together). Extensions (copy cost, contention, several channels) are timed on the same
engine by the event semantics' program and channel policy (:mod:`fusionopt.model._events`),
whose backward is compute the policy may slow; the executor runs this program whatever the
problem's extensions (:class:`~fusionopt.executor.RankRunner`).

Examples
--------
MODEL.md section 5, ``alpha = 3 ms``, groups ``{t3}, {t2, t1}``: 17 ms, as ``simulate`` gives.

>>> from fusionopt.cost import AlphaBeta
>>> from fusionopt.model import Plan, Problem, Profile
>>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
>>> plan = Plan.from_groups(profile, [[2], [1, 0]])
>>> program = allreduce_program(problem, plan)
>>> [(spec.gate, spec.need) for spec in program.collectives]
[('emitted', 1), ('emitted', 3)]
>>> t = simulate_program(problem, plan)
>>> round(t.iteration_time * 1e3, 9), (t.message_end * 1e3).round(9).tolist()
(17.0, [6.0, 14.0])
"""

from __future__ import annotations

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import (AT, COMPUTE, EMIT, FORWARD, MARK, WAIT, Fifo, Program, durations,
                                          run_program)
from fusionopt.model._timeline import Timeline, build_timeline, reduction_times

ALL_REDUCE = 2
"""The kind of an all-reduce in a program (0 and 1 are the reduce-scatter and the all-gather)."""
EMITTED = "emitted"
"""The gate the backward counts its gradients on, in the ready order."""


def allreduce_program(problem: Problem, plan: Plan) -> Program:
    """The :class:`~fusionopt.model.Program` of ``plan`` (validated by the
    caller) on a plain all-reduce ``problem`` (module docstring). ``program.roles["emitted"]``
    holds the emission times, seconds, in the ready order."""
    problem.pattern.require_plan(plan)
    profile = problem.profile
    n = profile.n
    outside = np.flatnonzero(plan.tensor >= n)
    if outside.size:                                  # a plan not validated against this profile
        k = int(plan.chunk_message[outside[0]])
        raise ValueError(f"message {k}: tensor index {int(plan.tensor[outside[0]])} is out of range for a profile "
                         f"of {n} tensors")
    order = profile.backward_order
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    # Message k is ready once the gradient last in the ready order among its tensors is emitted.
    need = (np.maximum.reduceat(position[plan.tensor], plan.starts[:-1]) + 1).tolist()
    program = Program("all-reduce", profile.sizes.tolist())
    release = plan.release.tolist()
    for k, message in enumerate(plan.messages):
        chunks = tuple((c.tensor, c.lo, c.hi) for c in message.chunks)
        program.collective(ALL_REDUCE, k, int(plan.message_bytes[k]), EMITTED, need[k], release[k],
                           ("all-reduce of message {}", k), chunks=chunks)
    emitted = profile.ready_times[order].tolist()
    ops = program.ops
    # The backward: the gradients emitted at their ready times, counted where some message
    # becomes ready (the only counts a collective waits for); the stream is then at B.
    ops.extend((EMIT, EMITTED, count, emitted[count - 1]) for count in sorted(set(need)))
    ops.append((AT, profile.B))
    m = len(plan.messages)
    if problem.sync == "barrier":
        if m:
            ops.append((WAIT, m - 1))                 # one channel in order: the last ends last
        ops += [(COMPUTE, profile.post_backward), (COMPUTE, profile.update_lump), (COMPUTE, profile.U)]
        for i in range(n):
            ops += [(MARK, FORWARD, i), (COMPUTE, float(profile.forward[i]))]
    last = np.full(n, -1, dtype=np.int64)             # the last message carrying each tensor
    np.maximum.at(last, plan.tensor, plan.chunk_message)
    if problem.sync == "layerwise":
        for i, k in enumerate(last.tolist()):
            if k >= 0:
                ops.append((WAIT, k))
            ops += [(COMPUTE, float(profile.update[i])), (MARK, FORWARD, i), (COMPUTE, float(profile.forward[i]))]
    ops.append((COMPUTE, profile.host_overhead))
    program.forward_mark = np.arange(n)
    program.forward_offset = np.zeros(n)
    program.reduced_by = tuple(last.tolist())
    program.gathered_by = (-1,) * n
    program.roles = {EMITTED: emitted}
    return program


def simulate_program(problem: Problem, plan: Plan, *, validate: bool = True) -> Timeline:
    """The :class:`~fusionopt.model.Timeline` of ``plan`` on a plain all-reduce
    ``problem``, from its step program run on one FIFO channel: ``simulate``'s, to the bit."""
    if problem.extensions:
        raise ValueError(f"an all-reduce with {', '.join(problem.extensions)} runs the event semantics' program "
                         "(fusionopt.model.simulate_events), whose backward the extensions may slow")
    if validate:
        plan.validate(problem.profile)
    program = allreduce_program(problem, plan)
    channel = Fifo(program, durations(program, {ALL_REDUCE: problem.cost}))
    clock, marks = run_program(program, channel)
    emitted = program.roles[EMITTED]
    ready = np.asarray([emitted[spec.need - 1] for spec in program.collectives], dtype=np.float64)
    end = np.asarray(channel.end, dtype=np.float64)
    reduced = reduction_times(plan, end, problem.profile.n)
    return build_timeline(problem, plan, float(clock), ready, np.asarray(channel.start, dtype=np.float64), end,
                          reduced, program.forward_start(marks))


__all__ = ["ALL_REDUCE", "EMITTED", "allreduce_program", "simulate_program"]
