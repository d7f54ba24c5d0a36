"""Framework baselines for the decoupled all-reduce (MODEL.md section 8.1; docs/methods.md).

* :func:`decoupled_wfbp`: one reduce-scatter per tensor as its gradient is ready, one
  all-gather per tensor in forward order: the unfused schedule, the reference of
  :func:`~fusionopt.solvers.compare` on these problems.
* :func:`megatron` and :func:`megatron_overlap`: Megatron-LM's data-parallel buckets with its
  distributed optimiser and ``overlap_grad_reduce``, without and with
  ``overlap_param_gather``.
"""

from __future__ import annotations

import numpy as np

from fusionopt.model._decoupled_plan import REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import compute_pieces, simulate
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result


MEGATRON_MIN_BUCKET = 40_000_000            # parameters


MEGATRON_BUCKET_PER_RANK = 1_000_000        # parameters per data-parallel rank


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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_wfbp(Problem(profile, pattern=Decoupled(half, half), sync="layerwise"))
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([8e7, 1e8, 8e7], [0.0] * 3, [1e-3] * 3)   # 20M, 25M, 20M params
    >>> megatron_buckets(Problem(profile, pattern=Decoupled(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))))
    ([[2, 1], [0]], 40000000)
    """
    if bucket_size is None:
        dp = data_parallel_size
        if dp is None:                                    # the problem's own, when it was built on a network
            dp = getattr(problem.pattern, "workers", None) or 1
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
    if problem.pattern.update_after_gather and profile.U > 0:
        raise ValueError(f"{method} updates in the optimiser step, before gathering parameters; this problem "
                         "updates after the gathers (update_after_gather=True)")
    buckets, size = megatron_buckets(problem, data_parallel_size, bucket_size)
    ready = profile.ready_times
    # Reduce-scatters: a bucket goes when its last gradient is ready (ties: bucket order).
    rs_order = sorted(range(len(buckets)), key=lambda b: (float(ready[buckets[b]].max()), b))
    reduce_scatter = Plan.from_groups(profile, [buckets[b] for b in rs_order])
    # The optimiser step waits for every reduce-scatter (finish_grad_sync), then runs.
    step_end = max(profile.B, gradients_reduced(problem, reduce_scatter)) + profile.U
    if not overlap_param_gather:
        # In the step, one all-gather per bucket in bucket order; the forward waits for all.
        all_gather = Plan.from_groups(profile, buckets, release=[step_end] * len(buckets))
    else:
        # Forward pre-hooks: the bucket the forward needs first is gathered at the start of the
        # forward, and each next one when the forward reaches the bucket before it.
        chain = sorted(buckets, key=min)
        all_gather = gathered_one_ahead(problem, reduce_scatter, chain, step_end)
    plan = DecoupledPlan(reduce_scatter, all_gather)
    if data_parallel_size is None:
        data_parallel_size = problem.pattern.workers
    stats = {"bucket_size": size, "buckets": len(buckets), "data_parallel_size": data_parallel_size,
             "overlap_param_gather": overlap_param_gather, "step_end": step_end}
    return Outcome(plan, stats=stats)


def gradients_reduced(problem: Problem, reduce_scatter: Plan, reduce_with: str = "reduce_scatter") -> float:
    """When the last gradient message ends, as the simulator times it (seconds): the gradient
    messages run first on the channel, so the all-gathers after them do not change it."""
    everything = Plan.from_groups(problem.profile, [list(range(problem.profile.n))])
    timeline = simulate(problem, DecoupledPlan(reduce_scatter, everything, reduce_with=reduce_with), validate=False)
    return float(timeline.message_end[timeline.message_kind == REDUCE_SCATTER].max())


def gathered_one_ahead(problem: Problem, reduce_scatter: Plan, chain: list[list[int]], first: float) -> Plan:
    """The all-gathers of ``chain`` (groups in the order the forward needs them) as forward
    pre-hooks issue them: the first released at ``first`` (seconds), each next one when the
    compute stream starts on the first tensor of the group before it, after waiting for that
    group's all-gather (its update when the problem updates after the gathers, else its
    forward). Those moments are read from the simulator's compute stream: a group's start
    depends only on the groups before it, so each pass fixes one more release."""
    kind = "update" if problem.pattern.update_after_gather else "forward"
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
      them: ``sync="barrier"`` only;
    * what the collectives carry is the problem's: Megatron training in bf16, with or without
      ``grad_reduce_in_fp32``, is this plan on ``Decoupled.mixed_precision(...)``.

    Reconstructed, not measured: the padding of each parameter's start to 64 elements and of
    each bucket to ``lcm(dp, 128)`` elements is left out, and the first iteration (which sends every bucket after the backward) is not the
    steady state modelled.

    Examples
    --------
    Tensors of 4, 1 and 3 MB (2M parameters, under 40M): one bucket, reduce-scattered at the
    end of the backward (6-15 ms with ``1 ms + 1 ns/B``), then the step (no update time) and
    one all-gather (15-24 ms), then the forward: ``T = 27`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 3e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = megatron(Problem(profile, pattern=Decoupled(half, half)))
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 3e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)

    With 1M-parameter buckets: ``{t2, t1}`` (ready at 3 ms) is reduce-scattered 3-8 ms and
    ``{t0}`` 8-13 ms; the step ends at 13 ms and gathers ``{t0}``, 13-18 ms; the forward
    reaches t0 at 18 ms and dispatches ``{t2, t1}``, 18-23 ms; forwards at 18, 23 and 24 ms.

    >>> r = megatron_overlap(Problem(profile, pattern=Decoupled(half, half), sync="layerwise"), bucket_size=1_000_000)
    >>> r.stats["buckets"], (r.plan.all_gather.release * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    (2, [13.0, 18.0], 25.0)
    """
    return _megatron(problem, "megatron-overlap", data_parallel_size, bucket_size, overlap_param_gather=True)


__all__ = ["MEGATRON_MIN_BUCKET", "MEGATRON_BUCKET_PER_RANK", "decoupled_wfbp", "gathered_one_ahead", "gradients_reduced",
           "megatron_buckets", "megatron", "megatron_overlap"]
