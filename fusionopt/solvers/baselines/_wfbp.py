"""Baseline schedules every comparison includes (docs/methods.md, sections wfbp to horovod).

Each is a plain function ``f(problem, *, options) -> Result``; the plan it builds is
re-evaluated by the simulator (:func:`fusionopt.solvers.finish`). All of them emit
fusion plans: whole tensors, contiguous in backward order, in backward order. The
frameworks' own schedules live in :mod:`fusionopt.solvers.baselines._ddp` and
:mod:`fusionopt.solvers.baselines._horovod`.
"""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method

MiB = 1024 * 1024


def positive_number(label: str, value: float, unit: str) -> float:
    """``value`` as a float, or one line naming ``label`` unless it is a positive, finite
    number (of ``unit``, for the message)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of {unit}, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise ValueError(f"{label} must be a positive, finite number of {unit}, got {value!r}")
    return float(value)


def _positive_bytes(label: str, value: float) -> int:
    return int(positive_number(label, value, "bytes"))


def _backward_order(problem: Problem) -> list[int]:
    return list(problem.profile.ready_order)


@method("wfbp", family="framework baseline", summary="wait-free backpropagation: one message per tensor")
def wfbp(problem: Problem) -> Result:
    """Wait-free backpropagation: one message per tensor, in backward order.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``: 14 ms, and optimal.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> r = wfbp(Problem(profile, AlphaBeta(1e-3, 1e-9)))
    >>> round(r.iteration_time * 1e3, 9), r.num_messages
    (14.0, 3)
    """
    return Outcome(Plan.per_tensor(problem.profile))


@method("single", family="framework baseline", summary="SyncEASGD: one message after the backward")
def single(problem: Problem) -> Result:
    """SyncEASGD: all gradients in one message after the backward.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(single(Problem(profile, AlphaBeta(3e-3, 1e-9))).iteration_time * 1e3, 9)
    19.0
    """
    plan = Plan.from_groups(problem.profile, [_backward_order(problem)])
    return Outcome(plan)


@method("threshold", family="framework baseline", summary="fuse consecutive tensors up to a byte threshold")
def threshold(problem: Problem, *, threshold_bytes: float = 25 * MiB) -> Result:
    """Fuse consecutive tensors in backward order while the message stays within
    ``threshold_bytes``; a tensor larger than the threshold travels alone.

    Unlike :func:`ddp`, a message is closed *before* the tensor that would overflow it.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> threshold(Problem(profile, AlphaBeta(3e-3, 1e-9)), threshold_bytes=3e6).plan.groups()
    [[2, 1], [0]]
    """
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
    return Outcome(plan, stats={"threshold_bytes": cap})
