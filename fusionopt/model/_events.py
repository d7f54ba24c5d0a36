"""The extensions of MODEL.md section 6, as a step program and a channel policy: the event
semantics.

Used by :func:`fusionopt.model.simulate` when a problem has ``copy_cost``, ``message_compute``,
``contention``, ``comm_contention`` or ``channels`` on (and by
:func:`~fusionopt.model.compute_pieces` on every all-reduce problem). The plain model's
recursion is a special case; tests pin the two together with every extension off.

**The program** (:func:`event_program`, the engine of :mod:`fusionopt.model._step_program`):
the compute stream runs a fixed list of tasks, each an amount of work in seconds at full
speed: the backward of the tensors in the ready order (``n-1 .. 0`` unless the profile's
``ready_order`` reorders tensors ready at one moment; each backward takes its tensor's ready
time less the one before, so every gradient is ready when the profile says, in the order it
says), each followed by the packing of the messages it makes ready when
``copy_on="compute"`` and the ``message_compute`` (and ``message_compute_per_byte``) of each
(plan order), then the updates and
forwards gated by the sync rule, with the profile's step parts where MODEL.md section 4 puts
them. A message is *ready* when the backward of every tensor it carries has ended (and its
work on the compute stream): the program publishes it there.

**The channel policy** (:class:`EventChannels`): a ready message is *dispatched* in plan
order, once past its release time, once the message before it has been dispatched and while
fewer than ``channels`` messages are in flight. It then runs a latency phase (``alpha``,
plus the packing ``copy_cost * S`` when it runs on the channel) and a transfer phase
(``beta * S`` seconds of exclusive bandwidth), the transfers in flight sharing the bandwidth
equally (:mod:`fusionopt.model._flights`). With one channel the whole ``c(S)`` is the latency
phase, so any cost model works. While at least one message is in flight the stream computes
at ``1 / contention`` of full speed; while the stream computes, every message in flight
progresses at ``1 / comm_contention`` of full speed, in its latency and its transfer phase
alike. The stream *computes* while its current task has work left and every message it
waits for has ended; the policy advances the channels and the stream's task together, event
by event (:meth:`EventChannels.compute`), and the channels alone while the stream waits
(:meth:`EventChannels.ended`).
"""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._allreduce_program import ALL_REDUCE, EMITTED
from fusionopt.model._flights import Flight, SharedChannels, tolerance
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import COMPUTE, FORWARD, MARK, PUBLISH, WAIT, Program, run_program
from fusionopt.model._timeline import build_timeline, reduction_times

PACKED = "packed"
"""The gate the stream counts its packing tasks on, in stream order."""


def event_program(problem: Problem, plan: Plan) -> Program:
    """The step program of ``plan`` (validated) on an all-reduce ``problem`` in the event
    semantics (module docstring): each compute task a ``COMPUTE`` op labelled ``(kind,
    tensor, message)``; message ``k`` gated on counter ``"emitted"`` (backward tasks ended,
    in the ready order) or, when it is packed on the stream, ``"packed"`` (packing tasks
    ended)."""
    profile = problem.profile
    n = profile.n
    order = profile.backward_order
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    last = np.maximum.reduceat(position[plan.tensor], plan.starts[:-1]).tolist()   # per message
    made_ready: dict[int, list[int]] = {}
    for k, p in enumerate(last):
        made_ready.setdefault(p, []).append(k)
    # Compute-stream work of each message: its packing there and the work every message costs.
    packing = problem.compute_per_message(np.array([len(m.tensors) for m in plan.messages]),
                                          plan.message_bytes.astype(np.float64)).tolist()
    gates: list[tuple[str, int]] = [(EMITTED, p + 1) for p in last]
    program = Program("all-reduce", profile.sizes.tolist())
    ops = program.ops
    backward = profile.backward_steps.tolist()
    packed = 0
    for p, i in enumerate(order.tolist()):
        ops += [(COMPUTE, backward[p], ("backward", i, None)), (PUBLISH, EMITTED, p + 1)]
        for k in made_ready.get(p, []):
            if packing[k] > 0.0:
                packed += 1
                gates[k] = (PACKED, packed)
                ops += [(COMPUTE, packing[k], ("pack", i, k)), (PUBLISH, PACKED, packed)]
    release = plan.release.tolist()
    for k, message in enumerate(plan.messages):
        chunks = tuple((c.tensor, c.lo, c.hi) for c in message.chunks)
        program.collective(ALL_REDUCE, k, int(plan.message_bytes[k]), *gates[k], release[k],
                           ("all-reduce of message {}", k), chunks=chunks)
    m = len(plan.messages)
    carried_by: list[list[int]] = [[] for _ in range(n)]
    for k, message in enumerate(plan.messages):
        for i in dict.fromkeys(c.tensor for c in message.chunks):
            carried_by[i].append(k)
    update, forward = profile.update.tolist(), profile.forward.tolist()
    if problem.sync == "barrier":
        # Whole-step work waits for every gradient (MODEL.md section 4; layerwise sync has none).
        ops.extend((WAIT, k) for k in range(m))
        ops.extend((COMPUTE, getattr(profile, part), (part, -1, None)) for part in ("post_backward", "update_lump")
                   if getattr(profile, part))
        ops.extend((COMPUTE, update[i], ("update", i, None)) for i in range(n))
        for i in range(n):
            ops += [(MARK, FORWARD, i), (COMPUTE, forward[i], ("forward", i, None))]
    else:
        for i in range(n):
            ops.extend((WAIT, k) for k in carried_by[i])
            ops += [(COMPUTE, update[i], ("update", i, None)), (MARK, FORWARD, i),
                    (COMPUTE, forward[i], ("forward", i, None))]
    if profile.host_overhead:
        ops.append((COMPUTE, profile.host_overhead, ("host_overhead", -1, None)))
    last_carrier = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last_carrier, plan.tensor, plan.chunk_message)
    program.forward_mark = np.arange(n)
    program.forward_offset = np.zeros(n)
    program.reduced_by = tuple(last_carrier.tolist())
    program.gathered_by = (-1,) * n
    return program


class EventChannels(SharedChannels):
    """``channels`` channels sharing one bandwidth, under contention both ways: the channel
    policy of the event semantics (module docstring). The engine publishes a message's gate
    at the stream's clock, hands each compute task to :meth:`compute` and each wait to
    :meth:`ended`, so the policy's clock is the stream's."""

    def __init__(self, problem: Problem, plan: Plan, program: Program) -> None:
        sizes = plan.message_bytes.astype(np.float64)
        packing = np.array([len(m.tensors) > 1 for m in plan.messages]) * problem.copy_cost * sizes
        if problem.copy_on != "channel":
            packing = np.zeros_like(sizes)
        if problem.channels == 1:
            carried = [m.tensors for m in plan.messages]
            latency, transfer = problem.message_cost(sizes, carried) + packing, np.zeros_like(sizes)
        else:
            alpha, beta = problem.cost.affine
            latency, transfer = np.where(sizes > 0, alpha, 0.0) + packing, beta * sizes
        self.latency, self.transfer = latency.tolist(), transfer.tolist()
        count = len(self.latency)
        super().__init__(problem.contention, problem.comm_contention,
                         tolerance(problem.profile.compute_time + float(latency.sum() + transfer.sum())), count)
        self.release = plan.release.tolist()
        self.channels = problem.channels
        self.ready = [math.inf] * count
        self.start = [math.inf] * count
        # Per gate, its messages by need: a publish makes ready those whose need it reaches.
        self.waiting: dict[str, list[tuple[int, int]]] = {}
        for k, (gate, need, *_) in enumerate(program.meta):
            self.waiting.setdefault(gate, []).append((need, k))
        for queue in self.waiting.values():
            queue.sort(reverse=True)
        self.following = 0                               # the next message to dispatch, plan order

    def publish(self, gate: str, value: int, time: float) -> None:
        queue = self.waiting.get(gate, [])
        while queue and queue[-1][0] <= value:
            self.ready[queue.pop()[1]] = time

    def _instant(self) -> None:
        """Dispatch what may start now and end what is done, until neither changes anything."""
        clock, flights = self.clock, self.flights
        progressed = True
        while progressed:
            progressed = False
            k = self.following
            while (k < len(self.ready) and self.ready[k] <= clock and self.release[k] <= clock
                   and len(flights) < self.channels):
                self.start[k] = clock
                flights.append(Flight(k, self.latency[k], self.transfer[k]))
                k += 1
                progressed = True
            self.following = k
            for k in self._landed():
                self.end[k] = clock
                progressed = True

    def _arrivals(self, candidates: list[float]) -> None:
        """The next message's release, when it is ready and a channel is free but it is not released yet."""
        k = self.following
        if (k < len(self.ready) and self.ready[k] <= self.clock and len(self.flights) < self.channels
                and self.release[k] > self.clock):
            candidates.append(self.release[k] - self.clock)


def simulate_events(problem: Problem, plan: Plan, *, pieces: list | None = None):
    """The :class:`~fusionopt.model.Timeline` of ``plan`` under the extensions: its
    :func:`event_program` run by the step program's engine over :class:`EventChannels`.

    Parameters
    ----------
    pieces : list, optional
        If given, one :class:`~fusionopt.model.ComputePiece` per compute task is
        appended to it in stream order: its start (seconds) is when the task is next on the
        stream and every message it waits for has ended, its end when its work is done.
        Recording changes no number of the timeline.
    """
    program = event_program(problem, plan)
    channels = EventChannels(problem, plan, program)
    clock, marks = run_program(program, channels, pieces=pieces)
    end = np.asarray(channels.end, dtype=np.float64)
    reduced = reduction_times(plan, end, problem.profile.n)
    return build_timeline(problem, plan, float(clock), np.asarray(channels.ready, dtype=np.float64),
                          np.asarray(channels.start, dtype=np.float64), end, reduced, program.forward_start(marks))


__all__ = ["EventChannels", "PACKED", "event_program", "simulate_events"]
