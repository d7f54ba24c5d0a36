"""``sharded-brute``: every fully sharded plan over a small set of atoms (units, reshard flags,
prefetch depths, root), exact over that space, within the memory cap (MODEL.md section 8.2;
docs/methods.md).
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._needs import declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._sharded_units import SHARDED, atom_bounds, check_floor, infeasible, plan_score


BRUTE_MAX_ATOMS = 8
BRUTE_MAX_FREE_UNITS = 12
"""With ``units=``: the most units whose reshard flags ``sharded-brute`` enumerates (2**12
flag vectors per pair of depths); ``reshard="suffix"`` enumerates ``m + 1`` at any size."""
RESHARD_SPACES = ("any", "suffix")


def _plans_over(atoms: list[int]):
    """Every plan whose unit boundaries are among ``atoms``: partitions, reshard flags, root,
    and the prefetch depths that differ (a depth of ``m - 1`` or more issues every
    all-gather of the pass at its start)."""
    inner = atoms[1:-1]
    for mask in range(1 << len(inner)):
        bounds = [atoms[0]] + [b for k, b in enumerate(inner) if mask >> k & 1] + [atoms[-1]]
        m = len(bounds) - 1
        depths = range(0, max(m - 1, 0) + 1)
        for root in ((False, True) if m >= 2 else (False,)):
            free = list(range(1, m - 1)) if root else list(range(m))
            for flags in itertools.product((False, True), repeat=len(free)):
                reshard = [False] * m
                for j, flag in zip(free, flags):
                    reshard[j] = flag
                for d_f in depths:
                    for d_b in depths:
                        yield ShardedPlan(bounds, reshard, forward_prefetch=d_f, backward_prefetch=d_b, root=root)


def plans_with_units(units: ShardedPlan, *, reshard: str = "any", forward_depths: Sequence[int] = (1,),
                     backward_depths: Sequence[int] = (1,)):
    """Every plan with ``units``' unit bounds and root (the units a job has wrapped, which
    FSDP2 cannot change between steps): each reshard flag vector of the space ``reshard``
    (``"any"``: every flag of every unit outside the root; ``"suffix"``: the last ``k``
    units of the forward kept whole and the others resharded, ``k`` from 0 to every
    one, the units whose backward comes first, which hold their parameters the shortest),
    with each forward depth in ``forward_depths`` and backward depth in ``backward_depths``.
    The root's parts are always kept (MODEL.md section 8.2)."""
    m = units.num_units
    free = [j for j in range(m) if not (units.root and j in (0, m - 1))]
    if reshard == "any":
        vectors = itertools.product((True, False), repeat=len(free))
    else:
        vectors = ((True,) * (len(free) - k) + (False,) * k for k in range(len(free) + 1))
    for flags in vectors:
        vector = [False] * m
        for j, flag in zip(free, flags):
            vector[j] = flag
        for d_f in forward_depths:
            for d_b in backward_depths:
                yield units.replace(reshard=vector, forward_prefetch=d_f, backward_prefetch=d_b)


def _with_units(problem: Problem, units: ShardedPlan, reshard: str, max_depth: int, min_forward_prefetch: int,
                min_backward_prefetch: int) -> Result:
    if not isinstance(units, ShardedPlan):
        raise ValueError(f"sharded-brute: units must be a ShardedPlan whose units to keep, got {type(units).__name__}")
    units.validate(problem.profile)
    if reshard not in RESHARD_SPACES:
        raise ValueError(f"sharded-brute: reshard must be one of {', '.join(RESHARD_SPACES)}, got {reshard!r}")
    for name, value in (("max_depth", max_depth), ("min_forward_prefetch", min_forward_prefetch),
                        ("min_backward_prefetch", min_backward_prefetch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"sharded-brute: {name} must be a whole number >= 0, got {value!r}")
    free = units.num_units - (2 if units.root else 0)
    if reshard == "any" and free > BRUTE_MAX_FREE_UNITS:
        raise ValueError(f"sharded-brute enumerates every reshard flag of at most {BRUTE_MAX_FREE_UNITS} units and "
                         f"refuses {free}; use reshard='suffix'")
    forward = range(min_forward_prefetch, max(max_depth, min_forward_prefetch) + 1)
    backward = range(min_backward_prefetch, max(max_depth, min_backward_prefetch) + 1)
    plans = plans_with_units(units, reshard=reshard, forward_depths=forward, backward_depths=backward)
    return _best(problem, plans, {"units": units.num_units})


def _best(problem: Problem, plans, stats: dict) -> Result:
    """The first fastest of ``plans`` within the cap, proven by enumeration; the cap's
    refusal when none fits."""
    best, best_score, count = None, (math.inf, math.inf), 0
    for plan in plans:
        count += 1
        score = plan_score(problem, plan)
        if score < best_score:
            best, best_score = plan, score
    if best_score[0] > 0:
        raise infeasible(problem, "sharded-brute", best_score[0])
    return Outcome(best, stats={"plans": count, **stats}, lower_bound=best_score[1], optimal=True)


@method("sharded-brute", family="exact",
        summary="fully sharded, exact: every plan over at most 8 atoms (units, reshard flags, depths, root)",
        in_default_comparison=False)
@declares(SHARDED)
def sharded_brute(problem: Problem, *, atoms: str | Sequence[int] | None = None, units: ShardedPlan | None = None,
                  reshard: str | None = None, max_depth: int | None = None, min_forward_prefetch: int = 0,
                  min_backward_prefetch: int = 0) -> Result:
    """Exact: every plan whose units are unions of consecutive ``atoms`` (:func:`atom_bounds`),
    with every reshard flag, root or not, and every prefetch depth, at most
    ``BRUTE_MAX_ATOMS`` atoms. The best plan within the memory cap; ``OPTIMAL`` over that
    space (a proof by enumeration), ties broken by the first found.

    The space is FSDP's: each unit's gradients are reduce-scattered with the unit. Plans
    with a reduce-scatter grouping of their own (``reduce_bounds``, DeepSpeed ZeRO-3's
    gradient buckets) are outside it, and can be faster: the ``lower_bound`` reported is
    the optimum of this space, as a fusion method's is of fusion plans.

    With ``units`` (a :class:`ShardedPlan`), the space is the plans a job with those units
    can switch between, what FSDP2 can change between steps (``set_reshard_after_forward``,
    ``set_modules_to_forward_prefetch`` / ``backward_prefetch``; its units are fixed at
    ``fully_shard``): ``units``' bounds and root, the reshard flags of the space ``reshard``
    (:func:`plans_with_units`: ``"any"``, every vector, at most
    ``BRUTE_MAX_FREE_UNITS`` units; ``"suffix"``), the forward depths from
    ``min_forward_prefetch`` and the backward depths from ``min_backward_prefetch``, each
    up to ``max_depth`` (default 3; a least depth above it is searched alone). ``atoms``
    goes without ``units`` and the other options with it; each is refused in one line
    otherwise.

    Examples
    --------
    MODEL.md section 5's profile, halves of ``1 ms + 1 ns/B``: without a cap the best plan
    keeps a unit per tensor whole from its all-gather to its backward (22 ms, 11 MB whole at
    the peak); a cap of 10 MB makes it reshard the middle unit (27 ms, 9 MB):

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> free = sharded_brute(Problem(profile, pattern=FullySharded(half, half)))
    >>> capped = sharded_brute(Problem(profile, pattern=FullySharded(half, half, memory_cap=1e7)))
    >>> round(free.iteration_time * 1e3, 9), free.timeline.peak_memory, str(free.status)
    (22.0, 11000000, 'OPTIMAL')
    >>> round(capped.iteration_time * 1e3, 9), capped.timeline.peak_memory, capped.plan.reshard.tolist()
    (27.0, 9000000, [False, True, False])
    """
    check_floor(problem, "sharded-brute")
    if units is not None:
        if atoms is not None:
            raise ValueError("sharded-brute: atoms make units; with units= the units are given: leave atoms out")
        return _with_units(problem, units, "any" if reshard is None else reshard, 3 if max_depth is None else max_depth,
                           min_forward_prefetch, min_backward_prefetch)
    given = [name for name, value in (("reshard", reshard), ("max_depth", max_depth),
                                      ("min_forward_prefetch", min_forward_prefetch or None),
                                      ("min_backward_prefetch", min_backward_prefetch or None)) if value is not None]
    if given:
        raise ValueError(f"sharded-brute: {given[0]} goes with units= (the plans of fixed units); over atoms every "
                         "flag and depth is searched")
    bounds = atom_bounds(problem.profile, "tensor" if atoms is None else atoms)
    if len(bounds) - 1 > BRUTE_MAX_ATOMS:
        raise ValueError(f"sharded-brute enumerates every plan over at most {BRUTE_MAX_ATOMS} atoms and refuses "
                         f"{len(bounds) - 1}; use method='sharded-opt', or coarser atoms")
    return _best(problem, _plans_over(bounds), {"atoms": len(bounds) - 1})


__all__ = ["BRUTE_MAX_ATOMS", "BRUTE_MAX_FREE_UNITS", "RESHARD_SPACES", "plans_with_units", "sharded_brute"]
