"""fusionopt: communication scheduling for data-parallel deep learning.

Model how gradient communication overlaps computation, compute optimal or near-optimal
tensor fusion and partition schedules, and compare published heuristics against them.

The package by task (each name at the path it is documented under):

Describe a training step
    ``fusionopt.model.Profile`` (tensors' bytes and compute times; measured ones from
    ``fusionopt.integrations.profile_model``, the zoo's from ``fusionopt.zoo.profile``), a
    cost per message (``fusionopt.cost.AlphaBeta``, ``fusionopt.cost.network``; what a message
    carries on the wire: ``fusionopt.model.Encoded``, ``fusionopt.model.Cheapest``), and the
    ``fusionopt.model.Problem`` they make with a communication pattern: an all-reduce on
    that cost (``fusionopt.model.AllReduce``), or ``pattern=`` one of
    ``fusionopt.model.ParameterServer``, ``fusionopt.model.Decoupled``,
    ``fusionopt.model.FullySharded``, ``fusionopt.model.HSDP`` (each a
    ``fusionopt.model.Pattern``: its plans, timing, bound and refusals).
Judge a plan
    ``fusionopt.model.simulate`` (the model's one judge: a ``fusionopt.model.Timeline``),
    ``fusionopt.model.compute_pieces`` (the compute stream), plans
    ``fusionopt.model.Plan``, ``fusionopt.model.PSPlan``, ``fusionopt.model.DecoupledPlan``,
    ``fusionopt.model.ShardedPlan``, and lower bounds (``fusionopt.model.best_bound``).
Solve and compare
    ``fusionopt.solvers.solve`` (a ``fusionopt.solvers.Result``), ``fusionopt.solvers.methods``
    (the catalogue: framework baselines, papers, searches, exact methods),
    ``fusionopt.solvers.compare`` (a table, each plan's gap to a bound).
Settings for a framework
    ``fusionopt.advice.allreduce.ddp_settings``, ``fusionopt.advice.allreduce.horovod_settings``,
    ``fusionopt.advice.sharded.fsdp2_advice``,
    ``fusionopt.advice.sharded.zero3_settings``,
    ``fusionopt.advice.sharded.zero2_settings``; applied to a real job by
    ``fusionopt.integrations.apply_advice``.
Run and measure
    ``fusionopt.integrations.plan_reducer.PlanReducer`` (train with a plan; switch plans
    between steps), ``fusionopt.integrations.online.OnlinePlanner`` (re-plan a running job
    from its own timings),
    ``fusionopt.integrations.EmulatedLink`` (a slower network inside real frameworks),
    ``fusionopt.executor.run`` (a plan on local, MPI or NCCL ranks) and
    ``fusionopt.executor.calibrate`` (a link's cost, measured).
Experiments and plots
    ``fusionopt.experiments.runner.run_sweep`` (grids of problems),
    ``fusionopt.viz.save_timeline`` and ``fusionopt.viz.save_sweep``; the ``fusionopt``
    command line (``python -m fusionopt --help``) does each of these from a shell.

Examples
--------
>>> import fusionopt
>>> profile = fusionopt.Profile.from_arrays([4e6, 1e6, 2e6], forward=[1e-3] * 3,
...                                         backward=[3e-3, 2e-3, 1e-3])
>>> problem = fusionopt.Problem(profile, fusionopt.cost.AlphaBeta(alpha=3e-3, beta=1e-9))
>>> round(fusionopt.solve(problem, "single").iteration_time * 1e3, 9)
19.0
"""

from fusionopt import cost
from fusionopt.model import (
    Chunk,
    Message,
    Plan,
    Problem,
    Profile,
    Timeline,
    evaluate_cuts,
    fusion_iteration_time,
    simulate,
)
from fusionopt.solvers import Result, Status, compare, methods, solve

__version__ = "0.1.0"

__all__ = [
    "Chunk", "Message", "Plan", "Problem", "Profile", "Result", "Status", "Timeline", "compare",
    "cost", "evaluate_cuts", "fusion_iteration_time", "methods", "simulate", "solve",
]
