"""A traced data-parallel job's step time, predicted by the model from the job's own traces
and set against the time the traces measured (no torch needed).

:func:`predict_traced_step` reads one job (a folder of per-rank traces, or one trace):

1. the profile: :func:`~fusionopt.integrations.kineto.profile_from_traces`, forward and
   backward per tensor and the step parts (update lump, post-backward copies, host
   overhead), medians over steps and ranks;
2. the collective cost: :func:`~fusionopt.integrations.collective_trace.collective_samples`
   (with every rank's trace, each all-reduce from the last rank's entry to the last exit,
   the time shared with the collectives in flight beside it divided among them), fitted by
   :func:`~fusionopt.integrations.collective_trace.fit_collective_cost`: a
   ``PiecewiseLinear`` through each size's mean;
3. the plan the framework ran: DDP's buckets of the last traced step, in launch order
   (:func:`~fusionopt.integrations.collective_trace.recorded_buckets`);
4. ``T`` by :func:`~fusionopt.model.simulator.simulate` under barrier sync (DDP waits for every
   bucket before the optimiser), set against the mean period of the traced steps.

Every figure is a mean over the steps (``statistic="mean"``): the mean step is what a job's
throughput is, and means add up (the mean period is the sum of the mean parts), where a
sum of medians of skewed parts falls short of the median period. ``statistic="median"``
takes medians throughout instead.

The breakdown names where the prediction and the measurement differ. Of the seven parts,
six (forward, backward, update, update lump, post-backward copies, host overhead) are the
trace's own measurements, copied into the profile the model runs on (:data:`COPIED_PARTS`):
they agree by construction (up to the gap between a sum of medians and the median of sums).
The one part the model predicts is the exposed communication (``T - compute_time``, from
the fitted all-reduce cost and DDP's buckets), set against the wait the trace shows
(``metadata["step"]["exposed"]``): :attr:`TracedStep.exposed_error` is that part's own
error, where :attr:`TracedStep.error`, the whole step's, is diluted by the copied parts.

A job is read from every rank's trace: a folder whose traces name a world of ``P`` ranks
(``distributedInfo``) must hold all ``P`` (one rank's all-reduce durations include its
wait for the others), and is refused in one line naming the missing ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusionopt.integrations.collective_trace import collective_samples, fit_collective_cost, recorded_buckets
from fusionopt.integrations.kineto import (describe_ranks, documents_by_rank, parameters_from_trace,
                                           profile_from_traces, read_parameter_csv)
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.model.cost import CommCost

STATISTICS = ("mean", "median")
# A job folder's parameter list, when it has one: name,size_bytes in forward order.
PARAMETERS_FILE = "parameters.csv"
# The parts of the step the prediction copies from the trace (through the profile), and the
# one the model predicts.
COPIED_PARTS = ("forward", "backward", "update", "update_lump", "post_backward", "host_overhead")
PREDICTED_PART = "exposed"


def folder_parameters(traces: Any) -> list[tuple[str, int]] | None:
    """The parameter list in a job folder's ``parameters.csv``
    (:func:`~fusionopt.integrations.kineto.read_parameter_csv`), or ``None`` when it has none."""
    if not isinstance(traces, (str, Path)) or not Path(traces).is_dir():
        return None
    listing = Path(traces) / PARAMETERS_FILE
    return read_parameter_csv(listing) if listing.exists() else None


@dataclass(frozen=True)
class TracedStep:
    """One job's predicted and measured step, times in seconds.

    Attributes
    ----------
    profile : Profile
        Read from the traces, step parts included.
    cost : CommCost
        The all-reduce cost fitted to the traced collectives.
    plan : Plan
        DDP's buckets as the job launched them.
    predicted, measured : float
        The simulator's ``T`` and the mean (or median) period of the traced steps.
    predicted_parts, measured_parts : dict
        Forward, backward, update, the step parts and the exposed communication: the
        profile's and the simulator's (predicted) and the trace's (measured). All but
        ``"exposed"`` are the trace's measurements on both sides (:data:`COPIED_PARTS`).
    """

    profile: Profile
    cost: CommCost
    plan: Plan
    predicted: float
    measured: float
    predicted_parts: dict[str, float] = field(default_factory=dict)
    measured_parts: dict[str, float] = field(default_factory=dict)

    @property
    def error(self) -> float:
        """``(predicted - measured) / measured``."""
        return (self.predicted - self.measured) / self.measured

    @property
    def exposed_difference(self) -> float:
        """Predicted less measured exposed communication, seconds: the step's one predicted part."""
        return self.predicted_parts[PREDICTED_PART] - self.measured_parts[PREDICTED_PART]

    @property
    def copied_difference(self) -> float:
        """The step's error less the exposed part's, seconds: what the copied parts bring to
        it. Their predicted and measured figures differ only as a sum of medians differs from
        the median of sums; the rest is the measured parts not adding up to the measured
        period (on the GPU's clock a step's work can outlast its host period, and the host
        overhead is never below 0)."""
        return self.predicted - self.measured - self.exposed_difference

    @property
    def exposed_error(self) -> float | None:
        """``(predicted - measured) / measured`` of the exposed communication alone; ``None``
        when the trace shows no exposed wait.

        >>> from fusionopt.model import Plan, Profile
        >>> from fusionopt.model.cost import AlphaBeta
        >>> p = Profile.from_arrays([4], [0.0], [1.0])
        >>> r = TracedStep(p, AlphaBeta(0.0, 1e-9), Plan.from_groups(p, [[0]]), 1.1, 1.2,
        ...                {"exposed": 0.1}, {"exposed": 0.2})
        >>> round(r.error, 6), round(r.exposed_error, 6), round(r.exposed_difference, 6), round(r.copied_difference, 6)
        (-0.083333, -0.5, -0.1, 0.0)
        """
        measured = self.measured_parts[PREDICTED_PART]
        return self.exposed_difference / measured if measured > 0 else None

    @property
    def problem(self) -> Problem:
        """The traced job as a problem: its profile and fitted cost under barrier sync (DDP
        waits for every bucket before the optimiser). ``predicted`` is :attr:`plan` simulated
        on it; another plan on it predicts the job run that way, e.g. DDP under another bucket
        setting: ``solve(traced.problem, "ddp", bucket_cap_mb=5).iteration_time``."""
        return Problem(self.profile, self.cost, sync="barrier")


def predict_traced_step(traces: Any, parameters: Any = None, *, statistic: str = "mean",
                        **options: Any) -> TracedStep:
    """Predict a traced DDP job's step time from its traces and compare it with the traces.

    Parameters
    ----------
    traces : str, Path, list or JobTraces
        A folder of the job's traces (one per rank, as
        :func:`~fusionopt.integrations.kineto.profile_from_traces` finds them), a trace, a
        list of files, or :func:`~fusionopt.integrations.kineto.documents_by_rank`'s reading
        of them. Every rank of the world the traces name must be there.
    parameters : optional
        The model's parameter list as :func:`~fusionopt.integrations.kineto.profile_from_trace`
        takes it; default: the folder's ``parameters.csv`` (:func:`folder_parameters`), else
        read from the lowest rank's trace
        (:func:`~fusionopt.integrations.kineto.parameters_from_trace`).
    statistic : {"mean", "median"}
        How the steps, the ranks and the repeats of each all-reduce size are summed up
        (module docstring).
    **options
        For :func:`~fusionopt.integrations.kineto.profile_from_trace` (``timeline``, ...).
    """
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}: choose one of {', '.join(map(repr, STATISTICS))}")
    job = documents_by_rank(traces)
    if job.missing_ranks:
        where = traces if isinstance(traces, (str, Path)) else job[min(job)][0].parent
        raise ValueError(f"{where}: {describe_ranks(job.missing_ranks)} of a world of {job.world_size} missing "
                         f"(traces of {describe_ranks(sorted(job))} only): give every rank's trace")
    if parameters is None:
        parameters = folder_parameters(traces) or parameters_from_trace(job)
    profile = profile_from_traces(job, parameters, statistic=statistic, **options)
    sizes, seconds, _ = collective_samples(job)
    cost = fit_collective_cost(sizes, seconds, statistic=statistic).curve
    plan = Plan.from_groups(profile, recorded_buckets(job, profile))
    timeline = simulate(Problem(profile, cost, sync="barrier"), plan)
    step = profile.metadata["step"]
    predicted_parts = {**profile.parts, "exposed": timeline.exposed}
    measured_parts = {key: step[key] for key in ("forward", "backward")}
    # The update and the step parts are read from the trace once, into the profile: the same
    # figures on both sides; forward, backward and the exposed wait are measured apart.
    measured_parts.update(update=profile.U, **{part: step[part] for part in profile.step_parts}, exposed=step["exposed"])
    measured = float(np.mean(step["periods"]) if statistic == "mean" else np.median(step["periods"]))
    return TracedStep(profile, cost, plan, timeline.iteration_time, measured,
                      predicted_parts, measured_parts)
