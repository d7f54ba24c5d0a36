"""Framework settings from a fusion plan: the closest PyTorch DDP and Horovod configuration.

A plan (the DP's, say) fixes every message; DDP and Horovod only take a few knobs. These
functions pick the knobs whose schedule, built by the :func:`~fusionopt.solvers.baselines.ddp`
and :func:`~fusionopt.solvers.baselines.horovod` baselines, simulates fastest, and report
the model's predicted ``T`` *of the setting itself* (its own schedule simulated, not the
plan's) beside the plan's ``T``.

* :func:`ddp_settings`: one ``bucket_cap_mb`` for every bucket but the first (PyTorch's
  fixed 1 MiB), chosen among the caps implied by the plan's message sizes and DDP's
  default 25 MiB; never slower than the default.
* :func:`horovod_settings`: ``HOROVOD_FUSION_THRESHOLD`` (bytes) and ``HOROVOD_CYCLE_TIME``
  (milliseconds) on a small grid (the plan's message sizes and Horovod's defaults, times a
  few cycle times); never slower than the current defaults (1 ms, 128 MiB).

Ties in ``T`` (within a relative ``1e-9``) go to the schedule whose message boundaries
differ least from the plan's, then to the smaller knob.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model import simulate
from fusionopt.solvers.baselines import HOROVOD_DEFAULTS, MiB
from fusionopt.solvers.registry import solve

DDP_DEFAULT_CAP_BYTES = 25 * MiB
DDP_FIRST_BUCKET_BYTES = 1 * MiB
HOROVOD_CYCLE_TIMES_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HOROVOD_MAX_THRESHOLDS = 16       # plan sizes beyond this many are thinned to quantiles
_TIE = 1e-9                       # relative tolerance on T for ties


@dataclass(frozen=True)
class DDPSettings:
    """A PyTorch DDP configuration and its predicted iteration time (seconds).

    ``bucket_cap_mb`` is what ``DistributedDataParallel(..., bucket_cap_mb=...)`` takes
    (PyTorch multiplies it by ``1024 * 1024``: ``bucket_cap_bytes``). ``bucket_caps_bytes``
    is the cap of each bucket in turn (the first is PyTorch's fixed first-bucket cap), and
    ``parameter_order`` the order DDP walks the parameters: reverse registration order,
    which here is the backward order (forward indices of the profile). ``buckets`` holds
    the tensors of each bucket that order yields.
    """

    bucket_cap_mb: float
    bucket_cap_bytes: int
    first_bucket_bytes: int
    bucket_caps_bytes: tuple[int, ...]
    parameter_order: tuple[int, ...]
    buckets: tuple[tuple[int, ...], ...]
    iteration_time: float          # T of this setting, simulated through the ddp baseline
    plan_iteration_time: float     # T of the plan it was derived from
    default_iteration_time: float  # T of DDP's default bucket_cap_mb=25
    candidates: int                # caps tried

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["bucket_caps_bytes"] = list(self.bucket_caps_bytes)
        doc["parameter_order"] = list(self.parameter_order)
        doc["buckets"] = [list(b) for b in self.buckets]
        return doc


@dataclass(frozen=True)
class HorovodSettings:
    """Horovod tensor-fusion settings and their predicted iteration time (seconds).

    ``environment`` gives them as Horovod reads them: ``HOROVOD_FUSION_THRESHOLD`` in bytes
    and ``HOROVOD_CYCLE_TIME`` in milliseconds.
    """

    fusion_threshold_bytes: int
    cycle_time_ms: float
    messages: int
    iteration_time: float          # T of this setting, simulated through the horovod baseline
    plan_iteration_time: float
    default_iteration_time: float  # T of Horovod's current defaults (1 ms, 128 MiB)
    candidates: int                # (threshold, cycle time) pairs tried

    @property
    def environment(self) -> dict[str, str]:
        return {"HOROVOD_FUSION_THRESHOLD": str(self.fusion_threshold_bytes),
                "HOROVOD_CYCLE_TIME": f"{self.cycle_time_ms:g}"}

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["environment"] = self.environment
        return doc


def _check(problem: Problem, plan: Plan) -> float:
    """Validate the inputs; return the plan's simulated T."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    if problem.ps is not None:
        raise ValueError("DDP and Horovod settings need an all-reduce problem, not a parameter server")
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a Plan, got {type(plan).__name__}")
    plan.validate(problem.profile)
    return simulate(problem, plan, validate=False).iteration_time


def _boundaries(plan: Plan) -> set[int]:
    """Cumulative byte offsets where the plan's messages end (the last one left out)."""
    return set(np.cumsum(plan.message_bytes)[:-1].tolist())


def _pick(trials: list[tuple[float, int, Any, Any]]) -> tuple[float, int, Any, Any]:
    """The fastest trial; within the tie tolerance, the closest to the plan, then the smaller knob."""
    best = min(t[0] for t in trials)
    near = [t for t in trials if t[0] <= best + _TIE * abs(best)]
    return min(near, key=lambda t: (t[1], t[2]))


def ddp_settings(problem: Problem, plan: Plan) -> DDPSettings:
    """The PyTorch DDP ``bucket_cap_mb`` closest to ``plan``, with its predicted ``T``.

    Each distinct message size of the plan is tried as the cap (DDP closes a bucket once
    it reaches the cap, so a message of ``S`` bytes is reproduced with cap ``S`` when the
    buckets before it line up), and so is DDP's default 25 MiB; the cap whose DDP buckets
    (the ``ddp`` baseline, first bucket 1 MiB) simulate fastest is kept.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``: the DP sends the 2 MB tensor, then the 1 and
    4 MB tensors together; DDP reproduces that (first bucket 1 MiB, then a 2 MB cap, the
    smallest of the plan's sizes that does) at the plan's T.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> s = ddp_settings(problem, solve(problem, "dp").plan)
    >>> s.bucket_cap_bytes, s.buckets, s.bucket_caps_bytes
    (2000000, ((2,), (1, 0)), (1048576, 2000000))
    >>> s.iteration_time == s.plan_iteration_time <= s.default_iteration_time
    True
    """
    plan_time = _check(problem, plan)
    target = _boundaries(plan)
    caps = sorted({int(b) for b in plan.message_bytes} | {DDP_DEFAULT_CAP_BYTES})
    trials = []
    default = None
    for cap in caps:
        result = solve(problem, "ddp", bucket_cap_bytes=cap, first_bucket_bytes=DDP_FIRST_BUCKET_BYTES)
        distance = len(_boundaries(result.plan) ^ target)
        trials.append((result.iteration_time, distance, cap, result))
        if cap == DDP_DEFAULT_CAP_BYTES:
            default = result
    t, _, cap, result = _pick(trials)
    buckets = tuple(tuple(g) for g in result.plan.groups())
    return DDPSettings(
        bucket_cap_mb=cap / MiB,
        bucket_cap_bytes=cap,
        first_bucket_bytes=DDP_FIRST_BUCKET_BYTES,
        bucket_caps_bytes=tuple([DDP_FIRST_BUCKET_BYTES] + [cap] * (len(buckets) - 1)),
        parameter_order=tuple(problem.profile.ready_order),
        buckets=buckets,
        iteration_time=t,
        plan_iteration_time=plan_time,
        default_iteration_time=default.iteration_time,
        candidates=len(caps),
    )


def _thresholds(plan: Plan) -> list[int]:
    sizes = sorted({int(b) for b in plan.message_bytes})
    if len(sizes) > HOROVOD_MAX_THRESHOLDS:
        picks = np.linspace(0, len(sizes) - 1, HOROVOD_MAX_THRESHOLDS).round().astype(int)
        sizes = [sizes[k] for k in sorted(set(picks.tolist()))]
    defaults = {int(threshold) for _, threshold in HOROVOD_DEFAULTS.values()}
    return sorted(set(sizes) | defaults)


def horovod_settings(problem: Problem, plan: Plan) -> HorovodSettings:
    """Horovod's fusion threshold and cycle time closest to ``plan``, with its predicted ``T``.

    The grid: the plan's distinct message sizes (thinned to 16 quantiles when there are
    more) and Horovod's 64 and 128 MiB as thresholds, times cycle times of 0.1 to 10 ms;
    each pair is simulated through the ``horovod`` baseline and the fastest kept.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> s = horovod_settings(problem, solve(problem, "dp").plan)
    >>> s.iteration_time <= s.default_iteration_time
    True
    >>> sorted(s.environment)
    ['HOROVOD_CYCLE_TIME', 'HOROVOD_FUSION_THRESHOLD']
    """
    plan_time = _check(problem, plan)
    target = _boundaries(plan)
    thresholds = _thresholds(plan)
    default_cycle, default_threshold = HOROVOD_DEFAULTS["current"]
    trials = []
    for threshold in thresholds:
        for cycle_ms in HOROVOD_CYCLE_TIMES_MS:
            result = solve(problem, "horovod", cycle_time=cycle_ms / 1e3, fusion_threshold_bytes=threshold)
            distance = len(_boundaries(result.plan) ^ target)
            trials.append((result.iteration_time, distance, (threshold, cycle_ms), result))
    default = solve(problem, "horovod", cycle_time=default_cycle, fusion_threshold_bytes=default_threshold)
    t, _, (threshold, cycle_ms), result = _pick(trials)
    return HorovodSettings(
        fusion_threshold_bytes=threshold,
        cycle_time_ms=cycle_ms,
        messages=result.num_messages,
        iteration_time=t,
        plan_iteration_time=plan_time,
        default_iteration_time=default.iteration_time,
        candidates=len(trials),
    )
