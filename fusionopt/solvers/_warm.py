"""Warm starts: a solver that begins from other methods' plans gets them here, below every
solver, by name from the catalogue (:mod:`fusionopt.solvers._catalogue`), never from the
dispatcher.

* :func:`start`: another method's result on the problem (a local search's starting points,
  GradSSA's seeds); within :func:`~fusionopt.solvers._catalogue.solved_once` a comparison's
  own result.
* :func:`hint_plan`: what an exact solver's ``hint`` option names, as a plan of its space:
  ``None``, a plan, ``"best-baseline"`` (the fastest of the solver's baselines whose plan
  lies in its space and keeps to its caps) or a method's name. The CP-SAT models of each
  pattern take their hints through it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from fusionopt.model._pattern import Pattern
from fusionopt.model._problem import Problem
from fusionopt.solvers._catalogue import get_method, run
from fusionopt.solvers._result import Result


def start(problem: Problem, name: str, **options: Any) -> Result:
    """Method ``name``'s result on ``problem`` (with ``options``), to start a search from."""
    return run(problem, name, **options)


def _reason(check: Callable[[Any], None], plan: Any) -> str | None:
    """Why ``plan`` is outside the space (``check`` raises ``ValueError`` saying so), or None."""
    try:
        check(plan)
    except ValueError as exc:
        return str(exc)
    return None


def hint_plan(problem: Problem, hint: Any, *, method: str, plan_type: type, best_of: Sequence[str],
              check: Callable[[Any], None], fits: Callable[[Any], bool] | None = None,
              adapt: Callable[[Any], Any] | None = None,
              options: Mapping[str, Any] | None = None) -> tuple[Any | None, str]:
    """``hint``, the ``hint`` option of ``method``, as a plan of its space and a label for its
    ``stats`` (``"none"``, ``"plan"``, the method it came from): ``(None, why)`` where no
    plan is to be used.

    Parameters
    ----------
    plan_type : type
        The plans a hint may be given as (``Plan``, ``DecoupledPlan``, ...).
    best_of : sequence of str
        The methods ``"best-baseline"`` picks from: the fastest whose plan (``adapt``-ed)
        lies in the space and ``fits``, among those that take the problem.
    check : callable
        ``check(plan)`` raises ``ValueError`` saying why ``plan`` is outside the space.
    fits : callable, optional
        ``fits(plan)``: whether the plan keeps to the solver's caps; a hint that does not is
        not used (its label says so).
    options : mapping, optional
        Options handed to a named method that takes them (None values are left out).

    Refused in one line: a hint of another type, ``method`` itself, an unknown method or one
    of another pattern, and a plan outside the space (given, or a named method's).
    """
    if hint is None:
        return None, "none"
    kind = plan_type.__name__
    if isinstance(hint, plan_type):
        reason = _reason(check, hint)
        if reason is not None:
            raise ValueError(f"hint: {reason}")
        plan, label = hint, "plan"
    elif not isinstance(hint, str):
        raise ValueError(f"hint must be 'best-baseline', a method name, a {kind} or None; got {type(hint).__name__}")
    elif hint == "best-baseline":
        best: tuple[float, str, Any] | None = None
        for name in best_of:
            try:
                result = run(problem, name)
            except ValueError:               # the baseline refuses this problem (Horovod a per-message choice)
                continue
            candidate = result.plan if adapt is None else adapt(result.plan)
            if _reason(check, candidate) is None and (fits is None or fits(candidate)) and (
                    best is None or result.iteration_time < best[0]):
                best = (result.iteration_time, name, candidate)
        if best is None:
            return None, "best-baseline (none meets the caps)"
        return best[2], best[1]
    elif hint == method:
        raise ValueError(f"hint {method!r} would solve the problem with {method} to hint {method}; "
                         f"name another method, 'best-baseline', a {kind} or None")
    else:
        try:
            entry = get_method(hint)
        except ValueError as exc:
            raise ValueError(f"hint {hint!r} is neither 'best-baseline' nor a method: {exc}") from None
        if not problem.pattern.is_a(entry.pattern):
            have = problem.pattern
            raise ValueError(f"hint {hint!r} is neither 'best-baseline' nor {have.article()} {have.words} method: "
                             f"it plans {Pattern.named(entry.pattern).words} problems")
        taken = {key: value for key, value in (options or {}).items()
                 if value is not None and key in entry.options}
        on, label = problem, hint
        if entry.plain_only and problem.extensions:
            on, label = problem.plain(), f"{hint} (on the plain problem)"   # its plan is one of this problem too
        plan = run(on, hint, **taken).plan
        reason = _reason(check, plan)
        if reason is not None:
            raise ValueError(f"hint method {hint!r} returned a plan outside the space: {reason}")
    if fits is not None and not fits(plan):
        return None, f"{label} (not used: it breaks the caps)"
    return plan, label


__all__ = ["hint_plan", "start"]
