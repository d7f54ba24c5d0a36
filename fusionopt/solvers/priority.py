"""Priority schedulers for layerwise sync: P3 and ByteScheduler (PAPERS.md, "Baselines").

Both cut gradient tensors into slices and send the ready slice of best priority first;
priority is the forward index (tensor 0 first, since the next forward needs it first) and,
within a tensor, byte order. Both are dynamic policies: each function simulates its
policy event by event and emits the static :class:`~fusionopt.model.plan.Plan` of slices
in the order they were handed to the channel, one slice per message, which the simulator
then judges like every other plan (MODEL.md section 3).

* :func:`p3` (Jayarajan et al., SysML 2019): slices of ``slice_parameters`` parameters;
  whenever a channel is free, the ready slice of best priority is sent (non-preemptive
  per slice).
* :func:`bytescheduler` (Peng et al., SOSP 2019): tensors above the partition size are
  cut into nearly equal slices; a credit window of parameters in flight (below).
* :func:`bytescheduler_tuned`: partition and credit searched on the model, standing in for
  ByteScheduler's auto-tuner.

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
from typing import Any, Callable, Iterable

import numpy as np

from fusionopt.model.plan import Chunk, Message, Plan
from fusionopt.model.problem import Problem
from fusionopt.model.timeline import simulate
from fusionopt.solvers.result import Result, finish

P3_SLICE_PARAMETERS = 40_000
BYTESCHEDULER_PRESETS = {
    "default": (1_000_000, 4_000_000),   # BYTESCHEDULER_PARTITION, BYTESCHEDULER_CREDIT
    "advised": (8_000_000, 16_000_000),  # the paper's advice for all-reduce
}
TUNING_PARTITIONS = tuple(2**k for k in range(16, 25))     # 65,536 .. 16,777,216 parameters
TUNING_CREDIT_MULTIPLES = (1, 2, 4, 8)

# Remaining work below this fraction of the problem's time scale counts as finished
# (the rule of fusionopt.model.events).
_EPS = 1e-13

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


def _check_credit(partition: int, credit: int) -> None:
    if credit < partition:
        raise ValueError(
            f"credit_parameters = {credit} is smaller than one partition (partition_parameters = "
            f"{partition}); the credit must admit at least one partition"
        )


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


def bytescheduler_slices(problem: Problem, partition_parameters: int) -> list[Chunk]:
    """ByteScheduler's slices: a tensor of more than ``partition_parameters`` parameters is
    cut into ``ceil(size / partition)`` nearly equal slices (their parameter counts differ
    by at most one; a tensor whose size is not a whole number of elements ends in a partial
    element), a smaller tensor is one slice; in priority order.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([40, 8], [0.0] * 2, [1e-3] * 2)   # float32: 10 and 2 parameters
    >>> [(c.tensor, c.lo, c.hi) for c in bytescheduler_slices(Problem(profile, AlphaBeta(0, 1e-9)), 4)]
    [(0, 0, 12), (0, 12, 24), (0, 24, 40), (1, 0, 8)]
    """
    partition_parameters = _whole_parameters("partition_parameters", partition_parameters)
    profile = problem.profile
    dtype = profile.dtype_bytes
    partition = partition_parameters * dtype
    slices = []
    for i, size in enumerate(profile.sizes.tolist()):
        pieces = -(-size // partition)
        elements = -(-size // dtype)
        bounds = [dtype * (j * elements // pieces) for j in range(pieces)] + [size]
        slices.extend(Chunk(i, lo, hi) for lo, hi in zip(bounds, bounds[1:]))
    return slices


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


def _schedule(problem: Problem, slices: list[Chunk], window: Window) -> _Schedule:
    """Simulate the priority policy with ``window`` on ``problem``: the exact one-channel
    recursion when it applies, the event semantics of the extensions otherwise."""
    if problem.channels == 1 and problem.contention == 1.0:
        return _serial_schedule(problem, slices, window)
    return _event_schedule(problem, slices, window)


def _tensor_slices(n: int, slices: list[Chunk]) -> tuple[list[int], list[int]]:
    # Slices come in priority order, so each tensor's are consecutive.
    first, stop = [0] * n, [0] * n
    for s, c in enumerate(slices):
        if s == 0 or slices[s - 1].tensor != c.tensor:
            first[c.tensor] = s
        stop[c.tensor] = s + 1
    return first, stop


def _serial_schedule(problem: Problem, slices: list[Chunk], window: Window) -> _Schedule:
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
    heap: list[int] = []                     # ready tensors with slices left, by priority
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
            heapq.heappush(heap, releases[released])
            released += 1
        while outstanding and outstanding[0][0] <= clock:
            outstanding_bytes -= outstanding.popleft()[1]
        while heap and window(len(outstanding), outstanding_bytes):
            i = heap[0]
            s = following[i]
            following[i] += 1
            if following[i] == stop[i]:
                heapq.heappop(heap)
            k = len(order)
            order.append(s)
            start[k] = max(ready[i], channel_free)
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
    forward_clock = profile.B
    for i in range(n):
        forward_clock = max(forward_clock, reduced[i]) + profile.update[i]
        phi = forward_clock
        forward_clock += profile.forward[i]
    return _Schedule(order, start, end, float(phi + profile.forward[-1]))


def _event_schedule(problem: Problem, slices: list[Chunk], window: Window) -> _Schedule:
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
    heap: list[int] = []
    library: deque[int] = deque()            # posted, waiting for a channel
    flights: list[list[float]] = []          # [slice, latency left, transfer left]
    posted_count = posted_bytes = 0
    order: list[int] = []
    start = np.full(len(slices), np.inf)
    end = np.full(len(slices), np.inf)
    tolerance = _EPS * (profile.compute_time + float(latency.sum() + transfer.sum()) + 1e-300)
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
                    heapq.heappush(heap, made_ready)
                task_index += 1
                if task_index < len(tasks):
                    remaining = tasks[task_index][0]
                progressed = True
            for flight in [f for f in flights if f[1] <= 0.0 and f[2] <= 0.0]:
                flights.remove(flight)
                s = int(flight[0])
                end[s] = clock
                posted_count -= 1
                posted_bytes -= int(sizes[s])
                unreduced[slices[s].tensor] -= 1
                progressed = True
            if progressed:
                continue                     # every event of this instant before a decision
            while heap and window(posted_count, posted_bytes):
                i = heap[0]
                s = following[i]
                following[i] += 1
                if following[i] == stop[i]:
                    heapq.heappop(heap)
                order.append(s)
                library.append(s)
                posted_count += 1
                posted_bytes += int(sizes[s])
                progressed = True
            while library and len(flights) < channels:
                s = library.popleft()
                start[s] = clock
                flights.append([s, float(latency[s]), float(transfer[s])])
                progressed = True
        if task_index == len(tasks):
            break
        rate = 1.0 / problem.contention if flights else 1.0
        computing = gate_open()
        candidates = [remaining / rate] if computing else []
        share = sum(1 for f in flights if f[1] <= 0.0)
        candidates.extend(f[1] if f[1] > 0.0 else f[2] * share for f in flights)
        if not candidates:
            raise AssertionError("priority schedule stalled: a gate waits for a slice that never runs")
        step = min(candidates)
        clock += step
        if computing:
            remaining = _advance(remaining, step * rate, tolerance)
        for f in flights:
            if f[1] > 0.0:
                f[1] = _advance(f[1], step, tolerance)
            else:
                f[2] = _advance(f[2], step / share, tolerance)
    return _Schedule(order, start[order], end[order], clock)


def _advance(amount: float, progress: float, tolerance: float) -> float:
    left = amount - progress
    return 0.0 if left <= tolerance else left


def _p3_window(channels: int) -> Window:
    # Post only when a channel is free: nothing ever queues in the library.
    return lambda count, nbytes: count < channels


def _credit_window(channels: int, credit_bytes: int) -> Window:
    # A free channel always takes a ready slice; beyond that the credit bounds the bytes
    # posted and not yet reduced.
    return lambda count, nbytes: count < channels or nbytes < credit_bytes


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


# ---------------------------------------------------------------------------- ByteScheduler
def _bytescheduler_schedule(problem: Problem, partition: int, credit: int,
                            slices: list[Chunk] | None = None) -> tuple[list[Chunk], _Schedule]:
    if slices is None:
        slices = bytescheduler_slices(problem, partition)
    credit_bytes = credit * problem.profile.dtype_bytes
    return slices, _schedule(problem, slices, _credit_window(problem.channels, credit_bytes))


def _bytescheduler_stats(partition: int, credit: int, slices: list[Chunk], schedule: _Schedule) -> dict[str, Any]:
    return {
        "partition_parameters": partition,
        "credit_parameters": credit,
        "slices": len(slices),
        "policy_iteration_time": schedule.iteration_time,
    }


def bytescheduler(
    problem: Problem,
    *,
    partition_parameters: int = BYTESCHEDULER_PRESETS["default"][0],
    credit_parameters: int = BYTESCHEDULER_PRESETS["default"][1],
    preset: str | None = None,
) -> Result:
    """ByteScheduler (Peng et al. 2019) for layerwise sync: partitions, priority, credit.

    A tensor of more than ``partition_parameters`` parameters is cut into
    ``ceil(size / partition)`` nearly equal slices (:func:`bytescheduler_slices`), each
    slice its own message; priority is the forward index, then byte order. The scheduler
    posts the ready slice of best priority to the communication library while the
    parameters posted and not yet reduced are fewer than ``credit_parameters``; the library
    runs posted slices in the order posted, and a slice once posted is never overtaken.
    This credit rule is **our reconstruction** (module docstring); with several channels
    the credit bounds the parameters in flight across them, but never holds a ready slice
    back from a free channel.

    Parameters
    ----------
    partition_parameters : int
        Largest slice, in parameters (``BYTESCHEDULER_PARTITION``, default 1,000,000).
    credit_parameters : int
        Parameters posted and not yet reduced (``BYTESCHEDULER_CREDIT``, default 4,000,000);
        at least one partition (a smaller credit is an error, not clamped).
    preset : {None, "default", "advised"}
        ``"advised"``: 8,000,000 / 16,000,000, the paper's advice for all-reduce;
        ``"default"``: 1,000,000 / 4,000,000. A preset sets both values; passing a
        different value with it is an error.

    Returns
    -------
    Result
        ``stats``: ``partition_parameters``, ``credit_parameters``, ``preset``,
        ``slices`` and ``policy_iteration_time`` (seconds).

    Raises
    ------
    ValueError
        For ``sync="barrier"``, an unknown preset, a value that is not a positive whole
        number of parameters, or a credit smaller than one partition.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``, partitions of 250,000 float32 parameters
    (1 MB, 2 ms a slice) and a credit of two. At 1 ms both of t2's slices are posted
    (1-3, 3-5); t1, ready at 3 ms, queues behind them (5-7) where P3 would let it overtake;
    t0's slices follow, 7-15 ms.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    >>> result = bytescheduler(problem, partition_parameters=250_000, credit_parameters=500_000)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9)
    ([[2], [2], [1], [0], [0], [0], [0]], 18.0)

    With the defaults no tensor is split (the largest holds 1M parameters): WFBP's order.

    >>> round(bytescheduler(problem).iteration_time * 1e3, 9)
    14.0
    >>> bytescheduler(problem, preset="tuned")
    Traceback (most recent call last):
    ...
    ValueError: unknown preset 'tuned': choose 'default' or 'advised'
    """
    started = time.perf_counter()
    _require_layerwise(problem, "bytescheduler")
    defaults = BYTESCHEDULER_PRESETS["default"]
    if preset is not None:
        if preset not in BYTESCHEDULER_PRESETS:
            raise ValueError(f"unknown preset {preset!r}: choose 'default' or 'advised'")
        for label, value, default in (("partition_parameters", partition_parameters, defaults[0]),
                                      ("credit_parameters", credit_parameters, defaults[1])):
            if value != default:
                raise ValueError(f"preset={preset!r} sets {label}; do not pass {label}={value!r} with it")
        partition_parameters, credit_parameters = BYTESCHEDULER_PRESETS[preset]
    partition = _whole_parameters("partition_parameters", partition_parameters)
    credit = _whole_parameters("credit_parameters", credit_parameters)
    _check_credit(partition, credit)
    slices, schedule = _bytescheduler_schedule(problem, partition, credit)
    stats = _bytescheduler_stats(partition, credit, slices, schedule)
    stats["preset"] = preset
    result = finish(problem, schedule.plan(slices), "bytescheduler", started, space="any", stats=stats)
    _check_reproduced(problem, result, schedule, "bytescheduler")
    return result


def bytescheduler_tuned(
    problem: Problem,
    *,
    partitions: Iterable[int] | None = None,
    credits: Iterable[int] | None = None,
) -> Result:
    """ByteScheduler with partition and credit searched on the model.

    ByteScheduler's auto-tuner tries settings on the hardware for a few steps each; here
    every candidate is scored by :func:`~fusionopt.model.simulate` on ``problem`` and the
    best is kept (the first best in the order below: ties keep the earlier one). Candidates,
    in order: ByteScheduler's defaults (1M, 4M) and the advised preset (8M, 16M), where its
    tuner starts, so the result is never worse than :func:`bytescheduler` with either; then
    the grid ``partitions x credits`` by increasing partition and credit, without pairs
    whose credit is smaller than the partition.

    Parameters
    ----------
    partitions : iterable of int, optional
        Partition sizes in parameters; default the powers of two ``2^16 .. 2^24``
        (65,536 to 16,777,216).
    credits : iterable of int, optional
        Credits in parameters, tried with every partition they are not smaller than;
        default ``partition x {1, 2, 4, 8}`` for each partition (36 pairs with the
        default partitions, 38 candidates in all).

    Returns
    -------
    Result
        ``stats``: the chosen ``partition_parameters`` and ``credit_parameters``,
        ``evaluated`` (candidates simulated), ``slices`` and ``policy_iteration_time``
        of the chosen setting, and ``default_iteration_time``
        (seconds, ByteScheduler's defaults).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``: tensor 0 is ready last, so no slicing
    lets it go earlier, and every slice costs a startup: the defaults (no tensor split,
    WFBP's order, 14 ms) are the best of the 38 candidates.

    >>> from fusionopt.model import AlphaBeta, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> tuned = bytescheduler_tuned(Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise"))
    >>> round(tuned.iteration_time * 1e3, 9), tuned.stats["evaluated"]
    (14.0, 38)
    >>> tuned.stats["partition_parameters"], tuned.stats["credit_parameters"]
    (1000000, 4000000)
    """
    started = time.perf_counter()
    _require_layerwise(problem, "bytescheduler-tuned")
    if partitions is None:
        partition_grid = list(TUNING_PARTITIONS)
    else:
        partition_grid = sorted({_whole_parameters("partitions", p) for p in partitions})
        if not partition_grid:
            raise ValueError("partitions is empty: give at least one partition size")
    if credits is None:
        pairs = [(p, p * m) for p in partition_grid for m in TUNING_CREDIT_MULTIPLES]
    else:
        credit_grid = sorted({_whole_parameters("credits", c) for c in credits})
        if not credit_grid:
            raise ValueError("credits is empty: give at least one credit")
        pairs = [(p, c) for p in partition_grid for c in credit_grid if c >= p]
        if not pairs:
            raise ValueError(
                f"no credit in {credit_grid} is at least one of the partitions {partition_grid}: "
                f"the credit must admit at least one partition"
            )
    candidates = list(dict.fromkeys(list(BYTESCHEDULER_PRESETS.values()) + pairs))

    sliced: dict[int, list[Chunk]] = {}
    best: tuple[float, int, int, Plan, list[Chunk], _Schedule] | None = None
    default_time = math.nan
    for partition, credit in candidates:
        if partition not in sliced:
            sliced[partition] = bytescheduler_slices(problem, partition)
        slices, schedule = _bytescheduler_schedule(problem, partition, credit, sliced[partition])
        plan = schedule.plan(slices)
        iteration_time = simulate(problem, plan, validate=False).iteration_time
        if (partition, credit) == BYTESCHEDULER_PRESETS["default"]:
            default_time = iteration_time
        if best is None or iteration_time < best[0]:
            best = (iteration_time, partition, credit, plan, slices, schedule)
    _, partition, credit, plan, slices, schedule = best
    stats = _bytescheduler_stats(partition, credit, slices, schedule)
    stats.update(evaluated=len(candidates), default_iteration_time=default_time)
    result = finish(problem, plan, "bytescheduler-tuned", started, space="any", stats=stats)
    _check_reproduced(problem, result, schedule, "bytescheduler-tuned")
    return result
