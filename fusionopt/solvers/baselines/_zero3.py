"""DeepSpeed ZeRO stage 3 with its defaults (DeepSpeed 0.19.6) as a fully sharded plan
(MODEL.md section 8.2): :func:`zero3` and :func:`zero3_plan`.

Read in DeepSpeed 0.19.6, ``deepspeed/runtime/zero/``:

* ``config.py`` (``DeepSpeedZeroConfig``), defaults in elements (numel):
  ``stage3_prefetch_bucket_size`` 5e7, ``stage3_param_persistence_threshold`` 1e5,
  ``stage3_max_live_parameters`` 1e9, ``stage3_max_reuse_distance`` 1e9,
  ``reduce_bucket_size`` 5e8; ``overlap_comm`` is True for stage 3.
* ``partitioned_param_coordinator.py``, ``fetch_sub_module``: at a module's pre-forward
  hook its own parameters that are not available are all-gathered in one call; then, the
  trace being complete, the parameters of the trace queue are popped and those not
  available are added to one prefetch all-gather while ``numel_prefetching <
  min(max_live - n_available, prefetch_bucket_size)`` (the last one popped may overshoot
  the bucket). Every module's hook prefetches up to one more bucket, so with
  ``max_live_parameters`` 1e9 the gathers run as far ahead as the channel allows.
  ``release_sub_module`` / ``__params_to_release``: after a module's forward its
  parameters are released unless the trace uses them again within
  ``max_reuse_distance`` elements.
* ``stage3.py``: gradients are copied into an ``ipg`` bucket of ``reduce_bucket_size``
  elements, reduce-scattered (``__reduce_and_partition_ipg_grads``) before adding a
  gradient that would overflow it, and the rest when the backward ends
  (``independent_gradient_partition_epilogue``); with ``overlap_comm`` on its own stream.
  Parameters of at most ``param_persistence_threshold`` elements are persistent: gathered
  again after every optimiser step, one synchronous all-gather per parameter
  (``_post_step``), and never released.

What :func:`zero3_plan` reconstructs, tensor by tensor in forward order (a tensor's element
count is ``ceil(size / element_bytes)``; a module is a tensor name without its last part,
:func:`~fusionopt.model._names.module_of`):

* **Units.** The first hook to run is the top-level module's: its own parameters (the
  tensors whose names have no dot, which ``named_parameters`` lists first; none in most
  models) are unit 0, and its prefetch takes the first bucket. Then prefetch buckets:
  tensors are taken in forward order (the trace) and a bucket is closed after the tensor
  that brings its count of non-persistent elements to
  ``min(prefetch_bucket_size, max_live_parameters)`` or more. Persistent tensors count no
  elements (DeepSpeed skips them, being available) and are the plan's ``persistent``
  tensors: each gathered alone after the optimiser step, the next forward waiting for
  those gathers, and whole all step (``_post_step``; MODEL.md 8.2).
  ``prefetch_bucket_size=0`` (no prefetch): a unit per module, each gathered at its own
  hook (prefetch depths 0).
* **Prefetch depths.** Both ``forward_prefetch`` and ``backward_prefetch`` are the number
  of units (every gather issued at the start of its pass, first in first out), as each
  module's hook issues one more bucket; when the model has more elements than
  ``max_live_parameters``, ``floor(max_live_parameters / bucket)`` units ahead instead
  (an approximation of ``max_live - n_available``).
* **Reshard.** A unit is resharded when its first tensor's module is used again (in the
  backward) only after ``max_reuse_distance`` elements or more of the trace: the
  parameters of the later tensors, twice (the rest of the forward, then the backward back
  to it). With 1e9 and models under about 5e8 parameters nothing is resharded.
  DeepSpeed decides per module; a unit takes its first module's decision.
* **Reduce-scatter groups** (``reduce_bounds``): tensors in reverse forward order (the
  ready order, up to ties), a group closed before a tensor whose elements would take it
  over ``reduce_bucket_size`` (all tensors count, persistent ones too). A group is issued
  when its first tensor's gradient is ready; DeepSpeed flushes it when the next
  gradient arrives, ``b`` of one tensor later: left out. Under 5e8 elements: one
  reduce-scatter of everything when the backward ends.
* Left out: the copies into and out of the flat buffers, the CPU's lag behind the GPU
  (``__max_ongoing_fetch_events``), gradient clipping and overflow checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.model._names import module_of
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method

PREFETCH_BUCKET_SIZE = 50_000_000
PARAM_PERSISTENCE_THRESHOLD = 100_000
MAX_LIVE_PARAMETERS = 1_000_000_000
MAX_REUSE_DISTANCE = 1_000_000_000
REDUCE_BUCKET_SIZE = 500_000_000


def _count(label: str, value: Any, least: int) -> int:
    """A whole number of elements (an int, or a float such as ``5e7`` with no fraction)."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
          and np.isfinite(value) and float(value) == int(value) and value >= least)
    if not ok:
        raise ValueError(f"{label} must be a whole number of elements >= {least}, got {value!r}")
    return int(value)


def element_counts(profile: Profile) -> list[int]:
    """Each tensor's element count: ``ceil(size / element_bytes)``."""
    return [-(-int(size) // int(element)) for size, element in zip(profile.sizes.tolist(), profile.element_bytes)]


def zero3_plan(profile: Profile, *, prefetch_bucket_size: int = PREFETCH_BUCKET_SIZE,
               param_persistence_threshold: int = PARAM_PERSISTENCE_THRESHOLD,
               max_live_parameters: int = MAX_LIVE_PARAMETERS, max_reuse_distance: int = MAX_REUSE_DISTANCE,
               reduce_bucket_size: int = REDUCE_BUCKET_SIZE) -> ShardedPlan:
    """The plan :func:`zero3` runs (the reconstruction is in this module's docstring).

    Six tensors of 10, 6, 1, 6, 1 and 2 elements (4 bytes each), buckets of 8 elements,
    persistence at 1 element, reduce buckets of 12: the top-level module owns no tensor, so
    its hook prefetches the first bucket, ``emb.weight`` (10 >= 8: closed); the second takes
    ``h.0.fc.weight`` (6), ``h.0.fc.bias`` (persistent, 0) and ``h.1.fc.weight`` (12 >= 8:
    closed); the third the rest. Gradients, from the end:
    2 + 1 + 6 + 1 = 10, then 6 would make 16 > 12: a group of tensors 2..5; ``h.0.fc.weight``
    (6) then ``emb`` (6 + 10 > 12): groups ``[1]`` and ``[0]``.

    >>> p = Profile.from_arrays([40, 24, 4, 24, 4, 8], [0] * 6, [0] * 6, names=[
    ...     "emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "h.1.fc.bias", "ln.weight"])
    >>> plan = zero3_plan(p, prefetch_bucket_size=8, param_persistence_threshold=1, reduce_bucket_size=12)
    >>> plan.bounds.tolist(), plan.reduce_bounds.tolist(), plan.forward_prefetch, plan.reshard.tolist()
    ([0, 1, 4, 6], [0, 1, 2, 6], 3, [False, False, False])
    """
    bucket = _count("prefetch_bucket_size", prefetch_bucket_size, 0)
    persist = _count("param_persistence_threshold", param_persistence_threshold, 0)
    max_live = _count("max_live_parameters", max_live_parameters, 1)
    reuse = _count("max_reuse_distance", max_reuse_distance, 0)
    reduce = _count("reduce_bucket_size", reduce_bucket_size, 1)
    n = profile.n
    elements = element_counts(profile)
    modules = [module_of(name) for name in profile.names]
    total = sum(elements)

    # Units: the top-level module's own parameters (its hook runs first), then prefetch
    # buckets (or a unit per module).
    first = next((i for i in range(n) if modules[i] != ""), n)
    bounds = [0, first] if first else [0]
    if bucket == 0:
        bounds += [i for i in range(first + 1, n) if modules[i] != modules[i - 1]]
        if bounds[-1] != n:
            bounds.append(n)
    else:
        limit = min(bucket, max_live)
        count = 0
        for i in range(first, n):
            if elements[i] > persist:
                count += elements[i]
            if count >= limit:
                bounds.append(i + 1)
                count = 0
        if bounds[-1] != n:
            bounds.append(n)
    bounds = sorted(set(bounds))
    m = len(bounds) - 1
    if bucket == 0:
        depth = 0
    elif total <= max_live:
        depth = m
    else:
        depth = max(1, max_live // min(bucket, max_live))

    # Reshard: the first module of each unit, reused after twice the elements behind it.
    after = np.concatenate((np.cumsum(np.asarray(elements[::-1], dtype=np.int64))[::-1][1:], [0])).tolist()
    run_end = list(range(n))                              # the last tensor of each tensor's module run
    for i in range(n - 2, -1, -1):
        if modules[i] == modules[i + 1]:
            run_end[i] = run_end[i + 1]
    reshard = [bool(2 * after[run_end[bounds[j]]] >= reuse) for j in range(m)]

    # Reduce-scatter groups: the ipg bucket, in reverse forward order.
    cuts = [n]
    count = 0
    for i in range(n - 1, -1, -1):
        if count + elements[i] > reduce and count > 0:
            cuts.append(i + 1)
            count = 0
        count += elements[i]
    cuts.append(0)
    groups = sorted(set(cuts))
    names = [modules[bounds[j]] or profile.names[bounds[j]] for j in range(m)]
    persistent = [elements[i] <= persist for i in range(n)]
    return ShardedPlan(bounds, reshard, forward_prefetch=depth, backward_prefetch=depth, names=names,
                       reduce_bounds=groups, persistent=persistent)


@method("zero3", family="framework baseline",
        summary="DeepSpeed ZeRO-3 (0.19.6 defaults): 5e7-element prefetch buckets, 5e8-element reduce-scatter buckets")
@declares(Needs(pattern="fully-sharded"))
def zero3(problem: Problem, *, prefetch_bucket_size: int = PREFETCH_BUCKET_SIZE,
          param_persistence_threshold: int = PARAM_PERSISTENCE_THRESHOLD,
          max_live_parameters: int = MAX_LIVE_PARAMETERS, max_reuse_distance: int = MAX_REUSE_DISTANCE,
          reduce_bucket_size: int = REDUCE_BUCKET_SIZE) -> Result:
    """DeepSpeed ZeRO stage 3 (DeepSpeed 0.19.6) with its defaults: :func:`zero3_plan`
    (what is read in DeepSpeed and what is reconstructed: this module's docstring).

    Examples
    --------
    The profile of :func:`zero3_plan`'s example, forwards of 1, 1, 0, 1, 0, 1 ms, backwards
    of 2, 2, 0, 2, 0, 2 ms, every collective 1 ms. The persistent biases (tensors 2 and 4)
    are gathered first, 0-1 and 1-2 ms; the three units' gathers, issued at 0 too, run 2-3,
    3-4, 4-5; the forwards 3-4, 4-6, 6-7; the backward of the last unit 7-9, of the middle
    one 9-13: the group of tensors 2..5 is complete when tensor 2 is ready, at 13 - b_1 = 11
    (11-12), tensor 1's group when the unit ends, at 13 (13-14); the first unit's backward
    13-15 and tensor 0's reduce-scatter 15-16 ms: ``T = 16`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded, Profile
    >>> p = Profile.from_arrays([40, 24, 4, 24, 4, 8], [1e-3, 1e-3, 0, 1e-3, 0, 1e-3],
    ...                         [2e-3, 2e-3, 0, 2e-3, 0, 2e-3], names=[
    ...     "emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "h.1.fc.bias", "ln.weight"])
    >>> one_ms = AlphaBeta(1e-3, 0.0)
    >>> r = zero3(Problem(p, pattern=FullySharded(one_ms, one_ms)), prefetch_bucket_size=8,
    ...           param_persistence_threshold=1, reduce_bucket_size=12)
    >>> (r.timeline.message_ready * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([0.0, 0.0, 0.0, 0.0, 0.0, 11.0, 13.0, 15.0], 16.0)

    GPT-2 (124,439,808 parameters): buckets from ``wte`` (the top-level module owns no
    tensor) to ``h.1.mlp.c_fc.weight`` (51,180,288 non-persistent elements >= 5e7), then to
    ``h.8.mlp.c_proj.weight``, then the rest; its 98 biases and norms (at most 1e5 elements
    each) persistent, each gathered alone; one reduce-scatter at the end:

    >>> from fusionopt import zoo
    >>> problem = Problem(zoo.profile("gpt2", device="h100", batch=8),
    ...                   pattern=FullySharded.from_network("100gb-ib", workers=64))
    >>> r = zero3(problem)
    >>> r.plan.num_units, r.plan.reduce_bounds.size - 1, r.num_messages, bool(r.plan.reshard.any())
    (3, 1, 102, False)
    """
    plan = zero3_plan(problem.profile, prefetch_bucket_size=prefetch_bucket_size,
                      param_persistence_threshold=param_persistence_threshold,
                      max_live_parameters=max_live_parameters, max_reuse_distance=max_reuse_distance,
                      reduce_bucket_size=reduce_bucket_size)
    elements = element_counts(problem.profile)
    persistent = sum(1 for e in elements if e <= param_persistence_threshold)
    return Outcome(plan,
                   stats={"units": plan.num_units, "reduce_scatters": int(plan.reduce_bounds.size - 1),
                         "prefetch_depth": plan.forward_prefetch, "resharded": int(plan.reshard.sum()),
                         "persistent_tensors": persistent})


__all__ = ["zero3", "zero3_plan", "element_counts"]
