"""A traced data-parallel job's step time, predicted by the model from the job's own traces
and set against the time the traces measured (no torch needed).

:func:`predict_traced_step` reads one job (a folder of per-rank traces, or one trace):

1. the profile: :func:`~fusionopt.integrations.profile_from_traces`, forward and
   backward per tensor and the step parts (update lump, post-backward copies, host
   overhead), medians over steps and ranks;
2. the collective cost: :func:`~fusionopt.integrations.collective_samples`
   (with every rank's trace, each all-reduce from the last rank's entry to the last exit,
   the time shared with the collectives in flight beside it divided among them), fitted by
   :func:`~fusionopt.integrations.fit_collective_cost`: a
   ``PiecewiseLinear`` through each size's mean;
3. the plan the framework ran: DDP's buckets of the last traced step, in launch order
   (:func:`~fusionopt.integrations._collective_trace.recorded_buckets`);
4. ``T`` by :func:`~fusionopt.model.simulate` under barrier sync (DDP waits for every
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

**Without the profiler.** The profiler slows the job it traces (its host time per recorded
event), so ``predicted`` is the traced job's step. :attr:`TracedStep.predicted_unprofiled` is
the same job's step without the profiler: each rank's trace is replayed with the profiler's
cost taken out (:func:`~fusionopt.integrations.replay_trace`: the host's events
move earlier, the GPU's work keeps its durations and follows its launches and the host's
synchronisations), the replayed trace is read into a profile like the traced one, and the
same plan is simulated on it with the same fitted cost: :attr:`TracedStep.unprofiled_parts`
says where its time goes. The profiler's cost per event is the job folder's measured one
(``profiler_cost.json``, written by the recorders), or the default; a job folder's
``unprofiled.json`` (the unprofiled step, measured) is read only to be set against the
prediction (:attr:`TracedStep.unprofiled_error`). Where either is missing, one warning line
names what is missing.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusionopt.integrations._collective_trace import collective_samples, fit_collective_cost, recorded_buckets
from fusionopt.integrations._kineto_ranks import describe_ranks, profile_from_traces
from fusionopt.integrations._kineto_events import documents_by_rank
from fusionopt.integrations._kineto_parameters import parameters_from_trace, read_parameter_csv
from fusionopt.integrations._unprofiled import (DEFAULT_PROFILER_COST, PROFILER_COST_FILE, UNPROFILED_FILE,
                                               ProfilerCost, StepReplay, read_profiler_cost,
                                               read_unprofiled_reference, replay_job)
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.model._cost import CommCost

STATISTICS = ("mean", "median")
# A job folder's parameter list, when it has one: name,size_bytes in forward order.
PARAMETERS_FILE = "parameters.csv"
# The parts of the step the prediction copies from the trace (through the profile), and the
# one the model predicts.
COPIED_PARTS = ("forward", "backward", "update", "update_lump", "post_backward", "host_overhead")
PREDICTED_PART = "exposed"


def folder_parameters(traces: Any) -> list[tuple[str, int]] | None:
    """The parameter list in a job folder's ``parameters.csv``
    (:func:`~fusionopt.integrations._kineto_parameters.read_parameter_csv`), or ``None`` when it has none."""
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
    predicted_unprofiled : float or None
        The job's step without the profiler: :attr:`plan` simulated on the profile of the
        traces replayed without the profiler's cost (module docstring), seconds.
    unprofiled_parts : dict
        Its parts, as ``predicted_parts``: the replayed profile's and the simulator's.
    unprofiled_profile : Profile or None
        The profile read from the replayed traces.
    replayed : float or None
        The replayed steps' period (the statistic over steps and ranks), seconds: the
        replay's own figure, which ``predicted_unprofiled`` models as ``predicted`` models
        ``measured``.
    profiler_cost : ProfilerCost or None
        The profiler's cost per event the replay took out, and where it comes from.
    replays : dict
        Rank -> each step's :class:`~fusionopt.integrations._unprofiled.StepReplay`.
    measured_unprofiled : float or None
        The job's unprofiled step as measured (its folder's ``unprofiled.json``), seconds;
        ``None`` where there is none. Never an input to the prediction.
    unprofiled_note : str or None
        The one line naming what the unprofiled prediction lacks (a measured profiler cost,
        a measured unprofiled step), ``None`` where it lacks nothing.
    """

    profile: Profile
    cost: CommCost
    plan: Plan
    predicted: float
    measured: float
    predicted_parts: dict[str, float] = field(default_factory=dict)
    measured_parts: dict[str, float] = field(default_factory=dict)
    predicted_unprofiled: float | None = None
    unprofiled_parts: dict[str, float] = field(default_factory=dict)
    unprofiled_profile: Profile | None = None
    replayed: float | None = None
    profiler_cost: ProfilerCost | None = None
    replays: dict[int, list[StepReplay]] = field(default_factory=dict)
    measured_unprofiled: float | None = None
    unprofiled_note: str | None = None

    @property
    def unprofiled_error(self) -> float | None:
        """``(predicted_unprofiled - measured_unprofiled) / measured_unprofiled``; ``None``
        without both."""
        if self.predicted_unprofiled is None or self.measured_unprofiled is None:
            return None
        return (self.predicted_unprofiled - self.measured_unprofiled) / self.measured_unprofiled

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
        >>> from fusionopt.cost import AlphaBeta
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
                        profiler_cost: ProfilerCost | float | None = None, **options: Any) -> TracedStep:
    """Predict a traced DDP job's step time from its traces and compare it with the traces.

    Parameters
    ----------
    traces : str, Path, list or JobTraces
        A folder of the job's traces (one per rank, as
        :func:`~fusionopt.integrations.profile_from_traces` finds them), a trace, a
        list of files, or :func:`~fusionopt.integrations.documents_by_rank`'s reading
        of them. Every rank of the world the traces name must be there.
    parameters : optional
        The model's parameter list as :func:`~fusionopt.integrations.profile_from_trace`
        takes it; default: the folder's ``parameters.csv`` (:func:`folder_parameters`), else
        read from the lowest rank's trace
        (:func:`~fusionopt.integrations._kineto_parameters.parameters_from_trace`).
    statistic : {"mean", "median"}
        How the steps, the ranks and the repeats of each all-reduce size are summed up
        (module docstring).
    profiler_cost : ProfilerCost or float, optional
        The profiler's host cost per recorded event (a float: seconds) for the unprofiled
        prediction; default: the folder's ``profiler_cost.json``, else
        :data:`~fusionopt.integrations.DEFAULT_PROFILER_COST`.
    **options
        For :func:`~fusionopt.integrations.profile_from_trace` (``timeline``, ...).
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
    if profiler_cost is not None and not isinstance(profiler_cost, ProfilerCost):
        profiler_cost = ProfilerCost(profiler_cost)
    profile = profile_from_traces(job, parameters, statistic=statistic, **options)
    sizes, seconds, _ = collective_samples(job)
    cost = fit_collective_cost(sizes, seconds, statistic=statistic).curve
    groups = recorded_buckets(job, profile)
    plan = Plan.from_groups(profile, groups)
    timeline = simulate(Problem(profile, cost, sync="barrier"), plan)
    step = profile.metadata["step"]
    predicted_parts = {**profile.parts, "exposed": timeline.exposed}
    measured_parts = {key: step[key] for key in ("forward", "backward")}
    # The update and the step parts are read from the trace once, into the profile: the same
    # figures on both sides; forward, backward and the exposed wait are measured apart.
    measured_parts.update(update=profile.U, **{part: step[part] for part in profile.step_parts}, exposed=step["exposed"])
    pick = np.mean if statistic == "mean" else np.median
    measured = float(pick(step["periods"]))

    folder = Path(traces) if isinstance(traces, (str, Path)) and Path(traces).is_dir() else None
    given = profiler_cost
    if given is None:
        profiler_cost = (read_profiler_cost(folder) if folder else None) or DEFAULT_PROFILER_COST
    replayed_job, replays = replay_job(job, profiler_cost, profile.n)
    with warnings.catch_warnings():     # the traced read said them already
        warnings.simplefilter("ignore")
        unprofiled_profile = profile_from_traces(replayed_job, parameters, statistic=statistic, **options)
    unprofiled = simulate(Problem(unprofiled_profile, cost, sync="barrier"), Plan.from_groups(unprofiled_profile, groups))
    reference = read_unprofiled_reference(folder) if folder else None
    note = _missing_note(traces, folder, profiler_cost if given is None else None, reference)
    if note:
        warnings.warn(note, stacklevel=2)
    return TracedStep(profile, cost, plan, timeline.iteration_time, measured, predicted_parts, measured_parts,
                      predicted_unprofiled=unprofiled.iteration_time,
                      unprofiled_parts={**unprofiled_profile.parts, "exposed": unprofiled.exposed},
                      unprofiled_profile=unprofiled_profile,
                      replayed=float(pick([r.replayed for steps in replays.values() for r in steps])),
                      profiler_cost=profiler_cost, replays=replays,
                      measured_unprofiled=reference.seconds if reference else None, unprofiled_note=note)


def _missing_note(traces: Any, folder: Path | None, taken: ProfilerCost | None, reference: Any) -> str | None:
    """The one line naming what the unprofiled prediction lacks: a measured profiler cost
    (``taken`` is the cost read or defaulted, ``None`` when one was given) and a measured
    unprofiled step to check it against."""
    lacking = []
    if taken is not None and taken.source != "measured":
        lacking.append(f"no {PROFILER_COST_FILE} (the profiler's cost per event, measured where the job was "
                       f"recorded), so predicted_unprofiled takes the default "
                       f"{1e6 * taken.seconds_per_event:.3g} us per event fitted to H100 traces")
    if reference is None:
        lacking.append(f"no {UNPROFILED_FILE} (the job's step measured without the profiler), so "
                       "predicted_unprofiled is not checked against a measurement")
    if not lacking:
        return None
    where = folder if folder is not None else (traces if isinstance(traces, (str, Path)) else "the traces")
    kind = "" if folder is not None else " (not a job folder)"
    return f"{where}{kind}: " + "; ".join(lacking)
