"""Priority dispatch: a policy that decides as the step runs which slice goes next (MODEL.md
sections 3, 4 and 6).

Gradient tensors are cut into slices (``Chunk`` objects, each tensor's consecutive, in
priority order); the scheduler *posts* the ready slice of best priority whenever its
**window** allows, and the communication library runs posted slices in the order posted:
one at a time on one channel, up to ``K`` at once on ``K`` channels. A window is the
plug-in: P3 posts only to a free channel (:func:`free_channel_window`), ByteScheduler
while the bytes posted and not yet reduced are under its credit (:func:`credit_window`).
Priority is a rank per tensor (lower first), then byte order within it.

:func:`priority_dispatch` runs the policy and returns its own timeline and the order it
posted the slices in, from which the solver emits a static plan (one slice per message)
for :func:`~fusionopt.model.simulate` to judge: on the plain model the policy's recursion is
the simulator's term for term, so the two agree exactly; under contention (either way) or
several channels the policy is a channel policy (:class:`PriorityChannels`) of the step
programs' engine (:mod:`fusionopt.model._step_program`), running the step's compute tasks
(:func:`dispatch_program`) in the event semantics of :mod:`fusionopt.model._events`, and
agrees with the simulator to rounding.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fusionopt.model._allreduce_program import ALL_REDUCE
from fusionopt.model._fifo import fifo_job
from fusionopt.model._flights import Flight, SharedChannels, tolerance
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import COMPUTE, FORWARD, MARK, PUBLISH, WAIT, Program, run_program
from fusionopt.model._sync import layerwise_forward

Window = Callable[[int, int], bool]
"""May the scheduler post another slice, given the number of slices and the bytes posted and
not yet reduced?"""


def free_channel_window(channels: int) -> Window:
    """Post only when a channel is free: nothing ever queues in the library (P3)."""
    return lambda count, nbytes: count < channels


def credit_window(channels: int, credit_bytes: int) -> Window:
    """A free channel always takes a ready slice; beyond that the credit bounds the bytes
    posted and not yet reduced (ByteScheduler; the last slice posted may overshoot it)."""
    return lambda count, nbytes: count < channels or nbytes < credit_bytes


@dataclass(frozen=True)
class PolicyRun:
    """A dynamic policy's own timeline: slices in the order posted, with their dispatch and
    end times (seconds, same order) and ``T``."""

    order: list[int]
    start: np.ndarray
    end: np.ndarray
    iteration_time: float

    def plan(self, slices: list[Chunk]) -> Plan:
        """The static plan: one message per slice, in the order posted."""
        return Plan(tuple(Message((slices[s],)) for s in self.order))


class ReadySlices:
    """The slices of the ready tensors, best priority first: a heap of ``(rank, tensor)`` over
    tensors with slices left, and each tensor's next slice. ``slices`` must hold each
    tensor's slices consecutively."""

    def __init__(self, n: int, slices: list[Chunk]) -> None:
        self.first, self.stop = [0] * n, [0] * n
        for s, c in enumerate(slices):
            if s == 0 or slices[s - 1].tensor != c.tensor:
                self.first[c.tensor] = s
            self.stop[c.tensor] = s + 1
        self.following = list(self.first)
        self.heap: list[tuple[int, int]] = []

    def __bool__(self) -> bool:
        return bool(self.heap)

    def release(self, rank: int, tensor: int) -> None:
        """Tensor ``tensor``'s gradient is ready: its slices join the queue."""
        heapq.heappush(self.heap, (rank, tensor))

    def take(self) -> int:
        """The next slice of the ready tensor of best priority; the tensor leaves the queue
        with its last slice."""
        i = self.heap[0][1]
        s = self.following[i]
        self.following[i] += 1
        if self.following[i] == self.stop[i]:
            heapq.heappop(self.heap)
        return s


def priority_dispatch(problem: Problem, slices: list[Chunk], window: Window, rank: list[int] | None = None
                      ) -> PolicyRun:
    """Run the priority policy with ``window`` on ``problem``: the exact one-channel recursion
    when it applies, the event semantics of the extensions otherwise. ``rank[i]`` is tensor
    ``i``'s priority (lower first; default the forward index).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``, slices of 1 MB (2 ms each), P3's window: t2's
    first slice runs 1-3 ms; at 3 ms t1 is ready and overtakes t2's second slice.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    >>> slices = [Chunk(i, lo, min(lo + 1_000_000, size)) for i, size in enumerate([4_000_000, 1_000_000, 2_000_000])
    ...           for lo in range(0, size, 1_000_000)]
    >>> run = priority_dispatch(problem, slices, free_channel_window(1))
    >>> [slices[s].tensor for s in run.order], round(run.iteration_time * 1e3, 9)
    ([2, 1, 2, 0, 0, 0, 0], 18.0)
    """
    if problem.computes_per_message:
        eta, eta_byte = problem.message_compute_terms
        raise ValueError(f"the priority policies do not model compute per message ({eta!r} s a message, "
                         f"{eta_byte!r} s a byte, with an encoding's cast on the compute stream); use a fusion method, "
                         "or leave message_compute out")
    rank = list(range(problem.profile.n)) if rank is None else rank
    if problem.channels == 1 and problem.contention == 1.0 and problem.comm_contention == 1.0:
        return _serial(problem, slices, window, rank)
    return _events(problem, slices, window, rank)


def _serial(problem: Problem, slices: list[Chunk], window: Window, rank: list[int]) -> PolicyRun:
    """One channel, no contention: ready times are fixed, and a posted slice's times follow
    at once from the channel's FIFO step (the library runs posted slices in order)."""
    profile = problem.profile
    n = profile.n
    ready = profile.ready_times
    sizes = np.array([c.nbytes for c in slices], dtype=np.int64)
    durations = problem.message_cost(sizes, [c.tensor for c in slices])
    queue = ReadySlices(n, slices)
    releases = sorted(range(n), key=lambda i: ready[i])
    outstanding: deque[tuple[float, int]] = deque()   # (end, bytes) posted, not yet reduced
    outstanding_bytes = 0
    order: list[int] = []
    start = np.empty(len(slices))
    end = np.empty(len(slices))
    channel_free = -np.inf
    released = 0
    clock = ready[releases[0]]
    while len(order) < len(slices):
        while released < n and ready[releases[released]] <= clock:
            queue.release(rank[releases[released]], releases[released])
            released += 1
        while outstanding and outstanding[0][0] <= clock:
            outstanding_bytes -= outstanding.popleft()[1]
        while queue and window(len(outstanding), outstanding_bytes):
            s = queue.take()
            k = len(order)
            order.append(s)
            start[k], channel_free = fifo_job(ready[slices[s].tensor], durations[s], channel_free)
            end[k] = channel_free
            outstanding.append((end[k], int(sizes[s])))
            outstanding_bytes += int(sizes[s])
        upcoming = [float(ready[releases[released]])] if released < n else []
        if outstanding:
            upcoming.append(float(outstanding[0][0]))
        if upcoming:
            clock = min(upcoming)
        elif len(order) < len(slices):
            raise AssertionError("priority dispatch stalled with slices left and no event to come")

    reduced = np.full(n, -np.inf)
    for k, s in enumerate(order):
        reduced[slices[s].tensor] = max(reduced[slices[s].tensor], end[k])
    return PolicyRun(order, start, end, layerwise_forward(profile, reduced)[1])


def _events(problem: Problem, slices: list[Chunk], window: Window, rank: list[int]) -> PolicyRun:
    """The policy under contention and several channels, in the semantics of
    :mod:`fusionopt.model._events`: :func:`dispatch_program` run by the step programs' engine
    under :class:`PriorityChannels`; ``T`` is where the last forward ends, plus ``W``."""
    program = dispatch_program(problem, slices)
    channels = PriorityChannels(problem, slices, window, rank)
    clock, _ = run_program(program, channels)
    order = channels.order
    return PolicyRun(order, channels.start[order], np.asarray(channels.end)[order], clock + problem.profile.W)


TENSORS_READY = "tensors ready"
"""The gate the backward counts its tensors on, in reverse forward order."""


def dispatch_program(problem: Problem, slices: list[Chunk]) -> Program:
    """The step a priority policy runs in (:func:`_events`' semantics): the compute stream
    runs the backward in reverse forward order, publishing ``"tensors ready"`` as each ends (tensor
    ``n - value``'s slices are ready), then each tensor's update, after every slice of it
    has ended, and its forward. The collectives are the slices, in ``slices`` order: the
    policy, not the program, decides the order they run in."""
    profile = problem.profile
    n = profile.n
    program = Program("all-reduce", profile.sizes.tolist())
    ops = program.ops
    backward, update, forward = profile.backward.tolist(), profile.update.tolist(), profile.forward.tolist()
    for count, i in enumerate(range(n - 1, -1, -1), start=1):
        ops += [(COMPUTE, backward[i], ("backward", i, None)), (PUBLISH, TENSORS_READY, count)]
    of_tensor: list[list[int]] = [[] for _ in range(n)]
    for s, c in enumerate(slices):
        program.collective(ALL_REDUCE, s, c.nbytes, TENSORS_READY, n - c.tensor, 0.0, ("slice {}", s),
                           chunks=((c.tensor, c.lo, c.hi),))
        of_tensor[c.tensor].append(s)
    for i in range(n):
        ops.extend((WAIT, s) for s in of_tensor[i])
        ops += [(COMPUTE, update[i], ("update", i, None)), (MARK, FORWARD, i), (COMPUTE, forward[i], ("forward", i, None))]
    program.forward_mark = np.arange(n)
    program.forward_offset = np.zeros(n)
    return program


class PriorityChannels(SharedChannels):
    """A priority policy with its window as a channel policy of the step programs' engine: the
    scheduler posts the ready slice of best priority while the window allows, the library runs
    posted slices in the order posted on up to ``channels`` channels, each a latency phase and
    then a transfer sharing the bandwidth (:mod:`fusionopt.model._flights`); the stream computes
    at ``1 / contention`` while a slice is in flight, and the slices progress at
    ``1 / comm_contention`` while it computes. At one moment every slice that ends is
    counted before the scheduler decides. ``order`` holds the slices as posted, ``start`` and
    ``end`` their times (seconds, by slice)."""

    def __init__(self, problem: Problem, slices: list[Chunk], window: Window, rank: list[int]) -> None:
        n = problem.profile.n
        self.sizes = [c.nbytes for c in slices]
        sizes = np.array(self.sizes, dtype=np.int64)
        if problem.channels == 1:
            latency, transfer = problem.message_cost(sizes, [c.tensor for c in slices]), np.zeros(len(slices))
        else:
            alpha, beta = problem.cost.affine
            latency, transfer = np.where(sizes > 0, alpha, 0.0), beta * sizes.astype(np.float64)
        self.latency, self.transfer = latency.tolist(), transfer.tolist()
        super().__init__(problem.contention, problem.comm_contention,
                         tolerance(problem.profile.compute_time + float(latency.sum() + transfer.sum())), len(slices))
        self.window, self.rank, self.n = window, rank, n
        self.channels = problem.channels
        self.queue = ReadySlices(n, slices)
        self.library: deque[int] = deque()               # posted, waiting for a channel
        self.posted_count = self.posted_bytes = 0
        self.order: list[int] = []
        self.start = np.full(len(slices), np.inf)

    def publish(self, gate: str, value: int, time: float) -> None:
        """Tensor ``n - value``'s backward ended: its slices join the scheduler's queue."""
        tensor = self.n - value
        self.queue.release(self.rank[tensor], tensor)

    def _instant(self) -> None:
        """Every slice that ends now, then the scheduler's posts and the library's dispatches."""
        flights, clock = self.flights, self.clock
        progressed = True
        while progressed:
            progressed = False
            for s in self._landed():
                self.end[s] = clock
                self.posted_count -= 1
                self.posted_bytes -= self.sizes[s]
                progressed = True
            if progressed:
                continue                     # every event of this instant before a decision
            while self.queue and self.window(self.posted_count, self.posted_bytes):
                s = self.queue.take()
                self.order.append(s)
                self.library.append(s)
                self.posted_count += 1
                self.posted_bytes += self.sizes[s]
                progressed = True
            while self.library and len(flights) < self.channels:
                s = self.library.popleft()
                self.start[s] = clock
                flights.append(Flight(s, self.latency[s], self.transfer[s]))
                progressed = True
