"""The plan spaces of the parameter server's exact methods (MODEL.md section 6):
``ps-brute`` (:mod:`fusionopt.solvers.exact._ps_brute`), ``ps-dp``
(:mod:`fusionopt.solvers.exact._ps_dp`: the fusion DP of section 7 adapted to the two
directions) and ``ps-cpsat`` (:mod:`fusionopt.solvers.exact._ps_cpsat`).

They give the greedy methods (iPart, iBatch) a gap to measure. Each searches a stated
**space** of :class:`~fusionopt.model.PSPlan` s, and its ``OPTIMAL`` status and
``lower_bound`` hold over that space, as for the all-reduce ``brute`` and ``dp`` over
fusion plans: ``stats["space"]`` names it and ``stats["bound_all_plans"]`` is
:func:`~fusionopt.model.ps_lower_bound`, the bound for every PS plan.

The spaces
----------
A plan of the space cuts the **push stream** (the tensors in backward order, MODEL.md
section 7's order) and the **pull stream** (forward order) into contiguous messages
(:meth:`PSPlan.from_offsets <fusionopt.model.PSPlan.from_offsets>`), at candidate
cut points given by ``granularity``:

* ``"tensor"`` (default): tensor boundaries only, so every message carries whole tensors,
  push groups contiguous in backward order and pull groups contiguous in forward order.
  No tensor is ever split, so partitioned compute (``ps.partition_compute``) changes
  nothing in this space;
* an integer ``g``: every tensor is cut into **units** of ``g`` parameters
  (``g * profile.dtype_bytes`` bytes, the last unit of a tensor may be shorter), and a cut
  may fall on any unit boundary, inside a tensor or between two.

Cutting inside a tensor can pay even without partitioned compute: the pull of a tensor's
first part may start while its later parts are still being pushed (a push-pull pipeline),
and with partitioned compute the backward and forward of a split tensor overlap its own
communication. The grid spaces hold such plans; the whole-tensor space does not, so its
optimum can exceed the optimum over all plans (tests show a one-tensor case).

Plans outside both kinds of space (push messages out of backward order, pull messages
out of forward order, priorities) are not searched by any method here.
"""

from __future__ import annotations

import numbers
from typing import Any

from fusionopt.model._bounds import ps_lower_bound
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import stream_offsets


DEFAULT_MAX_UNITS = 64


# ---------------------------------------------------------------------------- the space
def ps_units(problem: Problem, granularity: Any = "tensor") -> list[tuple[int, int, int]]:
    """The units ``(tensor, lo, hi)`` of a granularity, in forward order.

    ``"tensor"``: one unit per tensor. An integer ``g >= 1``: units of ``g`` parameters
    (``g * dtype_bytes`` bytes; the last unit of a tensor may be shorter).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([12, 4], [0.0] * 2, [1e-3] * 2)   # float32: 3 and 1 parameters
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)))
    >>> ps_units(problem), ps_units(problem, 2)
    ([(0, 0, 12), (1, 0, 4)], [(0, 0, 8), (0, 8, 12), (1, 0, 4)])
    """
    profile = problem.profile
    if isinstance(granularity, str) and granularity == "tensor":
        return [(i, 0, int(s)) for i, s in enumerate(profile.sizes.tolist())]
    if isinstance(granularity, bool) or not isinstance(granularity, numbers.Integral) or granularity < 1:
        raise ValueError(f"granularity must be 'tensor' or an integer >= 1 (parameters per unit), "
                         f"got {granularity!r}")
    unit = int(granularity) * profile.dtype_bytes
    return [(i, lo, min(lo + unit, int(s))) for i, s in enumerate(profile.sizes.tolist())
            for lo in range(0, int(s), unit)]


def space_label(granularity: Any) -> str:
    if isinstance(granularity, str):
        return "whole tensors (push groups in backward order, pull groups in forward order)"
    return f"contiguous messages on a grid of {int(granularity)}-parameter units, both streams"


def candidate_cuts(problem: Problem, units: list[tuple[int, int, int]], direction: str) -> list[int]:
    """Byte offsets of the unit boundaries inside a direction's stream, ascending."""
    starts = stream_offsets(problem.profile, direction)
    return sorted(int(starts[i]) + lo for i, lo, _ in units if int(starts[i]) + lo > 0)


def subsets(points: list[int]) -> list[list[int]]:
    """Every subset of ``points`` (ascending lists), the empty one first."""
    out: list[list[int]] = [[]]
    for x in reversed(points):
        out += [[x] + rest for rest in out]
    return out


def common_stats(problem: Problem, granularity: Any, units: list[tuple[int, int, int]]) -> dict[str, Any]:
    return {"space": space_label(granularity), "granularity": granularity, "units": len(units),
            "bound_all_plans": ps_lower_bound(problem)}


__all__ = ["DEFAULT_MAX_UNITS", "ps_units", "space_label", "candidate_cuts", "subsets", "common_stats"]
