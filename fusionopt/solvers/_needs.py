"""What a method can solve, declared where the method is defined.

A solver function carries a :class:`Needs` (set by :func:`declares`); the registry,
:func:`~fusionopt.solvers.compare`, the sweep and the command line read it from
there, and every call of the function is checked against it (:meth:`Needs.check`), so what
a method takes is said once. A function without a declaration takes every all-reduce
problem: both sync modes and every extension.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from fusionopt.model._pattern import Pattern
from fusionopt.model._problem import Problem

F = TypeVar("F", bound=Callable)
PATTERN_WORDS = {"all-reduce": "all-reduce", "ps": "parameter server", "decoupled": "decoupled all-reduce",
                 "fully-sharded": "fully sharded"}


@dataclass(frozen=True)
class Needs:
    """``plain``: the plain model only (no copy cost, contention or several channels);
    ``layerwise``: ``sync="layerwise"`` only (a partition scheduler that lets the next forward
    start tensor by tensor); ``barrier``: ``sync="barrier"`` only; ``pattern``: the problems'
    communication pattern (:attr:`fusionopt.model.Problem.pattern`): ``"all-reduce"``,
    ``"ps"`` (a parameter server), ``"decoupled"`` (MODEL.md section 8.1) or
    ``"fully-sharded"`` (section 8.2).
    ``max_tensors``: the most tensors it takes (``max_tensors_channels`` with several
    channels, where it is smaller), ``size_reason`` why, and ``plain_alternative`` the method
    to use instead on a larger problem of the plain model. ``takes``: the extensions a
    ``plain`` method takes all the same.

    >>> Needs(plain=True, layerwise=True).describe()
    'all-reduce; plain model only; layerwise sync only'
    >>> Needs(max_tensors=20, max_tensors_channels=14).describe()
    'all-reduce; n <= 20 (14 with several channels)'
    >>> Needs(pattern="allreduce")
    Traceback (most recent call last):
    ...
    ValueError: unknown pattern 'allreduce': choose one of ...
    """

    plain: bool = False
    layerwise: bool = False
    pattern: str = "all-reduce"
    barrier: bool = False
    max_tensors: int | None = None
    max_tensors_channels: int | None = None
    size_reason: str = "takes"
    plain_alternative: str | None = None
    takes: tuple[str, ...] = ()

    def describe(self) -> str:
        """The declaration in words, for listings."""
        words = [PATTERN_WORDS[self.pattern]]
        if self.plain:
            words.append("plain model only" + (f" (and {', '.join(self.takes)})" if self.takes else ""))
        if self.layerwise:
            words.append("layerwise sync only")
        if self.barrier:
            words.append("barrier sync only")
        if self.max_tensors is not None:
            channels = "" if self.max_tensors_channels is None else f" ({self.max_tensors_channels} with several channels)"
            words.append(f"n <= {self.max_tensors}{channels}")
        return "; ".join(words)

    def __post_init__(self) -> None:
        Pattern.named(self.pattern)

    def tensor_limit(self, problem: Problem) -> int | None:
        """The most tensors the method takes on ``problem``'s options (None: no limit)."""
        if problem.channels > 1 and self.max_tensors_channels is not None:
            return self.max_tensors_channels
        return self.max_tensors

    def check(self, problem: Any, method: str) -> None:
        """Raise a one-line ``ValueError`` naming ``method`` if it does not take ``problem``."""
        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
        if not problem.pattern.is_a(self.pattern):
            wanted, have = Pattern.named(self.pattern), problem.pattern
            if wanted.extension is not None:
                raise ValueError(f"{method} needs {wanted.article()} {wanted.words} problem: {wanted.spelling()}")
            raise ValueError(f"{method} is {wanted.article()} {wanted.words} method and this problem is "
                             f"{have.article()} {have.words} problem (pattern={type(have).__name__}(...)): use a "
                             f"{have.words} method (fusionopt methods lists them)")
        if self.plain:
            problem.require_plain(method, allowing=self.takes)
        if self.layerwise:
            problem.require_layerwise(method)
        if self.barrier and problem.sync != "barrier":
            raise ValueError(f"{method} is for sync='barrier' only (the forward waits for every collective), "
                             f"and this problem has sync={problem.sync!r}")
        limit = self.tensor_limit(problem)
        if limit is not None and problem.profile.n > limit:
            instead = "" if self.plain_alternative is None or problem.extensions else f"; use method={self.plain_alternative!r}"
            raise ValueError(f"{method} {self.size_reason} and refuses n = {problem.profile.n} > {limit}{instead}")


ANY_ALL_REDUCE = Needs()


def declares(needs: Needs) -> Callable[[F], F]:
    """Mark a solver function with what it can solve (read by the registry) and check every
    call against it; the method is named as registered (``bytescheduler_tuned`` is
    ``bytescheduler-tuned``)."""
    def mark(function: F) -> F:
        method = function.__name__.replace("_", "-")

        @functools.wraps(function)
        def checked(problem: Any, *args: Any, **options: Any) -> Any:
            needs.check(problem, method)
            return function(problem, *args, **options)

        checked.needs = needs  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]
    return mark


def needs_of(function: Callable) -> Needs:
    """The declaration of ``function``, or :data:`ANY_ALL_REDUCE` where it has none."""
    return getattr(function, "needs", ANY_ALL_REDUCE)
