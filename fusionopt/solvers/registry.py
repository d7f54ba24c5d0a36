"""One entry point for every method: :func:`solve`, :func:`methods` and :func:`compare`."""

from __future__ import annotations

import importlib
import inspect
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from fusionopt.model.problem import Problem
from fusionopt.solvers import baselines
from fusionopt.solvers.needs import Needs, needs_of
from fusionopt.solvers.result import Result


_SOLVED: ContextVar[dict[str, tuple[Problem, Result]] | None] = ContextVar("fusionopt_solved", default=None)
"""Within one :func:`compare`: each method's result on its problem, solved with the default
options, so a method that starts from other methods' plans (``layerwise-opt``, ``cpsat``'s
hints) is handed the comparison's own results instead of solving them again."""


@dataclass(frozen=True)
class Method:
    """A registered solver: ``function(problem, **options) -> Result``.

    ``target`` is the function or its import path ``"module:function"``, imported on first
    use so that heavy solvers (OR-Tools, HiGHS) cost nothing until they are asked for.
    """

    name: str
    target: Callable[..., Result] | str
    summary: str
    family: str
    in_default_comparison: bool = True

    @property
    def function(self) -> Callable[..., Result]:
        if callable(self.target):
            return self.target
        module_name, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attribute)

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


_REGISTRY: dict[str, Method] = {}


FAMILIES = {
    "framework baseline": "what a training framework does by default (DDP, Horovod, a parameter server)",
    "paper": "a published scheduler, as its paper or code runs it",
    "search": "a heuristic search, with its gap to a bound",
    "exact": "an exact method: a proved optimum over its plan space, or a certified gap",
}
"""The method families, each with what its members have in common."""

REFERENCE = {"all-reduce": "wfbp", "ps": "ps-default", "decoupled": "decoupled-wfbp", "fully-sharded": "sharded-wfbp"}
"""The method :func:`compare` measures speedups against, for each pattern of problem."""


def register(name: str, target: Callable[..., Result] | str, summary: str, *, family: str,
             in_default_comparison: bool = True) -> None:
    """Add a method under ``name``; ``target`` is a function or ``"module:function"``;
    ``family`` one of :data:`FAMILIES`.

    ``in_default_comparison``: whether :func:`compare` runs it when no methods are named
    (off for searches that are slow or limited in size). What the method can solve is read
    from its function's declaration (:func:`fusionopt.solvers.needs.declares`): a method
    that needs the plain model or layerwise sync is left out of that comparison on problems
    it refuses, and parameter-server and all-reduce methods each run on their own kind of
    problem only.
    """
    if name in _REGISTRY:
        raise ValueError(f"method {name!r} is already registered")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} for method {name!r}; families: {', '.join(FAMILIES)}")
    _REGISTRY[name] = Method(name, target, summary, family, in_default_comparison)


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
         family="exact", in_default_comparison=False)
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
         family="paper", in_default_comparison=False)
register("decoupled-opt", "fusionopt.solvers.decoupled:decoupled_opt",
         "decoupled all-reduce: local search over both groupings from the best of the others, any n",
         family="search")
register("decoupled-brute", "fusionopt.solvers.decoupled:decoupled_brute",
         "decoupled all-reduce, exact: every pair of contiguous groupings, n <= 8",
         family="exact", in_default_comparison=False)
register("decoupled-dp", "fusionopt.solvers.decoupled_dp:decoupled_dp",
         "decoupled all-reduce, exact over decoupled-brute's space, any n: tensor 0 ready last, or barrier sync "
         "without update time",
         family="exact", in_default_comparison=False)
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
    """The methods :func:`compare` runs when none are named (for ``problem``: without the
    plain-model methods when it has extensions on, with the layerwise-only ones when its
    sync is layerwise).

    >>> default_methods()[:2]
    ['wfbp', 'single']
    """
    extended = problem is not None and bool(problem.extensions)
    layerwise = problem is not None and problem.sync == "layerwise"
    pattern = "all-reduce" if problem is None else problem.pattern
    return [name for name, m in _REGISTRY.items()
            if m.in_default_comparison and not (extended and m.plain_only)
            and (layerwise or not m.layerwise_only) and not (layerwise and m.needs.barrier)
            and m.pattern == pattern]


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


@dataclass(frozen=True)
class ComparisonRow:
    """One method's figures in a :func:`compare` table (times in seconds)."""

    method: str
    iteration_time: float
    speedup: float              # T of the pattern's REFERENCE method (WFBP on all-reduce) / T of this method
    exposed: float
    messages: int
    status: str
    gap: float | None
    solve_seconds: float
    peak_memory: int | None = None   # fully sharded: the most bytes whole at once (MODEL.md 8.2)


def compare(problem: Problem, methods: Iterable[str] | None = None) -> list[ComparisonRow]:
    """Solve ``problem`` with each method and tabulate them against WFBP.

    Parameters
    ----------
    methods : iterable of str, optional
        Method names; default every registered method marked for the default comparison
        (the baselines and the DP; not the searches limited in size or time). WFBP is
        always solved as the reference for ``speedup``.

    Each method is solved once: a method that starts from other methods' plans
    (``layerwise-opt``) is handed the results this comparison solved, so its
    ``solve_seconds`` counts its own work only.

    Examples
    --------
    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> rows = compare(Problem(profile, AlphaBeta(3e-3, 1e-9)), ["wfbp", "single"])
    >>> [(r.method, round(r.iteration_time * 1e3, 6), round(r.speedup, 4)) for r in rows]
    [('wfbp', 20.0, 1.0), ('single', 19.0, 1.0526)]
    """
    if isinstance(methods, (str, bytes)):
        raise ValueError(f"methods must be a list of method names, got the string {methods!r} (write [{methods!r}])")
    names = default_methods(problem) if methods is None else list(methods)
    if not names:
        raise ValueError("compare needs at least one method")
    for name in names:
        get_method(name)
    base = REFERENCE[problem.pattern]
    token = _SOLVED.set({})
    try:
        results = {name: solve(problem, name) for name in dict.fromkeys(names)}
        reference = results[base] if base in results else solve(problem, base)
    finally:
        _SOLVED.reset(token)
    rows = []
    for name, r in results.items():
        rows.append(ComparisonRow(
            method=name,
            iteration_time=r.iteration_time,
            speedup=_speedup(reference.iteration_time, r.iteration_time),
            exposed=r.timeline.exposed if r.timeline is not None else float("nan"),
            messages=r.num_messages,
            status=str(r.status),
            gap=r.gap,
            solve_seconds=r.solve_seconds,
            peak_memory=None if r.timeline is None else r.timeline.peak_memory,
        ))
    return rows


def _speedup(reference: float, value: float) -> float:
    # A step of zero time (no compute, free network) is as fast as the reference or faster.
    if value > 0:
        return reference / value
    return 1.0 if reference == 0 else float("inf")


def format_table(rows: Iterable[ComparisonRow]) -> str:
    """A plain-text table of comparison rows, times in milliseconds (and peak memory in MiB
    when the rows have it: fully sharded problems)."""
    rows = list(rows)
    memory = any(r.peak_memory is not None for r in rows)
    header = ("method", "T (ms)", "speedup", "exposed (ms)", "messages", "gap to bound", "status")
    if memory:
        header = header[:5] + ("peak (MiB)",) + header[5:]
    lines = [header]
    for r in rows:
        gap = "-" if r.gap is None else f"{100 * r.gap:.2f}%"
        cells = (r.method, f"{1e3 * r.iteration_time:.3f}", f"{r.speedup:.3f}x",
                 f"{1e3 * r.exposed:.3f}", str(r.messages), gap, r.status)
        if memory:
            peak = "-" if r.peak_memory is None else f"{r.peak_memory / 2**20:.1f}"
            cells = cells[:5] + (peak,) + cells[5:]
        lines.append(cells)
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    out = []
    for k, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(line[1:], widths[1:])]
        out.append("  ".join(cells))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
