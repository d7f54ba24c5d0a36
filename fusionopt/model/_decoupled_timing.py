"""Timing of a decoupled all-reduce (MODEL.md section 8.1): :func:`simulate_decoupled`.

It runs the step's program (:func:`~fusionopt.model._decoupled_program.decoupled_program`,
the program the executor runs too) on one first-in-first-out channel
(:class:`~fusionopt.model.Fifo`). The channel runs the plan's reduce-scatter and all-gather messages one at a time in the
plan's order (the FIFO step of :mod:`fusionopt.model._fifo`). A reduce-scatter waits for its
gradients; each tensor's sharded update waits for its last reduce-scatter and the update
before it; an all-gather waits for the updates of its tensors; the next forward waits for
the updates and, tensor by tensor (``sync="layerwise"``, DeAR) or all at once
(``sync="barrier"``, ZeRO-1/2 without overlapped gathers), for the all-gathers.
"""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._decoupled_program import UPDATE, UPDATED, decoupled_program
from fusionopt.model._pattern import require_pattern
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import FORWARD, MARK, Fifo, Program, durations, run_program
from fusionopt.model._timeline import ComputePiece, Timeline, read_only


def require_decoupled(problem: Problem, what: str) -> None:
    """Raise ``ValueError`` unless ``problem`` is a decoupled all-reduce: ``what`` needs one."""
    require_pattern(problem, "decoupled", what)


def simulate_decoupled(problem: Problem, plan: DecoupledPlan, *, validate: bool = True,
                       pieces: list[ComputePiece] | None = None) -> Timeline:
    """Simulate ``plan`` on a decoupled problem (MODEL.md section 8.1).

    * Reduce-scatter message ``k`` is ready at ``R_k``, the latest ready time of its
      chunks' gradients, and is released at ``Q_k``.
    * ``D_i``: the end of the last reduce-scatter holding a byte of tensor ``i``. After the
      backward the compute stream updates each tensor's shard in the order the gradients
      became ready: ``v = B`` before the first, then ``v_i = max(v_prev, D_i) + u_i``.
    * All-gather message ``k`` waits for ``v_i`` of every tensor it holds, and its release.
    * The channel runs both kinds in the plan's order: ``start = max(waits, end before)``,
      ``end = start + c(S)`` with the reduce-scatter or the all-gather cost of the
      message's unsharded size ``S`` (the all-reduce cost for gradient messages of a plan
      that reduces with all-reduces, ``reduce_with="all_reduce"``).
    * ``A_i``: the end of the last all-gather holding a byte of tensor ``i``. With
      ``sync="layerwise"`` the forward runs tensor by tensor from the last update ``v_L``:
      ``phi_0 = max(v_L, A_0)``, ``phi_i = max(phi_(i-1) + f_(i-1), A_i)``,
      ``T = phi_(n-1) + f_(n-1) + W``; with ``sync="barrier"``
      ``T = max(v_L, max_i A_i) + F + W``.
    * With ``Decoupled(..., update_after_gather=True)`` (DeAR: the all-gathers carry the
      reduced gradient shards and each module is updated in its forward pre-hook) an
      all-gather waits for its tensors' reduce-scatters instead, and the update runs just
      before each forward: ``phi_i = max(phi_(i-1) + f_(i-1), A_i) + u_i`` from ``B``
      (layerwise), or every update after the last all-gather, then the forward (barrier).

    A plan whose all-gather waits for an update that waits for a reduce-scatter the channel
    runs after it can never run; it is refused, naming the message.

    ``pieces``, when given, receives the compute stream task by task: the backward along
    the ready order, the updates (each from when it can start to ``v_i``), the forwards and
    the host's share.

    Returns
    -------
    Timeline
        ``message_*`` over the channel, both kinds, in the plan's order, with
        ``message_kind`` (0 reduce-scatter, 1 all-gather); ``reduced`` is ``D_i``,
        ``updated`` ``v_i``, ``gathered`` ``A_i`` and ``forward_start`` ``phi_i``.

    Examples
    --------
    MODEL.md section 5's profile (gradients ready at 1, 3 and 6 ms; forwards of 1 ms), ring
    halves of ``1 ms + 1 ns/B``, no update time, one reduce-scatter per tensor and one
    all-gather of everything: the reduce-scatters run 1-4, 4-6 and 6-11 ms; the all-gather
    waits for the last update (11 ms) and runs 11-19 ms; ``T = 19 + 3 = 22`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, Decoupled
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> problem = Problem(profile, pattern=Decoupled(half, half), sync="layerwise")
    >>> plan = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[0, 1, 2]])
    >>> t = simulate_decoupled(problem, plan)
    >>> (t.message_end * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9)
    ([4.0, 6.0, 11.0, 19.0], 22.0)

    All-gathers per tensor in forward order instead let the forward start on tensor 0's
    parameters while the others arrive: 11-16, 16-18, 18-21 ms, forwards at 16, 18 and 21 ms.

    >>> plan = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[0], [1], [2]])
    >>> t = simulate_decoupled(problem, plan)
    >>> (t.forward_start * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9)
    ([16.0, 18.0, 21.0], 22.0)
    """
    require_decoupled(problem, "simulate_decoupled")
    problem.pattern.require_plan(plan)
    profile = problem.profile
    if validate:
        plan.validate(profile)
    _refuse_orders_that_never_run(problem, plan)
    program = decoupled_program(problem, plan)
    costs = {kind: problem.pattern.cost(kind, plan.reduce_with) for kind in (REDUCE_SCATTER, ALL_GATHER)}
    channel = Fifo(program, durations(program, costs))
    clock, marks = run_program(program, channel)
    n = profile.n
    ends = np.asarray(channel.end + [-math.inf])          # by nothing: index -1
    updated = marks.get(UPDATED, {})
    phi = program.forward_start(marks)
    if pieces is not None:
        _stream(problem, program, marks, float(clock), pieces)
    return Timeline(
        sync=problem.sync,
        iteration_time=float(clock),
        compute_time=profile.compute_time,
        message_ready=read_only(channel.issue),
        message_start=read_only(channel.start),
        message_end=read_only(channel.end),
        message_bytes=read_only(program.nbytes, np.int64),
        reduced=read_only(ends[np.asarray(program.reduced_by, dtype=np.int64)]),
        forward_start=read_only(phi),
        message_kind=read_only(program.kind, np.int8),
        updated=read_only([updated.get(i, math.nan) for i in range(n)]),
        gathered=read_only(ends[np.asarray(program.gathered_by, dtype=np.int64)]),
    )


def _refuse_orders_that_never_run(problem: Problem, plan: DecoupledPlan) -> None:
    """Raise ``ValueError`` naming the first all-gather that waits for a reduce-scatter the
    plan's order sends after it: directly (its tensors', with ``update_after_gather``) or
    through an update (each update waits for the reduce-scatters of every tensor ready
    before it)."""
    profile = problem.profile
    n = profile.n
    backward = [int(i) for i in profile.ready_order]
    after = problem.pattern.update_after_gather
    unsent = np.bincount(plan.reduce_scatter.tensor, minlength=n).tolist()   # reduce-scatter chunks left per tensor
    tensors = {kind: np.split(plan.plan(kind).tensor, plan.plan(kind).starts[1:-1]) for kind in (REDUCE_SCATTER, ALL_GATHER)}
    known = 0                                             # updates determined: backward[:known]
    determined = [False] * n
    count = [0, 0]
    for kind in plan.order.tolist():
        k = count[kind]
        count[kind] += 1
        held = tensors[kind][k].tolist()
        if kind == REDUCE_SCATTER:
            for i in held:
                unsent[i] -= 1
            while known < n and unsent[backward[known]] == 0:
                determined[backward[known]] = True
                known += 1
        elif after:
            late = [i for i in held if unsent[i]]
            if late:
                raise ValueError(
                    f"all-gather message {k} holds tensor {late[0]}, whose reduce-scatter the plan sends "
                    f"after it: the channel can never run it (put that reduce-scatter first)")
        else:
            late = [i for i in held if not determined[i]]
            if late:
                raise ValueError(
                    f"all-gather message {k} holds tensor {late[0]}, whose update waits for a reduce-scatter "
                    f"the plan sends after it: the channel can never run it (put that reduce-scatter first)")


def _stream(problem: Problem, program: Program, marks: dict[str, dict[int, float]], iteration_time: float,
            pieces: list[ComputePiece]) -> None:
    """The compute stream task by task: the backward along the ready order, the updates
    (each from when it can start to ``v_i``) and the forwards in the program's order, and
    the host's share."""
    profile = problem.profile
    ready = profile.ready_times.tolist()
    clock = 0.0
    for i in profile.ready_order:
        pieces.append(ComputePiece("backward", i, clock, ready[i]))
        clock = ready[i]
    forward = profile.forward.tolist()
    starts, ends, phi = marks.get(UPDATE, {}), marks.get(UPDATED, {}), marks.get(FORWARD, {})
    for op in program.ops:
        if op[0] == MARK and op[1] == UPDATE:
            i = op[2]
            pieces.append(ComputePiece("update", i, starts[i], ends[i]))
        elif op[0] == MARK and op[1] == FORWARD:
            i = op[2]
            pieces.append(ComputePiece("forward", i, phi[i], phi[i] + forward[i]))
    if profile.host_overhead:
        pieces.append(ComputePiece("host_overhead", -1, pieces[-1].end, iteration_time))


__all__ = ["simulate_decoupled", "require_decoupled"]
