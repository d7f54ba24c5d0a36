"""TorchInductor's bucketing of FSDP collectives (torch 2.13) on FSDP2's units, as a fully
sharded plan (MODEL.md section 8.2): :func:`inductor`, :func:`inductor_plan`,
:func:`inductor_cap_mb`.

Read in torch 2.13.0, ``torch/_inductor/``:

* ``fx_passes/fsdp.py``, ``pre_bucket_fsdp_collectives``: the FSDP all-gathers are
  bucketed, then the reduce-scatters, separately, each with one cap
  (``compute_pre_bucket_cap_mb``; ``config.aten_distributed_optimizations.
  pre_bucketing_fsdp_collectives_bucket_cap_mb`` overrides it).
* ``fx_passes/bucketing.py``, ``greedy_bucket_collective_by_mb``: collectives of one
  group, in graph order, are added to the current bucket; one whose bytes would take the
  bucket over ``int(cap_mb * 1024 * 1024)`` closes it first (a collective larger than the
  cap is a bucket alone). Only adjacent collectives merge, so the order is kept.
* ``compute_pre_bucket_cap_mb`` with ``comm_analysis.compute_min_saturation_bytes``: the
  cap is ``clamp(max(9 x latency x bus_bw, min_saturation_bytes) / MiB, 10, 500)`` MiB
  (``target_efficiency`` 0.9 gives the 9; the latency ``base + (P - 1) x hop`` and the
  bus bandwidth from a per-interconnect profile, ``INTERCONNECT_PROFILES``; the floor and
  the ceiling are ``pre_bucketing_fsdp_collectives_min/max_bucket_cap_mb``).

This pass is opt-in (``aten_distributed_optimizations.enable_overlap_scheduling``, off by
default in 2.13, and the FX bucketing configs ``bucket_*_fx`` default to ``"none"``): the
method is what ``torch.compile`` does with it on.

Our reading: the problem's all-gather cost ``c(S) = alpha + beta S`` stands for the
interconnect profile, ``alpha`` the latency and ``1 / beta`` the bandwidth, so the default
cap is ``clamp(9 alpha / beta bytes, 10 MiB, 500 MiB)`` (the profiles' floors in bytes
for InfiniBand are left out). A cost that is not affine needs ``bucket_cap_mb``.

Reconstructed on our unit model: the collectives bucketed are FSDP2's per unit
(:func:`~fusionopt.solvers.baselines.fsdp2_plan`): the all-gathers in forward order, the
reduce-scatters in backward order. When nothing merges the plan is FSDP2's own. Merged
all-gathers make one unit; the reduce-scatter
buckets are the plan's ``reduce_bounds`` when they differ from the units. A merged unit is
resharded only when all its FSDP2 units are. Since the model's root does not combine with
``reduce_bounds``, FSDP2's root is not one unit here: its part before the blocks is the
first unit and its part after them the last, each kept, gathered and reduce-scattered at
its own place (FSDP2 gathers both first and reduce-scatters both last). The backward's
all-gathers (the regathers) are bucketed in the backward graph in reverse order; here a
regather is its unit's, as grouped in the forward. Prefetch depths are FSDP2's (2
forward, 1 backward).
"""

from __future__ import annotations


import numpy as np

from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_timing import require_sharded
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers.baselines._fsdp2 import fsdp2_forward_prefetch, fsdp2_plan
from fusionopt.solvers._catalogue import method

MIB = 1024 * 1024
MIN_CAP_MB, MAX_CAP_MB = 10.0, 500.0
SATURATION = 0.9 / (1.0 - 0.9)                            # target_efficiency 0.9: 9


def inductor_cap_mb(problem: Problem) -> float:
    """The default bucket cap in MiB (our reading of ``compute_pre_bucket_cap_mb``):
    ``clamp(9 alpha / beta / MiB, 10, 500)`` from the all-gather cost ``alpha + beta S``.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded, Profile
    >>> p = Profile.from_arrays([8], [0], [0])
    >>> inductor_cap_mb(Problem(p, pattern=FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9))))
    10.0
    >>> ab = AlphaBeta(1e-3, 1e-10)                              # 9e7 B = 85.83 MiB
    >>> round(inductor_cap_mb(Problem(p, pattern=FullySharded(ab, ab))), 2)
    85.83
    """
    require_sharded(problem, "inductor")
    affine = problem.pattern.all_gather.affine
    if affine is None:
        raise ValueError("inductor: the all-gather cost is not alpha + beta S; give bucket_cap_mb (MiB): the "
                         "default cap is read from alpha and beta")
    alpha, beta = affine
    cap = MAX_CAP_MB if beta <= 0 else SATURATION * alpha / beta / MIB
    return float(max(MIN_CAP_MB, min(MAX_CAP_MB, cap)))


def _greedy(sizes: list[int], cap_bytes: int) -> list[list[int]]:
    """``greedy_bucket_collective_by_mb``: positions of ``sizes`` in buckets, in order."""
    buckets: list[list[int]] = []
    current: list[int] = []
    total = 0
    for k, size in enumerate(sizes):
        if total + size > cap_bytes and current:
            buckets.append(current)
            current, total = [], 0
        current.append(k)
        total += size
    if current:
        buckets.append(current)
    return buckets


def inductor_plan(problem: Problem, *, bucket_cap_mb: float | None = None) -> ShardedPlan:
    """The plan :func:`inductor` runs (the reconstruction: this module's docstring).

    FSDP2's units of 40 B (the root's ``emb``), 24, 24, 24 B (blocks) and 32 B (the root's
    ``ln``), a cap of 50 B: the all-gathers in forward order make ``[40]``, ``[24, 24]``
    (48), ``[24]`` (24 + 32 > 50), ``[32]``; the reduce-scatters from the end ``[32]``,
    ``[24, 24]``, ``[24]`` (24 + 40 > 50), ``[40]``.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded, Profile
    >>> p = Profile.from_arrays([40, 24, 24, 24, 32], [0] * 5, [0] * 5,
    ...                         names=["emb.weight", "h.0.w", "h.1.w", "h.2.w", "ln.weight"])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> plan = inductor_plan(Problem(p, pattern=FullySharded(half, half)), bucket_cap_mb=50 / 2**20)
    >>> plan.bounds.tolist(), plan.reduce_bounds.tolist(), plan.reshard.tolist(), plan.num_messages
    ([0, 1, 3, 4, 5], [0, 1, 2, 4, 5], [False, True, True, False], 10)
    """
    require_sharded(problem, "inductor")
    if bucket_cap_mb is None:
        cap_mb = inductor_cap_mb(problem)
    elif (isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float, np.integer, np.floating))
          or not np.isfinite(bucket_cap_mb) or bucket_cap_mb <= 0):
        raise ValueError(f"bucket_cap_mb must be a positive number of MiB, got {bucket_cap_mb!r}")
    else:
        cap_mb = float(bucket_cap_mb)
    cap_bytes = int(cap_mb * MIB)
    profile = problem.profile
    base = fsdp2_plan(profile, forward_prefetch=fsdp2_forward_prefetch(problem.pattern.blocking))
    bounds = base.bounds.tolist()
    sizes = base.unit_bytes(profile).tolist()
    m = len(sizes)
    gathers = _greedy(sizes, cap_bytes)
    scatters = _greedy(sizes[::-1], cap_bytes)
    if len(gathers) == len(scatters) == m:
        return base                                       # nothing merges: FSDP2's own plan, root and all
    unit_bounds = [bounds[bucket[0]] for bucket in gathers] + [profile.n]
    group_bounds = sorted(bounds[m - 1 - bucket[-1]] for bucket in scatters) + [profile.n]
    reshard = [bool(all(base.reshard[j] for j in bucket)) for bucket in gathers]
    names = [base.names[bucket[0]] if len(bucket) == 1 else f"{base.names[bucket[0]]}..{base.names[bucket[-1]]}"
             for bucket in gathers]
    return ShardedPlan(unit_bounds, reshard, forward_prefetch=base.forward_prefetch,
                       backward_prefetch=base.backward_prefetch, names=names,
                       reduce_bounds=None if group_bounds == unit_bounds else group_bounds)


@method("inductor", family="framework baseline",
        summary="TorchInductor (torch 2.13) FSDP bucketing: FSDP2's collectives merged greedily under a bandwidth cap")
@declares(Needs(pattern="fully-sharded"))
def inductor(problem: Problem, *, bucket_cap_mb: float | None = None) -> Result:
    """TorchInductor's FSDP collective bucketing (torch 2.13) on FSDP2's per-block units
    (:func:`inductor_plan`; what is read and what is reconstructed: this module's
    docstring). ``bucket_cap_mb``: the cap in MiB; default :func:`inductor_cap_mb`.

    Examples
    --------
    GPT-2 on 64 workers of 100 Gb/s InfiniBand: the cap is 9 x 126 us / 78.75 ps/B =
    14.4 MB (13.73 MiB); every unit is larger (a block is 28.35 MB), so nothing merges:
    FSDP2's own plan. A cap of 100 MiB merges three blocks at a
    time (3 x 28.35 MB = 85.05 MB <= 104.86 MB), ``ln_f`` with the last three: ``wte`` and
    ``wpe`` (157.5 MB) alone, then four units, the same buckets both ways:

    >>> from fusionopt import zoo
    >>> from fusionopt.model import FullySharded
    >>> problem = Problem(zoo.profile("gpt2", device="h100", batch=8),
    ...                   pattern=FullySharded.from_network("100gb-ib", workers=64))
    >>> r = inductor(problem)
    >>> round(r.stats["bucket_cap_mb"], 2), r.plan.num_units, r.plan.reduce_bounds is None
    (13.73, 14, True)
    >>> inductor(problem, bucket_cap_mb=100).plan.num_units
    5
    """
    cap = inductor_cap_mb(problem) if bucket_cap_mb is None else bucket_cap_mb
    plan = inductor_plan(problem, bucket_cap_mb=cap)
    groups = plan.num_units if plan.reduce_bounds is None else plan.reduce_bounds.size - 1
    return Outcome(plan,
                   stats={"bucket_cap_mb": float(cap), "units": plan.num_units, "reduce_scatters": int(groups)})


__all__ = ["inductor", "inductor_plan", "inductor_cap_mb"]
