"""The simulator: the one judge of every plan's timing (MODEL.md sections 3 to 8).

:func:`simulate` asks the problem's pattern (:mod:`fusionopt.model._pattern`) for the
:class:`~fusionopt.model.Timeline` of a plan: the all-reduce runs the plain model's
recursion on one FIFO channel, or the event engine with extensions on; each other pattern
its own step. :func:`compute_pieces` replays the same run for what the compute stream does
and when.
"""

from __future__ import annotations

from typing import Any

from fusionopt.model._problem import Problem
from fusionopt.model._timeline import ComputePiece, Timeline


def compute_pieces(problem: Problem, plan: Any, *, validate: bool = True) -> list[ComputePiece]:
    """The compute stream of ``plan`` on ``problem``, task by task, in stream order.

    The pattern's simulator records the pieces as it runs them (on the all-reduce, the event
    simulator :func:`~fusionopt.model.simulate_events`, which covers the plain model
    and every all-reduce extension). On the all-reduce and a parameter server, the
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

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Plan, Profile
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
    _pattern(problem).simulate(problem, plan, validate=validate, pieces=pieces)
    return pieces


def simulate(problem: Problem, plan: Any, *, validate: bool = True) -> Timeline:
    """Simulate ``plan`` on ``problem`` (MODEL.md sections 3 and 4).

    The problem's pattern judges the plan (:meth:`~fusionopt.model.Pattern.simulate`),
    and a plan of another pattern is refused in one line. On the all-reduce, messages run one
    at a time in plan order: ``start_k = max(R_k, Q_k, end_{k-1})``,
    ``end_k = start_k + c(S_k)``, with ``Q_k`` the message's release time (0 unless the
    plan gives one). Tensor ``i`` is reduced at ``C_i = max end_k`` over the
    messages carrying it; the next forward then starts after a barrier on every ``C_i`` or
    tensor by tensor (``problem.sync``). A problem with extensions on (copy cost,
    contention, several channels) is simulated event by event instead, its program run by
    the step programs' engine under the event channel policy (:mod:`fusionopt.model._events`);
    a parameter server by :func:`~fusionopt.model.simulate_ps`, a decoupled all-reduce by
    :func:`~fusionopt.model.simulate_decoupled` and a fully sharded problem
    by :func:`~fusionopt.model.simulate_sharded`.

    Parameters
    ----------
    validate : bool
        Check first that the plan sends every byte exactly once (``Plan.validate``).

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: the groups ``{t3}, {t2, t1}`` give 17 ms.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Plan, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> t = simulate(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    >>> round(t.iteration_time * 1e3, 9), round(t.exposed * 1e3, 9)
    (17.0, 8.0)
    >>> (t.message_end * 1e3).round(9).tolist()
    [6.0, 14.0]
    """
    return _pattern(problem).simulate(problem, plan, validate=validate)


def _pattern(problem: Any) -> Any:
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    return problem.pattern
