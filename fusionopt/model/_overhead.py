"""A framework's own costs on the model: a constant and a cost per byte of each message on
the channel, and a fixed cost per step on the host (MODEL.md section 2.1).

A gradient reducer (DDP's C++ reducer, FSDP2, fusionopt's ``PlanReducer``) spends time of its
own beyond the link: hooks, packing and unpacking, hand-offs to its communication thread.
What each message costs holds the channel like the link's startup does, so it is added to
every message's ``c(S)``: ``c'(S) = c(S) + o + o_B S`` for ``S > 0`` (``alpha + o`` and
``beta + o_B`` for an :class:`~fusionopt.cost.AlphaBeta`), ``o_B`` what each byte costs
beyond the link (copies into and out of the message's buffer on its path). What each step
costs is time the step waits for the host, so it is added to the profile's
``host_overhead``: every plan's ``T`` grows by exactly that (MODEL.md section 4). What each message costs the compute stream (a hook packing
it in the backward's thread, a communication thread taking a core from the backward) delays
the backward after it: it is added to the problem's ``message_compute``.
"""

from __future__ import annotations

import dataclasses

from fusionopt.model._cost import AlphaBeta, CommCost, Composite, check_param
from fusionopt.model._encoding import Cheapest, Encoded
from fusionopt.model._problem import Problem

__all__ = ["with_message_overhead", "with_overhead"]


def with_message_overhead(cost: CommCost, seconds: float, per_byte: float = 0.0) -> CommCost:
    """``cost`` with ``seconds + per_byte * S`` more on every message of ``S > 0`` bytes
    (``c(0)`` stays 0; ``S`` what the link carries).
    An :class:`~fusionopt.cost.Encoded` or :class:`~fusionopt.cost.Cheapest` cost takes it on
    the link it wraps, so that each message keeps the encoding it is priced in (a compressor
    on that link pays it on each all-reduce it sends).

    >>> with_message_overhead(AlphaBeta(1e-4, 1e-9), 2.5e-4)
    AlphaBeta(alpha=0.00035, beta=1e-09)
    >>> from fusionopt.cost import PiecewiseLinear
    >>> c = with_message_overhead(PiecewiseLinear([1e3, 1e6], [1e-5, 1e-3]), 1e-4)
    >>> round(float(c(1e6)), 9), float(c(0))
    (0.0011, 0.0)
    >>> with_message_overhead(AlphaBeta(1e-4, 1e-9), 0.0, per_byte=1e-9)
    AlphaBeta(alpha=0.0001, beta=2e-09)
    """
    seconds = check_param("per-message overhead", seconds)
    per_byte = check_param("per-byte overhead", per_byte)
    if not isinstance(cost, CommCost):
        raise ValueError(f"cost must be a CommCost, got {type(cost).__name__}")
    if seconds == 0.0 and per_byte == 0.0:
        return cost
    if isinstance(cost, Encoded):      # on the link under the encoding: the message keeps its encoding
        return Encoded(with_message_overhead(cost.cost, seconds, per_byte), cost.encoding)
    if isinstance(cost, Cheapest):
        return Cheapest(with_message_overhead(cost.cost, seconds, per_byte), cost.encodings)
    if isinstance(cost, AlphaBeta):
        return AlphaBeta(cost.alpha + seconds, cost.beta + per_byte)
    return Composite([(cost, 1.0), (AlphaBeta(seconds, per_byte), 1.0)])


def with_overhead(problem: Problem, *, per_step: float, per_message: float,
                  per_message_compute: float = 0.0, per_byte: float = 0.0) -> Problem:
    """``problem`` with a framework's own costs: ``per_message`` seconds and ``per_byte``
    seconds per byte on every message (on both collectives' costs of a fully sharded
    problem), ``per_step`` seconds added to
    the profile's ``host_overhead`` and ``per_message_compute`` seconds of compute-stream
    work per message added to the problem's ``message_compute`` (an all-reduce problem only).

    >>> from fusionopt.model import Plan, Profile, simulate
    >>> profile = Profile.from_arrays([4e6], [1e-3], [2e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> plan = Plan.from_cuts(profile, [])
    >>> slower = with_overhead(problem, per_step=5e-4, per_message=2e-4)
    >>> round(simulate(slower, plan).iteration_time - simulate(problem, plan).iteration_time, 12)
    0.0007
    """
    per_step = check_param("per-step overhead", per_step)
    per_message = check_param("per-message overhead", per_message)
    per_message_compute = check_param("per-message compute", per_message_compute)
    per_byte = check_param("per-byte overhead", per_byte)
    profile = problem.profile.with_step_parts(host_overhead=problem.profile.host_overhead + per_step)
    pattern = problem.pattern.with_message_overhead(per_message, per_byte)
    return dataclasses.replace(problem, profile=profile, pattern=pattern,
                               message_compute=problem.message_compute + per_message_compute)
