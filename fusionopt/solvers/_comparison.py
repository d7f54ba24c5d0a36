"""Several methods on one problem, side by side: :func:`compare` and :func:`format_table`.

A default comparison (no methods named) runs the methods of the problem's pattern marked for
it (:func:`~fusionopt.solvers.comparison_candidates`) and leaves out, each with its
one-line reason, those that do not take the problem: by their declaration (a layerwise-only
method under barrier sync) or by refusing it when solved (Megatron when updates follow the
gathers, TorchInductor's default cap on a measured cost). It never fails because one method
does not apply. A method named explicitly that does not take the problem is an error, in one
line: it was asked for.

Two things tighten the gap column:

* an exact method in the table proves its optimum for the plans of its space
  (:attr:`~fusionopt.solvers._registry.Method.in_space`); another row whose plan lies in that
  space has that optimum as a lower bound too (the optimum over a set of plans is at most the
  time of any plan in it), and is ``OPTIMAL`` when it meets it;
* a bound that says next to nothing about the communication is not used for a gap: a row's
  gap is shown only when its bound covers at least :data:`INFORMATIVE_SHARE` of the exposed
  communication of the best plan in the table (below).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from fusionopt.model._cost import CommCost
from fusionopt.model._powersgd import PowerSGD
from fusionopt.model._problem import Problem
from fusionopt.solvers._registry import (REFERENCE, comparison_candidates, default_methods, get_method, solve,
                                        solved_once)
from fusionopt.solvers._result import Result, with_bound
from fusionopt.solvers.baselines._ddp_powersgd import ddp_powersgd

NOT_UNDER_POWERSGD = {"horovod": "Horovod has no PowerSGD: torch's powerSGD_hook is a DDP comm hook"}
"""The methods a comparison under PowerSGD leaves out by name, with why."""

INFORMATIVE_SHARE = 0.1
"""A row's gap is shown when its lower bound ``L`` exceeds the compute floor ``C = B + F + U +
W`` (every plan's least ``T``) by at least this share of ``T* - C``, the exposed communication
of the fastest plan in the table: ``L - C >= 0.1 (T* - C)``. Below it the bound certifies under
a tenth of what the best known plan spends waiting for the network, and a gap of hundreds of
per cent measures the bound, not the plan."""


@dataclass(frozen=True)
class ComparisonRow:
    """One method's figures in a :func:`compare` table (times in seconds).

    ``lower_bound``: the bound ``gap`` is measured against; ``bound_from``: the exact method
    whose optimum it is, when its space holds this row's plan (else None: the row's own);
    ``informative``: whether that bound passes :data:`INFORMATIVE_SHARE` (the table shows
    ``gap`` only then).
    """

    method: str
    iteration_time: float
    speedup: float              # T of the pattern's REFERENCE method (WFBP on all-reduce) / T of this method
    exposed: float
    messages: int
    status: str
    gap: float | None
    solve_seconds: float
    peak_memory: int | None = None   # fully sharded: the most bytes whole at once (MODEL.md 8.2)
    lower_bound: float | None = None
    bound_from: str | None = None
    informative: bool = True


@dataclass(frozen=True)
class Comparison(Sequence):
    """The rows of :func:`compare` (a sequence of :class:`ComparisonRow`) and what the table
    says beside them: ``left_out`` maps each method of a default comparison that was not run
    to why (one line that starts with its name), in registry order; ``refused`` names those
    of them that refused the problem when solved (the others' declarations leave them out);
    ``compute_time`` is the compute floor ``B + F + U + W`` in seconds; ``measured_cost``: a
    communication cost of the problem is not ``alpha + beta S``."""

    rows: tuple[ComparisonRow, ...]
    left_out: Mapping[str, str] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    compute_time: float = 0.0
    measured_cost: bool = False

    def __getitem__(self, index: Any) -> Any:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)


def compare(problem: Problem, methods: Iterable[str] | None = None, *, powersgd: PowerSGD | None = None) -> Comparison:
    """Solve ``problem`` with each method and tabulate them against the pattern's reference
    (:data:`~fusionopt.solvers._registry.REFERENCE`: WFBP on all-reduce).

    Parameters
    ----------
    methods : iterable of str, optional
        Method names, each of which must take ``problem`` (else ``ValueError`` naming it).
        Default: every method of ``problem``'s pattern marked for the default comparison (the
        baselines and the exact methods that scale; not the searches limited in size or
        time), those that do not take the problem left out with their reason
        (:attr:`Comparison.left_out`). The reference is always solved for ``speedup``.

    powersgd : PowerSGD, optional
        Every plan judged under torch's ``powerSGD_hook`` once it compresses (MODEL.md section
        2.4): the methods solve ``powersgd.priced(problem)``, and the ``ddp`` row is DDP's
        buckets from the gradients' bytes under the hook
        (:func:`~fusionopt.solvers.baselines.ddp_powersgd`). The hook is DDP's: Horovod is
        left out, and so is a plan that cuts tensors or leaves the ready order (the hook
        compresses each whole gradient of a DDP bucket); named explicitly, each is an error.

    Each method is solved once: a method that starts from other methods' plans
    (``layerwise-opt``) is handed the results this comparison solved, so its
    ``solve_seconds`` counts its own work only.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> rows = compare(Problem(profile, AlphaBeta(3e-3, 1e-9)), ["wfbp", "single"])
    >>> [(r.method, round(r.iteration_time * 1e3, 6), round(r.speedup, 4)) for r in rows]
    [('wfbp', 20.0, 1.0), ('single', 19.0, 1.0526)]

    On a decoupled problem whose updates follow the gathers, Megatron's schedule (updates in
    the optimiser step) does not apply: the default table leaves it out and says why.

    >>> from fusionopt.model import Decoupled
    >>> timed = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3], update=[1e-4] * 3)
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> table = compare(Problem(timed, pattern=Decoupled(half, half, update_after_gather=True)))
    >>> [r.method for r in table]
    ['decoupled-wfbp', 'decoupled-opt', 'decoupled-dp']
    >>> table.left_out["megatron"]
    'megatron updates in the optimiser step, before gathering parameters; this problem updates after the gathers (update_after_gather=True)'
    >>> list(table.left_out)
    ['megatron', 'megatron-overlap', 'zero2', 'dear']
    """
    if isinstance(methods, (str, bytes)):
        raise ValueError(f"methods must be a list of method names, got the string {methods!r} (write [{methods!r}])")
    explicit = methods is not None
    gradients = problem                     # under PowerSGD, DDP's buckets come from its bytes
    if powersgd is not None and not isinstance(powersgd, PowerSGD):
        raise ValueError(f"powersgd must be a PowerSGD (fusionopt.cost) or None, got {powersgd!r}")
    if powersgd is not None:
        problem = powersgd.priced(problem)
    names = list(dict.fromkeys(methods)) if explicit else default_methods(problem)
    if explicit and not names:
        raise ValueError("compare needs at least one method")
    for name in names:
        get_method(name)
    left_out = {} if explicit else {name: _refusal(problem, name) for name in comparison_candidates(problem)
                                    if name not in names}
    base = REFERENCE[problem.pattern.step]
    refused = []
    results: dict[str, Result] = {}
    with solved_once():
        for name in names:
            try:
                if powersgd is not None and name in NOT_UNDER_POWERSGD:
                    raise ValueError(f"{name}: {NOT_UNDER_POWERSGD[name]}")
                result = ddp_powersgd(gradients, powersgd) if powersgd is not None and name == "ddp" else \
                    solve(problem, name)
                if powersgd is not None:
                    powersgd.require_buckets(result.plan, problem.profile, name)
                results[name] = result
            except ValueError as exc:           # the method refuses this problem: a note, not a failure
                if explicit:
                    raise
                left_out[name] = _named(name, str(exc))
                refused.append(name)
        reference = results[base] if base in results else solve(problem, base)
    results = _bounded_by_exact_optima(problem, results)
    compute = float(problem.profile.compute_time)
    feasible = [r.iteration_time for r, _ in results.values() if r.gap is not None]
    best = min(feasible, default=compute)
    rows = []
    for name, (r, source) in results.items():
        informative = (r.lower_bound is None or best <= compute
                       or r.lower_bound - compute >= INFORMATIVE_SHARE * (best - compute))
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
            lower_bound=r.lower_bound,
            bound_from=source,
            informative=informative,
        ))
    order = {name: k for k, name in enumerate(comparison_candidates(problem))}
    left_out = dict(sorted(left_out.items(), key=lambda item: order.get(item[0], len(order))))
    return Comparison(tuple(rows), MappingProxyType(left_out), tuple(refused), compute,
                      any(cost.affine is None for cost in _costs(problem)))


def _refusal(problem: Problem, name: str) -> str:
    """Why the declaration of ``name`` leaves it out of ``problem``'s default comparison."""
    needs = get_method(name).needs
    for sync in ("layerwise", "barrier"):
        if getattr(needs, sync) and problem.sync != sync:
            return f"{name}: for sync={sync!r} only"
    others = [e for e in problem.extensions if e not in needs.takes]
    if needs.plain and others:
        return f"{name}: plain model only, and this problem has {', '.join(others)}"
    try:
        get_method(name).needs.check(problem, name)
    except ValueError as exc:
        return _named(name, str(exc))
    return f"{name} is not in the default comparison of this problem"


def _named(name: str, reason: str) -> str:
    """``reason`` on one line, starting with the method's name."""
    reason = " ".join(reason.split())
    return reason if reason.startswith(name) else f"{name}: {reason}"


def _bounded_by_exact_optima(problem: Problem, results: dict[str, Result]) -> dict[str, tuple[Result, str | None]]:
    """Each result with the best bound the table proves for its plan, and the exact method
    that proved it (None: its own).

    An exact method's ``lower_bound`` holds for every plan of the space it searched, on this
    same problem (the optimum, or the bound a search stopped at), so it bounds another row's
    plan only when that plan lies in the space (:attr:`Method.in_space`); a plan outside it
    (released messages, groups out of order, split tensors) keeps its own bound.
    """
    exact = []
    for name, result in results.items():
        in_space = get_method(name).in_space
        if in_space is not None and result.lower_bound is not None:
            exact.append((name, in_space, result.lower_bound))
    bounded: dict[str, tuple[Result, str | None]] = {}
    for name, result in results.items():
        source = None
        for owner, in_space, bound in exact:
            if owner == name or result.lower_bound is None or bound <= result.lower_bound:
                continue
            if in_space(problem, result.plan):
                result, source = with_bound(result, bound, source=owner), owner
        bounded[name] = (result, source)
    return bounded


def _costs(problem: Problem) -> tuple[CommCost, ...]:
    """The communication costs of ``problem``'s pattern."""
    return problem.pattern.costs


def _speedup(reference: float, value: float) -> float:
    # A step of zero time (no compute, free network) is as fast as the reference or faster.
    if value > 0:
        return reference / value
    return 1.0 if reference == 0 else float("inf")


def format_table(rows: Iterable[ComparisonRow]) -> str:
    """A plain-text table of comparison rows, times in milliseconds (and peak memory in MiB
    when the rows have it: fully sharded problems). Given a :class:`Comparison`, the lines
    after it say which methods were left out and why, which rows are bounded by an exact
    method's optimum, and why a gap is ``-``."""
    comparison = rows if isinstance(rows, Comparison) else None
    rows = list(rows)
    memory = any(r.peak_memory is not None for r in rows)
    header = ("method", "T (ms)", "speedup", "exposed (ms)", "messages", "gap to bound", "status")
    if memory:
        header = header[:5] + ("peak (MiB)",) + header[5:]
    lines = [header]
    for r in rows:
        gap = "-" if r.gap is None or not r.informative else f"{100 * r.gap:.2f}%"
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
    if comparison is not None:
        out += _notes(comparison)
    return "\n".join(out)


def _notes(comparison: Comparison) -> list[str]:
    notes = []
    by_source: dict[str, list[str]] = {}
    for r in comparison.rows:
        if r.bound_from is not None:
            by_source.setdefault(r.bound_from, []).append(r.method)
    for source, members in by_source.items():
        notes.append(f"bounded by {source}'s optimum: {', '.join(members)} (their plans lie in the space it is "
                     "exact over)")
    vague = [r.method for r in comparison.rows if r.gap is not None and not r.informative]
    if vague:
        notes.append(f"gap -: the lower bound of {', '.join(vague)} covers under {INFORMATIVE_SHARE:.0%} of the "
                     "best plan's exposed communication; compare their T")
    notes += [f"left out: {reason}" for reason in comparison.left_out.values()]
    return [""] + notes if notes else []


__all__ = ["Comparison", "ComparisonRow", "INFORMATIVE_SHARE", "compare", "format_table"]
