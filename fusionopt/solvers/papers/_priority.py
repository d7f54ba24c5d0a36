"""Priority schedulers for layerwise sync: P3 and ByteScheduler (docs/methods.md, sections p3 and bytescheduler).

Both cut gradient tensors into slices and send the ready slice of best priority first;
priority is the forward index (tensor 0 first, since the next forward needs it first) and,
within a tensor, byte order. Both are dynamic policies: the model's priority dispatch
(:mod:`fusionopt.model._dispatch`) runs them, with each method's window as its plug-in, and
each function emits the static :class:`~fusionopt.model.Plan` of slices in the order
they were handed to the channel, one slice per message, which the simulator then judges
like every other plan (MODEL.md section 3).

* :func:`p3` (Jayarajan et al., SysML 2019): slices of ``slice_parameters`` parameters;
  whenever a channel is free, the ready slice of best priority is sent (non-preemptive
  per slice).
* ByteScheduler (Peng et al., SOSP 2019; :mod:`fusionopt.solvers.papers._bytescheduler`): tensors
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
semantics of :mod:`fusionopt.model._events` (the backward slows while a slice is in flight,
so ready times depend on the schedule); tests pin that simulation to
:func:`~fusionopt.model.simulate`. Barrier sync is refused: these schedulers exist to let
the next forward start tensor by tensor, which a barrier rules out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusionopt.model._dispatch import free_channel_window, priority_dispatch
from fusionopt.model._plan import Chunk
from fusionopt.model._problem import Problem
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._policy_checks import check_reproduced

P3_SLICE_PARAMETERS = 40_000


# ---------------------------------------------------------------------------- validation
def whole_parameters(label: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a positive whole number of parameters, got {value!r}")
    if not math.isfinite(value) or value != int(value) or value <= 0:
        raise ValueError(f"{label} must be a positive whole number of parameters, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------- slicing
def p3_slices(problem: Problem, slice_parameters: int) -> list[Chunk]:
    """P3's slices: each tensor cut into pieces of ``slice_parameters`` parameters
    (``slice_parameters * dtype_bytes`` bytes; the last piece of a tensor may be shorter),
    in priority order (forward index, then byte order).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([12, 4], [0.0] * 2, [1e-3] * 2)   # float32: 3 and 1 parameters
    >>> [(c.tensor, c.lo, c.hi) for c in p3_slices(Problem(profile, AlphaBeta(0, 1e-9)), 2)]
    [(0, 0, 8), (0, 8, 12), (1, 0, 4)]
    """
    slice_parameters = whole_parameters("slice_parameters", slice_parameters)
    profile = problem.profile
    step = slice_parameters * profile.dtype_bytes
    return [Chunk(i, lo, min(lo + step, size))
            for i, size in enumerate(profile.sizes.tolist()) for lo in range(0, size, step)]


# ---------------------------------------------------------------------------- P3
@method("p3", family="paper", summary="P3: 40k-parameter slices, priority by forward index (layerwise)")
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
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
    slices = p3_slices(problem, slice_parameters)
    schedule = priority_dispatch(problem, slices, free_channel_window(problem.channels))
    return Outcome(schedule.plan(slices), space="any", stats={
        "slice_parameters": int(slice_parameters),
        "slice_bytes": int(slice_parameters) * problem.profile.dtype_bytes,
        "slices": len(slices),
        "policy_iteration_time": schedule.iteration_time,
    }, check=lambda result: check_reproduced(problem, result, schedule, "p3"))
