"""The simulator: the one judge of every plan's timing (MODEL.md sections 3, 4 and 6).

:func:`simulate` runs the plain model's recursion on one FIFO channel itself and hands a
problem with extensions on to the event engine (:mod:`fusionopt.model.events`) and a
parameter-server problem to :mod:`fusionopt.model.ps_timing`; each returns a
:class:`~fusionopt.model.timeline.Timeline`. :func:`compute_pieces` replays the same run
for what the compute stream does and when.
"""

from __future__ import annotations

import numpy as np

from fusionopt.model.decoupled_plan import DecoupledPlan
from fusionopt.model.decoupled_timing import simulate_decoupled
from fusionopt.model.events import simulate_events
from fusionopt.model.fifo import fifo_ends
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.ps_plan import PSPlan
from fusionopt.model.ps_timing import simulate_ps
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.model.sharded_timing import simulate_sharded
from fusionopt.model.sync import barrier_forward, layerwise_forward
from fusionopt.model.timeline import ComputePiece, Timeline, build_timeline, reduction_times


def compute_pieces(problem: Problem, plan: Plan | PSPlan, *, validate: bool = True) -> list[ComputePiece]:
    """The compute stream of ``plan`` on ``problem``, task by task, in stream order.

    The general simulators record the pieces as they run them: the event simulator
    (:func:`~fusionopt.model.events.simulate_events`, which covers the plain model and every
    all-reduce extension) for a :class:`~fusionopt.model.plan.Plan`, and
    :func:`~fusionopt.model.ps_timing.simulate_ps` for a parameter-server problem. The
    stream is the backward of tensors ``n-1 .. 0`` (on a parameter server with partitioned
    compute, one piece per push chunk), each followed by the packing of the fused messages
    it makes ready when packing runs on the compute stream, then the updates and forwards
    of the next step (MODEL.md sections 4 and 6), and the profile's step parts where they
    run. Every task is listed, zero-length ones included (a step part only when the profile
    has it); a gap between one piece's ``end`` and the next one's ``start`` is the stream
    waiting for communication. The last ``end`` is the iteration time ``T`` and each
    tensor's first forward piece starts at its ``forward_start``, as :func:`simulate` gives
    them (the plain model's recursion to rounding).

    Parameters
    ----------
    validate : bool
        Check first that the plan sends every byte exactly once.

    Returns
    -------
    list of ComputePiece
        Times in seconds from the start of the backward.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``, groups ``{t3}, {t2, t1}``: the backward runs
    t3 0 -> 1, t2 1 -> 3, t1 3 -> 6 ms; the second message ends at 14 ms, so the updates
    (of zero seconds) and the forwards wait until then: forwards 14 -> 15 -> 16 -> 17 ms.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> pieces = compute_pieces(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    >>> for p in pieces:
    ...     print(p.kind, p.tensor, round(p.start * 1e3, 9), round(p.end * 1e3, 9))
    backward 2 0.0 1.0
    backward 1 1.0 3.0
    backward 0 3.0 6.0
    update 0 14.0 14.0
    update 1 14.0 14.0
    update 2 14.0 14.0
    forward 0 14.0 15.0
    forward 1 15.0 16.0
    forward 2 16.0 17.0
    """
    pieces: list[ComputePiece] = []
    if problem.fully_sharded is not None or isinstance(plan, ShardedPlan):
        simulate_sharded(problem, plan, validate=validate, pieces=pieces)
        return pieces
    if problem.decoupled is not None or isinstance(plan, DecoupledPlan):
        simulate_decoupled(problem, plan, validate=validate, pieces=pieces)
        return pieces
    if problem.ps is not None or not isinstance(plan, Plan):
        simulate_ps(problem, plan, validate=validate, pieces=pieces)
        return pieces
    if validate:
        plan.validate(problem.profile)
    simulate_events(problem, plan, pieces=pieces)
    return pieces


def simulate(problem: Problem, plan: Plan | PSPlan | DecoupledPlan | ShardedPlan, *, validate: bool = True) -> Timeline:
    """Simulate ``plan`` on ``problem`` (MODEL.md sections 3 and 4).

    Messages run one at a time in plan order: ``start_k = max(R_k, Q_k, end_{k-1})``,
    ``end_k = start_k + c(S_k)``, with ``Q_k`` the message's release time (0 unless the
    plan gives one). Tensor ``i`` is reduced at ``C_i = max end_k`` over the
    messages carrying it; the next forward then starts after a barrier on every ``C_i`` or
    tensor by tensor (``problem.sync``). A problem with extensions on (copy cost,
    contention, several channels) is simulated event by event instead
    (:mod:`fusionopt.model.events`); a parameter-server problem (``problem.ps``) takes a
    :class:`~fusionopt.model.ps_plan.PSPlan` and is simulated by
    :func:`~fusionopt.model.ps_timing.simulate_ps`; a decoupled all-reduce
    (``problem.decoupled``) takes a :class:`~fusionopt.model.decoupled_plan.DecoupledPlan` and is
    simulated by :func:`~fusionopt.model.decoupled_timing.simulate_decoupled`; a fully sharded
    problem (``problem.fully_sharded``) takes a :class:`~fusionopt.model.sharded_plan.ShardedPlan`
    and is simulated by :func:`~fusionopt.model.sharded_timing.simulate_sharded`.

    Parameters
    ----------
    validate : bool
        Check first that the plan sends every byte exactly once (``Plan.validate``).

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: the groups ``{t3}, {t2, t1}`` give 17 ms.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> t = simulate(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    >>> round(t.iteration_time * 1e3, 9), round(t.exposed * 1e3, 9)
    (17.0, 8.0)
    >>> (t.message_end * 1e3).round(9).tolist()
    [6.0, 14.0]
    """
    if problem.fully_sharded is not None or isinstance(plan, ShardedPlan):
        return simulate_sharded(problem, plan, validate=validate)
    if problem.decoupled is not None or isinstance(plan, DecoupledPlan):
        return simulate_decoupled(problem, plan, validate=validate)
    if problem.ps is not None or not isinstance(plan, Plan):
        return simulate_ps(problem, plan, validate=validate)
    profile = problem.profile
    if validate:
        plan.validate(profile)
    if problem.extensions:
        return simulate_events(problem, plan)
    # A message is ready with its last chunk; it starts once ready, released and the
    # channel is free (the sums run in message order, as the recursion states them).
    ready = np.maximum.reduceat(profile.ready_times[plan.tensor], plan.starts[:-1])
    durations = np.asarray(problem.cost.of_sizes(plan.message_bytes.astype(np.float64)), dtype=np.float64)
    available = np.maximum(ready, plan.release)
    end = fifo_ends(available, durations)
    start = np.maximum(available, np.concatenate(([-np.inf], end[:-1])))

    reduced = reduction_times(plan, end, profile.n)
    if problem.sync == "barrier":
        phi, iteration_time = barrier_forward(profile, float(end.max()))
    else:
        phi, iteration_time = layerwise_forward(profile, reduced)
    return build_timeline(problem, plan, iteration_time, ready, start, end, reduced, phi)
