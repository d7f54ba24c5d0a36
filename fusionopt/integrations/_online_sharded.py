"""Online re-planning of a fully sharded job: FSDP2's reshard flags and prefetch depths,
chosen from the job's own timings while it trains, followed when the link or the compute
changes.

FSDP2 fixes a job's units when ``fully_shard`` wraps them, but torch 2.13 lets a job change
between steps what each unit does: ``FSDPModule.set_reshard_after_forward`` (whether the unit
frees its parameters after its forward, to gather them again for its backward) and
``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch`` (which units'
all-gathers it issues ahead). :class:`ShardedPlanner` re-plans over exactly those knobs:
the plans with the job's units (:func:`~fusionopt.solvers.exact.plans_with_units`), each
reshard flag and each pair of prefetch depths FSDP2 can set, within the pattern's memory cap.

After each step it reads the job's record of it (:meth:`FSDP2Job.end_step`): the seconds of
every all-gather and reduce-scatter and their bytes, and the compute the forward and the
backward took between them. Every ``every`` steps it fits, over the last ``window`` steps:

* **each collective's cost** ``alpha + beta S``, least squares over every timed message of
  its kind, whatever plan sent it (a job's units are fixed, so its messages' sizes are too,
  and a cost identified on them is what the plans it can switch to need; where every message
  of a kind has one size, ``beta`` is the last one identified, 0 at first, and ``alpha`` is
  fitted around it);
* **the compute**: the median forward and backward seconds of the window, each spread over
  the tensors in the proportions of the job's starting profile (a slower batch scales both);

then solves the fitted problem exactly over the job's space (``sharded-brute`` with
``units=``) and switches only when the model predicts the best plan faster than the plan in
use by more than ``min_gain`` of the step and by more than ``confidence`` times the standard
error of the window's mean step (the steps of the plan in use): a switch is never made on
noise. A plan in use over the memory cap is left for the best within it whatever the gain.
Rank 0 decides and broadcasts its decision over a process group of the planner's own, so
every rank switches at the same step to the same plan.

Two jobs have the face it reads (``rank``, ``world``, ``profile``, ``pattern``, ``plan``,
``end_step()``, ``switch(plan)``):

* :class:`FSDP2Job`: real FSDP2, wrapped as a plan's settings say
  (:func:`~fusionopt.advice.fsdp2_settings`), its collectives timed on the training thread;
* :class:`SimulatedShardedJob`: the simulator's timeline of the plan in use, with seeded
  noise, for studies at any scale.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusionopt.integrations._fsdp_record import KIND_CODES
from fusionopt.integrations._online import Noise, _affine, check_planner_options
from fusionopt.model._cost import AlphaBeta
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._simulator import simulate

KINDS = tuple(sorted(KIND_CODES, key=KIND_CODES.__getitem__))
"""The collectives of a record, by the timeline's ``message_kind`` code (0 and 1)."""

FULL_FLAGS_UP_TO = 8
"""``reshard="auto"`` searches every reshard flag vector of a job with at most this many
units outside the root, else the last ``k`` units kept whole (``"suffix"``)."""


@dataclass(frozen=True)
class ShardedDecision:
    """One re-planning: at ``step``, the fitted costs, the compute scales (the window's over
    the starting profile's), the predicted ``T`` of the plan in use and of the best plan
    (seconds), the standard error of the window's mean step (seconds), and whether it
    switched to ``plan``."""

    step: int
    all_gather: AlphaBeta
    reduce_scatter: AlphaBeta
    forward_scale: float
    backward_scale: float
    current: float
    best: float
    spread: float
    switched: bool
    plan: ShardedPlan


def _check_job(pattern: Any, plan: Any) -> None:
    if getattr(pattern, "name", None) != "fully-sharded":
        raise ValueError(f"a fully sharded job needs a FullySharded pattern, got {type(pattern).__name__}")
    if not isinstance(plan, ShardedPlan):
        raise ValueError(f"plan must be a ShardedPlan, got {type(plan).__name__}")
    if plan.reduce_bounds is not None:
        raise ValueError("FSDP2 reduce-scatters each unit's gradients with the unit: the plan's reduce-scatter "
                         "groups cannot run")


def same_units(plan: ShardedPlan, other: ShardedPlan) -> bool:
    """Whether two plans have the same units (bounds and root): what FSDP2 fixes."""
    return plan.root == other.root and np.array_equal(plan.bounds, other.bounds)


def _units_refusal(plan: ShardedPlan, current: ShardedPlan) -> ValueError:
    return ValueError(f"FSDP2 fixes a job's units when fully_shard wraps them: the plan's units start at "
                      f"{plan.bounds.tolist()[:-1]} (root {plan.root}), the job's at {current.bounds.tolist()[:-1]} "
                      f"(root {current.root}); only reshard flags and prefetch depths switch")


class SimulatedShardedJob:
    """A fully sharded job the simulator plays, with the face :class:`ShardedPlanner` reads:
    each :meth:`end_step` is ``problem``'s timeline of the plan in use, every collective's
    seconds, the forward's and the backward's compute and the step stretched by seeded
    draws of :class:`~fusionopt.integrations.Noise` (a relative spread, or measured relative
    deviations drawn with replacement). ``profile`` is what the planner starts from (``prior``;
    by default the true profile, whose compute the planner scales); ``pattern`` the job's
    (its costs are only a start: the planner fits its own). Assign ``problem`` to change the
    link or the compute mid-run."""

    rank, world = 0, 1

    def __init__(self, problem: Problem, plan: ShardedPlan, *, noise: Any = 0.0, seed: int = 0,
                 prior: Profile | None = None) -> None:
        _check_job(problem.pattern, plan)
        plan.validate(problem.profile)
        self.noise = Noise(noise, seed)
        self.problem, self.plan = problem, plan
        self.profile = prior if prior is not None else problem.profile
        self.pattern = problem.pattern
        self.switches = 0
        self.step_time = math.nan
        self.peak_memory = 0

    def end_step(self) -> dict[str, Any]:
        """Play one step (``step_time``: its seconds, ``peak_memory``: its bytes); its
        record: ``collectives`` (``(kind, bytes, seconds)`` in issue order), ``forward`` and
        ``backward`` (compute seconds) and ``step`` (seconds)."""
        t = simulate(self.problem, self.plan)
        profile = self.problem.profile
        stretch = 1.0 + self.noise.draw(len(t.message_end) + 3)
        seconds = (t.message_end - t.message_start) * stretch[3:]
        self.step_time = float(t.iteration_time * stretch[2])
        self.peak_memory = int(t.peak_memory)
        return {"collectives": [(KINDS[k], int(b), float(s))
                                for k, b, s in zip(t.message_kind.tolist(), t.message_bytes.tolist(), seconds)],
                "forward": float(profile.forward.sum() * stretch[0]),
                "backward": float(profile.backward.sum() * stretch[1]),
                "step": self.step_time}

    def switch(self, plan: ShardedPlan) -> None:
        """Run ``plan`` (the same units) from the next step on."""
        _check_job(self.pattern, plan)
        if not same_units(plan, self.plan):
            raise _units_refusal(plan, self.plan)
        self.plan = plan
        self.switches += 1


class ShardedPlanner:
    """Re-plan a fully sharded job's reshard flags and prefetch depths from its own timings
    (module docstring). Make it on every rank (with several ranks it makes a process group
    of its own for its decisions) and call :meth:`after_step` after each step there, in
    place of the job's ``end_step()``.

    Parameters
    ----------
    job : FSDP2Job or SimulatedShardedJob
    every : int
        Steps between two re-plannings.
    window : int
        Steps the fit looks back over (the oldest are dropped, so drift is followed).
    min_gain : float
        The least predicted gain, a fraction of the step, that a switch needs.
    confidence : float
        A switch also needs a predicted gain above this many standard errors of the
        window's mean step.
    reshard : {"auto", "any", "suffix"}
        The reshard flags searched (:func:`~fusionopt.solvers.exact.plans_with_units`);
        ``"auto"``: every vector up to :data:`FULL_FLAGS_UP_TO` units outside the root,
        else the suffixes.
    max_depth : int
        The deepest prefetch searched, forward and backward (from FSDP2's least:
        :func:`~fusionopt.advice.fsdp2_least_forward_prefetch`, and 1).
    """

    def __init__(self, job: Any, *, every: int = 5, window: int = 10, min_gain: float = 0.01,
                 confidence: float = 2.0, reshard: str = "auto", max_depth: int = 3) -> None:
        check_planner_options(every, window, min_gain, confidence)
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be a whole number >= 1, got {max_depth!r}")
        if reshard not in ("auto", "any", "suffix"):
            raise ValueError(f"reshard must be 'auto', 'any' or 'suffix', got {reshard!r}")
        _check_job(job.pattern, job.plan)
        prior = job.profile
        if not prior.forward.sum() > 0 or not prior.backward.sum() > 0:
            raise ValueError("the job's starting profile needs forward and backward time to spread the measured "
                             "compute over its tensors")
        free = job.plan.num_units - (2 if job.plan.root else 0)
        self.reshard = reshard if reshard != "auto" else ("any" if free <= FULL_FLAGS_UP_TO else "suffix")
        self.job, self.every, self.window, self.max_depth = job, every, window, max_depth
        self.min_gain, self.confidence = float(min_gain), float(confidence)
        self.steps = 0
        self.seconds = 0.0                                # spent fitting, solving and deciding
        self.history: list[ShardedDecision] = []
        self._records: deque[dict[str, Any]] = deque(maxlen=window)      # any plan
        self._steps: deque[float] = deque(maxlen=window)                 # the plan in use's
        self._betas: dict[str, float | None] = {kind: None for kind in KINDS}
        self._plan = job.plan
        self._group = None
        if job.world > 1:                                 # every rank makes its planner: a collective call
            import torch.distributed as dist

            self._group = dist.new_group(ranks=list(range(job.world)))

    def after_step(self) -> ShardedDecision | None:
        """End the job's step and record it; every ``every`` steps, re-plan (a collective
        call: every rank must make it). Returns the decision made, or None."""
        record = self.job.end_step()
        started = time.perf_counter()
        if self.job.plan != self._plan:
            self._steps.clear()
            self._plan = self.job.plan
        self._records.append(record)
        self._steps.append(float(record["step"]))
        self.steps += 1
        decision = None
        if self.steps % self.every == 0 and len(self._steps) >= 2:
            mine = self._decide() if self.job.rank == 0 else None
            decision = self._share(mine)
            if decision.switched:
                self.job.switch(decision.plan)
            self.history.append(decision)
        self.seconds += time.perf_counter() - started
        return decision

    # ------------------------------------------------------------------ the fit
    def fitted_problem(self) -> tuple[Problem, float]:
        """The problem fitted on the window (module docstring) and the standard error of the
        window's mean step with the plan in use (seconds)."""
        costs = {}
        for kind in KINDS:
            sent = np.array([(b, s) for r in self._records for k, b, s in r["collectives"] if k == kind],
                            dtype=np.float64).reshape(-1, 2)
            if sent.size == 0:
                what = "gradients never arrived (did backward run?)" if kind == "reduce_scatter" else \
                    "parameters were never gathered (did forward run?)"
                raise ValueError(f"no {kind.replace('_', '-')} was timed in the last {len(self._records)} steps: "
                                 f"the job's {what}")
            costs[kind] = _affine(sent[:, 0], sent[:, 1], self._betas[kind])
            if np.ptp(sent[:, 0]) > 0:
                self._betas[kind] = costs[kind].beta
        prior = self.job.profile
        forward, backward = self._scales()
        profile = dataclasses.replace(prior, forward=prior.forward * forward, backward=prior.backward * backward)
        pattern = dataclasses.replace(self.job.pattern, all_gather=costs["all_gather"],
                                      reduce_scatter=costs["reduce_scatter"])
        steps = list(self._steps)
        spread = statistics.stdev(steps) / math.sqrt(len(steps)) if len(steps) > 1 else 0.0
        return Problem(profile, pattern=pattern), spread

    def _scales(self) -> tuple[float, float]:
        """The window's median forward and backward compute over the starting profile's."""
        prior = self.job.profile
        return (statistics.median(r["forward"] for r in self._records) / float(prior.forward.sum()),
                statistics.median(r["backward"] for r in self._records) / float(prior.backward.sum()))

    def _decide(self) -> ShardedDecision:
        from fusionopt.advice._sharded import FSDP2_MIN_BACKWARD_PREFETCH, fsdp2_least_forward_prefetch
        from fusionopt.solvers import solve
        from fusionopt.solvers._sharded_units import plan_score

        problem, spread = self.fitted_problem()
        plan = self.job.plan
        over, current = plan_score(problem, plan)
        best = solve(problem, "sharded-brute", units=plan, reshard=self.reshard, max_depth=self.max_depth,
                     min_forward_prefetch=fsdp2_least_forward_prefetch(problem),
                     min_backward_prefetch=FSDP2_MIN_BACKWARD_PREFETCH)
        gain = current - best.iteration_time
        switched = best.plan != plan and (over > 0 or (gain > self.min_gain * current
                                                          and gain > self.confidence * spread))
        return ShardedDecision(self.steps, problem.pattern.all_gather, problem.pattern.reduce_scatter,
                               *self._scales(), current, best.iteration_time, spread, switched,
                               best.plan if switched else plan)

    def _share(self, mine: ShardedDecision | None) -> ShardedDecision:
        """Rank 0's decision on every rank, over the planner's own process group."""
        if self.job.world == 1:
            assert mine is not None
            return mine
        import torch.distributed as dist

        box = [mine]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self._group, 0), group=self._group)
        return box[0]


__all__ = ["FULL_FLAGS_UP_TO", "KINDS", "ShardedDecision", "ShardedPlanner", "SimulatedShardedJob", "same_units"]
