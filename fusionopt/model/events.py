"""Event-driven simulation of the extensions of MODEL.md section 6.

Used by :func:`fusionopt.model.simulate` when a problem has ``copy_cost``, ``message_compute``,
``contention``, ``comm_contention`` or ``channels`` on. The plain model's recursion is a special case; tests
pin the two together with every extension off.

The compute stream runs a fixed list of tasks, each an amount of work in seconds at full
speed: the backward of the tensors in the ready order (``n-1 .. 0`` unless the profile's
``ready_order`` reorders tensors ready at one moment; each backward takes its tensor's ready
time less the one before, so every gradient is ready when the profile says, in the order it
says), each followed by the packing of the messages it makes ready when
``copy_on="compute"`` and the ``message_compute`` of each (plan order), then the updates and forwards gated by the sync rule,
with the profile's step parts where MODEL.md section 4 puts them. While at least one message
is in flight the stream progresses at ``1 / contention`` of full speed. The stream
*computes* while its current task has work left and every message it waits for has ended;
meanwhile every message in flight progresses at ``1 / comm_contention`` of full speed, in
its latency and its transfer phase alike.

A message is *ready* when the backward of every tensor it carries has ended (and its
work on the compute stream); it is *dispatched* in plan order, once ready and past its
release time, once the message before it has been dispatched and while fewer than
``channels`` messages are in flight. It then runs a latency phase (``alpha``, plus the packing ``copy_cost * S`` when it
runs on the channel) and a transfer phase (``beta * S`` seconds of exclusive bandwidth),
the transfers in flight sharing the bandwidth equally. With one channel the whole
``c(S)`` is the latency phase, so any cost model works.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fusionopt.model.flights import Flight, advance, fly, time_to_next, tolerance, transfers
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.timeline import ComputePiece, build_timeline, reduction_times

# Remaining work below this fraction of the problem's time scale counts as finished.


@dataclass
class _Task:
    kind: str                                      # "backward", "pack", "update", "forward" or a step part
    tensor: int                                    # forward index (packing: the backward's; a step part: -1)
    work: float                                    # seconds at full speed
    gate: set[int] = field(default_factory=set)   # messages that must be done first
    on_done: list[int] = field(default_factory=list)  # messages made ready when it ends
    message: int | None = None                     # the message a packing task packs


def _compute_tasks(problem: Problem, plan: Plan) -> list[_Task]:
    profile = problem.profile
    n = profile.n
    # The backward of tensor i makes ready the messages whose last tensor in the ready
    # order is i.
    order = profile.backward_order
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    made_ready: dict[int, list[int]] = {}
    for k, i in enumerate(order[np.maximum.reduceat(position[plan.tensor], plan.starts[:-1])].tolist()):
        made_ready.setdefault(i, []).append(k)
    # Compute-stream work of each message: its packing there and the work every message costs.
    packing = problem.compute_per_message(np.array([len(m.tensors) for m in plan.messages]),
                                          plan.message_bytes.astype(np.float64))
    backward = profile.backward_steps
    tasks: list[_Task] = []
    for p, i in enumerate(order.tolist()):
        ready = made_ready.get(i, [])
        tasks.append(_Task("backward", i, float(backward[p])))
        tasks[-1].on_done.extend(k for k in ready if packing[k] <= 0.0)
        for k in ready:
            if packing[k] > 0.0:
                tasks.append(_Task("pack", i, float(packing[k]), on_done=[k], message=k))
    carried_by: dict[int, set[int]] = {}
    for k, message in enumerate(plan.messages):
        for c in message.chunks:
            carried_by.setdefault(c.tensor, set()).add(k)
    everything = set(range(len(plan.messages)))
    if problem.sync == "barrier":
        # Whole-step work waits for every gradient (MODEL.md section 4; layerwise sync has none).
        for part in ("post_backward", "update_lump"):
            if getattr(profile, part):
                tasks.append(_Task(part, -1, getattr(profile, part), gate=everything))
        for i in range(n):
            tasks.append(_Task("update", i, float(profile.update[i]), gate=everything if i == 0 else set()))
        for i in range(n):
            tasks.append(_Task("forward", i, float(profile.forward[i])))
    else:
        for i in range(n):
            tasks.append(_Task("update", i, float(profile.update[i]), gate=carried_by[i]))
            tasks.append(_Task("forward", i, float(profile.forward[i])))
    if profile.host_overhead:
        tasks.append(_Task("host_overhead", -1, profile.host_overhead))
    return tasks


def _phases(problem: Problem, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Latency and transfer seconds of each message (see the module docstring)."""
    sizes = plan.message_bytes.astype(np.float64)
    packing = np.array([len(m.tensors) > 1 for m in plan.messages]) * problem.copy_cost * sizes
    if problem.copy_on != "channel":
        packing = np.zeros_like(sizes)
    if problem.channels == 1:
        return problem.cost(sizes) + packing, np.zeros_like(sizes)
    alpha, beta = problem.cost.affine
    return np.where(sizes > 0, alpha, 0.0) + packing, beta * sizes


def simulate_events(problem: Problem, plan: Plan, *, pieces: list | None = None):
    """The :class:`~fusionopt.model.timeline.Timeline` of ``plan`` under the extensions.

    Parameters
    ----------
    pieces : list, optional
        If given, one :class:`~fusionopt.model.timeline.ComputePiece` per compute task is
        appended to it in stream order: its start (seconds) is when the task is next on the
        stream and every message it waits for has ended, its end when its work is done.
        Recording changes no number of the timeline.
    """

    profile = problem.profile
    n_messages = len(plan.messages)
    latency, transfer = _phases(problem, plan)
    release = plan.release
    tasks = _compute_tasks(problem, plan)
    slowdown = problem.contention
    comm_slowdown = problem.comm_contention

    ready = np.full(n_messages, np.inf)
    start = np.full(n_messages, np.inf)
    end = np.full(n_messages, np.inf)
    done: set[int] = set()
    flights: list[Flight] = []
    phi = np.zeros(profile.n)
    next_dispatch = 0
    task_index, remaining = 0, tasks[0].work
    task_start = None            # when the current task began computing (its gate met)
    clock = 0.0
    finished_at = None
    tol = tolerance(profile.compute_time + float(latency.sum() + transfer.sum()))

    while True:
        # Instantaneous steps: finish zero-work tasks, dispatch what may start.
        progressed = True
        while progressed:
            progressed = False
            if task_index < len(tasks):
                task = tasks[task_index]
                if task_start is None and task.gate <= done:
                    task_start = clock
                if task.gate <= done and remaining <= 0.0:
                    for k in task.on_done:
                        ready[k] = clock
                    if pieces is not None:
                        pieces.append(ComputePiece(task.kind, task.tensor, task_start, clock, task.message))
                    task_start = None
                    task_index += 1
                    if task_index == len(tasks):
                        finished_at = clock
                    else:
                        remaining = tasks[task_index].work
                        if tasks[task_index].kind == "forward":
                            phi[tasks[task_index].tensor] = clock
                    progressed = True
            while (next_dispatch < n_messages and ready[next_dispatch] <= clock
                   and release[next_dispatch] <= clock and len(flights) < problem.channels):
                start[next_dispatch] = clock
                flights.append(Flight(next_dispatch, latency[next_dispatch], transfer[next_dispatch]))
                next_dispatch += 1
                progressed = True
            for flight in [f for f in flights if f.done]:
                flights.remove(flight)
                end[flight.message] = clock
                done.add(flight.message)
                progressed = True
        if finished_at is not None:
            break

        # The next event: a task ends, a latency phase ends, a transfer ends.
        busy = bool(flights)
        rate = 1.0 / slowdown if busy else 1.0
        computing = task_index < len(tasks) and tasks[task_index].gate <= done
        # Channel seconds per second: the messages slow while the stream computes.
        pace = 1.0 / comm_slowdown if computing else 1.0
        candidates = []
        if computing:
            candidates.append(remaining / rate)
        share = transfers(flights)
        candidates.extend(seconds / pace for seconds in time_to_next(flights, share))
        if (next_dispatch < n_messages and ready[next_dispatch] <= clock
                and len(flights) < problem.channels and release[next_dispatch] > clock):
            candidates.append(release[next_dispatch] - clock)
        if not candidates:
            raise AssertionError("simulation stalled: a gate waits for a message that never runs")
        step = min(candidates)
        clock += step
        if computing:
            remaining = advance(remaining, step * rate, tol)
        fly(flights, step * pace, share, tol)

    reduced = reduction_times(plan, end, profile.n)
    return build_timeline(problem, plan, float(finished_at), ready, start, end, reduced, phi)

