"""Tuners beside the online planner, in the same harness: what frameworks ship to find a
setting while a job runs, each on a job with the planner's face
(:class:`~fusionopt.integrations.SimulatedJob`, or any job with ``profile``,
``switch(plan)`` and a measured ``step_time`` per step).

* :class:`GridSearch`: DeepSpeed's autotuner (``deepspeed/autotuning``, read at
  ``constants.py``, ``tuner/base_tuner.py`` and ``tuner/index_based_tuner.py``:
  ``tuner_type="gridsearch"`` by default, the experiments in order, each profiled from
  ``start_profile_step = 3`` to ``end_profile_step = 5``, a better metric only when
  strictly better, and an early stop once ``tuner_early_stopping = 5`` experiments have run
  since the best one began),
  over DDP's ``bucket_cap_mb``. **Reconstructed**: DeepSpeed runs each experiment as a short
  job of its own and tunes ZeRO's bucket sizes, not DDP's; here each experiment is a stretch
  of the running job, as an online tuner must, and the grid is DDP's cap
  (:data:`DDP_CAPS_MB`). Once the grid is done the best measured setting is kept.
* :class:`ShardedGridSearch`: the same loop over FSDP2's knobs that switch between steps
  (:data:`FSDP2_GRID`: ``reshard_after_forward`` on every unit outside the root or on none,
  and the forward and backward prefetch depths), on a fully sharded job
  (:class:`~fusionopt.integrations.SimulatedShardedJob`,
  :class:`~fusionopt.integrations.FSDP2Job`). **Reconstructed** as above: DeepSpeed's
  autotuner does not tune FSDP2; this is its search run over the knobs an FSDP2 user tunes.

Horovod's autotune is :class:`fusionopt.integrations.HorovodAutotune`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from fusionopt.model._cost import check_count
from fusionopt.model._plan import Plan
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.solvers.baselines._ddp import ddp_buckets

DDP_CAPS_MB = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0)
"""The grid of DDP ``bucket_cap_mb`` values the grid search tries (MiB; 25 is DDP's default)."""


class GridSearch:
    """DeepSpeed's autotuner's grid search over DDP's ``bucket_cap_mb`` (module docstring).

    Call :meth:`after_step` after each step: experiment ``k`` runs ``end_profile_step`` steps
    with ``caps[k]``; its metric is the mean ``step_time`` of steps ``start_profile_step``
    to ``end_profile_step`` of it (counted from 1, as DeepSpeed counts). ``best`` is the
    cap kept once the search ends (the whole grid, or ``early_stopping`` experiments since
    the best one began)."""

    def __init__(self, job: Any, caps: tuple[float, ...] = DDP_CAPS_MB, *, start_profile_step: int = 3,
                 end_profile_step: int = 5, early_stopping: int = 5) -> None:
        for name, value in (("start_profile_step", start_profile_step), ("end_profile_step", end_profile_step),
                            ("early_stopping", early_stopping)):
            check_count(name, value)
        if not 1 <= start_profile_step <= end_profile_step:
            raise ValueError(f"the profiled steps must be 1 <= start <= end, got {start_profile_step} and "
                             f"{end_profile_step}")
        if not caps:
            raise ValueError("the grid is empty: give at least one bucket_cap_mb")
        self.job, self.caps = job, tuple(self._setting(c) for c in caps)
        self.start, self.end, self.early_stopping = start_profile_step, end_profile_step, early_stopping
        self.trial, self.in_trial = 0, 0
        self.times: list[float] = []
        self.metrics: list[float] = []
        self.best: float | None = None
        self._try(self.caps[0])

    @staticmethod
    def _setting(cap: Any) -> Any:
        return float(cap)

    def plan_of(self, cap: float) -> Plan:
        """The plan DDP builds with ``bucket_cap_mb = cap``."""
        return Plan.from_groups(self.job.profile, ddp_buckets(self.job.profile, bucket_cap_mb=cap))

    def _try(self, cap: float) -> None:
        self.job.switch(self.plan_of(cap))

    def _metric(self, times: list[float]) -> float:
        return statistics.fmean(times)

    def after_step(self) -> None:
        if self.best is not None:
            return
        self.in_trial += 1
        if self.in_trial >= self.start:
            self.times.append(self.job.step_time)
        if self.in_trial < self.end:
            return
        self.metrics.append(self._metric(self.times))
        self.times, self.in_trial = [], 0
        best = min(range(len(self.metrics)), key=self.metrics.__getitem__)     # the first of equals
        self.trial += 1
        if self.trial == len(self.caps) or self.trial >= best + self.early_stopping:
            self.best = self.caps[best]
            self._try(self.best)
        else:
            self._try(self.caps[self.trial])


FSDP2_GRID = tuple((reshard, forward, backward) for reshard in (True, False) for forward in (0, 1)
                   for backward in (1, 2))
"""The grid :class:`ShardedGridSearch` tries, in order: (reshard after forward, forward
prefetch beyond FSDP2's least, backward prefetch depth); FSDP2's defaults first."""


class ShardedGridSearch(GridSearch):
    """DeepSpeed's autotuner's grid search over FSDP2's switchable knobs (module docstring):
    each setting of :data:`FSDP2_GRID` on the job's units, the job's ``step_time`` its
    metric, as :class:`GridSearch` runs it. An experiment whose job ran over the pattern's
    memory cap (the job's ``peak_memory``, bytes, where it reports one) fails, as one that
    runs out of memory fails in DeepSpeed's autotuner, and is never kept."""

    def __init__(self, job: Any, grid: tuple[tuple[bool, int, int], ...] = FSDP2_GRID, **options: Any) -> None:
        from fusionopt.solvers.baselines._fsdp2 import fsdp2_forward_prefetch

        self.units: ShardedPlan = job.plan
        self.least = fsdp2_forward_prefetch(job.pattern.blocking)
        self._over = False
        super().__init__(job, grid, **options)

    def after_step(self) -> None:
        cap = self.job.pattern.memory_cap
        if self.best is None and cap is not None and getattr(self.job, "peak_memory", 0) > cap:
            self._over = True
        super().after_step()

    def _metric(self, times: list[float]) -> float:
        over, self._over = self._over, False
        return math.inf if over else statistics.fmean(times)

    @staticmethod
    def _setting(setting: Any) -> Any:
        reshard, forward, backward = setting
        return bool(reshard), int(forward), int(backward)

    def plan_of(self, setting: tuple[bool, int, int]) -> ShardedPlan:
        """The plan of ``setting`` on the job's units (the root's parts kept)."""
        reshard, forward, backward = setting
        units = self.units
        m = units.num_units
        flags = [reshard and not (units.root and j in (0, m - 1)) for j in range(m)]
        return units.replace(reshard=flags, forward_prefetch=self.least + forward, backward_prefetch=backward)


__all__ = ["DDP_CAPS_MB", "FSDP2_GRID", "GridSearch", "ShardedGridSearch"]
