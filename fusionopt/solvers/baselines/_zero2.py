"""DeepSpeed ZeRO stage 2 on the decoupled all-reduce (MODEL.md section 8.1; docs/methods.md,
section zero2): :func:`zero2`, its buckets :func:`zero2_buckets`, with ``overlap_comm`` off
(the stage-2 default) or on.

Read in ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``config.py`` of DeepSpeed at commit
``edaa7221`` (version 0.19.6; the same logic in the v0.19.5 and v0.16.5 tags):

* **Defaults** (``DeepSpeedZeroConfig``): ``reduce_bucket_size`` 5e8 elements,
  ``contiguous_gradients``, ``reduce_scatter`` and ``use_multi_rank_bucket_allreduce`` True;
  ``overlap_comm`` is None until the validator sets it to ``stage == 3``, so False for stage 2.
* **Buckets** (``reduce_independent_p_g_buckets_and_remove_grads``, run by each parameter's
  post-accumulate-grad hook): a gradient that would take the bucket past
  ``reduce_bucket_size`` elements first flushes it (``reduce_ipg_grads``), **in that
  gradient's hook**, so a bucket is flushed when the gradient after it is ready, not when its
  own last one is; the last bucket is flushed by the epilogue after the backward
  (``independent_gradient_partition_epilogue``).
* **Collective** (``average_tensor``): with the defaults every slice of the bucket goes into
  one ``allreduce_and_scatter``, an **all-reduce** of the bucket of which each rank keeps the
  slices of its partition (``allreduce_and_copy_with_multiple_ranks``), overlap or not.
* ``overlap_comm=False``: the all-reduce runs on the compute stream inside the hook, so the
  backward stops for it.
* ``overlap_comm=True``: two bucket buffers alternate (``bucket.index = 1 - bucket.index``
  after each flush) and the all-reduce runs on ``reduction_stream``. At each flush the
  reduction stream waits for the compute stream (the bucket's copies), then the compute
  stream waits for the reduction stream as it stands, that is for the **previous** bucket's
  all-reduce (``current_stream().wait_stream(stream)``, added in DeepSpeed 0.14.3 so that
  filling the other buffer cannot overwrite a bucket still being reduced): the backward
  stalls at a flush while the bucket before is still on the wire. The epilogue waits for
  every reduction (``get_accelerator().synchronize()``).
* **Step** (``step``): the optimiser on each rank's partition after every reduction, then
  ``all_gather_dp_groups`` (one ``all_gather_into_tensor`` per parameter group) on the
  compute stream; the next forward waits for it. ``overlap_comm`` does not change it.
"""

from __future__ import annotations


import numpy as np

from fusionopt.model._decoupled_plan import REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method
from fusionopt.model._cost import check_flag

ZERO_REDUCE_BUCKET = 500_000_000           # elements: DeepSpeed's reduce_bucket_size default


def zero2_buckets(problem: Problem, reduce_bucket_size: int = ZERO_REDUCE_BUCKET) -> list[list[int]]:
    """DeepSpeed ZeRO-2's gradient buckets (tensors, forward indices) in the order flushed.

    Gradients enter the bucket as their hooks fire (the ready order); the bucket is flushed
    before a gradient that would take it past ``reduce_bucket_size`` elements
    (``reduce_independent_p_g_buckets_and_remove_grads``), and the last one after the
    backward. A gradient larger than the bucket goes alone. ``overlap_comm`` does not change
    the buckets (its second buffer has the same size).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([12, 8, 8], [0.0] * 3, [1e-3] * 3)          # 3, 2, 2 float32 elements
    >>> zero2_buckets(Problem(profile, pattern=Decoupled(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))), 4)
    [[2, 1], [0]]
    """
    if isinstance(reduce_bucket_size, bool) or not isinstance(reduce_bucket_size, (int, np.integer)) \
            or reduce_bucket_size < 1:
        raise ValueError(f"reduce_bucket_size must be a whole number of elements >= 1, got {reduce_bucket_size!r}")
    profile = problem.profile
    buckets: list[list[int]] = []
    count = 0
    for i in profile.ready_order:
        i = int(i)
        elements = -(-int(profile.sizes[i]) // int(profile.element_bytes[i]))
        if buckets and buckets[-1] and count + elements > reduce_bucket_size:
            buckets.append([])
            count = 0
        if not buckets:
            buckets.append([])
        buckets[-1].append(i)
        count += elements
    return buckets


@method("zero2", family="framework baseline",
        summary="DeepSpeed ZeRO-2: 5e8-element buckets all-reduced (overlap_comm: on their own stream), one gather (barrier)")
@declares(Needs(pattern="decoupled", barrier=True))
def zero2(problem: Problem, *, reduce_bucket_size: int = ZERO_REDUCE_BUCKET, overlap_comm: bool = False) -> Result:
    """DeepSpeed ZeRO stage 2 as DeepSpeed 0.19.6 runs it (module docstring), with its
    defaults or with ``overlap_comm=True``.

    * Buckets of :func:`zero2_buckets` (``reduce_bucket_size`` elements, 5e8 by default),
      each **all-reduced**: the plan reduces with all-reduces (``reduce_with="all_reduce"``),
      priced ``c_AR = c_RS + c_AG``.
    * ``overlap_comm=False`` (the stage-2 default): each all-reduce runs on the compute
      stream and the backward waits for it, so the backward and the all-reduces take
      ``B + sum_k c_AR(S_k)``; the plan says so by releasing every bucket at ``B``.
    * ``overlap_comm=True``: bucket ``k < K - 1`` is flushed in the hook of the gradient that
      overflows it, the first of bucket ``k + 1`` (ready at ``r_k`` on the backward's own
      clock), the last bucket after the backward (``r_(K-1) = B``). At flush ``k >= 1`` the
      backward waits for bucket ``k - 1``'s all-reduce. With ``s_k`` the stall before flush
      ``k`` (``s_0 = 0``), bucket ``k`` is released at ``Q_k = r_k + s_k``, runs from
      ``max(Q_k, e_(k-1))`` to ``e_k`` on the channel, and
      ``s_(k+1) = s_k + max(0, e_(k-1) - Q_k)``. The releases are read from the
      simulator's own channel, one more fixed per pass.
    * Then the optimiser step (``U``) after every reduction, and one all-gather of every
      parameter, released at the step's end; the forward waits for it: ``sync="barrier"``
      only.

    Overlapping is never slower here: each stall is at most the all-reduce before it, so
    the last reduction ends no later than ``B + sum_k c_AR(S_k)``.

    Reconstructed, not measured: the backward's stalls are carried by the release times
    (the model's backward cannot wait for the channel), which reproduces the channel's
    timeline and ``T`` exactly while the timeline's compute stream shows the backward
    without them; a gradient larger than ``reduce_bucket_size`` is all-reduced in pieces cut
    at partition boundaries (``allreduce_and_scatter``), modelled as one message; the
    copies on the reduction stream (flattening, averaging, each rank's slices), one
    parameter group, the gradient-norm all-reduce of a scalar and the buffers' alignment
    padding are left out.

    Parameters
    ----------
    reduce_bucket_size : int
        DeepSpeed's ``reduce_bucket_size``, elements.
    overlap_comm : bool
        DeepSpeed's ``overlap_comm``.

    Returns
    -------
    Result
        ``stats``: ``reduce_bucket_size``, ``overlap_comm``, ``buckets``, ``stall`` (seconds
        the backward is held up: without ``overlap_comm`` every all-reduce but the
        epilogue's, run in its hooks; with it, its waits at the flushes), ``backward_end``
        (seconds, ``B`` plus the stall) and ``step_end`` (seconds).

    Examples
    --------
    One bucket: the backward ends at 6 ms, the all-reduce of 7 MB takes 2 + 14 = 16 ms with
    halves of ``1 ms + 1 ns/B`` (6-22), the all-gather of 7 MB 8 ms (22-30), then the forward:
    ``T = 33`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = zero2(Problem(profile, pattern=Decoupled(half, half)))
    >>> (r.timeline.message_end * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([22.0, 30.0], 33.0)

    ``overlap_comm=True``, one float32 element per bucket, backward times 5, 1, 1 and 1 ms
    (gradients 3, 2, 1, 0 ready at 1, 2, 3 and 8 ms) and halves of 1.5 ms (all-reduce 3 ms):
    ``{3}`` is flushed in t2's hook at 2 ms (2-5); ``{2}`` in t1's hook at 3 ms, where the
    backward waits for ``{3}`` until 5 (5-8); t0's backward runs 5-10 and its hook flushes
    ``{1}`` at 10 (10-13); the epilogue flushes ``{0}`` at 10, waiting for ``{1}`` (13-16).
    The all-gather runs 16-17.5 and the forward 4 ms: ``T = 21.5`` ms (without overlap,
    ``8 + 4 x 3 + 1.5 + 4 = 25.5`` ms).

    >>> profile = Profile.from_arrays([4] * 4, [1e-3] * 4, [5e-3, 1e-3, 1e-3, 1e-3])
    >>> problem = Problem(profile, pattern=Decoupled(AlphaBeta(1.5e-3, 0), AlphaBeta(1.5e-3, 0)))
    >>> r = zero2(problem, reduce_bucket_size=1, overlap_comm=True)
    >>> (r.plan.reduce_scatter.release * 1e3).round(9).tolist(), round(r.stats["stall"] * 1e3, 9)
    ([2.0, 3.0, 10.0, 10.0], 2.0)
    >>> (r.timeline.message_end * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([5.0, 8.0, 13.0, 16.0, 17.5], 21.5)
    """
    check_flag("overlap_comm", overlap_comm)
    profile = problem.profile
    if problem.pattern.update_after_gather and profile.U > 0:
        raise ValueError("zero2 updates in the optimiser step, before gathering parameters; this problem "
                         "updates after the gathers (update_after_gather=True)")
    buckets = zero2_buckets(problem, reduce_bucket_size)
    if overlap_comm:
        reduce, stall = _overlapped(problem, buckets)
        ends = _reduction_ends(problem, reduce)
    else:
        reduce = Plan.from_groups(profile, buckets, release=[profile.B] * len(buckets))
        ends = _reduction_ends(problem, reduce)
        # Every all-reduce but the last (the epilogue's) runs inside a hook of the backward.
        stall = float(ends[-2]) - profile.B if len(buckets) > 1 else 0.0
    step_end = float(ends[-1]) + profile.U
    gather = Plan.from_groups(profile, [list(range(profile.n))], release=[step_end])
    plan = DecoupledPlan(reduce, gather, reduce_with="all_reduce")
    return Outcome(plan,
                   stats={"reduce_bucket_size": int(reduce_bucket_size), "overlap_comm": bool(overlap_comm),
                         "buckets": len(buckets), "stall": stall, "backward_end": profile.B + stall,
                         "step_end": step_end})


def _reduction_ends(problem: Problem, reduce: Plan) -> np.ndarray:
    """The end of each bucket's all-reduce (seconds), as the simulator times ``reduce``
    followed by one all-gather (the buckets run first on the channel, so the all-gather
    does not change them)."""
    everything = Plan.from_groups(problem.profile, [list(range(problem.profile.n))])
    timeline = simulate(problem, DecoupledPlan(reduce, everything, reduce_with="all_reduce"), validate=False)
    return timeline.message_end[timeline.message_kind == REDUCE_SCATTER]


def _overlapped(problem: Problem, buckets: list[list[int]]) -> tuple[Plan, float]:
    """The buckets released as ``overlap_comm=True`` flushes them (:func:`zero2`), and the
    backward's total stall (seconds). Release ``k`` depends on the ends of the all-reduces
    before it only, so each pass of the simulator fixes at least one more."""
    profile = problem.profile
    ready = profile.ready_times
    flush = [float(ready[buckets[k + 1][0]]) for k in range(len(buckets) - 1)] + [float(profile.B)]
    release = list(flush)
    for _ in range(len(buckets)):
        plan = Plan.from_groups(profile, buckets, release=release)
        ends = _reduction_ends(problem, plan).tolist()
        stalled, stall = [], 0.0
        for k, at in enumerate(flush):
            stalled.append(at + stall)
            if k >= 1 and ends[k - 1] > at + stall:       # the backward waits for the bucket before
                stall = ends[k - 1] - at
        if stalled == release:
            return plan, stalled[-1] - flush[-1]      # the epilogue's own wait stalls no backward
        release = stalled
    raise AssertionError("the overlapped releases did not settle")


__all__ = ["zero2", "zero2_buckets", "ZERO_REDUCE_BUCKET"]
