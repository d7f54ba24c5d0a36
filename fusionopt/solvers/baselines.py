"""Baseline schedules every comparison includes (PAPERS.md, "Baselines").

Each is a plain function ``f(problem, *, options) -> Result``; the plan it builds is
re-evaluated by the simulator (:func:`fusionopt.solvers.result.finish`). All of them emit
fusion plans: whole tensors, contiguous in backward order, in backward order.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.solvers.result import Result, finish

MiB = 1024 * 1024


def _positive_bytes(label: str, value: float) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of bytes, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise ValueError(f"{label} must be a positive, finite number of bytes, got {value!r}")
    return int(value)


def _positive_seconds(label: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of seconds, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise ValueError(f"{label} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _backward_order(problem: Problem) -> list[int]:
    return list(problem.profile.ready_order)


def wfbp(problem: Problem) -> Result:
    """Wait-free backpropagation: one message per tensor, in backward order.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``: 14 ms, and optimal.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> r = wfbp(Problem(profile, AlphaBeta(1e-3, 1e-9)))
    >>> round(r.iteration_time * 1e3, 9), r.num_messages
    (14.0, 3)
    """
    started = time.perf_counter()
    return finish(problem, Plan.per_tensor(problem.profile), "wfbp", started)


def single(problem: Problem) -> Result:
    """SyncEASGD: all gradients in one message after the backward.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(single(Problem(profile, AlphaBeta(3e-3, 1e-9))).iteration_time * 1e3, 9)
    19.0
    """
    started = time.perf_counter()
    plan = Plan.from_groups(problem.profile, [_backward_order(problem)])
    return finish(problem, plan, "single", started)


def threshold(problem: Problem, *, threshold_bytes: float = 25 * MiB) -> Result:
    """Fuse consecutive tensors in backward order while the message stays within
    ``threshold_bytes``; a tensor larger than the threshold travels alone.

    Unlike :func:`ddp`, a message is closed *before* the tensor that would overflow it.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> threshold(Problem(profile, AlphaBeta(3e-3, 1e-9)), threshold_bytes=3e6).plan.groups()
    [[2, 1], [0]]
    """
    started = time.perf_counter()
    cap = _positive_bytes("threshold_bytes", threshold_bytes)
    sizes = problem.profile.sizes
    groups: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for i in _backward_order(problem):
        if current and current_bytes + int(sizes[i]) > cap:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(i)
        current_bytes += int(sizes[i])
    groups.append(current)
    plan = Plan.from_groups(problem.profile, groups)
    return finish(problem, plan, "threshold", started, stats={"threshold_bytes": cap})


HOROVOD_DEFAULTS = {"current": (1e-3, 128 * MiB), "legacy": (5e-3, 64 * MiB)}


def horovod(
    problem: Problem,
    *,
    cycle_time: float | None = None,
    fusion_threshold_bytes: float | None = None,
    defaults: str = "current",
) -> Result:
    """Horovod's tensor fusion, simulated cycle by cycle and emitted as a static plan.

    Horovod's background thread starts a cycle every ``cycle_time`` seconds, or as soon as
    the previous cycle's collectives are done if they took longer; a cycle fuses the
    tensors that became ready since the last one, in ready order, into messages of at
    most ``fusion_threshold_bytes`` (a larger tensor travels alone), and runs them one
    after the other. Cycles start at ``0, cycle_time, ...`` from the start of the backward
    (the thread's phase is not known; this is our choice).

    The emitted plan keeps Horovod's grouping and order; like every dynamic policy it is
    judged by the simulator (MODEL.md section 3), in which a message starts when it is
    ready and the channel is free, without waiting for the cycle tick.

    Parameters
    ----------
    cycle_time : float, optional
        Seconds between cycles (``HOROVOD_CYCLE_TIME``); default per ``defaults``.
    fusion_threshold_bytes : float, optional
        Largest fused message (``HOROVOD_FUSION_THRESHOLD``); default per ``defaults``.
    defaults : {"current", "legacy"}
        ``"current"``: 1 ms and 128 MiB (Horovod since late 2020);
        ``"legacy"``: 5 ms and 64 MiB.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> horovod(Problem(profile, AlphaBeta(3e-3, 1e-9))).plan.groups()
    [[2], [1, 0]]
    """
    started = time.perf_counter()
    if defaults not in HOROVOD_DEFAULTS:
        raise ValueError(f"unknown defaults {defaults!r}: choose 'current' or 'legacy'")
    default_cycle, default_threshold = HOROVOD_DEFAULTS[defaults]
    cycle = _positive_seconds("cycle_time", default_cycle if cycle_time is None else cycle_time)
    cap = _positive_bytes(
        "fusion_threshold_bytes",
        default_threshold if fusion_threshold_bytes is None else fusion_threshold_bytes,
    )
    profile = problem.profile
    ready = profile.ready_times
    sizes = profile.sizes
    pending = _backward_order(problem)     # ready order: backward order
    groups: list[list[int]] = []
    cycle_start, channel_free, busy_cycles = 0.0, 0.0, 0
    while pending:
        batch = [i for i in pending if ready[i] <= cycle_start]
        if batch:
            busy_cycles += 1
            pending = pending[len(batch):]
            fused: list[list[int]] = [[]]
            fused_bytes = 0
            for i in batch:
                if fused[-1] and fused_bytes + int(sizes[i]) > cap:
                    fused.append([])
                    fused_bytes = 0
                fused[-1].append(i)
                fused_bytes += int(sizes[i])
            for group in fused:
                message_bytes = int(sizes[group].sum())
                channel_free = max(channel_free, cycle_start) + float(problem.cost(message_bytes))
            groups.extend(fused)
        next_tick = cycle_start + cycle
        if pending and not batch:
            # Nothing was ready: skip idle ticks up to the next gradient.
            ticks = math.ceil((ready[pending[0]] - cycle_start) / cycle)
            next_tick = cycle_start + max(1, ticks) * cycle
        cycle_start = max(next_tick, channel_free)
    plan = Plan.from_groups(profile, groups)
    return finish(problem, plan, "horovod", started, stats={
        "cycle_time": cycle, "fusion_threshold_bytes": cap, "cycles": busy_cycles,
    })
