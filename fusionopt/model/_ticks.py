"""Cycle-tick fusion: a background thread that wakes at *ticks* and fuses what was posted
since the last one (MODEL.md section 3; Horovod's ``RunLoopOnce``).

At each tick the items posted and not yet sent are grouped by a **fuse rule**, the plug-in
(Horovod's ``FuseResponses``: :func:`fusionopt.solvers.baselines._horovod.fuse`), into messages released
at that tick (their release time, MODEL.md section 3); the channel runs them one at a time in
order. When the next tick comes depends on the deployment: a thread that hands the
collectives to a device stream ticks every ``cycle`` (``wait_for_collectives=False``,
Horovod on NCCL); one that runs them itself ticks at ``max(tick + cycle, end of the cycle's
collectives)`` (Gloo, MPI).

* :func:`cycle_ticks`: whole tensors posted as their gradients become ready (Horovod).
* :func:`credit_ticks`: slices posted by a priority scheduler under a credit
  (:mod:`fusionopt.model._dispatch`), credit returned when a slice's message ends
  (ByteScheduler on Horovod).

Both return the messages as groups of items with their release times, the message ends the
policy timed itself (the simulator must reproduce them exactly on the plain model), and
the number of busy cycles. Their loops are the fast path of :class:`TickChannels`, the same
policy as a channel policy of the step programs' engine (:func:`tick_policy`), which
:func:`cycle_ticks` and :func:`credit_ticks` run instead under contention (either way) or
a copy cost on the channel: there the ticks follow the stream as it slows, the channel as it
slows, and each fused message's packing. A test holds the two to each other on the plain
model (same messages, times to rounding). With several channels, a per-message compute or
packing on the compute stream (work of messages the program cannot know before the ticks
form them) the loops run on the plain recursion and the simulator judges their plan.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fusionopt.model._dispatch import ReadySlices
from fusionopt.model._events import event_program
from fusionopt.model._fifo import fifo_job
from fusionopt.model._flights import Flight, SharedChannels, tolerance
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import run_program

Fuse = Callable[[list[int]], list[list[int]]]
"""A fuse rule: the items of one cycle, in the order posted, grouped into messages."""


@dataclass(frozen=True)
class TickRun:
    """What a cycle-tick policy sent: ``groups`` (each message's items), ``release`` (its
    tick, seconds), ``ends`` (when it ends by the policy's own timing, seconds) and
    ``cycles`` (the ticks that sent something)."""

    groups: list[list[int]]
    release: list[float]
    ends: list[float]
    cycles: int
    iteration_time: float | None = None
    """``T`` of the step the engine ran (:func:`tick_policy`); None from the loops."""


def cycle_ticks(problem: Problem, fuse: Fuse, cycle: float, *, phase: float = 0.0,
                wait_for_collectives: bool = False) -> TickRun:
    """Whole tensors posted at their ready time, fused at ticks ``phase, phase + cycle, ...``;
    idle ticks up to the next gradient are skipped. Items are tensor indices.

    Examples
    --------
    Ticks every 3 ms on MODEL.md section 5 (ready at 1, 3, 6 ms; alpha 3 ms), each tensor
    its own message: t3 and t2 go at the 3 ms tick (3 -> 8, 8 -> 12), t1 at the 6 ms tick
    behind them (12 -> 19).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> run = cycle_ticks(Problem(profile, AlphaBeta(3e-3, 1e-9)), lambda batch: [[i] for i in batch], 3e-3)
    >>> run.groups, [round(t * 1e3, 9) for t in run.release], [round(t * 1e3, 9) for t in run.ends]
    ([[2], [1], [0]], [3.0, 3.0, 6.0], [8.0, 12.0, 19.0])
    """
    if not cycle > 0:
        raise ValueError(f"cycle must be a positive number of seconds, got {cycle!r}")
    profile = problem.profile
    if on_the_engine(problem):
        items = [Chunk(i, 0, int(profile.sizes[i])) for i in range(profile.n)]
        return tick_policy(problem, items, fuse, cycle, phase=phase, wait_for_collectives=wait_for_collectives)
    ready = profile.ready_times
    pending = list(profile.ready_order)                # ready times non-decreasing along it
    groups: list[list[int]] = []
    release: list[float] = []
    ends: list[float] = []
    tick, channel_free, busy_cycles = float(phase), 0.0, 0
    while pending:
        count = 0
        while count < len(pending) and ready[pending[count]] <= tick:
            count += 1
        batch, pending = pending[:count], pending[count:]
        if batch:
            busy_cycles += 1
            for group in fuse(batch):
                groups.append(group)
                release.append(tick)
                duration = float(problem.message_cost([profile.sizes[group].sum()], [group])[0])
                _, channel_free = fifo_job(tick, duration, channel_free)
                ends.append(channel_free)
        if not pending:
            break
        # The next tick; idle ticks up to the next gradient are skipped.
        waits = max(1, math.ceil((ready[pending[0]] - tick) / cycle)) if not batch else 1
        tick += waits * cycle
        if wait_for_collectives:
            tick = max(tick, channel_free)
    return TickRun(groups, release, ends, busy_cycles)


def credit_ticks(problem: Problem, slices: list[Chunk], rank: list[int], credit_bytes: int, fuse: Fuse,
                 cycle: float, *, wait_for_collectives: bool = False) -> TickRun:
    """Slices posted by priority (``rank`` per tensor, lower first) while the bytes posted and
    not yet reduced are under ``credit_bytes``, fused at ticks every ``cycle`` from the first
    gradient's (``cycle = 0``: each post goes at once); a slice's credit comes back when its
    message ends. Items are slice indices; ``slices`` holds each tensor's consecutively.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms`` and 5 ms ticks, 1 MB slices and a credit of
    4 MB, each cycle's slices fused into one message: at the 5 ms tick t2's two slices and
    t1's are posted and go as one 3 MB message, 5 -> 9 ms; t0's four go at the 10 ms tick,
    10 -> 15 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> slices = [Chunk(i, lo, lo + 1_000_000) for i, size in enumerate([4_000_000, 1_000_000, 2_000_000])
    ...           for lo in range(0, size, 1_000_000)]
    >>> run = credit_ticks(Problem(profile, AlphaBeta(1e-3, 1e-9)), slices, [0, 1, 2], 4_000_000,
    ...                    lambda batch: [batch], 5e-3)
    >>> run.groups, [round(t * 1e3, 9) for t in run.release], [round(t * 1e3, 9) for t in run.ends]
    ([[5, 6, 4], [0, 1, 2, 3]], [5.0, 10.0], [9.0, 15.0])
    """
    if not credit_bytes > 0:
        raise ValueError(f"credit_bytes must be positive (a credit of none posts nothing), got {credit_bytes!r}")
    if not cycle >= 0:
        raise ValueError(f"cycle must be a number of seconds >= 0, got {cycle!r}")
    if on_the_engine(problem):
        return tick_policy(problem, slices, fuse, cycle, rank=rank, credit_bytes=credit_bytes,
                           wait_for_collectives=wait_for_collectives)
    profile = problem.profile
    n = profile.n
    ready = profile.ready_times
    arrivals = list(profile.ready_order)
    sizes = [c.nbytes for c in slices]
    durations: dict[tuple[int, bool], float] = {}              # c(S) of each message met, with or without exact tensors
    exact = set(problem.exact_tensors)
    queue = ReadySlices(n, slices)
    posted: list[int] = []                                     # waiting for the tick
    returns: list[tuple[float, int]] = []                      # (end, bytes): credit coming back
    held = 0
    groups: list[list[int]] = []
    release: list[float] = []
    ends: list[float] = []
    channel_free = -math.inf
    clock = float(ready[arrivals[0]])
    tick = math.ceil(clock / cycle) * cycle if cycle > 0 else clock     # ticks at 0, cycle, ...
    released = sent = cycles = 0
    while sent < len(slices):
        while released < n and ready[arrivals[released]] <= clock:
            i = arrivals[released]
            queue.release(rank[i], i)
            released += 1
        while returns and returns[0][0] <= clock:
            held -= heapq.heappop(returns)[1]
        while queue and held < credit_bytes:
            s = queue.take()
            posted.append(s)
            held += sizes[s]
        if posted and (cycle == 0 or clock >= tick):
            cycles += 1
            for group in fuse(posted):
                nbytes = sum(sizes[s] for s in group)
                carried = [slices[s].tensor for s in group]
                key = (nbytes, not exact.isdisjoint(carried))
                if key not in durations:
                    durations[key] = float(problem.message_cost([nbytes], [carried])[0])
                _, channel_free = fifo_job(clock, durations[key], channel_free)
                groups.append(group)
                release.append(clock)
                heapq.heappush(returns, (channel_free, nbytes))
                ends.append(channel_free)
                sent += len(group)
            posted = []
            if cycle > 0:
                tick = max(clock + cycle, channel_free) if wait_for_collectives else clock + cycle
        upcoming = []
        if released < n:
            upcoming.append(float(ready[arrivals[released]]))
        if returns:
            upcoming.append(returns[0][0])
        if posted:
            upcoming.append(tick)
        if not upcoming:
            raise AssertionError("credit ticks: slices left and no event to come")
        clock = min(upcoming)
        if cycle > 0 and tick < clock:                         # idle ticks on the grid
            tick += math.ceil((clock - tick) / cycle) * cycle
    return TickRun(groups, release, ends, cycles)


def on_the_engine(problem: Problem) -> bool:
    """Whether the tick policies run as :class:`TickChannels` on the engine: under contention
    (either way) or a copy cost on the channel, on one channel, with no compute-stream work per
    message (module docstring); tensors kept exact change only the prices, which both take."""
    extensions = set(problem.timing_extensions)
    if not extensions or problem.channels > 1 or problem.computes_per_message:
        return False
    if problem.copy_cost > 0 and problem.copy_on != "channel":
        return False
    return extensions <= {"contention", "comm_contention", "copy_cost"}


class TickChannels(SharedChannels):
    """The cycle-tick policies as a channel policy of the step programs' engine: items
    (whole tensors, or a priority scheduler's slices) are posted as the backward makes them
    ready, a thread fuses what was posted at each tick (``fuse``) into messages released
    then, and one channel runs the messages one at a time in order, each its ``c(S)`` (plus
    its packing ``copy_cost S`` when it holds several tensors) as a latency phase
    (:mod:`fusionopt.model._flights`), the stream computing at ``1 / contention`` while one
    is in flight and the flight progressing at ``1 / comm_contention`` while the stream
    computes. The engine waits on the items: an item ends with its message.

    Two ways to post, as :func:`cycle_ticks` and :func:`credit_ticks` do: without a credit
    every ready item is posted, in the ready order, and ticks come at ``phase + k cycle``
    (idle ones skipped: the first tick after a quiet spell is the first of that grid at or
    after the item that ends it); with ``credit_bytes`` the ready items are posted by
    ``rank`` (lower first) while the bytes posted and not yet reduced are under the credit,
    and each busy tick starts the grid again ``cycle`` later (``cycle = 0``: a post goes at
    once). With ``wait_for_collectives`` a tick also waits for every message of the tick
    before (Gloo, MPI). ``groups``, ``release``, ``ends`` and ``cycles`` are as in
    :class:`TickRun`."""

    def __init__(self, problem: Problem, items: list[Chunk], fuse: Fuse, cycle: float, *, phase: float = 0.0,
                 rank: list[int] | None = None, credit_bytes: int | None = None,
                 wait_for_collectives: bool = False) -> None:
        profile = problem.profile
        self.problem, self.items, self.fuse, self.cycle = problem, items, fuse, float(cycle)
        self.sizes = [c.nbytes for c in items]
        self.credit = credit_bytes
        self.wait = wait_for_collectives
        self.order = profile.backward_order.tolist()
        self.of_tensor: list[list[int]] = [[] for _ in range(profile.n)]
        for k, c in enumerate(items):
            self.of_tensor[c.tensor].append(k)
        self.queue = ReadySlices(profile.n, items) if credit_bytes is not None else None
        self.rank = rank
        self.posted: list[int] = []
        self.held = 0                                    # bytes posted and not yet reduced (credit)
        self.groups: list[list[int]] = []
        self.release: list[float] = []
        self.ends: list[float] = []
        self.cycles = 0
        self.library: list[int] = []                     # fused messages waiting for the channel
        self.outstanding = 0                             # messages of the last tick not ended (waits)
        self.message_latency: list[float] = []
        scale = profile.compute_time + float(problem.cost(np.array(self.sizes, dtype=np.float64)).sum())
        super().__init__(problem.contention, problem.comm_contention, tolerance(scale), len(items))
        if credit_bytes is None:
            self.tick = float(phase)
        else:
            first = float(profile.ready_times[self.order[0]]) if profile.n else 0.0
            self.tick = math.ceil(first / cycle) * cycle if cycle > 0 else first

    def publish(self, gate: str, value: int, time: float) -> None:
        """The backward's ``value``-th tensor in the ready order is ready: its items are posted
        (no credit) or join the scheduler's queue."""
        tensor = self.order[value - 1]
        if self.queue is not None:
            self.queue.release(self.rank[tensor], tensor)
            return
        if not self.posted and not self.outstanding and time > self.tick:
            # The ticks since the last one found nothing: the next is the first of the grid at
            # or after this post (cycle_ticks' skip of idle ticks).
            self.tick += max(1, math.ceil((time - self.tick) / self.cycle)) * self.cycle
        self.posted.extend(self.of_tensor[tensor])

    def _due(self) -> float | None:
        """When the thread fuses what is posted, if it does now: the tick (the clock reaches a
        tick it stepped to to rounding), or now."""
        if not self.posted or self.outstanding:
            return None
        if self.queue is not None:
            if self.cycle == 0.0:
                return self.clock
            if self.tick < self.clock - self.tolerance:          # the grid, up to now
                self.tick += math.ceil((self.clock - self.tick) / self.cycle) * self.cycle
        return self.tick if self.clock >= self.tick - self.tolerance else None

    def _instant(self) -> None:
        """Every message that ends now and the channel's next ones (a message of no time ends
        at once), then the scheduler's posts and the tick's messages."""
        flights, clock = self.flights, self.clock
        progressed = True
        while progressed:
            progressed = False
            for m in self._landed():
                self.ends[m] = clock
                for k in self.groups[m]:
                    self.end[k] = clock
                self.held -= sum(self.sizes[k] for k in self.groups[m])
                if self.wait and self.outstanding:
                    self.outstanding -= 1
                    if not self.outstanding and clock > self.tick:
                        self.tick = clock            # the thread ran its tick's collectives itself
                progressed = True
            if self.library and not flights:         # the channel takes the next message
                m = self.library.pop(0)
                latency = self.message_latency[m]
                flights.append(Flight(m, latency if latency > self.tolerance else 0.0, 0.0))
                progressed = True
            if progressed:
                continue                             # every end of this instant before a decision
            while self.queue is not None and self.queue and self.held < self.credit:
                k = self.queue.take()
                self.posted.append(k)
                self.held += self.sizes[k]
                progressed = True
            now = self._due()
            if now is not None:
                self.cycles += 1
                fused = self.fuse(self.posted)
                for group in fused:
                    self._add_message(list(group), now)
                self.posted = []
                if self.cycle > 0.0:
                    self.tick = now + self.cycle
                if self.wait and self.cycle > 0.0:
                    self.outstanding = len(fused)
                progressed = True

    def _add_message(self, group: list[int], clock: float) -> None:
        nbytes = sum(self.sizes[k] for k in group)
        problem = self.problem
        latency = float(problem.message_cost([nbytes], [[self.items[k].tensor for k in group]])[0])
        if problem.copy_cost > 0 and problem.copy_on == "channel" and len({self.items[k].tensor for k in group}) > 1:
            latency += problem.copy_cost * nbytes
        self.groups.append(group)
        self.release.append(clock)
        self.ends.append(math.inf)
        self.message_latency.append(latency)
        self.library.append(len(self.groups) - 1)

    def _arrivals(self, candidates: list[float]) -> None:
        """The next tick, when something is posted and waits for it."""
        if self.posted and not self.outstanding and self.tick > self.clock + self.tolerance \
                and (self.queue is None or self.cycle > 0):
            candidates.append(self.tick - self.clock)


def tick_policy(problem: Problem, items: list[Chunk], fuse: Fuse, cycle: float, *, phase: float = 0.0,
                rank: list[int] | None = None, credit_bytes: int | None = None,
                wait_for_collectives: bool = False) -> TickRun:
    """Run a cycle-tick policy (:class:`TickChannels`) on the step programs' engine: the
    step's event program with the items as its collectives (each waited for where its
    tensor's update needs it), the policy as its channel. Items are ``Chunk`` s, each tensor's
    consecutively; without ``credit_bytes`` every item is posted when its tensor is ready
    (:func:`cycle_ticks`), with it by ``rank`` under the credit (:func:`credit_ticks`).
    Returns the :class:`TickRun` with ``T``.

    Examples
    --------
    :func:`cycle_ticks`' example on the engine: the same messages at the same ticks.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> items = [Chunk(i, 0, int(s)) for i, s in enumerate(profile.sizes)]
    >>> run = tick_policy(Problem(profile, AlphaBeta(3e-3, 1e-9)), items, lambda batch: [[i] for i in batch], 3e-3)
    >>> run.groups, [round(t * 1e3, 9) for t in run.release], [round(t * 1e3, 9) for t in run.ends]
    ([[2], [1], [0]], [3.0, 3.0, 6.0], [8.0, 12.0, 19.0])
    >>> round(run.iteration_time * 1e3, 9)
    22.0
    """
    if credit_bytes is not None and rank is None:
        raise ValueError("tick_policy: a credit posts by priority: give rank, one per tensor")
    plan = Plan(tuple(Message((c,)) for c in items))
    program = event_program(problem, plan)
    channels = TickChannels(problem, items, fuse, cycle, phase=phase, rank=rank, credit_bytes=credit_bytes,
                            wait_for_collectives=wait_for_collectives)
    clock, _ = run_program(program, channels)
    return TickRun(channels.groups, channels.release, channels.ends, channels.cycles, float(clock))


__all__ = ["Fuse", "TickChannels", "TickRun", "credit_ticks", "cycle_ticks", "on_the_engine", "tick_policy"]
