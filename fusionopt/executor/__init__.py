"""The executor: run plans with real collectives and measure them against the model.

:func:`run` runs a :class:`~fusionopt.model.plan.Plan` on a
:class:`~fusionopt.model.problem.Problem` through a communication backend: every rank
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
>>> from fusionopt.model import AlphaBeta, Plan, Problem, Profile
>>> profile = Profile.from_arrays([4096, 1024, 2048], [1e-4] * 3, [3e-4, 2e-4, 1e-4])
>>> problem = Problem(profile, AlphaBeta(alpha=1e-4, beta=1e-9))
>>> m = run(problem, Plan.per_tensor(profile), ranks=3, iterations=3, warmup=1)
>>> m.correct, m.ranks, m.iteration_times.shape, m.message_end.shape
(True, 3, (3,), (3, 3))
"""

from fusionopt.executor.calibrate import Calibration, calibrate, fit_alpha_beta
from fusionopt.executor.communicator import BACKENDS, Communicator
from fusionopt.executor.driver import run
from fusionopt.executor.errors import CollectiveTimeout, CorrectnessError, GroupAborted, PlanMismatchError
from fusionopt.executor.job import Fault, Job, scale_compute
from fusionopt.executor.measurement import Measurement

__all__ = [
    "BACKENDS", "Calibration", "CollectiveTimeout", "Communicator", "CorrectnessError", "Fault",
    "GroupAborted", "Job", "Measurement", "PlanMismatchError", "calibrate", "fit_alpha_beta", "run",
    "scale_compute",
]
