"""The pure timing model (MODEL.md): profiles, patterns, plans, problems, the simulator.

numpy only: nothing here imports a solver. The cost models a message is priced with have
their own face, :mod:`fusionopt.cost`.

Describe a step
    :class:`Profile` (per-tensor bytes and compute seconds; files: :meth:`Profile.read`,
    :func:`read_profile_csv`, :func:`write_profile_csv`, :func:`fit_step_parts`);
    :class:`Problem`, a profile under one :class:`Pattern`: :class:`AllReduce`,
    :class:`ParameterServer` (:func:`ps_cost`), :class:`Decoupled`, :class:`FullySharded`,
    :class:`HSDP`.
Plans
    :class:`Plan` of :class:`Message` s of :class:`Chunk` s; :class:`PSPlan`
    (:func:`stream_offsets`), :class:`DecoupledPlan`, :class:`ShardedPlan`.
Judge a plan
    :func:`simulate`, the model's one judge (a :class:`Timeline`), and
    :func:`compute_pieces` (:class:`ComputePiece`); the fusion fast paths
    :func:`fusion_iteration_time`, :func:`evaluate_cuts`, :func:`score_cuts`,
    :func:`block_iteration_time`, :func:`fusion_message_times`, :func:`arc_times`,
    :func:`backward_arrays`, :func:`layerwise_slack`, :func:`fifo_ends`; the exact fusion DP
    :func:`optimal_fusion` (:func:`fewest_messages`).
The engine
    A step is a :class:`Program` of ops (:data:`COMPUTE`, :data:`EMIT`, :data:`WAIT`,
    :data:`MARK`, :data:`PUBLISH`, :data:`FORWARD`, :data:`SPAN`, :data:`AT`,
    :data:`CHANNEL`) run by :func:`run_program` against a channel (:class:`Fifo`,
    :class:`EventChannels`, :class:`PriorityChannels`) and :func:`replay` ed; each pattern's
    program: :func:`allreduce_program`, :func:`event_program` (:data:`PACKED`),
    :func:`dispatch_program`, :func:`ps_program` (:data:`PUSH`, :data:`PULL`),
    :func:`sharded_program` (:data:`ALL_GATHER`, :data:`REDUCE_SCATTER`), each pinned to its
    fast path: :func:`simulate_program` (:data:`ALL_REDUCE`, :data:`EMITTED`),
    :func:`simulate_events`, :func:`priority_dispatch` (:func:`credit_window`,
    :func:`free_channel_window`), :func:`simulate_ps`, :func:`simulate_ps_program`,
    :func:`offsets_iteration_time`, :func:`pull_sources`, :func:`pieces_by_tensor`,
    :func:`range_max`, :func:`simulate_decoupled`, :func:`simulate_sharded`,
    :func:`simulate_sharded_program`, :func:`one_pass` (where it :func:`applies`),
    :func:`channel_schedule`; the cycle-tick policies :func:`cycle_ticks`, :func:`credit_ticks`
    (a :class:`TickRun`; on the engine :func:`tick_policy`, :class:`TickChannels`);
    :func:`block_of` names a tensor's block.
Lower bounds
    :func:`best_bound` and its parts: :func:`compute_bound`, :func:`channel_bound`,
    :func:`fusion_bound`, :func:`last_message_bound`, :func:`fluid_bound`,
    :func:`fluid_latency_bound`, :func:`fluid_prefix_done`, :func:`least_channel_time`,
    :func:`ps_lower_bound`, :func:`decoupled_lower_bound`, :func:`sharded_lower_bound`,
    :func:`sharded_memory_floor`.
"""

from fusionopt.model._allreduce import AllReduce
from fusionopt.model._allreduce_program import ALL_REDUCE, EMITTED, allreduce_program, simulate_program
from fusionopt.model._blocks import block_iteration_time
from fusionopt.model._bounds import (
    best_bound, channel_bound, compute_bound, decoupled_lower_bound, fluid_bound, fluid_latency_bound,
    fluid_prefix_done, fusion_bound, last_message_bound, least_channel_time, ps_lower_bound, sharded_lower_bound,
    sharded_memory_floor,
)
from fusionopt.model._decoupled import Decoupled
from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._decoupled_timing import simulate_decoupled
from fusionopt.model._dispatch import (
    PriorityChannels, credit_window, dispatch_program, free_channel_window, priority_dispatch,
)
from fusionopt.model._events import PACKED, EventChannels, event_program, simulate_events
from fusionopt.model._fifo import fifo_ends
from fusionopt.model._fusion import arc_times, backward_arrays, fusion_message_times, layerwise_slack
from fusionopt.model._fusion_dp import fewest_messages, optimal_fusion
from fusionopt.model._fusion_eval import evaluate_cuts, fusion_iteration_time, score_cuts
from fusionopt.model._hsdp import HSDP
from fusionopt.model._names import block_of
from fusionopt.model._pattern import Pattern
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._profile_csv import read_profile_csv, write_profile_csv
from fusionopt.model._ps import ParameterServer, ps_cost
from fusionopt.model._ps_plan import PSPlan, stream_offsets
from fusionopt.model._ps_program import PULL, PUSH, ps_program, simulate_ps_program
from fusionopt.model._ps_timing import offsets_iteration_time, pieces_by_tensor, pull_sources, range_max, simulate_ps
from fusionopt.model._sharded import FullySharded
from fusionopt.model._sharded_pass import applies, one_pass
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_program import sharded_program
from fusionopt.model._sharded_timing import ALL_GATHER, REDUCE_SCATTER, simulate_sharded, simulate_sharded_program
from fusionopt.model._sharing import channel_schedule
from fusionopt.model._simulator import compute_pieces, simulate
from fusionopt.model._step_parts import fit_step_parts
from fusionopt.model._step_program import (
    AT, CHANNEL, COMPUTE, EMIT, FORWARD, MARK, PUBLISH, SPAN, WAIT, Fifo, Program, replay, run_program,
)
from fusionopt.model._ticks import TickChannels, TickRun, credit_ticks, cycle_ticks, tick_policy
from fusionopt.model._timeline import ComputePiece, Timeline

__all__ = [
    "ALL_GATHER", "ALL_REDUCE", "AT", "AllReduce", "CHANNEL", "COMPUTE", "Chunk", "ComputePiece", "Decoupled",
    "DecoupledPlan", "EMIT", "EMITTED", "EventChannels", "FORWARD", "Fifo", "FullySharded", "HSDP", "MARK",
    "Message", "PACKED", "PSPlan", "PUBLISH", "PULL", "PUSH", "ParameterServer", "Pattern", "Plan",
    "PriorityChannels", "Problem", "Profile", "Program", "REDUCE_SCATTER", "SPAN", "ShardedPlan", "TickChannels",
    "TickRun", "Timeline", "WAIT", "allreduce_program", "applies", "arc_times", "backward_arrays", "best_bound",
    "block_iteration_time", "block_of", "channel_bound", "channel_schedule", "compute_bound", "compute_pieces",
    "credit_ticks", "credit_window", "cycle_ticks", "decoupled_lower_bound", "dispatch_program", "evaluate_cuts",
    "event_program", "fewest_messages", "fifo_ends", "fit_step_parts", "fluid_bound", "fluid_latency_bound",
    "fluid_prefix_done", "free_channel_window", "fusion_bound", "fusion_iteration_time", "fusion_message_times",
    "last_message_bound", "layerwise_slack", "least_channel_time", "offsets_iteration_time", "one_pass",
    "optimal_fusion", "pieces_by_tensor", "priority_dispatch", "ps_cost", "ps_lower_bound", "ps_program",
    "pull_sources", "range_max", "read_profile_csv", "replay", "run_program", "score_cuts", "sharded_lower_bound",
    "sharded_memory_floor", "sharded_program", "simulate", "simulate_decoupled", "simulate_events",
    "simulate_program", "simulate_ps", "simulate_ps_program", "simulate_sharded", "simulate_sharded_program",
    "stream_offsets", "tick_policy", "write_profile_csv",
]
