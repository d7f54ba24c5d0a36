"""ByteScheduler (Peng et al., SOSP 2019) as its code runs on Horovod, for layerwise sync.

Checked against ``bytescheduler/common/bytecore.py``, ``bytescheduler/pytorch/horovod.py``
and ``horovod_task.py`` of the byteps repository (branch ``bytescheduler``), deployed on
Horovod 0.16 (the release its plugin targets) with NCCL; reconstructed from the code, not
run here.

* **Partitions.** A tensor of more than ``partition_parameters`` elements is cut into
  ``number = ceil(numel / partition)`` pieces along its first dimension, at most one per
  row: ``rows // number`` rows each, the remainder one extra row for each of the last
  pieces. Without shapes, pieces of nearly equal element counts.
* **Priority.** A partition's priority is its tensor's position in ``model.parameters()``
  (the profile's registration order), then its index: lower first.
* **Credit.** The core posts the ready partition of best priority while its credit is
  positive, taking the partition's elements from it (so it may go negative), and gives them
  back when the communication completes (module :mod:`fusionopt.solvers.papers._priority` has the
  same rule). By default the core also tunes the credit online (a Bayesian search over 4M
  to 64M elements); here ``credit_tuning`` tries that range's powers of two on the model
  and keeps the best, what the online search could at most reach.
* **Horovod underneath.** Posting calls ``allreduce_async_``: the partition joins
  Horovod's queue, and Horovod's next cycle tick fuses the partitions pending then, up to
  its fusion threshold, into messages released at that tick (:mod:`fusionopt.solvers.baselines._horovod`).
  The deployment's defaults: Horovod 0.16's 5 ms cycle and 64 MiB threshold, NCCL
  behaviour (a tick every cycle). A partition's credit comes back when its fused message
  ends.

``fusion_threshold_bytes=0`` turns Horovod's fusion off (each partition its own message;
US-Byte's runtime sets ``HOROVOD_FUSION_THRESHOLD=0``), and ``cycle_time=0`` hands posted
partitions straight to the channel: with both, the schedule is the unfused policy of
:mod:`fusionopt.solvers.papers._priority`, which also runs under contention and several channels.
The Horovod path models one channel without contention or copy cost.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from fusionopt.model._dispatch import PolicyRun, credit_window, priority_dispatch
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.model._ticks import credit_ticks
from fusionopt.solvers.baselines._horovod import BACKENDS, HOROVOD_DEFAULTS, PADDING_BYTES, fuse
from fusionopt.solvers.papers._priority import whole_parameters
from fusionopt.solvers._policy_checks import check_message_ends, check_reproduced
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method
from fusionopt.model._cost import check_flag

MiB = 1024 * 1024
BYTESCHEDULER_PRESETS = {
    "default": (1_000_000, 4_000_000),   # BYTESCHEDULER_PARTITION, BYTESCHEDULER_CREDIT
    "advised": (8_000_000, 16_000_000),  # the paper's advice for all-reduce
}
CREDIT_TUNING_RANGE = tuple(m * 1_000_000 for m in (4, 8, 16, 32, 64))
TUNING_PARTITIONS = tuple(2**k for k in range(16, 25))     # 65,536 .. 16,777,216 parameters
TUNING_CREDIT_MULTIPLES = (1, 2, 4, 8)
DEPLOYED_HOROVOD = "legacy"                                  # Horovod 0.16: 5 ms, 64 MiB


def _check_credit(partition: int, credit: int) -> None:
    if credit < partition:
        raise ValueError(
            f"credit_parameters = {credit} is smaller than one partition (partition_parameters = "
            f"{partition}); the credit must admit at least one partition"
        )


def bytescheduler_slices(problem: Problem, partition_parameters: int) -> list[Chunk]:
    """ByteScheduler's partitions in forward order (each tensor's in byte order).

    With the profile's shapes, a tensor of more than ``partition_parameters`` elements is
    cut along its first dimension into ``min(ceil(numel / partition), rows)`` pieces of
    whole rows, the last ``rows % pieces`` pieces one row longer. Without shapes, into
    ``ceil(size / partition)`` pieces whose element counts differ by at most one (a tensor
    whose size is not a whole number of elements ends in a partial element).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([40, 8], [0.0] * 2, [1e-3] * 2)   # float32: 10 and 2 parameters
    >>> [(c.tensor, c.lo, c.hi) for c in bytescheduler_slices(Problem(profile, AlphaBeta(0, 1e-9)), 4)]
    [(0, 0, 12), (0, 12, 24), (0, 24, 40), (1, 0, 8)]
    >>> rows = Profile.from_arrays([40, 8], [0.0] * 2, [1e-3] * 2, shapes=[(5, 2), (2,)])
    >>> [(c.tensor, c.lo, c.hi) for c in bytescheduler_slices(Problem(rows, AlphaBeta(0, 1e-9)), 4)]
    [(0, 0, 8), (0, 8, 24), (0, 24, 40), (1, 0, 8)]
    """
    partition_parameters = whole_parameters("partition_parameters", partition_parameters)
    profile = problem.profile
    slices = []
    for i, size in enumerate(profile.sizes.tolist()):
        element = int(profile.element_bytes[i])
        elements = -(-size // element)
        pieces = -(-elements // partition_parameters)
        if profile.shapes is not None and pieces > 1:
            rows = int(profile.shapes[i][0])
            pieces = min(pieces, rows)
            row_bytes = size // rows
            base, extra = divmod(rows, pieces)
            counts = [base] * (pieces - extra) + [base + 1] * extra
            bounds = [0] + np.cumsum([c * row_bytes for c in counts]).tolist()
        else:
            bounds = [element * (j * elements // pieces) for j in range(pieces)] + [size]
        slices.extend(Chunk(i, lo, hi) for lo, hi in zip(bounds, bounds[1:]))
    return slices


def _registration_rank(problem: Problem) -> list[int]:
    rank = [0] * problem.profile.n
    for position, i in enumerate(problem.profile.registration_order):
        rank[i] = position
    return rank


def _horovod_schedule(problem: Problem, slices: list[Chunk], rank: list[int], credit_bytes: int,
                      threshold: int, cycle: float, gpu: bool, lookahead: bool) -> tuple[Plan, int, list[float]]:
    """The core's credit over Horovod's cycle ticks (module docstring), run by the model's
    :func:`~fusionopt.model.credit_ticks` with Horovod's fuse rule: the plan of fused
    messages with their release times, the number of busy cycles, and the message ends the
    loop returned credit at (the simulator must agree: :func:`_finish` checks)."""
    sizes = [c.nbytes for c in slices]
    kinds = None if problem.profile.dtypes is None else tuple(problem.profile.dtypes[c.tensor] for c in slices)
    padding = PADDING_BYTES if gpu and lookahead else 1        # the current code pads on GPUs
    run = credit_ticks(problem, slices, rank, credit_bytes,
                       lambda posted: fuse(posted, sizes, kinds, threshold, lookahead, padding),
                       cycle, wait_for_collectives=not gpu)
    plan = Plan(tuple(Message(tuple(slices[s] for s in group), tick) for group, tick in zip(run.groups, run.release)))
    return plan, run.cycles, run.ends


def _run(problem: Problem, partition: int, credit: int, options: dict[str, Any],
         slices: list[Chunk] | None = None) -> tuple[Plan, dict[str, Any], PolicyRun | list[float]]:
    """One setting: its plan, its stats, and the policy's own timing for the simulator to
    agree with: the unfused policy's schedule, or the message ends on Horovod."""
    if slices is None:
        slices = bytescheduler_slices(problem, partition)
    rank = _registration_rank(problem)
    credit_bytes = credit * problem.profile.dtype_bytes
    stats = {"partition_parameters": partition, "credit_parameters": credit, "slices": len(slices)}
    if options["unfused"]:
        schedule = priority_dispatch(problem, slices, credit_window(problem.channels, credit_bytes), rank)
        stats["policy_iteration_time"] = schedule.iteration_time
        return schedule.plan(slices), stats, schedule
    plan, cycles, ends = _horovod_schedule(problem, slices, rank, credit_bytes, options["threshold"],
                                           options["cycle"], options["gpu"], options["lookahead"])
    stats["cycles"] = cycles
    return plan, stats, ends


def _horovod_options(problem: Problem, fusion_threshold_bytes: float | None, cycle_time: float | None,
                     backend: str, horovod_defaults: str) -> dict[str, Any]:
    if horovod_defaults not in HOROVOD_DEFAULTS:
        raise ValueError(f"unknown horovod_defaults {horovod_defaults!r}: choose 'current' or 'legacy'")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose 'nccl' (GPU), 'gloo' or 'mpi' (CPU)")
    default_cycle, default_threshold = HOROVOD_DEFAULTS[horovod_defaults]
    values = {}
    for label, value, default, unit in (("fusion_threshold_bytes", fusion_threshold_bytes, default_threshold, "bytes"),
                                        ("cycle_time", cycle_time, default_cycle, "seconds")):
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{label} must be a number of {unit} >= 0, got {value!r}")
        values[label] = value
    unfused = values["fusion_threshold_bytes"] == 0 and values["cycle_time"] == 0
    if not unfused and problem.timing_extensions:
        raise ValueError("bytescheduler over Horovod's fusion models one channel without contention or copy "
                         "cost; pass fusion_threshold_bytes=0 and cycle_time=0 for the unfused policy, "
                         "which runs on every model option")
    threshold = int(values["fusion_threshold_bytes"])
    if horovod_defaults == "current" and threshold > 0:
        threshold = -(-threshold // 512) * 512
    return {"unfused": unfused, "threshold": threshold, "cycle": float(values["cycle_time"]),
            "gpu": backend == "nccl", "lookahead": horovod_defaults == "current",
            "backend": backend, "horovod_defaults": horovod_defaults}


def _outcome(problem: Problem, method: str, plan: Plan, stats: dict[str, Any], timing: PolicyRun | list[float],
             options: dict[str, Any]) -> Outcome:
    """The plan with its stats, and the check that the simulation reproduces ``timing``."""
    stats.update(fusion_threshold_bytes=options["threshold"], cycle_time=options["cycle"],
                 backend=options["backend"], horovod_defaults=options["horovod_defaults"])

    def check(result: Result) -> None:
        if isinstance(timing, PolicyRun):
            check_reproduced(problem, result, timing, method)
        else:
            check_message_ends(problem, result, timing, method)
    return Outcome(plan, space="any", stats=stats, check=check)


@method("bytescheduler", family="paper",
        summary="ByteScheduler on Horovod 0.16: partitions, credit, cycle-tick fusion (layerwise)")
@declares(Needs(layerwise=True))
def bytescheduler(
    problem: Problem,
    *,
    partition_parameters: int = BYTESCHEDULER_PRESETS["default"][0],
    credit_parameters: int = BYTESCHEDULER_PRESETS["default"][1],
    preset: str | None = None,
    credit_tuning: bool = True,
    fusion_threshold_bytes: float | None = None,
    cycle_time: float | None = None,
    backend: str = "nccl",
    horovod_defaults: str = DEPLOYED_HOROVOD,
) -> Result:
    """ByteScheduler on Horovod (module docstring) for layerwise sync.

    Parameters
    ----------
    partition_parameters : int
        Largest partition, in elements (``BYTESCHEDULER_PARTITION``, default 1,000,000).
    credit_parameters : int
        The credit in elements (``BYTESCHEDULER_CREDIT``, default 4,000,000); at least one
        partition. With ``credit_tuning`` the starting point of the search.
    preset : {None, "default", "advised"}
        ``"advised"``: 8M / 16M, the paper's advice for all-reduce; ``"default"``: 1M / 4M.
        A preset sets both values; passing a different value with it is an error.
    credit_tuning : bool
        Tune the credit as the code does by default (the best of ``credit_parameters`` and
        4M, 8M, 16M, 32M, 64M on the model); ``False`` keeps ``credit_parameters``.
    fusion_threshold_bytes, cycle_time : float, optional
        Horovod's ``HOROVOD_FUSION_THRESHOLD`` (bytes) and ``HOROVOD_CYCLE_TIME`` (seconds);
        default per ``horovod_defaults``. ``0`` and ``0``: no Horovod fusion, no cycle (the
        unfused policy).
    backend : {"nccl", "gloo", "mpi"}
        Horovod's behaviour: a tick every cycle (NCCL, GPU) or after the cycle's collectives.
    horovod_defaults : {"legacy", "current"}
        ``"legacy"`` (default): Horovod 0.16, ByteScheduler's deployment (5 ms, 64 MiB, no
        dtype look-ahead); ``"current"``: 1 ms, 128 MiB, look-ahead, padding, rounding.

    Returns
    -------
    Result
        ``stats``: ``partition_parameters``, ``credit_parameters`` (the one kept),
        ``preset``, ``slices``, the Horovod settings, ``cycles`` (busy Horovod cycles) or,
        unfused, ``policy_iteration_time``; with tuning, ``credits_tried``.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``, partitions of 250,000 float32 elements (1 MB,
    2 ms a message), no Horovod fusion and no cycle, a fixed credit of two partitions: at
    1 ms both of t2's partitions are posted (1-3, 3-5); t1, ready at 3 ms, queues behind
    them (5-7) where P3 would let it overtake; t0's partitions follow, 7-15 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    >>> unfused = bytescheduler(problem, partition_parameters=250_000, credit_parameters=500_000,
    ...                         credit_tuning=False, fusion_threshold_bytes=0, cycle_time=0)
    >>> unfused.plan.groups(), round(unfused.iteration_time * 1e3, 9)
    ([[2], [2], [1], [0], [0], [0], [0]], 18.0)

    On Horovod 0.16 (5 ms ticks, 64 MiB): at the 5 ms tick t2's two partitions and t1 are
    posted (credit 4M elements) and fused into one 3 MB message, 5 -> 9 ms; t0's
    partitions go at the 10 ms tick, 10 -> 15: ``T = 15 + 3 = 18`` ms.

    >>> fused = bytescheduler(problem, partition_parameters=250_000)
    >>> fused.plan.groups(), (fused.plan.release * 1e3).round(9).tolist(), round(fused.iteration_time * 1e3, 9)
    ([[2, 1], [0]], [5.0, 10.0], 18.0)

    ResNet-50 (the zoo's H100 profile), 10GbE ring, 64 workers: Horovod fuses the model into
    4 messages; the unfused scheduler pays a 3.15 ms startup on each of its 176 partitions.

    >>> from fusionopt import zoo
    >>> from fusionopt.cost import network
    >>> resnet = Problem(zoo.profile("resnet50"), network("10gbe", 64), sync="layerwise")
    >>> on_horovod = bytescheduler(resnet)
    >>> alone = bytescheduler(resnet, fusion_threshold_bytes=0, cycle_time=0, credit_tuning=False)
    >>> round(on_horovod.iteration_time * 1e3, 1), on_horovod.num_messages
    (189.0, 4)
    >>> round(alone.iteration_time * 1e3, 1), alone.num_messages
    (715.8, 176)
    """
    defaults = BYTESCHEDULER_PRESETS["default"]
    if preset is not None:
        if preset not in BYTESCHEDULER_PRESETS:
            raise ValueError(f"unknown preset {preset!r}: choose 'default' or 'advised'")
        for label, value, default in (("partition_parameters", partition_parameters, defaults[0]),
                                      ("credit_parameters", credit_parameters, defaults[1])):
            if value != default:
                raise ValueError(f"preset={preset!r} sets {label}; do not pass {label}={value!r} with it")
        partition_parameters, credit_parameters = BYTESCHEDULER_PRESETS[preset]
    partition = whole_parameters("partition_parameters", partition_parameters)
    credit = whole_parameters("credit_parameters", credit_parameters)
    _check_credit(partition, credit)
    check_flag("credit_tuning", credit_tuning)
    options = _horovod_options(problem, fusion_threshold_bytes, cycle_time, backend, horovod_defaults)
    credits = [credit]
    if credit_tuning:
        credits += [c for c in CREDIT_TUNING_RANGE if c >= partition and c != credit]
    slices = bytescheduler_slices(problem, partition)
    best = None
    for c in credits:
        plan, stats, schedule = _run(problem, partition, c, options, slices)
        t = simulate(problem, plan, validate=False).iteration_time
        if best is None or t < best[0]:
            best = (t, plan, stats, schedule)
    _, plan, stats, schedule = best
    stats["preset"] = preset
    if credit_tuning:
        stats["credits_tried"] = len(credits)
    return _outcome(problem, "bytescheduler", plan, stats, schedule, options)


@method("bytescheduler-tuned", family="paper",
        summary="ByteScheduler with partition and credit searched on a grid (layerwise)")
@declares(Needs(layerwise=True))
def bytescheduler_tuned(
    problem: Problem,
    *,
    partitions: Iterable[int] | None = None,
    credits: Iterable[int] | None = None,
    fusion_threshold_bytes: float | None = None,
    cycle_time: float | None = None,
    backend: str = "nccl",
    horovod_defaults: str = DEPLOYED_HOROVOD,
) -> Result:
    """ByteScheduler with partition and credit searched on the model (on the same Horovod
    settings as :func:`bytescheduler`).

    ByteScheduler's auto-tuner tries settings on the hardware for a few steps each; here
    every candidate is scored by :func:`~fusionopt.model.simulate` on ``problem`` and the
    best is kept (the first best in the order below: ties keep the earlier one). Candidates,
    in order: ByteScheduler's defaults (1M, 4M) and the advised preset (8M, 16M), where its
    tuner starts; then the grid ``partitions x credits`` by increasing partition and
    credit, without pairs whose credit is smaller than the partition.

    Parameters
    ----------
    partitions : iterable of int, optional
        Partition sizes in elements; default the powers of two ``2^16 .. 2^24``.
    credits : iterable of int, optional
        Credits in elements, tried with every partition they are not smaller than; default
        ``partition x {1, 2, 4, 8}`` for each partition (38 candidates in all).
    fusion_threshold_bytes, cycle_time, backend, horovod_defaults
        Horovod underneath, as for :func:`bytescheduler`.

    Returns
    -------
    Result
        ``stats``: the chosen ``partition_parameters`` and ``credit_parameters``,
        ``evaluated`` (candidates simulated), ``slices``, and ``default_iteration_time``
        (seconds, ByteScheduler's defaults without credit tuning).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 1 ms``, unfused: tensor 0 is ready last, so no
    slicing lets it go earlier, and every slice costs a startup: the defaults (no tensor
    split, WFBP's order, 14 ms) are the best of the 38 candidates.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    >>> tuned = bytescheduler_tuned(problem, fusion_threshold_bytes=0, cycle_time=0)
    >>> round(tuned.iteration_time * 1e3, 9), tuned.stats["evaluated"]
    (14.0, 38)
    >>> tuned.stats["partition_parameters"], tuned.stats["credit_parameters"]
    (1000000, 4000000)
    """
    options = _horovod_options(problem, fusion_threshold_bytes, cycle_time, backend, horovod_defaults)
    if partitions is None:
        partition_grid = list(TUNING_PARTITIONS)
    else:
        partition_grid = sorted({whole_parameters("partitions", p) for p in partitions})
        if not partition_grid:
            raise ValueError("partitions is empty: give at least one partition size")
    if credits is None:
        pairs = [(p, p * m) for p in partition_grid for m in TUNING_CREDIT_MULTIPLES]
    else:
        credit_grid = sorted({whole_parameters("credits", c) for c in credits})
        if not credit_grid:
            raise ValueError("credits is empty: give at least one credit")
        pairs = [(p, c) for p in partition_grid for c in credit_grid if c >= p]
        if not pairs:
            raise ValueError(
                f"no credit in {credit_grid} is at least one of the partitions {partition_grid}: "
                f"the credit must admit at least one partition"
            )
    candidates = list(dict.fromkeys(list(BYTESCHEDULER_PRESETS.values()) + pairs))
    sliced: dict[int, list[Chunk]] = {}
    best = None
    default_time = math.nan
    for partition, credit in candidates:
        if partition not in sliced:
            sliced[partition] = bytescheduler_slices(problem, partition)
        plan, stats, schedule = _run(problem, partition, credit, options, sliced[partition])
        iteration_time = simulate(problem, plan, validate=False).iteration_time
        if (partition, credit) == BYTESCHEDULER_PRESETS["default"]:
            default_time = iteration_time
        if best is None or iteration_time < best[0]:
            best = (iteration_time, plan, stats, schedule)
    _, plan, stats, schedule = best
    stats.update(evaluated=len(candidates), default_iteration_time=default_time)
    return _outcome(problem, "bytescheduler-tuned", plan, stats, schedule, options)
