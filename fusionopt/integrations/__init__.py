"""Profiles in: measured workloads from PyTorch.

* :func:`fusionopt.integrations.profile_model` times a ``torch.nn.Module`` on CPU or
  CUDA, parameter tensor by parameter tensor (needs ``pip install 'fusionopt[torch]'``).
* :func:`fusionopt.integrations.profile_from_trace` reads the chrome-trace JSON that
  ``torch.profiler.profile(...).export_chrome_trace`` writes; it does not need torch.

Both return a :class:`~fusionopt.model.Profile` in forward order, the step's parts
that belong to no tensor included, and share the rules of
one set of rules for turning ready events into backward times.

A data-parallel job's traces say more: :func:`~fusionopt.integrations.fit_collective_cost` fits
the all-reduce cost and reads the buckets DDP launched, and
:func:`~fusionopt.integrations.predict_traced_step` predicts the job's step from them against the step
they measured (:func:`~fusionopt.integrations.replay_trace`: without the profiler);
:func:`~fusionopt.integrations.record_ddp_traces` records such jobs (gloo, CPU) and
:func:`~fusionopt.integrations.ddp_bucket_layout` reads DDP's buckets with a comm hook.
Profiles also travel as CSV: :func:`~fusionopt.model.write_profile_csv` and
:func:`~fusionopt.model.read_profile_csv`.

Advice out: :func:`~fusionopt.integrations.apply_advice` builds DDP or FSDP2 on a
real model as ``fusionopt advise --json`` says, and
:func:`~fusionopt.integrations.apply_defaults` as the framework's defaults;
:class:`~fusionopt.integrations.EmulatedLink` holds their collectives for a
slower network's time (:func:`~fusionopt.integrations.ddp_comm_hook`,
:func:`~fusionopt.integrations.emulate_fsdp2`, and torch's ``powerSGD_hook`` by
:func:`~fusionopt.integrations.powersgd_comm_hook`). :func:`~fusionopt.integrations.wire_comm_hook`
sends each DDP bucket in the encoding the advice chooses for it, and
:func:`~fusionopt.integrations.padded_comm_hook` pads each to the alignment it needs.

Re-planning while a job trains: :class:`~fusionopt.integrations.OnlinePlanner` switches the
buckets of a :class:`~fusionopt.integrations.PlanReducer`, real DDP
(:class:`~fusionopt.integrations.DDPJob`) or a simulated job;
:class:`~fusionopt.integrations.ShardedPlanner` switches real FSDP2's reshard flags and
prefetch lists (:class:`~fusionopt.integrations.FSDP2Job`) or a simulated fully sharded
job's (:class:`~fusionopt.integrations.SimulatedShardedJob`).
"""

from fusionopt.integrations._apply import apply_advice, apply_defaults, read_advice
from fusionopt.integrations._collective_trace import collective_samples, fit_collective_cost
from fusionopt.integrations._ddp_layout import ddp_bucket_layout
from fusionopt.integrations._ddp_record import SMALL_INPUTS, free_port, join_gloo, record_ddp_traces, small_model
from fusionopt.integrations._deepspeed_prefetch import AdaptivePrefetch, SimulatedZero3Job, fetch_events
from fusionopt.integrations._emulated_link import EmulatedLink, Hold, ddp_comm_hook, emulate_fsdp2
from fusionopt.integrations._fsdp_record import (
    KIND_CODES, CollectiveRecorder, fsdp2_blocks, padded_bytes, record_fsdp2_collectives, tiny_transformer,
)
from fusionopt.integrations._horovod_autotune import TEST_POINTS, BayesianSearch, GaussianProcess, HorovodAutotune
from fusionopt.integrations._kineto import profile_from_trace
from fusionopt.integrations._kineto_events import documents_by_rank
from fusionopt.integrations._kineto_ranks import profile_from_traces
from fusionopt.integrations._online import DDPJob, OnlinePlanner, SimulatedJob
from fusionopt.integrations._online_baselines import DDP_CAPS_MB, FSDP2_GRID, GridSearch, ShardedGridSearch
from fusionopt.integrations._padded_hook import padded_comm_hook
from fusionopt.integrations._powersgd_link import HeldGroup, powersgd_comm_hook
from fusionopt.integrations._wire_hook import choose_encoding, wire_comm_hook
from fusionopt.integrations._online_sharded import ShardedDecision, ShardedPlanner, SimulatedShardedJob
from fusionopt.integrations._fsdp2_job import FSDP2Job
from fusionopt.integrations._plan_reducer import PlanReducer
from fusionopt.integrations._profiler_calibration import measure_profiler_cost
from fusionopt.integrations._rank_processes import leave_rank, run_rank_processes
from fusionopt.integrations._reducer_calibration import (
    REDUCER_CALIBRATION_SCHEMA, ReducerCalibration, Sample, fit_overhead, fit_reducer_cost, make_optimizer,
    measure_reducer_overhead, read_reducer_calibration, reducer_cost_words, with_reducer_overhead,
)
from fusionopt.integrations._torch import profile_model, require_torch
from fusionopt.integrations._traced_step import (
    COPIED_PARTS, PARAMETERS_FILE, TracedStep, folder_parameters, predict_traced_step,
)
from fusionopt.integrations._unprofiled import (
    DEFAULT_PROFILER_COST, UNPROFILED_FILE, ProfilerCost, read_profiler_cost, read_unprofiled_reference,
    replay_trace, write_profiler_cost,
)

__all__ = [
    "AdaptivePrefetch", "BayesianSearch", "COPIED_PARTS", "CollectiveRecorder", "DDPJob", "DDP_CAPS_MB",
    "DEFAULT_PROFILER_COST", "EmulatedLink", "FSDP2Job", "FSDP2_GRID", "GaussianProcess", "GridSearch", "HeldGroup", "Hold", "HorovodAutotune",
    "KIND_CODES", "OnlinePlanner", "PARAMETERS_FILE", "PlanReducer", "ProfilerCost", "REDUCER_CALIBRATION_SCHEMA",
    "ReducerCalibration", "SMALL_INPUTS", "Sample", "ShardedDecision", "ShardedGridSearch", "ShardedPlanner", "SimulatedJob",
    "SimulatedShardedJob", "SimulatedZero3Job", "TEST_POINTS", "TracedStep",
    "UNPROFILED_FILE", "apply_advice", "apply_defaults", "choose_encoding", "collective_samples", "ddp_bucket_layout", "ddp_comm_hook",
    "documents_by_rank", "emulate_fsdp2", "fetch_events", "fit_collective_cost", "fit_overhead", "folder_parameters",
    "fit_reducer_cost", "make_optimizer",
    "free_port", "fsdp2_blocks", "join_gloo", "leave_rank", "measure_profiler_cost", "measure_reducer_overhead",
    "padded_bytes", "padded_comm_hook", "powersgd_comm_hook", "predict_traced_step", "profile_from_trace", "profile_from_traces", "profile_model",
    "read_advice", "read_profiler_cost", "read_reducer_calibration", "read_unprofiled_reference",
    "record_ddp_traces", "record_fsdp2_collectives", "reducer_cost_words", "replay_trace", "require_torch",
    "run_rank_processes",
    "small_model", "tiny_transformer", "wire_comm_hook", "with_reducer_overhead", "write_profiler_cost",
]
