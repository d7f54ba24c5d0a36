"""Timing and memory of a fully sharded step (MODEL.md section 8.2): :func:`simulate_sharded`.

The step runs on one compute stream: the forward of units ``0 .. m-1``, then their backward
in reverse, then the optimiser. Each unit's forward waits for its all-gather; a resharded
unit's backward waits for a second one; each unit's gradients are reduce-scattered when its
backward ends. Every collective is issued at a point of the compute stream's program
(:func:`~fusionopt.model.sharded_program`, the program the executor runs
too), so the channel's first-in-first-out order is the program order and one pass of the
program computes the step (:func:`~fusionopt.model.run_program`). With two channels
(``FullySharded(channels="two")``) a collective's end depends on what the other channel
carries meanwhile: the pass then advances the channels, event by event, each time it waits
for a collective's end (:class:`_TwoChannels`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER
from fusionopt.model._fifo import fifo_job
from fusionopt.model._flights import Flight, fly, time_to_next, tolerance, transfers
from fusionopt.model._pattern import require_pattern
from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_pass import Walk, applies, one_pass
from fusionopt.model._sharded_program import (BACKWARD, ISSUED, OPTIMISER, forward_offsets, sharded_program,
                                             tensor_collectives, unit_ends)
from fusionopt.model._step_program import FORWARD, Program, durations, run_program
from fusionopt.model._timeline import ComputePiece, Timeline, read_only



def require_sharded(problem: Problem, what: str) -> None:
    """Raise ``ValueError`` unless ``problem`` is fully sharded: ``what`` needs one."""
    require_pattern(problem, "fully-sharded", what)


class _InIssueOrder:
    """The one channel of a fully sharded step: the program issues collective ``c`` by
    publishing ``issued = c + 1``, in channel order, so each is timed as it is issued:
    ``start = max(issue, end of the one before)``, ``end = start + c(S)``
    (:func:`~fusionopt.model._fifo.fifo_job`; :class:`~fusionopt.model.Fifo`'s
    rule for this gate, without its search for gates reached earlier)."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = durations
        self.free = -math.inf
        self.issue: list[float] = []
        self.start: list[float] = []
        self.end: list[float] = []

    def publish(self, gate: str, value: int, time: float) -> None:
        start, self.free = fifo_job(time, self.durations[value - 1], self.free)
        self.issue.append(time)
        self.start.append(start)
        self.end.append(self.free)

    def ended(self, c: int) -> float:
        return self.end[c]

    def finish(self) -> None:
        assert len(self.end) == len(self.durations), "a fully sharded program issues every collective"


class _TwoChannels:
    """An all-gather channel and a reduce-scatter channel sharing one bandwidth (MODEL.md
    8.2's option, ``FullySharded(channels="two")``): each runs its collectives first in,
    first out in issue order; a collective is a latency phase (its ``alpha``, in full) then a
    transfer (``beta S`` seconds of the whole bandwidth), the transfers in flight sharing the
    bandwidth equally (:mod:`fusionopt.model._flights`).

    :meth:`publish` only queues the collective issued; :meth:`ended` advances the channels,
    event by event, until a given collective has ended. The program waits for a collective
    only after issuing it, and issues nothing earlier than the end it waited for, so
    advancing to that end never runs past a later issue. A collective that never shares the
    bandwidth and runs alone ends at ``start + c(S)``, the one-channel arithmetic."""

    def __init__(self, problem: Problem, program: Program) -> None:
        kinds = np.asarray(program.kind, dtype=np.int64)
        nbytes = np.asarray(program.nbytes, dtype=np.float64)
        self.cost = durations(program, _costs(problem))
        self.latency = np.zeros(len(kinds))
        self.transfer = np.zeros(len(kinds))
        for kind, half in _costs(problem).items():
            alpha, beta = half.affine
            mine = kinds == kind
            self.latency[mine] = np.where(nbytes[mine] > 0, alpha, 0.0)
            self.transfer[mine] = beta * nbytes[mine]
        self.latency, self.transfer = self.latency.tolist(), self.transfer.tolist()
        self.tolerance = tolerance(problem.profile.compute_time + 3.0 * sum(self.cost))
        self.kind = program.kind
        self.clock = 0.0
        self.queue: dict[int, deque[int]] = {REDUCE_SCATTER: deque(), ALL_GATHER: deque()}
        self.busy: dict[int, Flight | None] = {REDUCE_SCATTER: None, ALL_GATHER: None}
        self.issue: list[float] = []
        self.start = [math.nan] * len(kinds)
        self.end = [math.nan] * len(kinds)
        self.solo = [True] * len(kinds)                   # never shared the bandwidth so far

    def publish(self, gate: str, value: int, time: float) -> None:
        """Collective ``value - 1`` is issued at ``time`` (seconds): queue it on its kind's channel."""
        message = value - 1
        assert gate == ISSUED and message == len(self.issue), "a fully sharded program issues in channel order"
        self.issue.append(time)
        self.queue[self.kind[message]].append(message)

    def ended(self, message: int) -> float:
        """The end of collective ``message``, advancing the channels until it is known."""
        while self.end[message] != self.end[message]:     # NaN: not ended yet
            self._step()
        return self.end[message]

    def finish(self) -> None:
        """Run every queued collective to its end."""
        for message in range(len(self.end)):
            self.ended(message)

    def _step(self) -> None:
        """Dispatch what may start now, end what is done, else advance to the next event."""
        clock = self.clock
        for kind, queue in self.queue.items():
            if self.busy[kind] is None and queue and self.issue[queue[0]] <= clock:
                message = queue.popleft()
                self.start[message] = max(clock, self.issue[message])
                self.busy[kind] = Flight(message, self.latency[message], self.transfer[message])
        flights = [f for f in self.busy.values() if f is not None]
        done = [f for f in flights if f.done]
        if done:
            for f in done:
                message = f.message
                self.busy[self.kind[message]] = None
                if self.solo[message] and len(flights) == 1:   # alone all along: the exact sum
                    self.clock = self.start[message] + self.cost[message]
                self.end[message] = self.clock
            return
        share = transfers(flights)
        arrival = min((self.issue[queue[0]] for kind, queue in self.queue.items()
                       if self.busy[kind] is None and queue), default=math.inf)
        step = min(time_to_next(flights, share), default=math.inf)
        if arrival - clock <= step:                       # the next event is an issue: land on it exactly
            step, self.clock = arrival - clock, arrival
        else:
            self.clock = clock + step
        if share > 1:
            for f in flights:
                if f.latency <= 0.0:
                    self.solo[f.message] = False
        fly(flights, step, share, self.tolerance)


def simulate_sharded(problem: Problem, plan: ShardedPlan, *, validate: bool = True,
                     pieces: list[ComputePiece] | None = None) -> Timeline:
    """Simulate ``plan`` on a fully sharded problem (MODEL.md section 8.2).

    Times are seconds from the start of the step's forward. With units ``0 .. m-1`` (forward
    order), prefetch depths ``d_f`` and ``d_b``:

    * **Forward.** Unit ``j``'s all-gather is issued at 0 for ``j < max(d_f, 1)``, else when
      the forward of unit ``j - d_f`` starts (``d_f = 0``: when unit ``j - 1``'s forward
      ends). Unit ``j``'s forward (the ``f_i`` of its tensors, in order) starts when unit
      ``j - 1``'s forward has ended and its all-gather has ended.
    * **Backward.** Each resharded unit is gathered again. The last unit's second all-gather,
      and those of units ``j > m - 1 - d_b``, are issued at the end of the forward, last unit
      first; the others when the backward of unit ``j + d_b`` starts (``d_b = 0``: when unit
      ``j + 1``'s backward ends, after its reduce-scatter). Unit ``j``'s backward (its
      ``b_i``) starts when unit ``j + 1``'s backward has ended and its parameters are whole;
      when it ends, the unit's reduce-scatter is issued.
    * The channel runs the collectives one at a time in issue order: ``start = max(issue,
      end before)``, ``end = start + c(S)``, ``c`` the all-gather or the reduce-scatter cost
      of the unit's unsharded bytes ``S``.
    * **Two channels** (``FullySharded(channels="two")``, affine costs ``alpha + beta S``):
      the all-gathers run first in, first out in issue order on one channel, the
      reduce-scatters on another: ``start = max(issue, end of the one before on its
      channel)``. A collective spends its ``alpha`` first, in full, then ``beta S`` seconds of
      the whole bandwidth, which the transfers in flight (at most one per channel) share
      equally; the step's rules are otherwise the same. A collective that runs alone ends at
      ``start + c(S)``, exactly as on one channel.
    * **Blocking collectives** (``FullySharded(blocking=True)``: FSDP2 on CPU with gloo, one
      channel): the compute stream waits for each collective where it issues it, until its
      end, so no compute overlaps a collective and every collective starts at its issue. A
      prefetch depth still says where a gather is issued (FSDP2's explicit lists); the
      rules are otherwise the same. Not with reduce-scatter groups (``ValueError``).
    * A plan with a ``root`` gathers its two parts (the first and the last unit) in one
      all-gather, first, keeps them whole and reduce-scatters them in one message when the
      backward of the first unit ends.
    * **Reduce-scatter groups** (``plan.reduce_bounds`` given, not with a root): the
      gradients are reduce-scattered in groups of consecutive tensors independent of the
      units. Within unit ``j``'s backward (start ``s_j``, end ``e_j``) tensor ``i``'s
      gradient is ready at ``e_j - sum of b_k over the unit's tensors k < i`` (its ready
      time ``r_i`` of the profile, taken within the unit: the end of its own backward piece
      in the default ready order; tensors that the profile's ready order reorders are ready
      at one moment, as the profile says). A group's reduce-scatter is issued when the last
      of its tensors is ready, in program order: groups completing within unit ``j``'s
      backward go after the backward-prefetch all-gather issued at ``s_j``, in the order of
      the profile's ready order, and before a ``d_b = 0`` all-gather issued at ``e_j``. The
      group holding tensor 0 is therefore issued when the backward ends. With
      ``reduce_bounds`` equal to the unit bounds this is the rule above, to the bit.
    * **Persistent tensors** (``plan.persistent``, DeepSpeed ZeRO-3's): each is gathered
      alone at 0, before every other collective (after the last step's optimiser, in the
      steady state), the forward waits for these gathers, and the tensor stays whole all
      step; its unit's gathers carry the unit's other tensors only (none when there are
      none).
    * ``T = max(end of the last backward, end of the last reduce-scatter) + U + W``, with
      ``W`` the profile's ``update_lump`` and ``host_overhead`` (run after the optimiser).
    * **Memory.** A unit's parameters are whole from the start of its all-gather on the
      channel until the end of its forward (resharded) or of its backward (kept), and from
      the start of its second all-gather until the end of its backward; its gradients from
      the start of its backward until the end of its reduce-scatter (with groups: a tensor's
      gradient from the start of its unit's backward until the end of its group's
      reduce-scatter). ``peak_memory`` is the
      most bytes whole at once (intervals are closed at a moment where some end and others
      begin: what ends is freed first, but a zero-length interval still counts).

    Returns
    -------
    Timeline
        ``message_*`` over the channel (both channels) in issue order, ``message_ready`` the issue time,
        ``message_kind`` (0 reduce-scatter, 1 all-gather) and ``message_unit`` (for a
        reduce-scatter of a plan with ``reduce_bounds``: its group);
        ``gathered`` (per tensor) the end of its unit's forward all-gather,
        ``forward_start`` ``phi_i``, ``reduced`` the end of its unit's reduce-scatter;
        ``peak_memory`` (bytes) and the step function ``memory_time``, ``memory_bytes``
        (bytes whole from each time to the next).

    Examples
    --------
    MODEL.md 8.2's worked check: one unit of ``S = 7e6`` B, resharded, ring halves of
    ``1 ms + 1 ns/B`` (8 ms each): all-gather 0-8, forward 8-11, second all-gather 11-19,
    backward 19-25, reduce-scatter 25-33 ms: ``T = 33`` ms. The parameters and the
    gradients are whole together during the backward and its reduce-scatter: 14 MB.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, FullySharded
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> problem = Problem(profile, pattern=FullySharded(half, half))
    >>> t = simulate_sharded(problem, ShardedPlan([0, 3]))
    >>> (t.message_end * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9), t.peak_memory
    ([8.0, 19.0, 33.0], 33.0, 14000000)

    Two units, ``{t1, t2}`` then ``{t3}``, neither resharded: the second all-gather (3 ms)
    runs 6-9 ms behind the first unit's forward (6-8 ms); the second unit's forward runs
    9-10 ms, the backward 10-16 ms and the reduce-scatters 11-14 and 16-22 ms: ``T = 22`` ms.

    >>> t = simulate_sharded(problem, ShardedPlan([0, 2, 3], [False, False]))
    >>> (t.message_start * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9)
    ([0.0, 6.0, 11.0, 16.0], 22.0)

    The same units with one reduce-scatter group of everything (``reduce_bounds=[0, 3]``,
    7 MB, 8 ms): the backward still runs 10-16 ms, the one reduce-scatter 16-24 ms.

    >>> t = simulate_sharded(problem, ShardedPlan([0, 2, 3], [False, False], reduce_bounds=[0, 3]))
    >>> (t.message_start * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9), t.message_unit.tolist()
    ([0.0, 6.0, 16.0], 24.0, [0, 1, 0])
    """
    require_sharded(problem, "simulate_sharded")
    problem.pattern.require_plan(plan)
    profile = problem.profile
    if validate:
        plan.validate(profile)
    walk = one_pass(problem, plan) if applies(problem, plan) else _engine(problem, plan)
    return _timeline(problem, plan, walk, pieces)


def simulate_sharded_program(problem: Problem, plan: ShardedPlan, *, validate: bool = True,
                             pieces: list[ComputePiece] | None = None) -> Timeline:
    """:func:`simulate_sharded` by the step program's engine alone
    (:func:`~fusionopt.model.run_program`), never by the one-channel pass
    (:mod:`~fusionopt.model._sharded_pass`), which gives the same timeline to the last bit."""
    require_sharded(problem, "simulate_sharded_program")
    problem.pattern.require_plan(plan)
    if validate:
        plan.validate(problem.profile)
    return _timeline(problem, plan, _engine(problem, plan), pieces)


def _engine(problem: Problem, plan: ShardedPlan) -> Walk:
    """Run ``plan``'s step program on the model's clock, over one channel in issue order or
    two sharing the bandwidth."""
    program = sharded_program(problem, plan)
    if problem.pattern.channels == "two":
        channel: _TwoChannels | _InIssueOrder = _TwoChannels(problem, program)
    else:
        channel = _InIssueOrder(durations(program, _costs(problem)))
    clock, marks = run_program(program, channel)
    m = plan.num_units
    forward_start = [marks[FORWARD][j] for j in range(m)]
    backward_start = [marks[BACKWARD][j] for j in range(m)]
    forward_end, backward_end = unit_ends(problem.profile, plan, forward_start, backward_start)
    return Walk(clock, (forward_start, forward_end, backward_start, backward_end), marks[OPTIMISER][0],
                (channel.issue, channel.start, channel.end), (program.kind, program.nbytes, program.units),
                program.roles)


def _timeline(problem: Problem, plan: ShardedPlan, walk: Walk, pieces: list[ComputePiece] | None) -> Timeline:
    """The timeline and the memory account of a walked step."""
    profile = problem.profile
    if pieces is not None:
        pieces.extend(_stream(profile, plan, walk.spans, walk.optimiser))
    issue, start, end = read_only(walk.channel)           # read-only rows
    kind, nbytes, unit = read_only(walk.described, np.int64)
    spans = np.array(walk.spans)
    unit_of = plan.unit_of()
    reduced_by, gathered_by = tensor_collectives(plan, walk.roles, unit_of)
    ends = np.concatenate((end, _NOTHING))                # gathered by nothing: index -1

    def memory_account() -> tuple[np.ndarray, np.ndarray, int]:
        times, levels, peak = _memory(*_whole(profile, plan, walk.roles, walk.clock, start, end, spans,
                                              problem.pattern.whole_widths))
        return read_only(times), read_only(levels, np.int64), peak

    return Timeline(
        sync=problem.sync,
        iteration_time=float(walk.clock),
        compute_time=profile.compute_time,
        message_ready=issue,
        message_start=start,
        message_end=end,
        message_bytes=nbytes,
        reduced=read_only(ends[reduced_by]),
        forward_start=read_only(spans[0][unit_of] + forward_offsets(profile, plan, unit_of)),
        message_kind=read_only(kind, np.int8),
        gathered=read_only(ends[gathered_by]),
        message_unit=unit,
        memory_account=memory_account,
    )


_NOTHING = np.array([-math.inf])


def _costs(problem: Problem) -> dict:
    """The cost of each kind of collective on a fully sharded problem."""
    return {REDUCE_SCATTER: problem.pattern.reduce_scatter, ALL_GATHER: problem.pattern.all_gather}


def _stream(profile, plan: ShardedPlan, spans: Sequence[Sequence[float]], optimiser: float) -> list[ComputePiece]:
    """The compute stream task by task: each unit's forwards in forward order, its backwards
    in the ready order, from the unit's start; the updates in the ready order from the
    optimiser's start; then the step parts. A unit's last task ends where the step's timing
    ends the unit (``spans``: :class:`~fusionopt.model._sharded_pass.Walk`'s)."""
    forward_start, forward_end, backward_start, backward_end = spans
    stream: list[ComputePiece] = []
    bounds = plan.bounds.tolist()
    order = profile.ready_order
    forward, backward, update = profile.forward.tolist(), profile.backward.tolist(), profile.update.tolist()
    for j in range(plan.num_units):
        stream += _pieces("forward", list(range(bounds[j], bounds[j + 1])), forward, forward_start[j], forward_end[j])
    for j in range(plan.num_units - 1, -1, -1):
        stream += _pieces("backward", [i for i in order if bounds[j] <= i < bounds[j + 1]], backward,
                          backward_start[j], backward_end[j])
    clock = optimiser
    stream += _pieces("update", list(order), update, clock, clock + profile.U)
    clock += profile.U
    for part in ("update_lump", "host_overhead"):
        value = getattr(profile, part)
        if value:
            stream.append(ComputePiece(part, -1, clock, clock + value))
            clock += value
    return stream


def _pieces(kind: str, tensors: list[int], seconds: list[float], begin: float, end: float) -> list[ComputePiece]:
    """``tensors``' tasks back to back from ``begin``, the last ending at ``end`` (the step's
    own sum of them; a running sum that rounds past it is held at it)."""
    pieces, clock = [], begin
    for k, i in enumerate(tensors):
        stop = end if k == len(tensors) - 1 else min(clock + seconds[i], end)
        pieces.append(ComputePiece(kind, i, clock, stop))
        clock = stop
    return pieces


def _whole(profile, plan: ShardedPlan, roles: dict, clock: float, start: np.ndarray, end: np.ndarray,
           spans: np.ndarray, widths: tuple[float, float] = (1.0, 1.0)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What is whole when, as intervals ``(begin, finish, bytes)`` (seconds, seconds, bytes),
    given a step's ``roles``, its end ``clock``, each collective's ``start`` and ``end`` and
    each unit's ``spans`` (:class:`~fusionopt.model._sharded_pass.Walk`): a unit's parameters from the start of its all-gather on the channel
    until the end of its forward (resharded) or backward (kept), and from the start of its
    second all-gather until the end of its backward; its gradients from the start of its
    backward until the end of its reduce-scatter (with groups: each unit's share of each
    group it meets); persistent tensors all step. ``widths``: bytes whole per profile byte of a
    parameter and of a gradient (:attr:`~fusionopt.model.FullySharded.whole_widths`)."""
    m = plan.num_units
    forward_end, backward_start, backward_end = spans[1], spans[2], spans[3]
    gather, regather = np.asarray(roles["gather"]), np.asarray(roles["regather"])
    counted, again = gather >= 0, regather >= 0           # every unit gathered again has its regather
    gather_bytes = np.asarray(roles["gather_bytes"], dtype=np.int64)
    if plan.root and counted[0]:                          # both parts gathered at once, counted with the first
        counted[m - 1] = False
        held = gather_bytes[counted]
        held[0] += gather_bytes[m - 1]
    else:
        held = gather_bytes[counted]
    parameter, gradient = widths
    begin = [start[gather[counted]], start[regather[again]]]
    finish = [np.where(plan.reshard, forward_end, backward_end)[counted], backward_end[again]]
    size = [whole_bytes(held, parameter), whole_bytes(gather_bytes[again], parameter)]
    if plan.reduce_bounds is None:
        begin.append(backward_start)
        finish.append(end[roles["scatter"]])
        size.append(whole_bytes(plan.unit_bytes(profile), gradient))
    else:                                                 # each unit's share of each group it meets
        bounds, group_bounds = plan.bounds.tolist(), plan.reduce_bounds.tolist()
        prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64))).tolist()
        shares = [(j, g, prefix[min(bounds[j + 1], group_bounds[g + 1])] - prefix[max(bounds[j], group_bounds[g])])
                  for j in range(m) for g in range(len(group_bounds) - 1)
                  if max(bounds[j], group_bounds[g]) < min(bounds[j + 1], group_bounds[g + 1])]
        units, groups, share = (np.asarray(column) for column in zip(*shares))
        begin.append(backward_start[units])
        finish.append(end[np.asarray(roles["scatter"])[groups]])
        size.append(whole_bytes(share, gradient))
    if roles["persistent"]:                               # whole all the time
        begin.append(np.zeros(1))
        finish.append(np.asarray([clock]))
        size.append(whole_bytes(np.asarray([profile.sizes[plan.persistent].sum()]), parameter))
    return np.concatenate(begin), np.concatenate(finish), np.concatenate(size)


def whole_bytes(nbytes: np.ndarray, width: float) -> np.ndarray:
    """Profile bytes held at ``width`` of their size (:attr:`~fusionopt.model.FullySharded.whole_widths`),
    whole bytes (exact for fp32 tensors)."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    return nbytes if width == 1.0 else np.rint(nbytes * width).astype(np.int64)


def _memory(begin: np.ndarray, finish: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The step function of bytes whole over time and its peak, from intervals ``[begin,
    finish]`` of ``size`` bytes: at one moment what ends is freed before what begins is
    counted, and a zero-length interval counts at its moment. (Within one moment the order
    among the frees, or among the counts, changes neither the peak nor the level after it.)"""
    times = np.concatenate((begin, finish))
    order = np.lexsort((np.concatenate((np.ones(begin.size), np.where(finish > begin, 0.0, 2.0))), times))
    times = times[order]
    levels = np.cumsum(np.concatenate((size, -size))[order])
    if not times.size:
        return times, levels, 0
    last = np.append(times[1:] != times[:-1], True)     # the level after each moment's last event
    return times[last], levels[last], max(int(levels.max()), 0)


__all__ = ["simulate_sharded", "simulate_sharded_program", "require_sharded", "whole_bytes", "REDUCE_SCATTER",
           "ALL_GATHER"]
