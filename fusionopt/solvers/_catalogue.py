"""The catalogue of methods: each solver registers itself with :func:`method`, a decorator on
its own function, and is run by name with :func:`run`.

The catalogue sits below every solver: a solver module imports it to register its functions
and to run another method as a warm start (:mod:`fusionopt.solvers._warm`), and never imports
the dispatcher (:mod:`fusionopt.solvers._registry`), which imports every solver module and
puts the methods in their order.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import numbers
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from fusionopt.model._pattern import Pattern
from fusionopt.model._problem import Problem
from fusionopt.solvers._needs import Needs, needs_of
from fusionopt.solvers._result import Interrupted, Outcome, Result

FAMILIES = {
    "framework baseline": "what a training framework does by default (DDP, Horovod, a parameter server)",
    "paper": "a published scheduler, as its paper or code runs it",
    "search": "a heuristic search, with its gap to a bound",
    "exact": "an exact method: a proved optimum over its plan space, or a certified gap",
}
"""The method families, each with what its members have in common."""

REFERENCE = {"all-reduce": "wfbp", "ps": "ps-default", "decoupled": "decoupled-wfbp", "fully-sharded": "sharded-wfbp"}
"""The method :func:`~fusionopt.solvers.compare` measures speedups against, for
each pattern of problem."""

_DEADLINE: ContextVar[float] = ContextVar("fusionopt_deadline", default=math.inf)
"""The ``time.perf_counter()`` reading by which the solve under way must end: its method's
``time_limit`` from when the solve began, or an enclosing solve's deadline if that is
earlier (a warm start never outlives the solve that asked for it)."""

_SOLVED: ContextVar[dict[str, tuple[Problem, Result]] | None] = ContextVar("fusionopt_solved", default=None)
"""Within :func:`solved_once`: each method's result on its problem, solved with the default
options, so a method that starts from other methods' plans (``layerwise-opt``, ``cpsat``'s
hints) is handed the comparison's own results instead of solving them again."""


@dataclass(frozen=True)
class Method:
    """A registered solver: ``function(problem, **options) -> Result``.

    ``in_space`` (exact methods): ``in_space(problem, plan) -> bool``, true for the plans of
    the space the method is exact over, so that its proven bound also bounds another method's
    plan of that space; None where not declared. ``in_default_comparison``: True, False, or
    ``f(problem) -> bool`` for a method the comparison runs on some problems only.
    """

    name: str
    function: Callable[..., Result]
    summary: str
    family: str
    in_default_comparison: bool | Callable[[Problem], bool] = True
    in_space: Callable[[Problem, Any], bool] | None = None

    def compared_on(self, problem: Problem | None) -> bool:
        """Whether a comparison that names no methods runs it on ``problem`` (None: on any)."""
        if callable(self.in_default_comparison):
            return problem is not None and bool(self.in_default_comparison(problem))
        return self.in_default_comparison

    @property
    def needs(self) -> Needs:
        """What the method can solve, as its function declares it (:mod:`fusionopt.solvers._needs`)."""
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
        """The pattern of the problems it plans: ``"all-reduce"``, ``"ps"``, ``"decoupled"`` or
        ``"fully-sharded"``."""
        return self.needs.pattern

    @property
    def options(self) -> dict[str, Any]:
        """Keyword options with their defaults."""
        signature = inspect.signature(self.function)
        return {p.name: p.default for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


_CATALOGUE: dict[str, Method] = {}


def register(name: str, function: Callable[..., Result], summary: str, *, family: str,
             in_default_comparison: bool | Callable[[Problem], bool] = True,
             space: Callable[[Problem, Any], bool] | None = None) -> Method:
    """Add ``function`` (``function(problem, **options) -> Result``) as method ``name`` of
    ``family`` (one of :data:`FAMILIES`); :func:`method` does the same as a decorator.

    ``in_default_comparison``: whether :func:`~fusionopt.solvers.compare` runs it
    when no methods are named (off for searches that are slow or limited in size; a
    function of the problem for a method that only some problems call for). What the
    method can solve is read from its function's declaration
    (:func:`fusionopt.solvers._needs.declares`): a method that needs the plain model or
    layerwise sync is left out of that comparison, with its reason, on problems it refuses,
    and each pattern's methods run on their own kind of problem only. ``space``: the
    method's ``in_space`` (:class:`Method`).
    """
    if name in _CATALOGUE:
        raise ValueError(f"method {name!r} is already registered")
    if not callable(function):
        raise ValueError(f"method {name!r}: its solver must be a function, got {type(function).__name__}")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} for method {name!r}; families: {', '.join(FAMILIES)}")
    if not isinstance(in_default_comparison, bool) and not callable(in_default_comparison):
        raise ValueError(f"method {name!r}: in_default_comparison must be True, False or a function of the problem")
    if space is not None and not callable(space):
        raise ValueError(f"method {name!r}: space must be a function (problem, plan) -> bool")
    entry = Method(name, function, summary, family, in_default_comparison, space)
    _CATALOGUE[name] = entry
    return entry


Solver = Callable[..., Result]


def method(name: str, *, family: str, summary: str, in_default_comparison: bool | Callable[[Problem], bool] = True,
           space: Callable[[Problem, Any], bool] | None = None) -> Callable[[Callable[..., Any]], Solver]:
    """Register the decorated solver function as method ``name`` (:func:`register`), beside
    its own definition, and run it in the life cycle every method shares (:func:`solving`).

    The function returns an :class:`~fusionopt.solvers.Outcome` (its plan and what it
    claims) and may raise :class:`~fusionopt.solvers.Interrupted` with one; what the
    decorator returns, called directly or by :func:`run`, returns the judged
    :class:`~fusionopt.solvers.Result`."""
    def registered(body: Callable[..., Any]) -> Callable[..., Result]:
        solver = solving(name, body)
        register(name, solver, summary, family=family, in_default_comparison=in_default_comparison, space=space)
        return solver
    return registered


def solving(name: str, body: Callable[..., Any]) -> Callable[..., Result]:
    """``body`` (``body(problem, **options)``) in the life cycle of method ``name``: the solve's
    clock starts, the method's ``time_limit`` (when it has one) is checked and becomes the
    solve's :func:`deadline`, ``body`` runs, and its :class:`~fusionopt.solvers.Outcome` is judged
    (:func:`~fusionopt.solvers.finish`: simulated, its bound and gap attached, its
    status set, the seconds taken), as is the outcome an
    :class:`~fusionopt.solvers.Interrupted` carries. Another method's result is handed
    on as an outcome (:meth:`~fusionopt.solvers.Outcome.handed_on`)."""
    limited = inspect.signature(body).parameters.get("time_limit")

    @functools.wraps(body)
    def solver(problem: Any, *args: Any, **options: Any) -> Result:
        started = time.perf_counter()
        token = None
        if limited is not None:
            limit = time_limit_seconds(options.get("time_limit", limited.default))
            if limit is not None:
                token = _DEADLINE.set(min(_DEADLINE.get(), started + limit))
        try:
            found = body(problem, *args, **options)
        except Interrupted as stop:
            if isinstance(stop.result, Outcome):
                raise Interrupted(stop.result.judged(problem, name, started)) from None
            raise
        finally:
            if token is not None:
                _DEADLINE.reset(token)
        if isinstance(found, Outcome):
            return found.judged(problem, name, started)
        raise TypeError(f"method {name!r} returned {type(found).__name__}: a solver returns an Outcome")
    return solver


def time_limit_seconds(value: Any) -> float | None:
    """A method's ``time_limit`` option as seconds (None: no limit), checked once for every
    method: a positive, finite number, or a one-line ``ValueError``.

    >>> time_limit_seconds(2), time_limit_seconds(None)
    (2.0, None)
    >>> time_limit_seconds(0)
    Traceback (most recent call last):
    ...
    ValueError: time_limit must be a positive, finite number of seconds, got 0
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"time_limit must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"time_limit must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def deadline() -> float:
    """The ``time.perf_counter()`` reading by which the solve under way must end (``inf``
    outside a solve with a time limit): what an anytime method checks its search against."""
    return _DEADLINE.get()


def seconds_left() -> float:
    """Seconds until :func:`deadline` (``inf`` without one; at most 0 once it has passed)."""
    return _DEADLINE.get() - time.perf_counter()


def arrange(order: Sequence[str]) -> None:
    """Put the methods named in ``order`` first, in that order (the order of listings and of
    a comparison's rows); the others keep theirs after them."""
    known = [name for name in order if name in _CATALOGUE]
    rest = [name for name in _CATALOGUE if name not in order]
    entries = {name: _CATALOGUE[name] for name in known + rest}
    _CATALOGUE.clear()
    _CATALOGUE.update(entries)


def methods() -> dict[str, str]:
    """Registered method names with a one-line description.

    >>> "wfbp" in methods()
    True
    """
    return {name: m.summary for name, m in _CATALOGUE.items()}


def catalogue() -> tuple[Method, ...]:
    """Every registered :class:`Method`, in order."""
    return tuple(_CATALOGUE.values())


def default_methods(problem: Problem | None = None) -> list[str]:
    """The methods :func:`~fusionopt.solvers.compare` runs when none are named,
    as their declarations allow (for ``problem``: without the plain-model methods when it has
    extensions on, with the layerwise-only ones when its sync is layerwise); a method may
    still refuse the problem when it is solved (compare then leaves it out with its reason).

    >>> default_methods()[:2]
    ['wfbp', 'single']
    """
    extensions = set() if problem is None else set(problem.extensions)
    layerwise = problem is not None and problem.sync == "layerwise"
    pattern = Pattern.named("all-reduce") if problem is None else type(problem.pattern)
    return [name for name, m in _CATALOGUE.items()
            if m.compared_on(problem) and not (m.plain_only and extensions - set(m.needs.takes))
            and (layerwise or not m.layerwise_only) and not (layerwise and m.needs.barrier)
            and issubclass(pattern, Pattern.named(m.pattern))]


def comparison_candidates(problem: Problem | None = None) -> list[str]:
    """The methods of ``problem``'s pattern marked for the default comparison, whether or not
    they take ``problem``: :func:`default_methods` and those its declarations leave out.

    >>> [m for m in comparison_candidates() if m not in default_methods()]
    ['p3', 'bytescheduler', 'bytescheduler-tuned', 'layerwise-opt']
    """
    pattern = Pattern.named("all-reduce") if problem is None else type(problem.pattern)
    return [name for name, m in _CATALOGUE.items()
            if m.compared_on(problem) and issubclass(pattern, Pattern.named(m.pattern))]


def get_method(name: str) -> Method:
    """The registered :class:`Method` called ``name``; ``ValueError`` listing the known ones."""
    try:
        return _CATALOGUE[name]
    except KeyError:
        known = ", ".join(sorted(_CATALOGUE))
        raise ValueError(f"unknown method {name!r}; known methods: {known}") from None


def run(problem: Problem, name: str, **options: Any) -> Result:
    """Solve ``problem`` with method ``name`` and its keyword ``options`` (what
    :func:`fusionopt.solvers.solve` does once every solver is registered): the method must
    be of the problem's pattern and take each option; within :func:`solved_once` a method
    run without options is solved once per problem."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    entry = get_method(name)
    have = problem.pattern
    if not have.is_a(entry.pattern):
        wanted = Pattern.named(entry.pattern)
        others = ", ".join(n for n, m in _CATALOGUE.items() if have.is_a(m.pattern))
        raise ValueError(f"method {name!r} is {wanted.article()} {wanted.words} method and this problem is "
                         f"{have.article()} {have.words} problem (pattern={type(have).__name__}(...)); "
                         f"methods for it: {others}")
    allowed = entry.options
    for key in options:
        if key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"unknown option {key!r} for method {name!r}; its options: {listed}")
    solved = _SOLVED.get()
    if solved is None or options:
        return entry.function(problem, **options)
    if name in solved and solved[name][0] is problem:
        return solved[name][1]
    result = entry.function(problem)
    solved[name] = (problem, result)
    return result


@contextlib.contextmanager
def solved_once() -> Iterator[None]:
    """Within this context, :func:`run` (and so :func:`~fusionopt.solvers.solve`) with no
    options solves each method once per problem and hands later calls (a method that starts
    from another's plan) the same result."""
    token = _SOLVED.set({})
    try:
        yield
    finally:
        _SOLVED.reset(token)


__all__ = ["FAMILIES", "REFERENCE", "Method", "arrange", "catalogue", "comparison_candidates", "deadline", "default_methods",
           "get_method", "method", "methods", "register", "run", "seconds_left", "solved_once", "solving", "time_limit_seconds"]
