"""PyTorch DistributedDataParallel's gradient buckets, as torch 2.13 builds them.

Checked against ``torch/nn/parallel/distributed.py`` of torch 2.13 (``_BucketCapacityConfig``,
``_ddp_init_helper``) and against real DDP runs (gloo, CPU, world size 1, a comm hook that
records ``bucket.parameters()`` per bucket index) on models with convolution, batch-norm,
layer-norm, LSTM, linear layers and two dtypes (``tests/integrations/test_ddp_layouts.py``,
``validation/frameworks/run.py``). The C++ ``compute_bucket_assignment_by_size`` and
``Reducer::rebuild_buckets`` are compiled into torch; their rules below are reconstructed from
the public C++ source and confirmed by those runs.

The caps (bytes; ``MiB = 2**20``):

* ``bucket_cap_mb`` unset: the first bucket is capped at 1 MiB
  (``dist._DEFAULT_FIRST_BUCKET_BYTES``), every other at 25 MiB.
* ``bucket_cap_mb = m`` given: every bucket, the first included, at ``int(m * 2**20)``.
* ``bucket_cap_mb_list = [m_0, m_1, ...]``: bucket ``k`` at ``int(m_k * 2**20)``, the last
  cap repeating; ``bucket_cap_mb`` is then ignored.

The assignment walks the parameters in some order and keeps one open bucket per dtype
(and device): a parameter joins its dtype's bucket, which closes as soon as its size
*reaches* the dtype's current cap (a bucket may exceed its cap; a tensor is never split),
and that dtype moves on to its next cap. Buckets close in that order; the open leftovers
follow, one per dtype, in the reverse order of each dtype's first parameter (the
iteration order of libstdc++'s hash map). Buckets are all-reduced strictly by index.

Which walk stands in steady state:

* ``find_unused_parameters=False`` (the default) or ``static_graph=True``: the first
  iteration runs with one bucket, then DDP *rebuilds* the buckets over the order in which
  the gradients became ready (the profile's ready order), with the caps above.
* ``find_unused_parameters=True`` without a static graph: no rebuild. The assignment walks
  the parameters in registration order (``named_parameters()``, the profile's
  ``registration_order``), sorts the buckets by their first parameter and reverses them;
  the small first cap is left out unless ``bucket_cap_mb`` is unset (then caps 1 MiB and
  25 MiB) or a list is given. Buckets then rarely match the ready order, and a bucket
  ready early may wait for one before it.

The model takes the steady state; the first iterations are not modelled.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method
from fusionopt.model._cost import check_flag

MiB = 1024 * 1024
DDP_DEFAULT_CAP_MB = 25
DDP_FIRST_BUCKET_BYTES = 1 * MiB


def _megabytes(label: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of MiB, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{label} must be a positive, finite number of MiB, got {value!r}")
    if int(float(value) * MiB) < 1:
        raise ValueError(f"{label} = {value!r} MiB is less than one byte")
    return float(value)


def bucket_caps(bucket_cap_mb: float | None = None,
                bucket_cap_mb_list: Sequence[float] | None = None) -> tuple[list[int], bool]:
    """The caps in bytes, bucket by bucket (the last repeats), and whether they are torch's
    defaults (``bucket_cap_mb`` unset, no list).

    >>> bucket_caps()
    ([1048576, 26214400], True)
    >>> bucket_caps(5)
    ([5242880], False)
    >>> bucket_caps(None, [0.5, 2.25])
    ([524288, 2359296], False)
    """
    if bucket_cap_mb_list is not None:
        if bucket_cap_mb is not None:       # torch 2.13's DDP would ignore bucket_cap_mb
            raise ValueError("give bucket_cap_mb or bucket_cap_mb_list, not both: DDP ignores bucket_cap_mb when "
                             "given a list")
        if isinstance(bucket_cap_mb_list, (str, bytes)) or not isinstance(bucket_cap_mb_list, Sequence):
            raise ValueError(f"bucket_cap_mb_list must be a list of MiB, got {bucket_cap_mb_list!r}")
        if len(bucket_cap_mb_list) == 0:
            raise ValueError("bucket_cap_mb_list is empty: give one cap per bucket, or leave it out")
        caps = [int(_megabytes(f"bucket_cap_mb_list[{k}]", m) * MiB) for k, m in enumerate(bucket_cap_mb_list)]
        return caps, False
    if bucket_cap_mb is None:
        return [DDP_FIRST_BUCKET_BYTES, DDP_DEFAULT_CAP_MB * MiB], True
    return [int(_megabytes("bucket_cap_mb", bucket_cap_mb) * MiB)], False


def assign(profile: Profile, order: Sequence[int], caps: Sequence[int]) -> list[list[int]]:
    """Torch's assignment by size over ``order`` (forward indices): buckets in the order they
    close, then the leftovers, each bucket's tensors in the order they joined it.

    >>> p = Profile.from_arrays([4, 4, 4, 4, 4], [0] * 5, [0] * 5)
    >>> assign(p, [4, 3, 2, 1, 0], [4, 8])
    [[4], [3, 2], [1, 0]]
    """
    keys = profile.dtypes if profile.dtypes is not None else ("",) * profile.n
    sizes = profile.sizes
    open_buckets: dict[str, list[int]] = {}
    filled: dict[str, int] = {}
    cap_index: dict[str, int] = {}
    first_seen: list[str] = []
    closed: list[list[int]] = []
    for i in order:
        key = keys[i]
        if key not in open_buckets:
            open_buckets[key], filled[key], cap_index[key] = [], 0, 0
            first_seen.append(key)
        open_buckets[key].append(int(i))
        filled[key] += int(sizes[i])
        if filled[key] >= caps[cap_index[key]]:
            closed.append(open_buckets[key])
            open_buckets[key], filled[key] = [], 0
            cap_index[key] = min(cap_index[key] + 1, len(caps) - 1)
    closed.extend(open_buckets[key] for key in reversed(first_seen) if open_buckets[key])
    return closed


def ddp_buckets(profile: Profile, *, bucket_cap_mb: float | None = None,
                bucket_cap_mb_list: Sequence[float] | None = None,
                find_unused_parameters: bool = False, static_graph: bool = False) -> list[list[int]]:
    """DDP's steady-state buckets: forward indices per bucket, buckets in reduction order,
    tensors in the order DDP fills them (module docstring).

    >>> p = Profile.from_arrays([6 * MiB, 1 * MiB, 2 * MiB], [0] * 3, [3e-3, 2e-3, 1e-3])
    >>> ddp_buckets(p), ddp_buckets(p, bucket_cap_mb=2.5)
    ([[2], [1, 0]], [[2, 1], [0]])
    >>> ddp_buckets(p, find_unused_parameters=True)    # registration order, reversed
    [[1, 2], [0]]
    """
    for label, flag in (("find_unused_parameters", find_unused_parameters), ("static_graph", static_graph)):
        check_flag(label, flag)
    caps, default = bucket_caps(bucket_cap_mb, bucket_cap_mb_list)
    if static_graph or not find_unused_parameters:
        return assign(profile, profile.ready_order, caps)
    if bucket_cap_mb_list is None and not (default and caps[0] < caps[1]):
        caps = caps[-1:]
    buckets = assign(profile, profile.registration_order, caps)
    position = {i: k for k, i in enumerate(profile.registration_order)}
    buckets.sort(key=lambda b: min(position[i] for i in b))
    return buckets[::-1]


@method("ddp", family="framework baseline",
        summary="PyTorch DDP buckets as torch 2.13 builds them (1 MiB first, then 25 MiB)")
def ddp(problem: Problem, *, bucket_cap_mb: float | None = None,
        bucket_cap_mb_list: Sequence[float] | None = None,
        find_unused_parameters: bool = False, static_graph: bool = False) -> Result:
    """PyTorch DDP's gradient buckets (torch 2.13; module docstring), reduced in order.

    Parameters are DDP's own: ``bucket_cap_mb`` (MiB; unset is torch's default, a 1 MiB
    first bucket then 25 MiB), ``bucket_cap_mb_list`` (MiB per bucket),
    ``find_unused_parameters`` and ``static_graph``. The profile's ready order,
    registration order and dtypes decide the layout.

    >>> from fusionopt.cost import AlphaBeta
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> ddp(problem).plan.groups(), ddp(problem, bucket_cap_mb=2).plan.groups()
    ([[2], [1, 0]], [[2, 1], [0]])
    >>> ddp(problem, bucket_cap_mb_list=[2.5]).plan.groups()
    [[2, 1], [0]]
    """
    buckets = ddp_buckets(problem.profile, bucket_cap_mb=bucket_cap_mb, bucket_cap_mb_list=bucket_cap_mb_list,
                          find_unused_parameters=find_unused_parameters, static_graph=static_graph)
    caps, _ = bucket_caps(bucket_cap_mb, bucket_cap_mb_list)
    plan = Plan.from_groups(problem.profile, buckets)
    space = "fusion" if plan.is_fusion(problem.profile) else "any"
    return Outcome(plan, space=space, stats={
        "bucket_cap_mb": bucket_cap_mb,
        "bucket_cap_mb_list": None if bucket_cap_mb_list is None else [float(m) for m in bucket_cap_mb_list],
        "bucket_caps_bytes": caps,
        "find_unused_parameters": bool(find_unused_parameters),
        "static_graph": bool(static_graph),
        "buckets": [list(b) for b in buckets],
    })
