"""Horovod's tensor fusion, cycle by cycle, as its background thread runs it.

Checked against Horovod's ``horovod/common/operations.cc`` (``RunLoopOnce``),
``controller.cc`` (``FuseResponses``, ``TensorFusionThresholdBytes``) and
``ops/nccl_operations.cc`` / ``gpu_operations.cc`` of the current code (defaults since
late 2020), and against the same files at v0.16 (the release ByteScheduler's Horovod
plugin was written for). Reconstructed from the code, not measured: this package has no
Horovod installation to run.

A cycle starts at a *tick*. The tensors whose gradients are ready by the tick and not yet
sent are fused, in ready order (steady state: the response cache replays the first
iteration's order, which is the ready order), into messages of one dtype and at most
``fusion_threshold_bytes``: a tensor that does not fit closes the message (a larger tensor
travels alone). The current code looks past tensors of another dtype while the bytes
skipped still fit under the threshold; v0.16 stops at the first. Each message is posted at
its tick: it starts no earlier (its *release time*, MODEL.md section 3).

When the next tick comes depends on the backend:

* ``backend="nccl"`` (GPU, the default): the collectives are enqueued on a CUDA stream and
  a finaliser thread waits for them, so the background thread ticks every ``cycle_time``
  while the stream is busy; gradients that arrive meanwhile form more, smaller messages.
  The thread sees a gradient when its ready event fires; it is modelled at the gradient's
  ready time on the device (the hook's host time is earlier by the launch queue).
  With the current code each tensor is padded to 16 bytes when the fusion buffer is
  counted (batched device copies); the padding counts against the threshold only.
* ``backend="gloo"`` or ``"mpi"`` (CPU): the thread runs the cycle's collectives itself,
  so the next tick is ``max(tick + cycle_time, end of the cycle's collectives)``. Those ends
  are the one-channel recursion of MODEL.md section 3, which the simulator reproduces
  exactly on the plain model (checked on every call); under model extensions the ticks
  follow that plain recursion and the simulator judges the plan.

``cycle_phase`` (seconds in ``[0, cycle_time)``) places the first tick after the start of
the backward; the thread's phase is not known in a real job, and 0 is our choice.
``local_size`` (GPUs per node, current code only) rounds the threshold up to a multiple of
``local_size * 8 * 64`` bytes, as Horovod does for a homogeneous cluster.

What goes on the wire: ``hvd.DistributedOptimizer(compression=...)`` sends every gradient
with one compression, ``hvd.Compression.none`` or ``hvd.Compression.fp16``
(``horovod/torch/compression.py``, which has no other), so a problem priced with one
encoding, fp32 or fp16 (:class:`~fusionopt.cost.Encoded`), is Horovod's
(:func:`horovod_compression`), and one that chooses per message (a
:class:`~fusionopt.cost.Cheapest` of several) or sends bf16 is refused in one line. Horovod
casts each tensor before fusing it, where the encoding prices its cast per message: a
reconstruction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusionopt.model._encoding import Cheapest, Encoded
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ticks import cycle_ticks
from fusionopt.solvers.baselines._wfbp import positive_number
from fusionopt.solvers._policy_checks import check_message_ends
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method

MiB = 1024 * 1024
HOROVOD_DEFAULTS = {"current": (1e-3, 128 * MiB), "legacy": (5e-3, 64 * MiB)}
BACKENDS = ("nccl", "gloo", "mpi")
PADDING_BYTES = 16                 # BATCHED_D2D_PADDING of the current code


def fuse(batch: list[int], sizes: Sequence[int], dtypes: tuple[str, ...] | None, threshold: int,
         lookahead: bool, padding: int) -> list[list[int]]:
    """Horovod's ``FuseResponses`` over one cycle's tensors (ready order): messages of one
    dtype up to ``threshold`` bytes (each tensor counted rounded up to ``padding``).

    >>> fuse([0, 1, 2, 3], np.array([4, 4, 4, 4]), ("a", "b", "a", "a"), 8, True, 1)
    [[0, 2], [1], [3]]
    >>> fuse([0, 1, 2, 3], np.array([4, 4, 4, 4]), ("a", "b", "a", "a"), 8, False, 1)
    [[0], [1], [2, 3]]
    """
    def counted(i: int) -> int:
        return -(-int(sizes[i]) // padding) * padding

    def kind(i: int) -> str:
        return "" if dtypes is None else dtypes[i]

    queue = list(batch)
    messages: list[list[int]] = []
    while queue:
        first = queue.pop(0)
        message, size, skipped, kept = [first], counted(first), 0, []
        while queue:
            i = queue[0]
            if kind(i) == kind(first) and size + counted(i) <= threshold:
                message.append(queue.pop(0))
                size += counted(i)
                continue
            skipped += counted(i)
            if lookahead and size + skipped <= threshold:
                kept.append(queue.pop(0))          # look past it
                continue
            break
        queue = kept + queue
        messages.append(message)
    return messages


def horovod_compression(problem: Problem) -> str:
    """The ``hvd.Compression`` that sends the problem's messages as its cost prices them,
    ``"none"`` or ``"fp16"`` (module docstring); one line saying why Horovod cannot
    otherwise."""
    if problem.compressor is not None:
        raise ValueError(f"horovod: Horovod's DistributedOptimizer has no {problem.compressor.name} (its compressions "
                         "are hvd.Compression.none and fp16): leave the compressor out")
    cost = problem.cost
    if isinstance(cost, Cheapest):
        if len(cost.encodings) > 1:
            raise ValueError("horovod: Horovod's DistributedOptimizer sends every gradient with one compression "
                             "(hvd.Compression.none or fp16), not an encoding chosen per message: price it with "
                             "one encoding")
        encoding = cost.encodings[0]
    elif isinstance(cost, Encoded):
        encoding = cost.encoding
    else:
        return "none"
    if encoding.lossless:
        return "none"
    if encoding.name != "fp16":
        raise ValueError(f"horovod: Horovod compresses to fp16 only (hvd.Compression.fp16), not {encoding.name}")
    return "fp16"


@method("horovod", family="framework baseline",
        summary="Horovod tensor fusion at cycle ticks (1 ms, 128 MiB; NCCL behaviour by default)")
def horovod(
    problem: Problem,
    *,
    cycle_time: float | None = None,
    fusion_threshold_bytes: float | None = None,
    defaults: str = "current",
    backend: str = "nccl",
    cycle_phase: float = 0.0,
    local_size: int = 1,
) -> Result:
    """Horovod's tensor fusion (module docstring): messages released at their cycle's tick.

    Parameters
    ----------
    cycle_time : float, optional
        Seconds between ticks (``HOROVOD_CYCLE_TIME``, which Horovod reads in ms); default
        per ``defaults``.
    fusion_threshold_bytes : float, optional
        Largest fused message (``HOROVOD_FUSION_THRESHOLD``); default per ``defaults``.
    defaults : {"current", "legacy"}
        ``"current"``: 1 ms, 128 MiB, dtype look-ahead, 16-byte padding on GPUs and the
        threshold rounding (Horovod since late 2020); ``"legacy"``: 5 ms, 64 MiB, none of
        them (v0.16).
    backend : {"nccl", "gloo", "mpi"}
        NCCL: GPU behaviour, a tick every cycle; Gloo and MPI: CPU behaviour, a cycle waits
        for its collectives.
    cycle_phase : float
        Seconds from the start of the backward to the first tick, in ``[0, cycle_time)``.
    local_size : int
        GPUs per node, for the current code's threshold rounding.

    Examples
    --------
    Ticks every 3 ms on MODEL.md section 5 (ready at 1, 3, 6 ms; alpha 3 ms): t3 goes at the
    3 ms tick, 3 -> 8 ms; t2 (ready at 3 ms) at the same tick queues behind it, 8 -> 12; t1
    at the 6 ms tick but the channel is busy until 12 -> 19 ms; T = 19 + 3 = 22 ms.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> r = horovod(problem, cycle_time=3e-3, fusion_threshold_bytes=2e6)
    >>> r.plan.groups(), (r.plan.release * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([[2], [1], [0]], [3.0, 3.0, 6.0], 22.0)
    """
    if defaults not in HOROVOD_DEFAULTS:
        raise ValueError(f"unknown defaults {defaults!r}: choose 'current' or 'legacy'")
    compression = horovod_compression(problem)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose 'nccl' (GPU), 'gloo' or 'mpi' (CPU)")
    default_cycle, default_threshold = HOROVOD_DEFAULTS[defaults]
    cycle = positive_number("cycle_time", default_cycle if cycle_time is None else cycle_time, "seconds")
    threshold_value = default_threshold if fusion_threshold_bytes is None else fusion_threshold_bytes
    threshold = int(positive_number("fusion_threshold_bytes", threshold_value, "bytes"))
    if isinstance(cycle_phase, bool) or not isinstance(cycle_phase, (int, float, np.integer, np.floating)) \
            or not 0.0 <= cycle_phase < cycle:
        raise ValueError(f"cycle_phase must be a number of seconds in [0, cycle_time = {cycle!r}), got {cycle_phase!r}")
    if isinstance(local_size, bool) or not isinstance(local_size, (int, np.integer)) or local_size < 1:
        raise ValueError(f"local_size must be a whole number of GPUs >= 1, got {local_size!r}")
    current = defaults == "current"
    gpu = backend == "nccl"
    if current:
        unit = int(local_size) * 8 * 64
        threshold = -(-threshold // unit) * unit
    padding = PADDING_BYTES if current and gpu else 1

    profile = problem.profile
    run = cycle_ticks(problem, lambda batch: fuse(batch, profile.sizes, profile.dtypes, threshold, current, padding),
                      cycle, phase=float(cycle_phase), wait_for_collectives=not gpu)
    plan = Plan.from_groups(profile, run.groups, release=run.release)
    space = "fusion" if plan.is_fusion(profile) else "any"     # releases make it another plan
    return Outcome(plan, space=space, stats={
        "cycle_time": cycle, "fusion_threshold_bytes": threshold, "cycles": run.cycles,
        "backend": backend, "defaults": defaults, "cycle_phase": float(cycle_phase), "compression": compression,
    }, check=lambda result: check_message_ends(problem, result, run.ends, "horovod"))
