"""fusionopt: communication scheduling for data-parallel deep learning.

Model how gradient communication overlaps computation, compute optimal or near-optimal
tensor fusion and partition schedules, and compare published heuristics against them.

The package by task. Each name has one public path, the one given here; every module
behind these faces is private (``fusionopt.model._profile`` and alike) and may change.
The faces: :mod:`fusionopt.model`, :mod:`fusionopt.cost`, :mod:`fusionopt.solvers` (and its
families :mod:`~fusionopt.solvers.baselines`, :mod:`~fusionopt.solvers.papers`,
:mod:`~fusionopt.solvers.searches`, :mod:`~fusionopt.solvers.exact`), :mod:`fusionopt.advice`,
:mod:`fusionopt.integrations`, :mod:`fusionopt.executor`, :mod:`fusionopt.experiments`,
:mod:`fusionopt.zoo` (with its calibration data :mod:`~fusionopt.zoo.calibrated`,
:mod:`~fusionopt.zoo.fitting`, :mod:`~fusionopt.zoo.published`), :mod:`fusionopt.viz`,
:mod:`fusionopt.cli`, :mod:`fusionopt.reporting` and :mod:`fusionopt.checks`.

Describe a training step
    ``fusionopt.model.Profile`` (tensors' bytes and compute times; measured ones from
    ``fusionopt.integrations.profile_model``, the zoo's from ``fusionopt.zoo.profile``), a
    cost per message (``fusionopt.cost.AlphaBeta``, ``fusionopt.cost.network``; what a message
    carries on the wire: ``fusionopt.cost.Encoded``, ``fusionopt.cost.Cheapest``), and the
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
    ``fusionopt.advice.ddp_settings``, ``fusionopt.advice.horovod_settings``,
    ``fusionopt.advice.fsdp2_advice``,
    ``fusionopt.advice.zero3_settings``,
    ``fusionopt.advice.zero2_settings``; applied to a real job by
    ``fusionopt.integrations.apply_advice``.
Run and measure
    ``fusionopt.integrations.PlanReducer`` (train with a plan; switch plans
    between steps), ``fusionopt.integrations.OnlinePlanner`` (re-plan a running job
    from its own timings),
    ``fusionopt.integrations.EmulatedLink`` (a slower network inside real frameworks),
    ``fusionopt.executor.run`` (a plan on local, MPI or NCCL ranks) and
    ``fusionopt.executor.calibrate`` (a link's cost, measured).
Experiments and plots
    ``fusionopt.experiments.run_sweep`` (grids of problems),
    ``fusionopt.viz.save_timeline`` and ``fusionopt.viz.save_sweep``; the ``fusionopt``
    command line (``python -m fusionopt --help``) does each of these from a shell.

Examples
--------
>>> from fusionopt.cost import AlphaBeta
>>> from fusionopt.model import Problem, Profile
>>> from fusionopt.solvers import solve
>>> profile = Profile.from_arrays([4e6, 1e6, 2e6], forward=[1e-3] * 3, backward=[3e-3, 2e-3, 1e-3])
>>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
>>> round(solve(problem, "single").iteration_time * 1e3, 9)
19.0
"""


import importlib
import warnings

from fusionopt import _aliases

__version__ = "0.1.0"

_aliases.install()

_FACES = ("advice", "checks", "cli", "cost", "executor", "experiments", "integrations", "model", "reporting",
          "solvers", "viz", "zoo")
__all__ = ["__version__", *_FACES]

# The previous release's top-level names, deprecated for one release: each has one public path now.
_MOVED = {name: "model" for name in ("Chunk", "Message", "Plan", "Problem", "Profile", "Timeline", "evaluate_cuts",
                                     "fusion_iteration_time", "simulate")}
_MOVED.update({name: "solvers" for name in ("Result", "Status", "compare", "methods", "solve")})


def __getattr__(name: str):
    """The faces load when first used; the previous release's top-level names warn."""
    if name in _FACES:
        return importlib.import_module(f"fusionopt.{name}")
    if name in _MOVED:
        face = _MOVED[name]
        warnings.warn(f"fusionopt.{name} is deprecated and will be removed: use fusionopt.{face}.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(f"fusionopt.{face}"), name)
    raise AttributeError(f"module 'fusionopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FACES))
