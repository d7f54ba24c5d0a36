"""Priority schedulers for layerwise sync: P3 and ByteScheduler (docs/methods.md, sections p3 and bytescheduler).

Both cut gradient tensors into slices and send the ready slice of best priority first;
priority is the forward index (tensor 0 first, since the next forward needs it first) and,
within a tensor, byte order. Both are dynamic policies: each function simulates its
policy event by event and emits the static :class:`~fusionopt.model.plan.Plan` of slices
in the order they were handed to the channel, one slice per message, which the simulator
then judges like every other plan (MODEL.md section 3).

* :func:`p3` (Jayarajan et al., SysML 2019): slices of ``slice_parameters`` parameters;
  whenever a channel is free, the ready slice of best priority is sent (non-preemptive
  per slice).
* ByteScheduler (Peng et al., SOSP 2019; :mod:`fusionopt.solvers.bytescheduler`): tensors
  above the partition size are cut into slices; a credit window of parameters in flight
  (below), on top of Horovod's cycle-tick fusion or, with that turned off, with this
  module's scheduler.

The credit, as we model it (our reconstruction)
------------------------------------------------
ByteScheduler's core loop (``bytescheduler/common/bytecore.py``) pops the ready task of
best priority and hands it to the communication library while its credit is positive; the
credit is the number of *unacknowledged* parameters it allows: it drops by a task's size
when the task is handed over and comes back when the task completes. We keep exactly that rule: the scheduler
**posts** the ready slice of best priority while the parameters posted and not yet reduced
are fewer than ``credit_parameters`` (so the last slice posted may overshoot the credit);
the library runs posted slices in the order posted, on one channel one at a time
(MODEL.md section 3) and on ``K`` channels up to ``K`` at once (section 6). A slice once
posted cannot be overtaken: a higher-priority gradient that becomes ready later queues
behind everything already posted, up to about a credit's worth of parameters. On one
channel the credit therefore trades priority responsiveness for fewer scheduling points:
a credit of one partition behaves like P3 with partition-sized slices (exactly so when
every slice is a full partition), a credit of the whole model like WFBP in slices. A
credit smaller than one partition is refused rather than clamped. Events at the same instant (a gradient becoming
ready, a slice completing) are all applied before the scheduler posts.

On ``K > 1`` channels the credit bounds the parameters in flight across the channels, with
one exception: it never holds a ready slice back from a free channel (the scheduler may
always post while fewer than ``K`` slices are posted and unfinished). A static plan could
not express such idle time anyway (the simulator dispatches a message as soon as a channel
frees), and with this rule the simulator reproduces the policy's timeline: exactly on the
plain model, where the policy's recursion is the simulator's term for term (checked on
every call), and to rounding under the extensions (tested). On one channel the exception
never applies: the credit is only exhausted by slices queued or running. P3 is the same
scheduler with no credit: it posts only to a free channel. ``stats["policy_iteration_time"]``
is the policy's own ``T``.

Extensions: every message carries one tensor, so a copy cost never applies (nothing is
packed). With contention or several channels the policies are simulated with the event
semantics of :mod:`fusionopt.model.events` (the backward slows while a slice is in flight,
so ready times depend on the schedule); tests pin that simulation to
:func:`~fusionopt.model.simulate`. Barrier sync is refused: these schedulers exist to let
the next forward start tensor by tensor, which a barrier rules out.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fusionopt.model.flights import Flight, advance, fly, time_to_next, tolerance, transfers
from fusionopt.model.plan import Chunk, Message, Plan
from fusionopt.model.problem import Problem
from fusionopt.model.sync import layerwise_forward
from fusionopt.solvers.result import Result, finish
from fusionopt.solvers.needs import Needs, declares

P3_SLICE_PARAMETERS = 40_000
# Remaining work below this fraction of the problem's time scale counts as finished
# (the rule of fusionopt.model.events).

# A window rule: may the scheduler post another slice, given the number of slices and the
# bytes posted and not yet reduced?
Window = Callable[[int, int], bool]


# ---------------------------------------------------------------------------- validation
def _whole_parameters(label: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a positive whole number of parameters, got {value!r}")
    if not math.isfinite(value) or value != int(value) or value <= 0:
        raise ValueError(f"{label} must be a positive whole number of parameters, got {value!r}")
    return int(value)


def _require_layerwise(problem: Problem, method: str) -> None:
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    problem.require_layerwise(method)


# ---------------------------------------------------------------------------- slicing
def p3_slices(problem: Problem, slice_parameters: int) -> list[Chunk]:
    """P3's slices: each tensor cut into pieces of ``slice_parameters`` parameters
    (``slice_parameters * dtype_bytes`` bytes; the last piece of a tensor may be shorter),
    in priority order (forward index, then byte order).

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([12, 4], [0.0] * 2, [1e-3] * 2)   # float32: 3 and 1 parameters
    >>> [(c.tensor, c.lo, c.hi) for c in p3_slices(Problem(profile, AlphaBeta(0, 1e-9)), 2)]
    [(0, 0, 8), (0, 8, 12), (1, 0, 4)]
    """
    slice_parameters = _whole_parameters("slice_parameters", slice_parameters)
    profile = problem.profile
    step = slice_parameters * profile.dtype_bytes
    return [Chunk(i, lo, min(lo + step, size))
            for i, size in enumerate(profile.sizes.tolist()) for lo in range(0, size, step)]


# ---------------------------------------------------------------------------- the policies
@dataclass(frozen=True)
class _Schedule:
    """A dynamic policy's own timeline: slices in the order posted, with their dispatch
    and end times (seconds, same order) and ``T``."""

    order: list[int]
    start: np.ndarray
    end: np.ndarray
    iteration_time: float

    def plan(self, slices: list[Chunk]) -> Plan:
        return Plan(tuple(Message((slices[s],)) for s in self.order))


def _schedule(problem: Problem, slices: list[Chunk], window: Window, rank: list[int] | None = None) -> _Schedule:
    """Simulate the priority policy with ``window`` on ``problem``: the exact one-channel
    recursion when it applies, the event semantics of the extensions otherwise. ``rank[i]``
    is tensor ``i``'s priority (lower first; default the forward index)."""
    rank = list(range(problem.profile.n)) if rank is None else rank
    if problem.channels == 1 and problem.contention == 1.0:
        return _serial_schedule(problem, slices, window, rank)
    return _event_schedule(problem, slices, window, rank)


def _tensor_slices(n: int, slices: list[Chunk]) -> tuple[list[int], list[int]]:
    # Slices come in priority order, so each tensor's are consecutive.
    first, stop = [0] * n, [0] * n
    for s, c in enumerate(slices):
        if s == 0 or slices[s - 1].tensor != c.tensor:
            first[c.tensor] = s
        stop[c.tensor] = s + 1
    return first, stop


def _next_slice(heap: list[tuple[int, int]], following: list[int], stop: list[int]) -> int:
    """The next slice of the ready tensor of best priority (``heap`` holds ``(rank, tensor)``
    of ready tensors with slices left); the tensor leaves the heap with its last slice."""
    i = heap[0][1]
    s = following[i]
    following[i] += 1
    if following[i] == stop[i]:
        heapq.heappop(heap)
    return s


def _serial_schedule(problem: Problem, slices: list[Chunk], window: Window, rank: list[int]) -> _Schedule:
    """One channel, no contention: ready times are fixed, and a posted slice's times follow
    at once from MODEL.md section 3's ``start_k = max(R_k, end_{k-1})`` (the library runs
    posted slices in order), computed exactly as the simulator does."""
    profile = problem.profile
    n = profile.n
    ready = profile.ready_times
    sizes = np.array([c.nbytes for c in slices], dtype=np.int64)
    durations = problem.cost(sizes)
    first, stop = _tensor_slices(n, slices)
    releases = sorted(range(n), key=lambda i: ready[i])
    heap: list[tuple[int, int]] = []         # (rank, tensor): ready tensors with slices left
    following = list(first)
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
            heapq.heappush(heap, (rank[releases[released]], releases[released]))
            released += 1
        while outstanding and outstanding[0][0] <= clock:
            outstanding_bytes -= outstanding.popleft()[1]
        while heap and window(len(outstanding), outstanding_bytes):
            s = _next_slice(heap, following, stop)
            k = len(order)
            order.append(s)
            start[k] = max(ready[slices[s].tensor], channel_free)
            end[k] = channel_free = start[k] + durations[s]
            outstanding.append((end[k], int(sizes[s])))
            outstanding_bytes += int(sizes[s])
        upcoming = [float(ready[releases[released]])] if released < n else []
        if outstanding:
            upcoming.append(float(outstanding[0][0]))
        if upcoming:
            clock = min(upcoming)
        elif len(order) < len(slices):
            raise AssertionError("priority schedule stalled with slices left and no event to come")

    reduced = np.full(n, -np.inf)
    for k, s in enumerate(order):
        reduced[slices[s].tensor] = max(reduced[slices[s].tensor], end[k])
    return _Schedule(order, start, end, layerwise_forward(profile, reduced)[1])


def _event_schedule(problem: Problem, slices: list[Chunk], window: Window, rank: list[int]) -> _Schedule:
    """The policy under contention and several channels, in the semantics of
    :mod:`fusionopt.model.events`: the compute stream runs the backward ``n-1 .. 0`` (a
    tensor's slices are ready when its backward ends), then each tensor's update, gated by
    its last slice, and forward, all at ``1 / contention`` speed while a slice is in
    flight; a dispatched slice runs a latency phase, then a transfer phase sharing the
    bandwidth with the transfers in flight."""
    profile = problem.profile
    n = profile.n
    channels = problem.channels
    sizes = np.array([c.nbytes for c in slices], dtype=np.int64)
    if channels == 1:
        latency, transfer = problem.cost(sizes), np.zeros(len(slices))
    else:
        alpha, beta = problem.cost.affine
        latency, transfer = np.where(sizes > 0, alpha, 0.0), beta * sizes.astype(np.float64)
    # Compute tasks: (work in seconds, tensor made ready, tensor whose slices gate it).
    tasks = [(float(profile.backward[i]), i, None) for i in range(n - 1, -1, -1)]
    for i in range(n):
        tasks.append((float(profile.update[i]), None, i))
        tasks.append((float(profile.forward[i]), None, None))
    first, stop = _tensor_slices(n, slices)
    unreduced = [stop[i] - first[i] for i in range(n)]
    following = list(first)
    heap: list[tuple[int, int]] = []
    library: deque[int] = deque()            # posted, waiting for a channel
    flights: list[Flight] = []
    posted_count = posted_bytes = 0
    order: list[int] = []
    start = np.full(len(slices), np.inf)
    end = np.full(len(slices), np.inf)
    tol = tolerance(profile.compute_time + float(latency.sum() + transfer.sum()))
    task_index, remaining = 0, tasks[0][0]
    clock = 0.0

    def gate_open() -> bool:
        gate = tasks[task_index][2]
        return gate is None or unreduced[gate] == 0

    while True:
        progressed = True
        while progressed:
            progressed = False
            while task_index < len(tasks) and remaining <= 0.0 and gate_open():
                made_ready = tasks[task_index][1]
                if made_ready is not None:
                    heapq.heappush(heap, (rank[made_ready], made_ready))
                task_index += 1
                if task_index < len(tasks):
                    remaining = tasks[task_index][0]
                progressed = True
            for flight in [f for f in flights if f.done]:
                flights.remove(flight)
                s = flight.message
                end[s] = clock
                posted_count -= 1
                posted_bytes -= int(sizes[s])
                unreduced[slices[s].tensor] -= 1
                progressed = True
            if progressed:
                continue                     # every event of this instant before a decision
            while heap and window(posted_count, posted_bytes):
                s = _next_slice(heap, following, stop)
                order.append(s)
                library.append(s)
                posted_count += 1
                posted_bytes += int(sizes[s])
                progressed = True
            while library and len(flights) < channels:
                s = library.popleft()
                start[s] = clock
                flights.append(Flight(s, latency[s], transfer[s]))
                progressed = True
        if task_index == len(tasks):
            break
        rate = 1.0 / problem.contention if flights else 1.0
        computing = gate_open()
        candidates = [remaining / rate] if computing else []
        share = transfers(flights)
        candidates.extend(time_to_next(flights, share))
        if not candidates:
            raise AssertionError("priority schedule stalled: a gate waits for a slice that never runs")
        step = min(candidates)
        clock += step
        if computing:
            remaining = advance(remaining, step * rate, tol)
        fly(flights, step, share, tol)
    return _Schedule(order, start[order], end[order], clock + profile.W)


def _p3_window(channels: int) -> Window:
    # Post only when a channel is free: nothing ever queues in the library.
    return lambda count, nbytes: count < channels


def _credit_window(channels: int, credit_bytes: int) -> Window:
    # A free channel always takes a ready slice; beyond that the credit bounds the bytes
    # posted and not yet reduced.
    return lambda count, nbytes: count < channels or nbytes < credit_bytes


def check_message_ends(problem: Problem, result: Result, ends: list[float], method: str) -> None:
    """A policy that timed its own messages (to return a credit, to start a cycle) must agree
    with the simulator that judges its plan: on the plain model, exactly."""
    if not problem.extensions and not np.array_equal(result.timeline.message_end, np.asarray(ends)):
        raise AssertionError(f"{method}: the simulator does not reproduce the policy's message ends")


def _check_reproduced(problem: Problem, result: Result, schedule: _Schedule, method: str) -> None:
    # On the plain model the policy's recursion is the simulator's, term for term.
    if problem.extensions:
        return
    timeline = result.timeline
    if not (np.array_equal(timeline.message_start, schedule.start)
            and np.array_equal(timeline.message_end, schedule.end)
            and timeline.iteration_time == schedule.iteration_time):
        raise AssertionError(f"{method}: the simulator does not reproduce the policy's timeline")


# ---------------------------------------------------------------------------- P3
@declares(Needs(layerwise=True))
def p3(problem: Problem, *, slice_parameters: int = P3_SLICE_PARAMETERS) -> Result:
    """P3 (priority-based parameter propagation, Jayarajan et al. 2019) for layerwise sync.

    Every tensor is cut into slices of ``slice_parameters`` parameters
    (``slice_parameters * profile.dtype_bytes`` bytes; the last slice of a tensor may be
    shorter), each slice its own message. Priority is the forward index (tensor 0 first),
    then byte order within a tensor. Whenever a channel is free, the ready slice of best
    priority is sent and runs to its end (non-preemptive per slice); if none is ready, the
    channel waits for the next gradient. The policy is simulated and emitted as the plan
    of slices in the order sent; on the plain model the simulator reproduces its timeline
    exactly (checked on every call). See the module docstring for the extensions.

    Parameters
    ----------
    slice_parameters : int
        Parameters per slice (P3's default 40,000).

    Returns
    -------
    Result
        ``stats``: ``slice_parameters``, ``slice_bytes``, ``slices`` (the number of
        messages) and ``policy_iteration_time`` (the policy's own ``T``, seconds).

    Raises
    ------
    ValueError
        For ``sync="barrier"``, or a ``slice_parameters`` that is not a positive whole number.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``, slices of 250,000 float32 parameters (1 MB,
    2 ms each): t2's first slice runs 1-3 ms; at 3 ms t1 is ready and overtakes t2's second
    slice (3-5, then 5-7); t0's four slices run 7-15; ``T = 15 + 3 = 18`` ms.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = p3(Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise"), slice_parameters=250_000)
    >>> result.plan.groups()
    [[2], [1], [2], [0], [0], [0], [0]]
    >>> (result.timeline.message_start * 1e3).round(9).tolist(), round(result.iteration_time * 1e3, 9)
    ([1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0], 18.0)

    Without startup cost P3 meets the fluid bound of MODEL.md section 7 (13 ms).

    >>> free = p3(Problem(profile, AlphaBeta(0.0, 1e-9), sync="layerwise"), slice_parameters=250_000)
    >>> round(free.iteration_time * 1e3, 9), str(free.status)
    (13.0, 'OPTIMAL')
    """
    started = time.perf_counter()
    _require_layerwise(problem, "p3")
    slices = p3_slices(problem, slice_parameters)
    schedule = _schedule(problem, slices, _p3_window(problem.channels))
    result = finish(problem, schedule.plan(slices), "p3", started, space="any", stats={
        "slice_parameters": int(slice_parameters),
        "slice_bytes": int(slice_parameters) * problem.profile.dtype_bytes,
        "slices": len(slices),
        "policy_iteration_time": schedule.iteration_time,
    })
    _check_reproduced(problem, result, schedule, "p3")
    return result
