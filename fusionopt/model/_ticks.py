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
the number of busy cycles. They model one channel without contention or copy cost: under
those extensions the ticks follow the plain recursion and the simulator judges the plan.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

from fusionopt.model._dispatch import ReadySlices
from fusionopt.model._fifo import fifo_job
from fusionopt.model._plan import Chunk
from fusionopt.model._problem import Problem

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
                _, channel_free = fifo_job(tick, float(problem.cost(int(profile.sizes[group].sum()))), channel_free)
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
    profile = problem.profile
    n = profile.n
    ready = profile.ready_times
    arrivals = list(profile.ready_order)
    sizes = [c.nbytes for c in slices]
    durations: dict[int, float] = {}                           # c(S) of each message size met
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
                if nbytes not in durations:
                    durations[nbytes] = float(problem.cost(nbytes))
                _, channel_free = fifo_job(clock, durations[nbytes], channel_free)
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
