"""One entry point for every method: :func:`solve` (tables of several methods:
:mod:`fusionopt.solvers.comparison`).

Each solver registers itself where it is defined (:func:`fusionopt.solvers.catalogue.method`),
in the folder of its family: ``baselines`` (what the frameworks do), ``papers`` (the seed
papers' schedulers), ``searches`` (heuristics with a gap) and ``exact``. This module imports
every solver module, so that all are registered, and puts them in the order of listings and
comparison tables (:data:`ORDER`). No solver imports it: a solver that
starts from other methods' plans runs them through :mod:`fusionopt.solvers.warm`.
"""

from __future__ import annotations

from typing import Any

from fusionopt.model.problem import Problem
from fusionopt.solvers.baselines import (  # noqa: F401  (each registers its methods)
    ddp, fsdp2, horovod, inductor, megatron, ps, wfbp, zero2, zero3)
from fusionopt.solvers.exact import (  # noqa: F401
    brute, cpsat, decoupled_brute, decoupled_cpsat, decoupled_dp, dp, milp, ps_brute, ps_cpsat, ps_dp, sharded_brute)
from fusionopt.solvers.papers import bytescheduler, dear, ipart, mgwfbp, of_wfbp, priority, usbyte  # noqa: F401
from fusionopt.solvers.searches import decoupled_opt, layerwise_opt, sharded_opt, ssa  # noqa: F401
from fusionopt.solvers.catalogue import (FAMILIES, REFERENCE, Method, arrange, catalogue, comparison_candidates,
                                         default_methods, get_method, methods, register, run, solved_once)
from fusionopt.solvers.result import Result

ORDER = (
    "wfbp", "single", "threshold", "ddp", "horovod", "mgwfbp", "ssa", "gradssa", "of-wfbp", "dp", "brute", "cpsat",
    "milp", "p3", "bytescheduler", "bytescheduler-tuned", "layerwise-opt",
    "ps-default", "ps-layer", "ibatch", "ipart", "ps-brute", "ps-dp", "ps-cpsat", "usbyte",
    "decoupled-wfbp", "megatron", "megatron-overlap", "zero2", "dear", "decoupled-opt", "decoupled-brute",
    "decoupled-dp", "decoupled-cpsat",
    "sharded-wfbp", "fsdp2", "sharded-opt", "sharded-brute", "zero3", "inductor",
)
"""The methods in the order of listings and of a comparison's rows: the all-reduce methods
(framework baselines, papers, searches and exact methods), then the parameter server's, the
decoupled all-reduce's and the fully sharded ones. A method registered later follows them."""

arrange(ORDER)


def solve(problem: Problem, method: str = "wfbp", **options: Any) -> Result:
    """Solve ``problem`` with ``method``; the plan is re-evaluated by the simulator.

    Parameters
    ----------
    problem : Problem
    method : str
        A name from :func:`methods`.
    **options
        The method's keyword options; unknown ones raise ``ValueError``.

    Examples
    --------
    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=1e-3, beta=1e-9))
    >>> result = solve(problem, method="wfbp")
    >>> round(result.iteration_time * 1e3, 9), str(result.status)   # WFBP meets the fusion bound
    (14.0, 'OPTIMAL')
    >>> solve(problem, method="ddp", bucket_mb=25)
    Traceback (most recent call last):
    ...
    ValueError: unknown option 'bucket_mb' for method 'ddp'; its options: bucket_cap_mb, bucket_cap_mb_list, find_unused_parameters, static_graph
    """
    return run(problem, method, **options)


__all__ = ["FAMILIES", "ORDER", "REFERENCE", "Method", "catalogue", "comparison_candidates", "default_methods", "get_method",
           "methods", "register", "solve", "solved_once"]
