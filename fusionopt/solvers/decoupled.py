"""Methods for the decoupled all-reduce (MODEL.md section 8.1; docs/methods.md).

* :func:`decoupled_wfbp`: one reduce-scatter per tensor as its gradient is ready, one
  all-gather per tensor in forward order: the unfused schedule, the reference of
  :func:`~fusionopt.solvers.comparison.compare` on these problems.
* :func:`megatron` and :func:`megatron_overlap`: Megatron-LM's data-parallel buckets with its
  distributed optimiser and ``overlap_grad_reduce``, without and with
  ``overlap_param_gather``.
* :func:`decoupled_brute`: every pair of contiguous groupings (reduce-scatters along the
  ready order, all-gathers along the forward order), exact over that space for small ``n``.
* the same optimum at any size where the two groupings separate:
  :func:`~fusionopt.solvers.decoupled_dp.decoupled_dp`.
* :func:`dear`: DeAR's fusion of modules up to a buffer threshold, reduce-scatters from the
  backward hooks, all-gathers one group ahead from the forward pre-hooks.
* :func:`decoupled_opt`: a local search over the two groupings from the best of the others,
  for any size, with its gap to :func:`~fusionopt.model.bounds.decoupled_lower_bound`.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np

from fusionopt.model.decoupled import REDUCE_SCATTER, DecoupledPlan
from fusionopt.model.fusion_dp import optimal_fusion
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.simulator import compute_pieces, simulate
from fusionopt.solvers.needs import Needs, declares
from fusionopt.solvers.result import Outcome, Result
from fusionopt.solvers.catalogue import method

MEGATRON_MIN_BUCKET = 40_000_000            # parameters
MEGATRON_BUCKET_PER_RANK = 1_000_000        # parameters per data-parallel rank
BRUTE_MAX_TENSORS = 8


@method("decoupled-wfbp", family="framework baseline",
        summary="decoupled all-reduce: a reduce-scatter per tensor when ready, an all-gather per tensor in forward order")
@declares(Needs(pattern="decoupled"))
def decoupled_wfbp(problem: Problem) -> Result:
    """Each gradient reduce-scattered alone as soon as it is ready, each parameter all-gathered
    alone in forward order, every reduce-scatter first.

    Examples
    --------
    MODEL.md section 5's profile with ring halves of ``1 ms + 1 ns/B``: reduce-scatters 1-4,
    4-6 and 6-11 ms, all-gathers 11-16, 16-18 and 18-21 ms; layerwise forwards at 16, 18 and
    21 ms: ``T = 22`` ms.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_wfbp(Problem(profile, decoupled=Decoupled(half, half), sync="layerwise"))
    >>> round(r.iteration_time * 1e3, 9), r.num_messages
    (22.0, 6)
    """
    profile = problem.profile
    plan = DecoupledPlan(Plan.per_tensor(profile, list(profile.ready_order)), Plan.per_tensor(profile, range(profile.n)))
    return Outcome(plan)


def megatron_buckets(problem: Problem, data_parallel_size: int | None = None,
                     bucket_size: int | None = None) -> tuple[list[list[int]], int]:
    """Megatron-LM's gradient buckets (tensors, forward indices) and their size in parameters.

    Parameters are taken in reverse registration order (``params[::-1]`` of each buffer)
    and a bucket is closed after the parameter that brings it to ``bucket_size`` elements
    or more; the size is ``max(40,000,000, 1,000,000 x data_parallel_size)`` unless given,
    ``data_parallel_size`` by default the problem's workers (``Decoupled.workers``, set by
    ``Decoupled.from_network``), else 1.
    Bucket 0 holds the model's last parameters.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([8e7, 1e8, 8e7], [0.0] * 3, [1e-3] * 3)   # 20M, 25M, 20M params
    >>> megatron_buckets(Problem(profile, decoupled=Decoupled(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))))
    ([[2, 1], [0]], 40000000)
    """
    if bucket_size is None:
        dp = data_parallel_size
        if dp is None:                                    # the problem's own, when it was built on a network
            dp = problem.decoupled.workers if problem.decoupled is not None and problem.decoupled.workers else 1
        if isinstance(dp, bool) or not isinstance(dp, (int, np.integer)) or dp < 1:
            raise ValueError(f"data_parallel_size must be an integer >= 1, got {data_parallel_size!r}")
        bucket_size = max(MEGATRON_MIN_BUCKET, MEGATRON_BUCKET_PER_RANK * int(dp))
    elif isinstance(bucket_size, bool) or not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1:
        raise ValueError(f"bucket_size must be a whole number of parameters >= 1, got {bucket_size!r}")
    profile = problem.profile
    elements = [-(-int(size) // int(element)) for size, element in zip(profile.sizes.tolist(), profile.element_bytes)]
    buckets: list[list[int]] = [[]]
    count = 0
    for i in reversed(list(profile.registration_order)):
        buckets[-1].append(int(i))
        count += elements[i]
        if count >= bucket_size:
            buckets.append([])
            count = 0
    if not buckets[-1]:
        buckets.pop()
    return buckets, int(bucket_size)


def _megatron(problem: Problem, method: str, data_parallel_size: int | None, bucket_size: int | None,
              overlap_param_gather: bool) -> Outcome:
    profile = problem.profile
    if problem.decoupled.update_after_gather and profile.U > 0:
        raise ValueError(f"{method} updates in the optimiser step, before gathering parameters; this problem "
                         "updates after the gathers (update_after_gather=True)")
    buckets, size = megatron_buckets(problem, data_parallel_size, bucket_size)
    ready = profile.ready_times
    # Reduce-scatters: a bucket goes when its last gradient is ready (ties: bucket order).
    rs_order = sorted(range(len(buckets)), key=lambda b: (float(ready[buckets[b]].max()), b))
    reduce_scatter = Plan.from_groups(profile, [buckets[b] for b in rs_order])
    # The optimiser step waits for every reduce-scatter (finish_grad_sync), then runs.
    step_end = max(profile.B, _gradients_reduced(problem, reduce_scatter)) + profile.U
    if not overlap_param_gather:
        # In the step, one all-gather per bucket in bucket order; the forward waits for all.
        all_gather = Plan.from_groups(profile, buckets, release=[step_end] * len(buckets))
    else:
        # Forward pre-hooks: the bucket the forward needs first is gathered at the start of the
        # forward, and each next one when the forward reaches the bucket before it.
        chain = sorted(buckets, key=min)
        all_gather = _gathered_one_ahead(problem, reduce_scatter, chain, step_end)
    plan = DecoupledPlan(reduce_scatter, all_gather)
    if data_parallel_size is None:
        data_parallel_size = problem.decoupled.workers
    stats = {"bucket_size": size, "buckets": len(buckets), "data_parallel_size": data_parallel_size,
             "overlap_param_gather": overlap_param_gather, "step_end": step_end}
    return Outcome(plan, stats=stats)


def _gradients_reduced(problem: Problem, reduce_scatter: Plan, reduce_with: str = "reduce_scatter") -> float:
    """When the last gradient message ends, as the simulator times it (seconds): the gradient
    messages run first on the channel, so the all-gathers after them do not change it."""
    everything = Plan.from_groups(problem.profile, [list(range(problem.profile.n))])
    timeline = simulate(problem, DecoupledPlan(reduce_scatter, everything, reduce_with=reduce_with), validate=False)
    return float(timeline.message_end[timeline.message_kind == REDUCE_SCATTER].max())


def _gathered_one_ahead(problem: Problem, reduce_scatter: Plan, chain: list[list[int]], first: float) -> Plan:
    """The all-gathers of ``chain`` (groups in the order the forward needs them) as forward
    pre-hooks issue them: the first released at ``first`` (seconds), each next one when the
    compute stream starts on the first tensor of the group before it, after waiting for that
    group's all-gather (its update when the problem updates after the gathers, else its
    forward). Those moments are read from the simulator's compute stream: a group's start
    depends only on the groups before it, so each pass fixes one more release."""
    kind = "update" if problem.decoupled.update_after_gather else "forward"
    release = [first] * len(chain)
    for _ in range(len(chain)):
        gather = Plan.from_groups(problem.profile, chain, release=release)
        pieces = compute_pieces(problem, DecoupledPlan(reduce_scatter, gather), validate=False)
        begins = {p.tensor: p.start for p in pieces if p.kind == kind}
        issued = [first] + [begins[min(group)] for group in chain[:-1]]
        if issued == release:
            return gather
        release = issued
    raise AssertionError("the one-ahead all-gathers did not settle")


@method("megatron", family="framework baseline",
        summary="Megatron-LM buckets (max(4e7, 1e6 x dp) params), distributed optimiser, gathers in the step (barrier)")
@declares(Needs(pattern="decoupled", barrier=True))
def megatron(problem: Problem, *, data_parallel_size: int | None = None, bucket_size: int | None = None) -> Result:
    """Megatron-LM DDP with the distributed optimiser and ``overlap_grad_reduce``, parameters
    gathered in the optimiser step (``overlap_param_gather=False``, its default).

    Checked against ``megatron/core/distributed`` (``distributed_data_parallel.py``,
    ``param_and_grad_buffer.py``) and ``optimizer/distrib_optimizer.py`` of Megatron-LM 0.20:

    * buckets of :func:`megatron_buckets` (``bucket_size`` parameters, by default
      ``max(4e7, 1e6 x data_parallel_size)``; without ``data_parallel_size`` the problem's
      workers when it was built on a network preset, else the 4e7 floor,
      exact up to 40 ranks);
    * a bucket's reduce-scatter is issued when its last gradient is ready;
    * the optimiser step waits for every reduce-scatter, then runs (``U``);
    * then one all-gather per bucket, in bucket order, and the forward waits for all of
      them: ``sync="barrier"`` only.

    Reconstructed, not measured: the padding of each parameter's start to 64 elements and of
    each bucket to ``lcm(dp, 128)`` elements is left out, and the first iteration (which sends every bucket after the backward) is not the
    steady state modelled.

    Examples
    --------
    Tensors of 4, 1 and 3 MB (2M parameters, under 40M): one bucket, reduce-scattered at the
    end of the backward (6-15 ms with ``1 ms + 1 ns/B``), then the step (no update time) and
    one all-gather (15-24 ms), then the forward: ``T = 27`` ms.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 3e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = megatron(Problem(profile, decoupled=Decoupled(half, half)))
    >>> r.stats["buckets"], round(r.iteration_time * 1e3, 9)
    (1, 27.0)
    """
    return _megatron(problem, "megatron", data_parallel_size, bucket_size, overlap_param_gather=False)


@method("megatron-overlap", family="framework baseline",
        summary="Megatron-LM with overlap_param_gather: buckets gathered one ahead by forward pre-hooks (layerwise)")
@declares(Needs(pattern="decoupled", layerwise=True))
def megatron_overlap(problem: Problem, *, data_parallel_size: int | None = None,
                     bucket_size: int | None = None) -> Result:
    """Megatron-LM as :func:`megatron`, with ``overlap_param_gather=True``: no all-gather in the
    step; the forward's pre-hooks gather the first bucket at the start of the forward and,
    when the forward reaches a bucket's first parameter, wait for that bucket and dispatch
    the next one (one ahead; ``finish_param_sync`` and ``next_param_gather_bucket_group``).
    The dispatch times are read from the simulator's own compute stream and given to the
    plan as release times. ``sync="layerwise"`` only.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 3e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)

    With 1M-parameter buckets: ``{t2, t1}`` (ready at 3 ms) is reduce-scattered 3-8 ms and
    ``{t0}`` 8-13 ms; the step ends at 13 ms and gathers ``{t0}``, 13-18 ms; the forward
    reaches t0 at 18 ms and dispatches ``{t2, t1}``, 18-23 ms; forwards at 18, 23 and 24 ms.

    >>> r = megatron_overlap(Problem(profile, decoupled=Decoupled(half, half), sync="layerwise"), bucket_size=1_000_000)
    >>> r.stats["buckets"], (r.plan.all_gather.release * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    (2, [13.0, 18.0], 25.0)
    """
    return _megatron(problem, "megatron-overlap", data_parallel_size, bucket_size, overlap_param_gather=True)


def in_grouping_space(problem: Problem, plan: object) -> bool:
    """Whether ``plan`` is one of :func:`decoupled_brute`'s space (the space
    :func:`~fusionopt.solvers.decoupled_dp.decoupled_dp` is exact over too): whole tensors,
    reduce-scatters in contiguous groups of the ready order, all-gathers in contiguous groups
    of the forward order, each kind in that order, every reduce-scatter before the first
    all-gather, no release times, gradients reduce-scattered. An optimum over the space then
    bounds the plan's ``T`` on the same problem.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, decoupled=Decoupled(AlphaBeta(1e-3, 1e-9), AlphaBeta(1e-3, 1e-9)))
    >>> in_grouping_space(problem, decoupled_wfbp(problem).plan)
    True
    >>> in_grouping_space(problem, DecoupledPlan.from_groups(profile, [[2, 1, 0]], [[0], [1, 2]], order=[1, 0, 1]))
    False
    """
    if not isinstance(plan, DecoupledPlan):
        return False
    profile = problem.profile
    rs, ag = plan.reduce_scatter.groups(), plan.all_gather.groups()
    if [i for g in rs for i in g] != [int(i) for i in profile.ready_order]:
        return False
    if [i for g in ag for i in g] != list(range(profile.n)):
        return False
    return DecoupledPlan.from_groups(profile, rs, ag) == plan          # whole tensors, no release, RS first


DEAR_THRESHOLD_MB = 25.0


@method("decoupled-brute", family="exact",
        summary="decoupled all-reduce, exact: every pair of contiguous groupings, n <= 8",
        in_default_comparison=False,
        space=in_grouping_space)
@declares(Needs(pattern="decoupled", max_tensors=BRUTE_MAX_TENSORS,
                size_reason="enumerates 4^(n-1) pairs of groupings"))
def decoupled_brute(problem: Problem) -> Result:
    """Every pair of contiguous groupings (reduce-scatters along the ready order, all-gathers
    along the forward order, every reduce-scatter first), the fastest kept (ties: the first
    found): exact over that space, for ``n <= 8``.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_brute(Problem(profile, decoupled=Decoupled(half, half), sync="barrier"))
    >>> round(r.iteration_time * 1e3, 9), str(r.status), r.stats["plans"]
    (22.0, 'OPTIMAL', 16)
    """
    profile = problem.profile
    n = profile.n
    ready_order = list(profile.ready_order)
    best: tuple[float, DecoupledPlan] | None = None
    plans = 0
    for rs_cuts in itertools.product((False, True), repeat=n - 1):
        reduce_scatter = Plan.from_groups(profile, _groups(ready_order, rs_cuts))
        for ag_cuts in itertools.product((False, True), repeat=n - 1):
            plan = DecoupledPlan(reduce_scatter, Plan.from_groups(profile, _groups(list(range(n)), ag_cuts)))
            value = simulate(problem, plan, validate=False).iteration_time
            plans += 1
            if best is None or value < best[0]:
                best = (value, plan)
    assert best is not None
    return Outcome(best[1], lower_bound=best[0], optimal=True,
                   stats={"plans": plans})


def dear_groups(problem: Problem, threshold_mb: float = DEAR_THRESHOLD_MB) -> list[list[int]]:
    """DeAR's fusion groups (tensors, forward indices), in forward order.

    Modules are the tensors' name prefixes before the last dot (``layer1.0.conv1`` for
    ``layer1.0.conv1.weight``), in the forward order of their first tensor, each sized at
    4 bytes per element in MB (2^20 bytes) as DeAR's code sizes them. A module joins the
    current group while the group is empty or stays under ``threshold_mb``; otherwise it
    starts a new group (``_generate_groups_with_threshold``).

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> mb = 2 ** 20
    >>> profile = Profile.from_arrays([10 * mb, 2 * mb, 20 * mb, 8 * mb], [0.0] * 4, [1e-3] * 4,
    ...                               names=["a.weight", "a.bias", "b.weight", "c.weight"])
    >>> dear_groups(Problem(profile, decoupled=Decoupled(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))))
    [[0, 1], [2], [3]]
    """
    if isinstance(threshold_mb, bool) or not isinstance(threshold_mb, (int, float)) or not (
            math.isfinite(threshold_mb) and threshold_mb > 0):
        raise ValueError(f"threshold_mb must be a positive number of MB, got {threshold_mb!r}")
    profile = problem.profile
    modules: dict[str, list[int]] = {}
    for i, name in enumerate(profile.names):
        modules.setdefault(name.rsplit(".", 1)[0], []).append(i)
    element_bytes = profile.element_bytes
    groups: list[list[int]] = []
    total = 0.0
    for tensors in modules.values():
        size = sum(-(-int(profile.sizes[i]) // int(element_bytes[i])) for i in tensors) * 4 / 1024 / 1024
        if not groups or not (total == 0 or total + size < threshold_mb):
            groups.append([])
            total = 0.0
        groups[-1].extend(tensors)
        total += size
    return groups


@method("dear", family="paper",
        summary="DeAR: 25 MB module groups, reduce-scatters in the backward, gathers one ahead in the forward (layerwise)")
@declares(Needs(pattern="decoupled", layerwise=True))
def dear(problem: Problem, *, threshold_mb: float = DEAR_THRESHOLD_MB) -> Result:
    """DeAR (Zhang, Shi et al., ICDCS 2023) as its code runs it: fused reduce-scatters during
    the backward, fused all-gathers of the reduced gradients overlapping the next forward.

    Checked against ``dear/dopt_rsag.py`` of ``lzhangbv/dear_pytorch`` (July 2023), which its
    training scripts use (the Bayesian-optimised threshold of ``dopt_rsag_bo.py`` is opt-in):

    * groups of :func:`dear_groups` (25 MB by default; the scripts' ``--threshold`` does not
      reach the optimiser);
    * a group's reduce-scatter is issued from the backward hook of its last gradient;
    * ``step()`` waits for every reduce-scatter (``_bp_barrier``) and issues the first
      group's all-gather; the forward pre-hook of a group's first module waits for that
      group's all-gather and issues the next group's (one outstanding);
    * each module is updated in its pre-hook, after its all-gather: the problem must say so
      (``Decoupled(..., update_after_gather=True)``) unless it has no update time.

    The all-gather dispatch times are read from the simulator's own compute stream and given
    to the plan as release times. ``sync="layerwise"`` only.

    Reconstructed, not measured: a module's tensors are found by name, and the buffers'
    padding to a multiple of the world size is left out.

    Examples
    --------
    MODEL.md section 5's tensors as three modules of 3.8, 1 and 1.9 MB with a 4 MB
    threshold: groups ``{t0}``, ``{t1, t2}``. Reduce-scatters: ``{t1, t2}`` at 3 ms, 3-7;
    ``{t0}`` at 6 ms, 7-12. The first all-gather ``{t0}`` goes at 12, 12-17; the forward
    reaches t0 at 17 (no update time) and dispatches ``{t1, t2}``, 17-21; forwards at 17,
    21 and 22 ms: ``T = 23`` ms.

    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = dear(Problem(profile, decoupled=Decoupled(half, half), sync="layerwise"), threshold_mb=4)
    >>> r.plan.all_gather.groups(), (r.plan.all_gather.release * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([[0], [1, 2]], [12.0, 17.0], 23.0)
    """
    profile = problem.profile
    if not problem.decoupled.update_after_gather and profile.U > 0:
        raise ValueError("dear updates each module after its all-gather (in the forward pre-hook): build the "
                         "problem with Decoupled(..., update_after_gather=True)")
    groups = dear_groups(problem, threshold_mb)
    position = {int(i): k for k, i in enumerate(profile.ready_order)}
    rs_order = sorted(range(len(groups)), key=lambda g: max(position[i] for i in groups[g]))
    reduce_scatter = Plan.from_groups(profile, [sorted(groups[g], key=position.get) for g in rs_order])
    # step() waits for every reduce-scatter and issues the first group's all-gather.
    all_gather = _gathered_one_ahead(problem, reduce_scatter, groups, _gradients_reduced(problem, reduce_scatter))
    return Outcome(DecoupledPlan(reduce_scatter, all_gather),
                   stats={"threshold_mb": float(threshold_mb), "groups": len(groups)})


@method("decoupled-opt", family="search",
        summary="decoupled all-reduce: local search over both groupings from the best of the others, any n")
@declares(Needs(pattern="decoupled"))
def decoupled_opt(problem: Problem, *, evaluations: int = 4000, kicks: int = 40, rng: int = 0,
                  time_limit: float = 10.0) -> Result:
    """The best pair of contiguous groupings found by local search (the space of
    :func:`decoupled_brute`: reduce-scatters along the ready order, all-gathers along the
    forward order, every reduce-scatter first), for any size.

    Starts: one message per tensor each way, one message each way, the reduce-scatter
    grouping of :func:`~fusionopt.solvers.decoupled_dp.decoupled_dp` (barrier sync, no update time), and Megatron's buckets
    and DeAR's groups where they are contiguous in both orders. From the best start, a
    first-improvement descent flips one cut at a time; then ``kicks`` times, a few random
    cuts are flipped and the descent runs again, the result kept if faster. Every candidate
    is timed by :func:`~fusionopt.model.simulate`.

    Parameters
    ----------
    evaluations : int
        Candidates timed at most (a deterministic budget: the result depends only on it and
        ``rng`` unless ``time_limit`` stops the search first).
    kicks : int
        Perturbations after the first descent.
    rng : int
        Seed of the kicks.
    time_limit : float
        Seconds, a safeguard checked between candidates.

    Returns
    -------
    Result
        ``stats``: ``start`` (the start kept), ``evaluations``, ``kicks_kept``.

    Examples
    --------
    >>> from fusionopt.model import AlphaBeta, Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_opt(Problem(profile, decoupled=Decoupled(half, half)))
    >>> round(r.iteration_time * 1e3, 9), str(r.status)
    (22.0, 'OPTIMAL')
    """
    started = time.perf_counter()
    for label, value in (("evaluations", evaluations), ("kicks", kicks)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{label} must be an integer >= 0, got {value!r}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not (
            math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be positive and finite (seconds), got {time_limit!r}")
    profile = problem.profile
    n = profile.n
    ready_order = [int(i) for i in profile.ready_order]
    deadline = started + float(time_limit)
    count = 0

    def evaluate(cuts: tuple[np.ndarray, np.ndarray]) -> float:
        nonlocal count
        count += 1
        plan = DecoupledPlan(Plan.from_cuts(profile, cuts[0]), Plan.from_groups(profile, _groups(list(range(n)), cuts[1])))
        return simulate(problem, plan, validate=False).iteration_time

    starts: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "one per tensor": (np.ones(n - 1, bool), np.ones(n - 1, bool)),
        "one message": (np.zeros(n - 1, bool), np.zeros(n - 1, bool)),
    }
    if problem.sync == "barrier" and profile.U == 0:
        fused = optimal_fusion(Problem(profile, problem.decoupled.reduce_scatter, sync="barrier"))
        starts["decoupled-dp"] = (np.array(fused.cuts, bool), np.zeros(n - 1, bool))
    for name, groups in (("megatron", megatron_buckets(problem)[0]), ("dear", dear_groups(problem))):
        cuts = (_cuts_of(groups, ready_order), _cuts_of(groups, list(range(n))))
        if cuts[0] is not None and cuts[1] is not None:
            starts[name] = cuts
    values = {name: evaluate(cuts) for name, cuts in starts.items()}
    start = min(values, key=values.get)
    current, value = (starts[start][0].copy(), starts[start][1].copy()), values[start]

    def descend(cuts: tuple[np.ndarray, np.ndarray], value: float) -> tuple[tuple[np.ndarray, np.ndarray], float]:
        improved = True
        while improved:
            improved = False
            for side in (0, 1):
                for j in range(n - 1):
                    if count >= evaluations or time.perf_counter() > deadline:
                        return cuts, value
                    cuts[side][j] = not cuts[side][j]
                    candidate = evaluate(cuts)
                    if candidate < value * (1 - 1e-12):
                        value, improved = candidate, True
                    else:
                        cuts[side][j] = not cuts[side][j]
        return cuts, value

    current, value = descend(current, value)
    generator = np.random.default_rng(rng)
    kept = 0
    for _ in range(kicks if n > 1 else 0):
        if count >= evaluations or time.perf_counter() > deadline:
            break
        trial = (current[0].copy(), current[1].copy())
        for _ in range(int(generator.integers(2, 5))):
            side, j = int(generator.integers(2)), int(generator.integers(n - 1))
            trial[side][j] = not trial[side][j]
        trial, trial_value = descend(trial, evaluate(trial))
        if trial_value < value * (1 - 1e-12):
            current, value, kept = trial, trial_value, kept + 1
    plan = DecoupledPlan(Plan.from_cuts(profile, current[0]),
                         Plan.from_groups(profile, _groups(list(range(n)), current[1])))
    return Outcome(plan,
                   stats={"start": start, "start_times": values, "evaluations": count, "kicks_kept": kept})


def _cuts_of(groups: list[list[int]], order: list[int]) -> np.ndarray | None:
    """The cut vector over ``order`` of ``groups``, or None if they are not contiguous runs of it."""
    owner = {i: g for g, tensors in enumerate(groups) for i in tensors}
    sequence = [owner[i] for i in order]
    runs = [g for k, g in enumerate(sequence) if k == 0 or g != sequence[k - 1]]
    if len(runs) != len(set(runs)):
        return None
    return np.array([sequence[k] != sequence[k + 1] for k in range(len(order) - 1)], dtype=bool)


def _groups(order: list[int], cuts: Any) -> list[list[int]]:
    groups: list[list[int]] = [[order[0]]]
    for i, cut in zip(order[1:], cuts):
        if cut:
            groups.append([])
        groups[-1].append(i)
    return groups


__all__ = ["decoupled_wfbp", "megatron", "megatron_overlap", "megatron_buckets", "decoupled_brute",
           "dear", "dear_groups", "decoupled_opt", "in_grouping_space"]
