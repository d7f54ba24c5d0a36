"""One entry point for every method: :func:`solve` (tables of several methods:
:mod:`fusionopt.solvers._comparison`).

Each solver registers itself where it is defined (:func:`fusionopt.solvers._catalogue.method`),
in the folder of its family: ``baselines`` (what the frameworks do), ``papers`` (the seed
papers' schedulers), ``searches`` (heuristics with a gap) and ``exact``. This module imports
every solver module, so that all are registered, and puts them in the order of listings and
comparison tables (:data:`ORDER`). No solver imports it: a solver that
starts from other methods' plans runs them through :mod:`fusionopt.solvers._warm`.
"""

from __future__ import annotations

from typing import Any

from fusionopt.model._problem import Problem
from fusionopt.solvers.baselines import (  # noqa: F401  (each registers its methods)
    _ddp, _fsdp2, _horovod, _inductor, _megatron, _ps,
    _wfbp, _zero2, _zero3,
)
from fusionopt.solvers.exact import (  # noqa: F401
    _brute, _cpsat, _decoupled_brute, _decoupled_cpsat,
    _decoupled_dp, _dp, _milp, _ps_brute, _ps_cpsat,
    _ps_dp, _sharded_brute,
)
from fusionopt.solvers.papers import (  # noqa: F401
    _bytescheduler, _dear, _ipart, _mgwfbp, _of_wfbp,
    _priority, _usbyte,
)
from fusionopt.solvers.searches import (  # noqa: F401
    _decoupled_opt, _layerwise_opt, _sharded_opt, _ssa,
)
from fusionopt.solvers._catalogue import (FAMILIES, REFERENCE, Method, arrange, catalogue, comparison_candidates,
                                         default_methods, get_method, methods, register, run, solved_once)
from fusionopt.solvers._result import Result

ORDER = (
    "wfbp", "single", "threshold", "ddp", "horovod", "mgwfbp", "ssa", "gradssa", "of-wfbp", "dp", "dp-apart", "brute",
    "cpsat",
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
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
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
