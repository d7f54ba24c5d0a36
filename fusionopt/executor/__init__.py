"""The executor: run plans with real collectives and measure them against the model.

:func:`run` runs a :class:`~fusionopt.model.Plan` on a
:class:`~fusionopt.model.Problem` through a communication backend: every rank
emulates the profile's compute, sends the plan's messages in plan order (pack, all-reduce,
unpack) and runs the next forward per the problem's sync. It returns a :class:`Measurement`:
per-step measured iteration times and message times beside the simulator's prediction, and a
correctness verdict (every byte of every tensor equals its exact sum after every step).

:func:`calibrate` measures a message's time against its size on a backend and fits
``AlphaBeta`` and ``PiecewiseLinear`` cost models, written as cost JSON.

Backends, behind one small :class:`Communicator` interface:

* ``local``: ranks as threads of this process, numpy buffers; no dependencies.
* ``mpi``: one process per rank under ``mpiexec`` (extra ``mpi``: mpi4py and MPICH);
  ``python -m fusionopt.executor JOB.json`` is the per-rank entry point.
* ``nccl``: one GPU per rank through CuPy's NCCL (extra ``gpu``); with one GPU, an
  emulated link holds the stream for the cost model's time (results labelled emulated).

Examples
--------
>>> from fusionopt.cost import AlphaBeta
>>> from fusionopt.model import Plan, Problem, Profile
>>> profile = Profile.from_arrays([4096, 1024, 2048], [1e-4] * 3, [3e-4, 2e-4, 1e-4])
>>> problem = Problem(profile, AlphaBeta(alpha=1e-4, beta=1e-9))
>>> m = run(problem, Plan.per_tensor(profile), ranks=3, iterations=3, warmup=1)
>>> m.correct, m.ranks, m.iteration_times.shape, m.message_end.shape
(True, 3, (3,), (3, 3))
"""

from fusionopt.executor._alignment_fit import alignment_sizes, fit_alignment
from fusionopt.executor._calibrate import (
    Calibration, calibrate, default_sizes, fit_alpha_beta, fit_casts, from_records, time_message,
)
from fusionopt.executor._communicator import BACKENDS, Communicator
from fusionopt.executor._contention import (
    CONTENTION_SCHEMA, Contention, ContentionSpec, contention_factors, measure_rank, read_contention,
)
from fusionopt.executor._cuda_streams import CudaStreams
from fusionopt.executor._driver import run, run_local
from fusionopt.executor._errors import CollectiveTimeout, CorrectnessError, GroupAborted, PlanMismatchError
from fusionopt.executor._faults import FaultyCommunicator
from fusionopt.executor._footprint import check_host_memory, rank_bytes
from fusionopt.executor._gradients import Gradients
from fusionopt.executor._job import Fault, Job, scale_compute
from fusionopt.executor._layout import Layout
from fusionopt.executor._local import LocalGroup, run_threads
from fusionopt.executor._measurement import Measurement, assemble
from fusionopt.executor._mpi import mpiexec
from fusionopt.executor._powersgd import PowerSGDMessages
from fusionopt.executor._programs import build_program
from fusionopt.executor._runner import RankRunner
from fusionopt.executor._shard_data import ShardData
from fusionopt.executor._shards import ShardLayout
from fusionopt.executor._streams import Streams, run_stream_rank

__all__ = [
    "BACKENDS", "CONTENTION_SCHEMA", "Calibration", "CollectiveTimeout", "Communicator", "Contention",
    "ContentionSpec", "CorrectnessError", "CudaStreams", "Fault", "FaultyCommunicator", "Gradients", "GroupAborted",
    "Job", "Layout", "LocalGroup", "Measurement", "PlanMismatchError", "PowerSGDMessages", "RankRunner", "ShardData",
    "ShardLayout", "Streams",
    "alignment_sizes", "assemble", "build_program", "calibrate", "check_host_memory", "contention_factors",
    "default_sizes", "fit_alignment", "fit_alpha_beta", "fit_casts", "from_records", "measure_rank", "mpiexec", "rank_bytes",
    "read_contention", "run", "run_local", "run_stream_rank", "run_threads", "scale_compute", "time_message",
]
