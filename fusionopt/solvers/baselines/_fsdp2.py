"""Framework baselines for fully sharded data parallelism (MODEL.md section 8.2;
docs/methods.md).

* :func:`sharded_wfbp`: a unit per tensor, each resharded, prefetch one ahead each way: the
  unfused schedule, the reference of :func:`~fusionopt.solvers.compare` on these
  problems.
* :func:`fsdp2`: PyTorch FSDP2's ``fully_shard`` on each block of the model and on the
  root, with its defaults.

A framework's fixed setting that exceeds the problem's memory cap is returned with status
``INFEASIBLE``.
"""

from __future__ import annotations

from fusionopt.model._names import block_of
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._needs import declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._sharded_units import SHARDED
from fusionopt.model._cost import check_flag


@method("sharded-wfbp", family="framework baseline",
        summary="fully sharded: a unit per tensor, resharded, prefetch one ahead each way (the unfused reference)")
@declares(SHARDED)
def sharded_wfbp(problem: Problem) -> Result:
    """A unit per tensor, each resharded after its forward, prefetch one unit ahead both ways.

    Examples
    --------
    MODEL.md section 5's profile with halves of ``1 ms + 1 ns/B``:

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = sharded_wfbp(Problem(profile, pattern=FullySharded(half, half)))
    >>> r.num_messages, r.plan.num_units
    (9, 3)
    """
    return Outcome(ShardedPlan.per_tensor(problem.profile))


def fsdp2_forward_prefetch(blocking: bool) -> int:
    """FSDP2's forward prefetch depth without prefetch lists (torch 2.13): 2 where the CPU runs
    ahead of the GPU's streams (:func:`fsdp2`), 0 where each collective blocks the training
    thread (``FullySharded(blocking=True)``, gloo on CPU: nothing runs ahead)."""
    return 0 if blocking else 2


def fsdp2_plan(profile: Profile, *, reshard_after_forward: bool = True, forward_prefetch: int = 2,
               backward_prefetch: int = 1) -> ShardedPlan:
    """The units FSDP2 builds when ``fully_shard`` is applied to each block
    (:func:`block_of`) and then to the whole model.

    Each run of consecutive tensors of one block is a unit; the tensors outside every block
    belong to the root. A root with tensors both before and after the blocks is the plan's
    ``root`` (one unit of two parts, kept); a root with tensors only before them is the first
    unit, kept; root tensors after the last block only, or between blocks, are kept units of
    their own (FSDP2 would gather them with the root's first part: a reconstruction).

    >>> p = Profile.from_arrays([4] * 5, [0] * 5, [1] * 5,
    ...                         names=["emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "ln.weight"])
    >>> plan = fsdp2_plan(p)
    >>> plan.bounds.tolist(), plan.reshard.tolist(), plan.root, plan.names
    ([0, 1, 3, 4, 5], [False, True, True, False], True, ('(root)', 'h.0', 'h.1', '(root)'))
    """
    check_flag("reshard_after_forward", reshard_after_forward)
    blocks = [block_of(name) for name in profile.names]
    bounds = [0] + [i for i in range(1, profile.n) if blocks[i] != blocks[i - 1]] + [profile.n]
    labels = [blocks[b] for b in bounds[:-1]]
    m = len(labels)
    root = m >= 2 and labels[0] is None and labels[-1] is None
    reshard = [label is not None and bool(reshard_after_forward) for label in labels]
    names = [label if label is not None else "(root)" for label in labels]
    return ShardedPlan(bounds, reshard, forward_prefetch=forward_prefetch, backward_prefetch=backward_prefetch,
                       root=root, names=names)


@method("fsdp2", family="framework baseline",
        summary="PyTorch FSDP2 (torch 2.13): fully_shard per block and on the root, blocks resharded, implicit prefetch")
@declares(SHARDED)
def fsdp2(problem: Problem, *, reshard_after_forward: bool = True, forward_prefetch: int | None = None,
          backward_prefetch: int = 1) -> Result:
    """PyTorch FSDP2: ``fully_shard`` on each block, then on the model (the root).

    Read in ``torch/distributed/fsdp/_fully_shard`` of torch 2.13.0 (``_fsdp_state.py``,
    ``_fsdp_param_group.py``, ``_fsdp_collectives.py``):

    * units: each block (:func:`fsdp2_plan`) and the root, which owns the parameters outside
      them (embeddings, final norm, head): its all-gather is the first of the step, it is
      not resharded after the forward (``reshard_after_forward`` left at its default is
      turned off for the root in ``FSDPState._lazy_init``), and its reduce-scatter is the last
      (issued by the root's final backward callback);
    * ``reshard_after_forward=True`` for every block (the default);
    * mixed precision is the problem's, not the plan's: FSDP2 with
      ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` is this plan on
      ``FullySharded.mixed_precision(..., param_dtype=..., reduce_dtype=...)`` (the bytes each
      collective carries checked against torch 2.13's on gloo, ``tests/integrations/test_fsdp2_gloo.py``);
    * forward: no explicit prefetch; each unit's all-gather is issued by its pre-forward
      hook, as far ahead as the CPU runs, and the all-gather streams wait for the copy-out
      of the unit two before (``wait_for_unshard``: the previous ``all_gather_state``), so
      unit ``j``'s all-gather can start once unit ``j - 2``'s forward starts:
      ``forward_prefetch=2``, assuming the CPU runs ahead of the GPU (a CPU-bound step
      issues later);
    * on CPU (gloo; ``FullySharded(blocking=True)``) each all-gather is synchronous on the
      training thread: nothing runs ahead, and a unit's all-gather is issued by its own
      pre-forward hook: ``forward_prefetch=0``, the default there (None: 2, or 0 where the
      problem's collectives block);
    * backward: the pre-backward hook waits for its own unit, then prefetches the next
      unit in reverse forward order (``_backward_prefetch``): ``backward_prefetch=1``;
    * all-gathers and reduce-scatters run on separate streams but one process group, so
      one NCCL communicator: one channel in issue order.

    Reconstructed, not measured: the copy-in and copy-out copies and the padding of each
    parameter to a multiple of the world size are left out; root tensors found between
    blocks or only after them are units of their own (:func:`fsdp2_plan`).

    Examples
    --------
    GPT-2's 148 tensors make 12 block units and the root (``wte``, ``wpe`` before the blocks
    and ``ln_f`` after them):

    >>> from fusionopt import zoo
    >>> from fusionopt.model import FullySharded
    >>> problem = Problem(zoo.profile("gpt2", device="h100", batch=8),
    ...                   pattern=FullySharded.from_network("100gb-ib", workers=64))
    >>> r = fsdp2(problem)
    >>> r.plan.num_units, r.plan.root, r.num_messages
    (14, True, 38)
    """
    if forward_prefetch is None:
        forward_prefetch = fsdp2_forward_prefetch(problem.pattern.blocking)
    plan = fsdp2_plan(problem.profile, reshard_after_forward=reshard_after_forward,
                      forward_prefetch=forward_prefetch, backward_prefetch=backward_prefetch)
    return Outcome(plan,
                   stats={"units": plan.num_units, "root": plan.root, "forward_prefetch": forward_prefetch,
                         "backward_prefetch": backward_prefetch})


__all__ = ["fsdp2_forward_prefetch", "sharded_wfbp", "fsdp2_plan", "fsdp2"]
