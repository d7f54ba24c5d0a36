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


@method("sharded-brute", family="exact",
        summary="fully sharded, exact: every plan over at most 8 atoms (units, reshard flags, depths, root)",
        in_default_comparison=False)
@declares(SHARDED)
def sharded_brute(problem: Problem, *, atoms: str | Sequence[int] = "tensor") -> Result:
    """Exact: every plan whose units are unions of consecutive ``atoms`` (:func:`atom_bounds`),
    with every reshard flag, root or not, and every prefetch depth, at most
    ``BRUTE_MAX_ATOMS`` atoms. The best plan within the memory cap; ``OPTIMAL`` over that
    space (a proof by enumeration), ties broken by the first found.

    The space is FSDP's: each unit's gradients are reduce-scattered with the unit. Plans
    with a reduce-scatter grouping of their own (``reduce_bounds``, DeepSpeed ZeRO-3's
    gradient buckets) are outside it, and can be faster: the ``lower_bound`` reported is
    the optimum of this space, as a fusion method's is of fusion plans.

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
    bounds = atom_bounds(problem.profile, atoms)
    if len(bounds) - 1 > BRUTE_MAX_ATOMS:
        raise ValueError(f"sharded-brute enumerates every plan over at most {BRUTE_MAX_ATOMS} atoms and refuses "
                         f"{len(bounds) - 1}; use method='sharded-opt', or coarser atoms")
    best, best_score, count = None, (math.inf, math.inf), 0
    for plan in _plans_over(bounds):
        count += 1
        score = plan_score(problem, plan)
        if score < best_score:
            best, best_score = plan, score
    if best_score[0] > 0:
        raise infeasible(problem, "sharded-brute", best_score[0])
    result = Outcome(best, stats={"plans": count, "atoms": len(bounds) - 1},
                     lower_bound=best_score[1], optimal=True)
    return result


__all__ = ["BRUTE_MAX_ATOMS", "sharded_brute"]
