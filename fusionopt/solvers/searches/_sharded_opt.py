"""``sharded-opt``: a deterministic local search over fully sharded plans (units, reshard
flags, prefetch depths, root; with ``reduce_groups=True`` also reduce-scatter groups apart
from the units, DeepSpeed ZeRO-3's gradient buckets) for any size, from the frameworks'
settings, within the memory cap, with its gap to
:func:`~fusionopt.model.sharded_lower_bound` (MODEL.md section 8.2; docs/methods.md).
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.solvers.baselines._fsdp2 import fsdp2_plan
from fusionopt.solvers._catalogue import deadline, method
from fusionopt.solvers._needs import declares
from fusionopt.solvers._result import Interrupted, Outcome, Result, Status
from fusionopt.solvers._sharded_units import SHARDED, atom_bounds, check_floor, infeasible, plan_score
from fusionopt.model._cost import check_flag


DESCENTS = 4
"""Descents ``sharded-opt`` runs, from its best starts."""


def _packed(profile: Profile, atoms: list[int], target: float) -> list[int]:
    """Unit bounds from consecutive atoms, a unit closed before an atom that would take it
    past ``target`` bytes (a unit holds at least one atom)."""
    prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64))).tolist()
    bounds, first = [0], 0
    for a, b in zip(atoms[1:-1], atoms[2:]):
        if prefix[b] - prefix[first] > target:
            bounds.append(a)
            first = a
    return bounds + [atoms[-1]]


def _packed_from_end(profile: Profile, atoms: list[int], target: float) -> list[int]:
    """:func:`_packed` along the backward: groups of consecutive atoms from the last one, a
    group closed after an atom that would take it past ``target`` bytes (DeepSpeed's
    gradient bucket, filled in ready order; the remainder is the group of tensor 0)."""
    prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64))).tolist()
    bounds, last = [atoms[-1]], atoms[-1]
    for a, b in zip(atoms[-2:0:-1], atoms[-3::-1]):
        if prefix[last] - prefix[b] > target:
            bounds.append(a)
            last = a
    return [0] + bounds[::-1]


def _group_layouts(profile: Profile, atoms: list[int]) -> list[list[int]]:
    """Reduce-scatter groupings to start from: atoms packed into groups of ten target sizes (a
    geometric grid from the median atom to the model), from the first tensor and from the
    last, without repeats."""
    prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64)))
    smallest = float(np.median(np.diff(prefix[np.asarray(atoms)])))
    layouts: list[list[int]] = []
    for target in np.geomspace(smallest, max(float(prefix[-1]), smallest), num=10).tolist():
        for groups in (_packed(profile, atoms, target), _packed_from_end(profile, atoms, target)):
            if groups not in layouts:
                layouts.append(groups)
    return layouts


def _group_neighbours(plan: ShardedPlan, atoms: list[int]):
    """Plans one reduce-scatter grouping move from ``plan``: a group boundary removed or added
    at an atom boundary, or moved to the next atom boundary either way; back to reduce-scatters
    with the units (``reduce_bounds=None``). The moves start from the plan's groups (its units'
    when it has none; a root is unmade first, since a root takes no groups of its own)."""
    if plan.root:
        plan = plan.replace(root=False)
    elif plan.reduce_bounds is not None:
        yield plan.replace(reduce_bounds=None)
    groups = plan.reduce_groups().tolist()
    inside = set(groups)
    for b in atoms[1:-1]:
        if b in inside:
            yield plan.replace(reduce_bounds=[c for c in groups if c != b])
        else:
            yield plan.replace(reduce_bounds=sorted(groups + [b]))
    place = {b: k for k, b in enumerate(atoms)}
    for g in range(1, len(groups) - 1):
        k = place.get(groups[g])
        if k is None:
            continue
        for other in (atoms[k - 1], atoms[k + 1]):
            if groups[g - 1] < other < groups[g + 1]:
                yield plan.replace(reduce_bounds=groups[:g] + [other] + groups[g + 1:])


def _candidates(profile: Profile, atoms: list[int]):
    """Structured starts: FSDP2's units; a unit per atom; atoms (and whole blocks, when
    they are made of atoms) packed into units of a target size (a geometric grid from the
    median atom to the model), each with every unit resharded but
    the last ``k`` (``k`` from 0 to all), prefetch depths (0, 0), (1, 1), (2, 1), (2, 2) and
    all ahead, with and without a root."""
    framework = fsdp2_plan(profile)
    if set(framework.bounds.tolist()) <= set(atoms):
        yield framework
        yield framework.replace(forward_prefetch=1)
    prefix = np.concatenate(([0], np.cumsum(profile.sizes, dtype=np.int64)))
    layouts = []
    blocks = atom_bounds(profile, "block")
    for grain in ([blocks] if set(blocks) <= set(atoms) and blocks != atoms else []) + [atoms]:
        layouts.append(list(grain))                       # a unit per atom: the least memory
        smallest = float(np.median(np.diff(prefix[np.asarray(grain)])))
        for target in np.geomspace(smallest, max(float(prefix[-1]), smallest), num=10).tolist():
            bounds = _packed(profile, grain, target)
            if bounds not in layouts:
                layouts.append(bounds)
    for bounds in layouts:
        m = len(bounds) - 1
        for kept in sorted({0, 1, 2, m // 4, m // 2, m}):
            reshard = [j < m - kept for j in range(m)]
            for d_f, d_b in ((0, 0), (1, 1), (2, 1), (2, 2), (m, m)):
                plan = ShardedPlan(bounds, reshard, forward_prefetch=d_f, backward_prefetch=d_b)
                yield plan
                if m >= 3:
                    yield plan.replace(root=True, reshard=[False] + reshard[1:-1] + [False])


def _admit(plan: ShardedPlan, least: dict[str, int], root: bool | None) -> ShardedPlan | None:
    """``plan`` within the least depths and the root asked for (None: it cannot have it)."""
    plan = plan.replace(forward_prefetch=max(plan.forward_prefetch, least["forward_prefetch"]),
                        backward_prefetch=max(plan.backward_prefetch, least["backward_prefetch"]))
    if root is None or plan.root == root:
        return plan
    if root and plan.num_units < 3:
        return None
    flags = plan.reshard.tolist()
    if root:
        flags[0] = flags[-1] = False
    return plan.replace(root=root, reshard=flags)


def _neighbours(plan: ShardedPlan, atoms: list[int], least: dict[str, int], root: bool | None):
    """Plans one move from ``plan``: a boundary removed or added at an atom boundary, a
    reshard flag flipped or swapped with a neighbour's, a prefetch depth one up or down (not
    below ``least``), the root made or unmade (unless ``root`` fixes it)."""
    bounds = plan.bounds.tolist()
    m = len(bounds) - 1
    reshard = plan.reshard.tolist()
    keep = {"forward_prefetch": plan.forward_prefetch, "backward_prefetch": plan.backward_prefetch}
    for j in range(m):
        if plan.root and j in (0, m - 1):
            continue
        yield plan.replace(reshard=reshard[:j] + [not reshard[j]] + reshard[j + 1:])
    for j in range(m - 1):                                # move a unit's resharding to its neighbour
        if reshard[j] != reshard[j + 1] and not (plan.root and j in (0, m - 2)):
            yield plan.replace(reshard=reshard[:j] + [reshard[j + 1], reshard[j]] + reshard[j + 2:])
    for field in keep:
        for step in (-1, 1):
            depth = keep[field] + step
            if least[field] <= depth <= max(m - 1, least[field]):
                yield plan.replace(**{field: depth})
    if m >= 2 and root is None:
        flags = list(reshard)
        if not plan.root:
            flags[0] = flags[-1] = False
        yield plan.replace(root=not plan.root, reshard=flags)
    inside = set(bounds)
    for b in atoms[1:-1]:
        if b in inside:
            j = bounds.index(b)                            # merge units j - 1 and j
            if plan.root and m <= 2 + (j in (1, m - 1)):
                continue                                  # a root keeps two parts and a unit between
            merged = reshard[:j - 1] + [reshard[j - 1] and reshard[j]] + reshard[j + 1:]
            if plan.root and (j == 1 or j == m - 1):
                merged[0] = merged[-1] = False
            yield plan.replace(bounds=bounds[:j] + bounds[j + 1:], reshard=merged)
        else:
            j = int(np.searchsorted(bounds, b))            # split unit j - 1 at b
            split = reshard[:j] + [reshard[j - 1]] + reshard[j:]
            if plan.root:
                split[0] = split[-1] = False
            yield plan.replace(bounds=bounds[:j] + [b] + bounds[j:], reshard=split)


@method("sharded-opt", family="search",
        summary="fully sharded: local search over units, reshard flags, prefetch depths and root under the memory cap "
                "(reduce_groups=True: also reduce-scatter groups)")
@declares(SHARDED)
def sharded_opt(problem: Problem, *, atoms: str | Sequence[int] = "module", max_evaluations: int = 20_000,
                kicks: int = 20, rng: int = 0, time_limit: float = 30.0, min_forward_prefetch: int = 0,
                min_backward_prefetch: int = 0, root: bool | None = None, reduce_groups: bool = False) -> Result:
    """A local search over units, reshard flags, prefetch depths and root, any size: the
    space of :func:`sharded_brute` (each unit's gradients reduce-scattered with it), and with
    ``reduce_groups=True`` also the reduce-scatter groupings apart from the units.

    Scores structured starts (:func:`_candidates`: FSDP2's plan, a unit per atom, and atoms
    and blocks packed into units of ten target sizes with the last ``k`` units kept and five pairs of prefetch depths,
    with and without a root), then descends from the best ``DESCENTS`` of them: it takes
    the first better neighbour (:func:`_neighbours`: a unit boundary removed or added at an
    atom boundary, a reshard flag flipped or swapped with a neighbour's, a depth changed by
    one, the root made or unmade) until none is better; then ``kicks`` times it moves the best plan 2-4 random moves away
    (seeded by ``rng``) and descends again, keeping what is better. It stops early after
    ``max_evaluations`` simulations (a deterministic budget, so a stored result reproduces
    anywhere) or ``time_limit`` seconds (a safeguard; ``TIME_LIMIT`` when it
    stops the search). Plans over the memory cap count as worse than every plan within it,
    and by how far they exceed it, so the search walks into the cap. Its ``gap`` is to
    :func:`~fusionopt.model.sharded_lower_bound`.

    ``reduce_groups=True`` (DeepSpeed ZeRO-3's gradient buckets, MODEL.md 8.2's
    ``reduce_bounds``; FSDP can only reduce-scatter a unit's gradients together, so the
    default is False): after that search, which runs exactly as without the option, a second
    one starts from its best local optima (the ``DESCENTS`` best, the root unmade), each with
    the reduce-scatter groups equal to its units and with atoms packed into groups of ten target
    sizes from either end (:func:`_group_layouts`), descends from the best ``DESCENTS`` of
    those starts over the moves above and the grouping's own (:func:`_group_neighbours`: a
    group boundary added, removed or moved to the next atom boundary, or back to
    reduce-scatters with the units), then kicks as above. It only takes a plan better than
    the best found so far, so its result is never slower than without the option on the same
    problem and budget (unless ``time_limit`` stops a search); it runs up to
    ``max_evaluations`` further simulations.

    ``min_forward_prefetch``, ``min_backward_prefetch``: the least depths to consider (FSDP2
    can set no less than 2 and 1, :mod:`fusionopt.advice._sharded`); ``root``: True or
    False fixes whether the first and last units are a root (None: both are searched; a plan
    with groups of its own has none, so ``root=True`` does not combine with ``reduce_groups``).
    ``stats``: ``evaluations`` (simulations in all), ``reduce_groups`` (whether groupings were
    searched), ``group_evaluations`` (the second search's simulations) and ``stopped``.
    Ctrl-C raises :class:`~fusionopt.solvers.Interrupted`, whose ``result`` is the
    best plan within the cap scored so far (``stopped``: ``"interrupted"``, status
    ``INTERRUPTED``); before there is one, a plain ``KeyboardInterrupt``.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import FullySharded, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> problem = Problem(profile, pattern=FullySharded(half, half, memory_cap=1e7))
    >>> r = sharded_opt(problem, atoms="tensor")
    >>> round(r.iteration_time * 1e3, 9), r.timeline.peak_memory <= 1e7
    (27.0, True)

    Two tensors of 1 MB (forwards 1 ms, backwards 4 ms), an all-gather 10 ms whatever its
    size, a reduce-scatter 4 ns/B: with the units, the best is one unit kept (gather 0-10,
    compute 10-20, one reduce-scatter 20-28 ms); with groups, ``t1``'s gradient, ready at
    16 ms, is reduce-scattered 16-20 while ``t0``'s backward runs, and ``t0``'s 20-24 ms:

    >>> two = Problem(Profile.from_arrays([1e6, 1e6], [1e-3] * 2, [4e-3] * 2),
    ...               pattern=FullySharded(AlphaBeta(0.0, 4e-9), AlphaBeta(10e-3, 0.0)))
    >>> [round(sharded_opt(two, reduce_groups=g).iteration_time * 1e3, 9) for g in (False, True)]
    [28.0, 24.0]
    """
    for label, value, least_value in (("max_evaluations", max_evaluations, 1), ("kicks", kicks, 0), ("rng", rng, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least_value:
            raise ValueError(f"{label} must be a whole number >= {least_value}, got {value!r}")
    least = {"forward_prefetch": min_forward_prefetch, "backward_prefetch": min_backward_prefetch}
    for label, value in least.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"min_{label} must be a whole number of units >= 0, got {value!r}")
    if root is not None and not isinstance(root, (bool, np.bool_)):
        raise ValueError(f"root must be True, False or None (search both), got {root!r}")
    check_flag("reduce_groups", reduce_groups)
    if reduce_groups and root:
        raise ValueError("reduce_groups=True searches reduce-scatter groups, which a root does not take: "
                         "leave root at None or False")
    check_floor(problem, "sharded-opt")
    profile = problem.profile
    bounds = atom_bounds(profile, atoms)
    seen: dict[ShardedPlan, tuple[float, float]] = {}
    stopped = None
    limit = max_evaluations                               # simulations allowed so far, all searches together

    def score(plan: ShardedPlan) -> tuple[float, float]:
        nonlocal stopped
        if plan not in seen:
            if len(seen) >= limit:
                stopped = "evaluations"
                return (math.inf, math.inf)
            seen[plan] = plan_score(problem, plan)
        return seen[plan]

    def descend(plan: ShardedPlan, moves) -> tuple[ShardedPlan, tuple[float, float]]:
        """First improvement, scanning on after each move, until no neighbour is better."""
        nonlocal stopped
        value = score(plan)
        improved = True
        while improved and stopped is None:
            if time.perf_counter() > deadline():
                stopped = "time"
                break
            improved = False
            for step in moves(plan):
                if score(step) < value:
                    plan, value, improved = step, score(step), True
                    break
        return plan, value

    optima: dict[ShardedPlan, tuple[float, float]] = {}   # where descents ended: starts for the groups

    def search(starts: list[ShardedPlan], extra: list[ShardedPlan], moves,
               best: ShardedPlan | None = None, best_score: tuple[float, float] = (math.inf, math.inf)
               ) -> tuple[ShardedPlan | None, tuple[float, float]]:
        """Descents from the best ``starts`` and ``extra``, then kicks; a plan replaces
        ``best`` only when it is better."""
        ranked = sorted(dict.fromkeys(starts), key=score)[:DESCENTS] + extra
        for start in ranked:
            plan, value = descend(start, moves)
            optima[plan] = value
            if value < best_score:
                best, best_score = plan, value
        generator = np.random.default_rng(rng)
        for _ in range(kicks if best is not None else 0):  # perturb the best: a few random moves, descend again
            if stopped is not None:
                break
            plan = best
            for _ in range(int(generator.integers(2, 5))):
                options = list(moves(plan))
                if not options:
                    break
                plan = options[int(generator.integers(len(options)))]
            plan, value = descend(plan, moves)
            if value < best_score:
                best, best_score = plan, value
        return best, best_score

    def unit_search(grain: list[int], extra: list[ShardedPlan]) -> tuple[ShardedPlan | None, tuple[float, float]]:
        """The search over units (each reduce-scattered with its gradients) over ``grain``."""
        starts = [plan for plan in (_admit(c, least, root) for c in _candidates(profile, grain)) if plan is not None]
        return search(starts, extra, lambda plan: _neighbours(plan, grain, least, root))

    reasons = []
    group_evaluations = 0
    try:
        # Whole blocks first when the atoms are finer: their best is a start for the atoms.
        blocks = atom_bounds(profile, "block")
        coarse = []
        if blocks != bounds and set(blocks) <= set(bounds):
            found, _ = unit_search(blocks, [])
            coarse = [] if found is None else [found]
        best, best_score = unit_search(bounds, coarse)
        if best is None:
            raise ValueError(f"sharded-opt: no start with a root: the atoms give {len(bounds) - 1} unit(s), a "
                             "root needs two parts and a unit between")
        reasons.append(stopped)
        if reduce_groups and stopped != "time":
            # From the best local optima of the search above, each with groups of its own.
            stopped, before = None, len(seen)
            limit = before + max_evaluations
            starts = []
            for plan in sorted(optima, key=optima.get)[:DESCENTS]:
                flat = plan.replace(root=False) if plan.root else plan
                starts.append(flat.replace(reduce_bounds=flat.bounds))
                starts += [flat.replace(reduce_bounds=groups) for groups in _group_layouts(profile, bounds)]

            def grouped_moves(plan: ShardedPlan):
                yield from _neighbours(plan, bounds, least, root if plan.reduce_bounds is None else False)
                yield from _group_neighbours(plan, bounds)

            best, best_score = search(starts, [], grouped_moves, best, best_score)
            group_evaluations = len(seen) - before
            reasons.append(stopped)
    except KeyboardInterrupt:
        # Ctrl-C: the best plan scored so far (each score is stored whole, so none is
        # half-made), if one is within the memory cap; else nothing to keep.
        best = min(seen, key=seen.get, default=None)
        if best is None or seen[best][0] > 0:
            raise
        reasons.append("interrupted")
        best_score = seen[best]
    if best_score[0] > 0:
        raise infeasible(problem, "sharded-opt", best_score[0])
    stopped = next((reason for reason in ("interrupted", "time", "evaluations") if reason in reasons), None)
    status = {"interrupted": Status.INTERRUPTED, "time": Status.TIME_LIMIT}.get(stopped, Status.FEASIBLE)
    stats = {"evaluations": len(seen), "atoms": len(bounds) - 1, "reduce_groups": bool(reduce_groups),
             "stopped": stopped or "local optimum"}
    if reduce_groups:
        stats["group_evaluations"] = group_evaluations
    result = Outcome(best, status=status, stats=stats)
    if stopped == "interrupted":
        raise Interrupted(result) from None
    return result


__all__ = ["DESCENTS", "sharded_opt"]
