"""One entry point for every method: :func:`solve` and :func:`methods` (tables of several
methods: :mod:`fusionopt.solvers.comparison`)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from fusionopt.model.problem import Problem
from fusionopt.solvers import baselines
from fusionopt.solvers.needs import Needs, needs_of
from fusionopt.solvers.result import Result


_SOLVED: ContextVar[dict[str, tuple[Problem, Result]] | None] = ContextVar("fusionopt_solved", default=None)
"""Within :func:`solved_once`: each method's result on its problem, solved with the default
options, so a method that starts from other methods' plans (``layerwise-opt``, ``cpsat``'s
hints) is handed the comparison's own results instead of solving them again."""


@dataclass(frozen=True)
class Method:
    """A registered solver: ``function(problem, **options) -> Result``.

    ``target`` is the function or its import path ``"module:function"``, imported on first
    use so that heavy solvers (OR-Tools, HiGHS) cost nothing until they are asked for.
    ``space`` (exact methods): ``in_space(problem, plan) -> bool``, or its import path, true
    for the plans of the space the method is exact over, so that its proven bound also
    bounds another method's plan of that space.
    """

    name: str
    target: Callable[..., Result] | str
    summary: str
    family: str
    in_default_comparison: bool = True
    space: Callable[[Problem, Any], bool] | str | None = None

    @property
    def function(self) -> Callable[..., Result]:
        return _imported(self.target)

    @property
    def in_space(self) -> Callable[[Problem, Any], bool] | None:
        """The membership test of the plan space the method is exact over (None: not declared)."""
        return None if self.space is None else _imported(self.space)

    @property
    def needs(self) -> Needs:
        """What the method can solve, as its function declares it (:mod:`fusionopt.solvers.needs`)."""
        return needs_of(self.function)

    @property
    def plain_only(self) -> bool:
        """Needs the plain model (no copy cost, contention or several channels)."""
        return self.needs.plain

    @property
    def layerwise_only(self) -> bool:
        """Needs ``sync="layerwise"`` (the partition schedulers)."""
        return self.needs.layerwise

    @property
    def pattern(self) -> str:
        """The pattern of the problems it plans: ``"all-reduce"``, ``"ps"`` or ``"decoupled"``."""
        return self.needs.pattern

    @property
    def options(self) -> dict[str, Any]:
        """Keyword options with their defaults."""
        signature = inspect.signature(self.function)
        return {
            p.name: p.default
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }


def _imported(target: Callable | str) -> Callable:
    if callable(target):
        return target
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


_REGISTRY: dict[str, Method] = {}


FAMILIES = {
    "framework baseline": "what a training framework does by default (DDP, Horovod, a parameter server)",
    "paper": "a published scheduler, as its paper or code runs it",
    "search": "a heuristic search, with its gap to a bound",
    "exact": "an exact method: a proved optimum over its plan space, or a certified gap",
}
"""The method families, each with what its members have in common."""

REFERENCE = {"all-reduce": "wfbp", "ps": "ps-default", "decoupled": "decoupled-wfbp", "fully-sharded": "sharded-wfbp"}
"""The method :func:`~fusionopt.solvers.comparison.compare` measures speedups against, for
each pattern of problem."""


def register(name: str, target: Callable[..., Result] | str, summary: str, *, family: str,
             in_default_comparison: bool = True, space: Callable[[Problem, Any], bool] | str | None = None) -> None:
    """Add a method under ``name``; ``target`` is a function or ``"module:function"``;
    ``family`` one of :data:`FAMILIES`.

    ``in_default_comparison``: whether :func:`~fusionopt.solvers.comparison.compare` runs it
    when no methods are named (off for searches that are slow or limited in size). What the
    method can solve is read from its function's declaration
    (:func:`fusionopt.solvers.needs.declares`): a method that needs the plain model or
    layerwise sync is left out of that comparison, with its reason, on problems it refuses,
    and each pattern's methods run on their own kind of problem only. ``space``: see
    :class:`Method`.
    """
    if name in _REGISTRY:
        raise ValueError(f"method {name!r} is already registered")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} for method {name!r}; families: {', '.join(FAMILIES)}")
    _REGISTRY[name] = Method(name, target, summary, family, in_default_comparison, space)


register("wfbp", baselines.wfbp,
         "wait-free backpropagation: one message per tensor",
         family="framework baseline")
register("single", baselines.single,
         "SyncEASGD: one message after the backward",
         family="framework baseline")
register("threshold", baselines.threshold,
         "fuse consecutive tensors up to a byte threshold",
         family="framework baseline")
register("ddp", "fusionopt.solvers.ddp:ddp",
         "PyTorch DDP buckets as torch 2.13 builds them (1 MiB first, then 25 MiB)",
         family="framework baseline")
register("horovod", "fusionopt.solvers.horovod:horovod",
         "Horovod tensor fusion at cycle ticks (1 ms, 128 MiB; NCCL behaviour by default)",
         family="framework baseline")
register("mgwfbp", "fusionopt.solvers.mgwfbp:mgwfbp",
         "MG-WFBP merge rule (a greedy; not optimal in general)",
         family="paper")
register("ssa", "fusionopt.solvers.ssa:ssa",
         "sparrow search (Xue and Shen 2020) over cut vectors",
         family="search", in_default_comparison=False)
register("gradssa", "fusionopt.solvers.ssa:gradssa",
         "our sparrow search for fusion: seeded, with local search",
         family="search", in_default_comparison=False)
register("of-wfbp", "fusionopt.solvers.of_wfbp:of_wfbp",
         "OF-WFBP: closed-form cases, else GradSSA (reconstructed)",
         family="paper", in_default_comparison=False)
register("dp", "fusionopt.solvers.dp:dp",
         "exact fusion dynamic programme (O(n) affine, O(n^2) any cost)",
         family="exact")
register("brute", "fusionopt.solvers.brute:brute",
         "exact: every fusion plan, n <= 20 (any model option)",
         family="exact", in_default_comparison=False, space="fusionopt.solvers.brute:in_fusion_space")
register("cpsat", "fusionopt.solvers.cpsat:cpsat",
         "exact: OR-Tools CP-SAT model, anytime",
         family="exact", in_default_comparison=False)
register("milp", "fusionopt.solvers.milp:milp",
         "exact: MILP solved by HiGHS, independent formulation",
         family="exact", in_default_comparison=False)
register("p3", "fusionopt.solvers.priority:p3",
         "P3: 40k-parameter slices, priority by forward index (layerwise)",
         family="paper")
register("bytescheduler", "fusionopt.solvers.bytescheduler:bytescheduler",
         "ByteScheduler on Horovod 0.16: partitions, credit, cycle-tick fusion (layerwise)",
         family="paper")
register("bytescheduler-tuned", "fusionopt.solvers.bytescheduler:bytescheduler_tuned",
         "ByteScheduler with partition and credit searched on a grid (layerwise)",
         family="paper")
register("layerwise-opt", "fusionopt.solvers.layerwise_opt:layerwise_opt",
         "ours: the best layerwise start improved by local search (layerwise)",
         family="search")
register("ps-default", "fusionopt.solvers.ps:ps_default",
         "parameter server: one push after the backward, one pull before the forward",
         family="framework baseline")
register("ps-layer", "fusionopt.solvers.ps:ps_layer",
         "parameter server: one push and one pull per tensor, overlapping the compute",
         family="framework baseline")
register("ibatch", "fusionopt.solvers.ipart:ibatch",
         "iBatch: pulls batched greedily with the forward (parameter server; reconstructed)",
         family="paper")
register("ipart", "fusionopt.solvers.ipart:ipart",
         "iPart: greedy partitions both ways with partitioned compute (parameter server; reconstructed)",
         family="paper")
register("ps-brute", "fusionopt.solvers.ps_exact:ps_brute",
         "parameter server, exact: every push and pull grouping (whole tensors or a unit grid), small n",
         family="exact", in_default_comparison=False)
register("ps-dp", "fusionopt.solvers.ps_exact:ps_dp",
         "parameter server: push and pull DPs (exact over whole tensors when updates cost no time per byte)",
         family="exact")
register("ps-cpsat", "fusionopt.solvers.ps_exact:ps_cpsat",
         "parameter server, exact: CP-SAT over push and pull groupings, anytime",
         family="exact", in_default_comparison=False)
register("usbyte", "fusionopt.solvers.usbyte:usbyte",
         "US-Byte: unequal blocks in gaps, priority search (layerwise)",
         family="paper", in_default_comparison=False)
register("decoupled-wfbp", "fusionopt.solvers.decoupled:decoupled_wfbp",
         "decoupled all-reduce: a reduce-scatter per tensor when ready, an all-gather per tensor in forward order",
         family="framework baseline")
register("megatron", "fusionopt.solvers.decoupled:megatron",
         "Megatron-LM buckets (max(4e7, 1e6 x dp) params), distributed optimiser, gathers in the step (barrier)",
         family="framework baseline")
register("megatron-overlap", "fusionopt.solvers.decoupled:megatron_overlap",
         "Megatron-LM with overlap_param_gather: buckets gathered one ahead by forward pre-hooks (layerwise)",
         family="framework baseline")
register("zero2", "fusionopt.solvers.zero2:zero2",
         "DeepSpeed ZeRO-2: 5e8-element buckets all-reduced (overlap_comm: on their own stream), one gather (barrier)",
         family="framework baseline")
register("dear", "fusionopt.solvers.decoupled:dear",
         "DeAR: 25 MB module groups, reduce-scatters in the backward, gathers one ahead in the forward (layerwise)",
         family="paper")
register("decoupled-opt", "fusionopt.solvers.decoupled:decoupled_opt",
         "decoupled all-reduce: local search over both groupings from the best of the others, any n",
         family="search")
register("decoupled-brute", "fusionopt.solvers.decoupled:decoupled_brute",
         "decoupled all-reduce, exact: every pair of contiguous groupings, n <= 8",
         family="exact", in_default_comparison=False, space="fusionopt.solvers.decoupled:in_grouping_space")
register("decoupled-dp", "fusionopt.solvers.decoupled_dp:decoupled_dp",
         "decoupled all-reduce, exact over decoupled-brute's space, any n: tensor 0 ready last, or barrier sync "
         "without update time",
         family="exact", space="fusionopt.solvers.decoupled:in_grouping_space")
register("decoupled-cpsat", "fusionopt.solvers.decoupled_cpsat:decoupled_cpsat",
         "decoupled all-reduce, exact: CP-SAT over both groupings and their interleaving on the channel, "
         "n <= 10 (every reduce-scatter first with interleave=False, n <= 40)",
         family="exact", in_default_comparison=False)

register("sharded-wfbp", "fusionopt.solvers.sharded:sharded_wfbp",
         "fully sharded: a unit per tensor, resharded, prefetch one ahead each way (the unfused reference)",
         family="framework baseline")
register("fsdp2", "fusionopt.solvers.sharded:fsdp2",
         "PyTorch FSDP2 (torch 2.13): fully_shard per block and on the root, blocks resharded, implicit prefetch",
         family="framework baseline")
register("sharded-opt", "fusionopt.solvers.sharded:sharded_opt",
         "fully sharded: local search over units, reshard flags, prefetch depths and root under the memory cap "
         "(reduce_groups=True: also reduce-scatter groups)",
         family="search")
register("sharded-brute", "fusionopt.solvers.sharded:sharded_brute",
         "fully sharded, exact: every plan over at most 8 atoms (units, reshard flags, depths, root)",
         family="exact", in_default_comparison=False)
register("zero3", "fusionopt.solvers.zero3:zero3",
         "DeepSpeed ZeRO-3 (0.19.6 defaults): 5e7-element prefetch buckets, 5e8-element reduce-scatter buckets",
         family="framework baseline")
register("inductor", "fusionopt.solvers.inductor:inductor",
         "TorchInductor (torch 2.13) FSDP bucketing: FSDP2's collectives merged greedily under a bandwidth cap",
         family="framework baseline")


def methods() -> dict[str, str]:
    """Registered method names with a one-line description.

    >>> "wfbp" in methods()
    True
    """
    return {name: m.summary for name, m in _REGISTRY.items()}


def default_methods(problem: Problem | None = None) -> list[str]:
    """The methods :func:`~fusionopt.solvers.comparison.compare` runs when none are named,
    as their declarations allow (for ``problem``: without the plain-model methods when it has
    extensions on, with the layerwise-only ones when its sync is layerwise); a method may
    still refuse the problem when it is solved (compare then leaves it out with its reason).

    >>> default_methods()[:2]
    ['wfbp', 'single']
    """
    extensions = set() if problem is None else set(problem.extensions)
    layerwise = problem is not None and problem.sync == "layerwise"
    pattern = "all-reduce" if problem is None else problem.pattern
    return [name for name, m in _REGISTRY.items()
            if m.in_default_comparison and not (m.plain_only and extensions - set(m.needs.takes))
            and (layerwise or not m.layerwise_only) and not (layerwise and m.needs.barrier)
            and m.pattern == pattern]


def comparison_candidates(problem: Problem | None = None) -> list[str]:
    """The methods of ``problem``'s pattern marked for the default comparison, whether or not
    they take ``problem``: :func:`default_methods` and those its declarations leave out.

    >>> [m for m in comparison_candidates() if m not in default_methods()]
    ['p3', 'bytescheduler', 'bytescheduler-tuned', 'layerwise-opt']
    """
    pattern = "all-reduce" if problem is None else problem.pattern
    return [name for name, m in _REGISTRY.items() if m.in_default_comparison and m.pattern == pattern]


def get_method(name: str) -> Method:
    """The registered :class:`Method` called ``name``; ``ValueError`` listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown method {name!r}; known methods: {known}") from None


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
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    entry = get_method(method)
    if entry.pattern != problem.pattern:
        kind = {"ps": "a parameter-server", "decoupled": "a decoupled all-reduce", "all-reduce": "an all-reduce",
                "fully-sharded": "a fully sharded"}
        has = {"ps": "a parameter server", "decoupled": "a decoupled all-reduce (decoupled=...)",
               "all-reduce": "all-reduce (no ps)", "fully-sharded": "full sharding (fully_sharded=...)"}
        others = ", ".join(n for n, m in _REGISTRY.items() if m.pattern == problem.pattern)
        raise ValueError(f"method {method!r} is {kind[entry.pattern]} method and this problem uses "
                         f"{has[problem.pattern]}; methods for it: {others}")
    allowed = entry.options
    for key in options:
        if key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"unknown option {key!r} for method {method!r}; its options: {listed}")
    solved = _SOLVED.get()
    if solved is None or options:
        return entry.function(problem, **options)
    if method in solved and solved[method][0] is problem:
        return solved[method][1]
    result = entry.function(problem)
    solved[method] = (problem, result)
    return result


@contextlib.contextmanager
def solved_once() -> Iterator[None]:
    """Within this context, :func:`solve` with no options solves each method once per problem
    and hands later calls (a method that starts from another's plan) the same result."""
    token = _SOLVED.set({})
    try:
        yield
    finally:
        _SOLVED.reset(token)
