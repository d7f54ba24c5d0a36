"""What a method can solve, declared where the method is defined.

A solver function carries a :class:`Needs` (set by :func:`declares`); the registry,
:func:`~fusionopt.solvers.registry.compare`, the sweep and the command line read it from
there, so what a method takes is said once. A function without a declaration takes every
all-reduce problem: both sync modes and every extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class Needs:
    """``plain``: the plain model only (no copy cost, contention or several channels);
    ``layerwise``: ``sync="layerwise"`` only (a partition scheduler that lets the next forward
    start tensor by tensor); ``ps``: a parameter-server problem (otherwise all-reduce).

    >>> Needs(plain=True, layerwise=True).describe()
    'all-reduce; plain model only; layerwise sync only'
    """

    plain: bool = False
    layerwise: bool = False
    ps: bool = False

    def describe(self) -> str:
        """The declaration in words, for listings."""
        words = ["parameter server" if self.ps else "all-reduce"]
        if self.plain:
            words.append("plain model only")
        if self.layerwise:
            words.append("layerwise sync only")
        return "; ".join(words)


ANY_ALL_REDUCE = Needs()


def declares(needs: Needs) -> Callable[[F], F]:
    """Mark a solver function with what it can solve (read by the registry)."""
    def mark(function: F) -> F:
        function.needs = needs  # type: ignore[attr-defined]
        return function
    return mark


def needs_of(function: Callable) -> Needs:
    """The declaration of ``function``, or :data:`ANY_ALL_REDUCE` where it has none."""
    return getattr(function, "needs", ANY_ALL_REDUCE)
