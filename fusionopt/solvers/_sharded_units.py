"""What the fully sharded methods share (MODEL.md section 8.2): the atoms units are made of
(:func:`atom_bounds`), the declaration of their problems, and the score of a plan under the
memory cap.
"""

from __future__ import annotations

import numbers
from typing import Sequence

from fusionopt.model._bounds import sharded_memory_floor
from fusionopt.model._names import block_of, module_of
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_timing import simulate_sharded
from fusionopt.solvers._needs import Needs


SHARDED = Needs(pattern="fully-sharded")


ATOM_KINDS = ("tensor", "module", "block")


def atom_bounds(profile: Profile, atoms: str | Sequence[int] = "module") -> list[int]:
    """Where units may start: the atom bounds, increasing from ``a_0 = 0`` to ``a_k = n``.

    ``atoms``: ``"tensor"`` (anywhere), ``"module"`` (between tensors of different modules,
    so a layer's weight and bias stay together: what ``fully_shard`` can wrap), ``"block"``
    (between blocks, :func:`block_of`, each run of root tensors its own atom), or the list
    of boundaries itself. A tensor whose name has no dot belongs to no module: an atom alone.

    >>> p = Profile.from_arrays([4] * 5, [0] * 5, [1] * 5,
    ...                         names=["emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "ln.weight"])
    >>> atom_bounds(p, "tensor"), atom_bounds(p, "module"), atom_bounds(p, "block")
    ([0, 1, 2, 3, 4, 5], [0, 1, 3, 4, 5], [0, 1, 3, 4, 5])
    """
    n = profile.n
    if not isinstance(atoms, str):
        atoms = list(atoms) if hasattr(atoms, "__iter__") else atoms
        if not hasattr(atoms, "__iter__") or any(isinstance(b, bool) or not isinstance(b, numbers.Integral)
                                                 for b in atoms):
            raise ValueError(f"atoms must be one of {', '.join(ATOM_KINDS)}, or increasing boundaries (integers) from "
                             f"0 to {n}, got {atoms!r}")
        bounds = [int(b) for b in atoms]
        if not bounds or bounds[0] != 0 or bounds[-1] != n or any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(f"atoms must be increasing boundaries from 0 to {n}, got {list(atoms)[:6]}...")
        return bounds
    if atoms not in ATOM_KINDS:
        raise ValueError(f"unknown atoms {atoms!r}: choose one of {', '.join(ATOM_KINDS)}, or give the boundaries")
    if atoms == "tensor":
        return list(range(n + 1))
    # A tensor outside every module (a name without a dot) is an atom of its own.
    key = module_of if atoms == "module" else (lambda name: block_of(name) or module_of(name))
    labels = [key(name) or name for name in profile.names]
    return [0] + [i for i in range(1, n) if labels[i] != labels[i - 1]] + [n]


def plan_score(problem: Problem, plan: ShardedPlan) -> tuple[float, float]:
    """``(bytes over the cap, T)``: lexicographically smaller is better."""
    timeline = simulate_sharded(problem, plan, validate=False)
    cap = problem.pattern.memory_cap
    over = 0.0 if cap is None else max(0.0, timeline.peak_memory - cap)
    return over, timeline.iteration_time


def check_floor(problem: Problem, method: str) -> None:
    """Refuse a cap no plan can meet (:func:`~fusionopt.model.sharded_memory_floor`)."""
    cap = problem.pattern.memory_cap
    if cap is None:
        return
    floor, tensor = sharded_memory_floor(problem)
    if cap < floor:
        name = problem.profile.names[tensor]
        why = ("its parameters and gradients, whole together during its backward" if problem.profile.backward[tensor] > 0
               else "its parameters")
        raise ValueError(f"{method}: no plan fits the memory cap of {cap:.6g} B: tensor {name!r} alone needs "
                         f"{floor:.6g} B ({why})")


def infeasible(problem: Problem, method: str, least_over: float) -> ValueError:
    cap = problem.pattern.memory_cap
    return ValueError(f"{method}: no plan it searched fits the memory cap of {cap:.6g} B; the least peak found "
                      f"is {cap + least_over:.6g} B")


__all__ = ["SHARDED", "ATOM_KINDS", "atom_bounds", "plan_score", "check_floor", "infeasible"]
