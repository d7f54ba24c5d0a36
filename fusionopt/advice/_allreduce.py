"""Framework settings from a plan: PyTorch DDP and Horovod configurations, each judged by the
layout the framework will actually build from it.

A plan (the DP's, say) fixes every message; DDP and Horovod take a few knobs. For each
setting these functions report the model's ``T`` of the schedule the framework builds from
it (:mod:`fusionopt.solvers.baselines._ddp`, :func:`~fusionopt.solvers.baselines._horovod.horovod`), beside the
plan's own ``T``.

* :func:`ddp_settings`: the ``bucket_cap_mb_list`` that makes torch build the plan's
  buckets exactly (an argument of recent torch releases; checked on 2.13), when the plan is
  a fusion plan DDP can express; the best
  single ``bucket_cap_mb`` under torch's rule for an explicit cap (the first bucket gets
  the same cap), or ``None`` ("leave it unset") when torch's default layout is faster; and
  what ``find_unused_parameters=True`` would cost (DDP then never rebuilds its buckets).
* :func:`horovod_settings`: ``HOROVOD_FUSION_THRESHOLD`` (bytes) and ``HOROVOD_CYCLE_TIME``
  (milliseconds) on a small grid (the plan's message sizes and Horovod's defaults, times a
  few cycle times), judged under the backend's behaviour; never slower than the current
  defaults (1 ms, 128 MiB).

Ties in ``T`` (within a relative ``1e-9``) go to the schedule whose message boundaries
differ least from the plan's, then to the smaller knob.

A setting replaces a framework's default only where the model predicts it at least
``min_gain`` faster (:data:`MIN_GAIN`, 5%, by default; :func:`gains_enough`): below that the
model's own error on a real job is larger than the gain. Applied to real DDP and FSDP2 jobs
with any gain and no reducer cost in the model (``python validation/frameworks/speedup.py
--min-gain 0 --calibration-rounds 0 --models cnn,lstm --ranks 2 --rounds 10``, gloo on a
2-core host, emulated link; it writes ``validation/results/subset/speedup-cpu.md``; timings
of 2026-11-27), the six settings
predicted 0-3.5% faster than the default, each with more buckets or units, were measured
4-22% slower, two of them beyond their 95% interval; the two predicted 19% faster were
measured at 1.03 and 1.10 of their predicted speedup.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fusionopt.model._alignment import Aligned
from fusionopt.model._encoding import Cheapest, Encoded, crossovers
from fusionopt.model._plan import Plan
from fusionopt.model._powersgd import PowerSGD
from fusionopt.model._pattern import require_pattern
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model import simulate
from fusionopt.solvers.baselines._ddp import MiB, ddp_buckets
from fusionopt.solvers.baselines._horovod import HOROVOD_DEFAULTS
from fusionopt.solvers._registry import solve

DDP_CAP_CANDIDATES_MB = (1, 2, 5, 10, 25, 50, 100, 200, 500, 1000)
HOROVOD_CYCLE_TIMES_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HOROVOD_MAX_THRESHOLDS = 16       # plan sizes beyond this many are thinned to quantiles
_TIE = 1e-9                       # relative tolerance on T for ties
POWERSGD_MODULE = "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook"
DEFAULT_HOOKS = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"
# wire_comm_hook's argument for the tensors kept exact (the advice prints EXACT = {...}).
EXACT_ARGUMENT = ", exact=[p for n, p in model.named_parameters() if n in EXACT]"
MIN_GAIN = 0.05
"""The least predicted gain, a fraction of the default's ``T``, for which advice replaces a
framework's default (module docstring)."""


def check_min_gain(min_gain: Any) -> float:
    """``min_gain`` as a float in ``[0, 1)``; one line naming it otherwise."""
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 1:
        raise ValueError(f"min_gain must be a fraction in [0, 1), got {min_gain!r}")
    return float(min_gain)


def gains_enough(advised: float, default: float, min_gain: float) -> bool:
    """Whether a setting of ``T = advised`` replaces a default of ``T = default`` (seconds):
    it must be faster by at least ``min_gain`` of the default's ``T``, beyond a tie.

    >>> gains_enough(0.95, 1.0, 0.05), gains_enough(0.951, 1.0, 0.05), gains_enough(1.0 - 1e-12, 1.0, 0.0)
    (True, False, False)
    """
    min_gain = check_min_gain(min_gain)
    for label, seconds in (("advised", advised), ("default", default)):
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= math.inf:
            raise ValueError(f"{label} must be a step time in seconds >= 0 (inf: infeasible), got {seconds!r}")
    gain = default - advised
    return gain > _TIE * abs(default) and gain >= min_gain * default - _TIE * abs(default)


@dataclass(frozen=True)
class DDPSettings:
    """PyTorch DDP settings for a plan, each with the model's ``T`` (seconds) of the buckets
    torch builds from it.

    ``bucket_cap_mb_list`` (MiB per bucket, for ``DistributedDataParallel(...,
    bucket_cap_mb_list=...)``) reproduces the plan exactly; ``None`` when no list can (the
    plan is not contiguous in the gradient-ready order, or mixes dtypes DDP keeps apart).
    ``bucket_cap_mb`` is the best single cap, ``None`` when leaving it unset (1 MiB first
    bucket, then 25 MiB) is at least as fast. ``buckets`` is the layout of the recommended
    setting (the list when there is one, else the single cap or the default): tensor
    indices per bucket in the order DDP fills them, buckets in reduction order;
    ``iteration_time`` its ``T``. ``find_unused_iteration_time`` is the ``T`` of the
    recommended setting with ``find_unused_parameters=True``. Where the problem's cost is an
    :class:`~fusionopt.cost.Aligned` price of padded messages (a calibrated alignment cliff,
    MODEL.md section 2.3), every ``T`` here is of buckets padded to it, which DDP does not do
    by itself: ``alignment_unit`` is the cost's unit (bytes per rank) and ``padding`` the
    bytes each bucket of ``buckets`` gains, and the job must register
    :func:`~fusionopt.integrations.padded_comm_hook` with that unit (``hook``). Where
    ``powersgd`` is set, every ``T`` here is of a step under torch's ``powerSGD_hook`` once it
    compresses (MODEL.md section 2.4), ``hook`` says how to register it, and
    ``plain_iteration_time`` is the ``T`` of DDP's defaults without it. Where the problem's
    cost carries messages in encodings (:class:`~fusionopt.cost.Encoded`,
    :class:`~fusionopt.cost.Cheapest`, MODEL.md section 2.2), ``wire`` is the model's choice
    by size, ``((from_bytes, encoding), ...)``, and ``exact_names`` the tensors kept exact
    (every bucket holding one in fp32): ``hook`` is torch's compress hook where one encoding
    serves every bucket, else :func:`~fusionopt.integrations.wire_comm_hook`, which applies
    that rule bucket by bucket. Where the problem has a ``compressor`` (torch's PowerSGD hook
    as one choice per message, MODEL.md section 2.4), every ``T`` here takes each bucket's
    cheaper way, ``compressor`` is the hook and ``through_names`` the tensors whose
    recommended bucket goes through it: ``hook`` is then
    :func:`~fusionopt.integrations.wire_comm_hook` with ``powersgd=`` and ``through=``.
    ``kept_defaults``: the list
    (or, without one, every single cap) is predicted less than ``min_gain`` faster than
    torch's default layout, so the advice is to leave DDP's defaults (``arguments`` is
    empty, ``buckets`` and ``iteration_time`` the default layout's); ``bucket_cap_mb_list``
    still names the list that would rebuild the plan.
    """

    bucket_cap_mb_list: tuple[float, ...] | None
    bucket_cap_mb: float | None
    cap_iteration_time: float             # T of the single cap's layout (the default's when None)
    default_iteration_time: float         # T of torch's default (bucket_cap_mb unset)
    buckets: tuple[tuple[int, ...], ...]
    plan_iteration_time: float
    find_unused_iteration_time: float
    candidates: int                       # single caps tried
    min_gain: float = 0.0
    alignment_unit: int | None = None     # bytes a rank's part must be a multiple of (an Aligned cost's)
    padding: tuple[int, ...] = ()         # bytes padding adds to each bucket of ``buckets``
    powersgd: PowerSGD | None = None      # the hook every T above is judged under (None: DDP's all-reduce)
    plain_iteration_time: float | None = None   # with powersgd: T of DDP's defaults without the hook
    wire: tuple[tuple[int, str], ...] | None = None   # each bucket's encoding from that many fp32 bytes on
    exact_names: tuple[str, ...] = ()     # tensors kept exact: a bucket holding one goes in fp32
    compressor: PowerSGD | None = None    # the hook as one choice per bucket (the problem's compressor)
    through_names: tuple[str, ...] = ()   # with compressor: the tensors whose bucket goes through it

    @property
    def kept_defaults(self) -> bool:
        """Whether the advice keeps torch's defaults: the list (without one, the best single
        cap) is not predicted ``min_gain`` faster than they are."""
        recommended = self.plan_iteration_time if self.bucket_cap_mb_list is not None else self.cap_iteration_time
        return not gains_enough(recommended, self.default_iteration_time, self.min_gain)

    @property
    def list_iteration_time(self) -> float | None:
        """T of the list's layout: the plan's own, since the list rebuilds it (None without one)."""
        return None if self.bucket_cap_mb_list is None else self.plan_iteration_time

    @property
    def iteration_time(self) -> float:
        """T of the recommended setting's layout (the list's, else the single cap's, or the
        default's where the defaults are kept)."""
        if self.kept_defaults:
            return self.default_iteration_time
        return self.cap_iteration_time if self.bucket_cap_mb_list is None else self.plan_iteration_time

    @property
    def arguments(self) -> dict[str, Any]:
        """The keyword arguments to give ``DistributedDataParallel`` (none: keep its defaults)."""
        if self.kept_defaults:
            return {}
        if self.bucket_cap_mb_list is not None:
            return {"bucket_cap_mb_list": list(self.bucket_cap_mb_list)}
        return {} if self.bucket_cap_mb is None else {"bucket_cap_mb": self.bucket_cap_mb}

    @property
    def hook(self) -> str | None:
        """The comm hook the advice needs, as Python (None: DDP's own all-reduce)."""
        if self.powersgd is not None:
            return f"{POWERSGD_MODULE}.powerSGD_hook"
        if self.through_names:
            wire = [list(step) for step in self.wire] if self.wire is not None else [[0, "fp32"]]
            exact = EXACT_ARGUMENT if self.exact_names else ""
            state = _powersgd_state(self.compressor)
            return (f"fusionopt.integrations.wire_comm_hook({wire!r}{exact}, powersgd={state}, "
                    "through=[p for n, p in model.named_parameters() if n in THROUGH])")
        if self.wire is not None and (self.exact_names or any(name != "fp32" for _, name in self.wire)):
            if len(self.wire) == 1 and not self.exact_names:
                return f"{DEFAULT_HOOKS}.{self.wire[0][1]}_compress_hook"
            exact = EXACT_ARGUMENT if self.exact_names else ""
            return f"fusionopt.integrations.wire_comm_hook({[list(step) for step in self.wire]!r}{exact})"
        if self.alignment_unit is None or not any(self.padding):
            return None
        return f"fusionopt.integrations.padded_comm_hook(unit={self.alignment_unit})"

    @property
    def hook_state(self) -> str | None:
        """The state to register :attr:`hook` with, as Python: ``ddp.register_comm_hook(state,
        hook)`` (None: the process group DDP was given)."""
        return None if self.powersgd is None else _powersgd_state(self.powersgd)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["bucket_cap_mb_list"] = None if self.bucket_cap_mb_list is None else list(self.bucket_cap_mb_list)
        doc["buckets"] = [list(b) for b in self.buckets]
        doc["padding"] = list(self.padding)
        doc["powersgd"] = None if self.powersgd is None else self.powersgd.to_dict()
        doc["wire"] = None if self.wire is None else [list(step) for step in self.wire]
        doc["exact_names"] = list(self.exact_names)
        doc["compressor"] = None if self.compressor is None else self.compressor.to_dict()
        doc["through_names"] = list(self.through_names)
        doc.update(arguments=self.arguments, list_iteration_time=self.list_iteration_time,
                   iteration_time=self.iteration_time, kept_defaults=self.kept_defaults, hook=self.hook,
                   hook_state=self.hook_state)
        return doc


@dataclass(frozen=True)
class HorovodSettings:
    """Horovod tensor-fusion settings and their predicted iteration time (seconds).

    ``environment`` gives them as Horovod reads them: ``HOROVOD_FUSION_THRESHOLD`` in bytes
    and ``HOROVOD_CYCLE_TIME`` in milliseconds; ``backend`` the behaviour they were judged
    under; ``compression`` the ``hvd.Compression`` of ``DistributedOptimizer`` that sends the
    messages as the problem's cost prices them (``"none"`` or ``"fp16"``; a problem Horovod
    cannot send so is refused in one line).
    """

    backend: str
    fusion_threshold_bytes: int
    cycle_time_ms: float
    messages: int
    iteration_time: float          # T of this setting, simulated through the horovod baseline
    plan_iteration_time: float
    default_iteration_time: float  # T of Horovod's current defaults (1 ms, 128 MiB)
    candidates: int                # (threshold, cycle time) pairs tried
    kept_defaults: bool = False    # no pair gains min_gain: the settings are the defaults
    compression: str = "none"      # hvd.Compression of DistributedOptimizer: "none" or "fp16"

    @property
    def environment(self) -> dict[str, str]:
        return {"HOROVOD_FUSION_THRESHOLD": str(self.fusion_threshold_bytes),
                "HOROVOD_CYCLE_TIME": f"{self.cycle_time_ms:g}"}

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["environment"] = self.environment
        return doc


def _check(problem: Problem, plan: Plan) -> float:
    """Validate the inputs; return the plan's simulated T."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    require_pattern(problem, "all-reduce", "DDP and Horovod settings")
    problem.pattern.require_plan(plan)
    plan.validate(problem.profile)
    return simulate(problem, plan, validate=False).iteration_time


def _boundaries(plan: Plan) -> set[int]:
    """Cumulative byte offsets where the plan's messages end (the last one left out)."""
    return set(np.cumsum(plan.message_bytes)[:-1].tolist())


def _pick(trials: list[tuple[float, int, Any, Any]]) -> tuple[float, int, Any, Any]:
    """The fastest trial; within the tie tolerance, the closest to the plan, then the smaller knob."""
    best = min(t[0] for t in trials)
    near = [t for t in trials if t[0] <= best + _TIE * abs(best)]
    return min(near, key=lambda t: (t[1], t[2]))


def shortest_megabytes(low: int, high: int) -> float | None:
    """The shortest decimal ``m`` (fewest digits after the point) with
    ``low < int(m * 2**20) <= high``, as torch turns MiB into bytes; ``None`` if none has
    up to 9 decimals.

    >>> shortest_megabytes(0, 2 * MiB), shortest_megabytes(MiB + 100, MiB + 600)
    (1.0, 1.0001)
    """
    for digits in range(10):
        scale = 10 ** digits
        m = math.ceil((low + 1) / MiB * scale) / scale
        for candidate in (m, m + 1 / scale):
            if low < int(candidate * MiB) <= high:
                return float(round(candidate, digits))
    return None


def plan_bucket_caps(profile: Profile, plan: Plan) -> tuple[float, ...] | None:
    """A ``bucket_cap_mb_list`` (MiB per bucket) whose buckets, as torch's DDP builds them
    (:func:`~fusionopt.solvers.baselines.ddp_buckets`), are the plan's messages; None
    when no list makes them (a partition plan, messages out of DDP's order, dtypes DDP keeps
    apart)."""
    if not plan.is_fusion(profile):
        return None
    caps = []
    for k, message in enumerate(plan.messages):
        sizes = [int(profile.sizes[c.tensor]) for c in message.chunks]
        total = sum(sizes)
        before = total - sizes[-1]                 # the bucket must not close earlier
        high = total if k < len(plan.messages) - 1 else max(total, before + 1)
        m = shortest_megabytes(before, high)
        if m is None:
            return None
        caps.append(m)
    if ddp_buckets(profile, bucket_cap_mb_list=caps) != plan.groups():
        return None                                # dtypes DDP keeps in separate buckets
    return tuple(caps)


def _single_caps(problem: Problem, plan: Plan) -> list[float]:
    """Single caps to try (MiB): each message size of the plan as its shortest decimal
    that yields the same buckets, and a few round numbers."""
    profile = problem.profile
    tried: dict[tuple[tuple[int, ...], ...], float] = {}
    sizes = sorted({int(b) for b in plan.message_bytes})
    for size in sizes:
        target = ddp_buckets(profile, bucket_cap_mb=size / MiB)
        for digits in range(10):
            m = round(size / MiB, digits)
            if m > 0 and int(m * MiB) >= 1 and ddp_buckets(profile, bucket_cap_mb=m) == target:
                break
        else:
            m = size / MiB
        tried.setdefault(tuple(map(tuple, target)), m)
    for m in DDP_CAP_CANDIDATES_MB:
        tried.setdefault(tuple(map(tuple, ddp_buckets(profile, bucket_cap_mb=m))), float(m))
    return sorted(tried.values())


def _powersgd_state(hook: PowerSGD) -> str:
    """torch's ``PowerSGDState`` of ``hook``, as Python."""
    return (f"{POWERSGD_MODULE}.PowerSGDState(process_group=None, matrix_approximation_rank={hook.rank}, "
            f"min_compression_rate={hook.min_compression_rate!r}, start_powerSGD_iter={hook.start_iter}, "
            f"use_error_feedback={hook.use_error_feedback}, warm_start={hook.warm_start})")


def ddp_settings(problem: Problem, plan: Plan, *, min_gain: float = MIN_GAIN,
                 powersgd: PowerSGD | None = None) -> DDPSettings:
    """PyTorch DDP settings for ``plan``, each judged by the buckets torch builds from it;
    torch's defaults where no setting is predicted at least ``min_gain`` faster (a fraction
    of their ``T``; :data:`MIN_GAIN`).

    MODEL.md section 5, ``alpha = 3 ms``: the DP sends t3 (2 MB) alone, then t2 (1 MB) and
    t1 (4 MB) together. A bucket closes once it *reaches* its cap, so the first cap lies in
    ``(0, 2e6]`` bytes and the second in ``(1e6, 5e6]``: 1 MiB (1,048,576 B) fits both. The
    default layout (1 MiB first, then 25 MiB) is the same plan here, so the list gains
    nothing and the advice is to keep DDP's defaults.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> s = ddp_settings(problem, solve(problem, "dp").plan)
    >>> s.bucket_cap_mb_list, s.kept_defaults, s.arguments, [list(b) for b in s.buckets]
    ((1.0, 1.0), True, {}, [[2], [1, 0]])
    >>> round(s.iteration_time * 1e3, 9), s.bucket_cap_mb, round(s.find_unused_iteration_time * 1e3, 9)
    (17.0, None, 19.0)

    With ``alpha = 1 ms`` the DP sends each tensor alone: 14 ms against the defaults' 15 ms,
    6.7% faster, which clears :data:`MIN_GAIN`.

    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> s = ddp_settings(problem, solve(problem, "dp").plan)
    >>> s.arguments, round(s.iteration_time * 1e3, 9), round(s.default_iteration_time * 1e3, 9)
    ({'bucket_cap_mb_list': [1.0, 0.1, 1.0]}, 14.0, 15.0)

    With ``powersgd`` (a :class:`~fusionopt.cost.PowerSGD`), the job registers torch's
    ``powerSGD_hook``: ``plan`` is a grouping of ``powersgd.priced(problem)`` (the DP's on it,
    say), DDP builds every layout from the gradients' bytes, as it does under the hook, and
    each layout's ``T`` is of a step once the hook compresses, judged on the priced problem.
    ``plain_iteration_time`` is DDP's defaults without the hook, for the job that leaves it
    out. Here (``alpha = 1 ms``, 1 ms of backward a tensor) the hook sends the 4 MiB and 1 MiB
    weights as 32 and 20 kB of factors and pays three startups a bucket: DDP's defaults (the
    bias and the 1 MiB weight in the first bucket, ready at 2 ms, the 4 MiB weight on its own)
    end their second bucket at 8.054 ms; one bucket of all three, ready at 3 ms, ends at 6.054
    ms, and a list of one 2 MiB cap builds it. Without the hook the defaults take 12.244 ms.

    >>> from fusionopt.cost import PowerSGD
    >>> prof = Profile.from_arrays([4194304, 1048576, 1024], [1e-3] * 3, [1e-3] * 3, ["w2", "w1", "b"],
    ...                            shapes=[(1024, 1024), (256, 1024), (256,)])
    >>> hook = PowerSGD(rank=4)
    >>> problem = Problem(prof, AlphaBeta(1e-3, 1e-9))
    >>> s = ddp_settings(problem, solve(hook.priced(problem), "dp").plan, powersgd=hook)
    >>> s.arguments, [list(b) for b in s.buckets]
    ({'bucket_cap_mb_list': [2.0]}, [[2, 1, 0]])
    >>> [round(t * 1e3, 6) for t in (s.iteration_time, s.default_iteration_time, s.plain_iteration_time)]
    [9.054272, 11.054272, 12.243904]
    >>> s.hook
    'torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook'

    With the hook as one choice per bucket (``Problem(..., compressor=hook)``) the DP sends the
    bias alone as it is, ready at 1 ms and done at 2.001 ms, and both weights through the
    hook, ready at 3 ms: three 1 ms startups and 53,248 B of factors, done at 6.053 ms. DDP's
    defaults send the bias and the 1 MiB weight as they are (2.050 ms, cheaper than the hook's
    3.022 ms), done at 4.050 ms, then the 4 MiB weight through the hook (3.033 ms), done at
    7.082 ms. A list builds the plan, and the hook registered is the wire hook with the
    weights ``through`` it.

    >>> s = ddp_settings(Problem(prof, AlphaBeta(1e-3, 1e-9), compressor=hook),
    ...                  solve(Problem(prof, AlphaBeta(1e-3, 1e-9), compressor=hook), "dp").plan)
    >>> s.arguments, [list(b) for b in s.buckets], s.through_names
    ({'bucket_cap_mb_list': [0.0001, 2.0]}, [[2], [1, 0]], ('w1', 'w2'))
    >>> [round(t * 1e3, 6) for t in (s.iteration_time, s.default_iteration_time)]
    [9.053248, 10.082368]
    >>> s.hook.startswith("fusionopt.integrations.wire_comm_hook([[0, 'fp32']], powersgd=torch.distributed")
    True
    """
    min_gain = check_min_gain(min_gain)
    compressor = problem.compressor if isinstance(problem, Problem) else None
    if compressor is not None and powersgd is not None:
        raise ValueError(f"powersgd= puts torch's hook on every bucket, and this problem sends each message through "
                         f"{compressor.name} or not as it chooses: give one of the two")
    if compressor is not None and not isinstance(compressor, PowerSGD):
        raise ValueError(f"ddp_settings sends buckets through torch's PowerSGD hook, not compressor {compressor.name!r}")
    judge = problem
    if powersgd is not None:
        if not isinstance(powersgd, PowerSGD):
            raise ValueError(f"powersgd must be a PowerSGD, got {type(powersgd).__name__}")
        judge = powersgd.priced(problem)
    plan_time = _check(judge, plan)
    profile = problem.profile
    if powersgd is not None:
        powersgd.require_buckets(plan, judge.profile, "the plan")
        plan = Plan.from_groups(profile, plan.groups())       # the same buckets, in the gradients' bytes
    target = _boundaries(plan)

    def timed(**options: Any) -> tuple[float, list[list[int]]]:
        buckets = ddp_buckets(profile, **options)
        layout = Plan.from_groups(judge.profile, buckets)
        return simulate(judge, layout, validate=False).iteration_time, buckets

    default_time, default_buckets = timed()
    plain_time = None if powersgd is None else \
        simulate(problem, Plan.from_groups(profile, default_buckets), validate=False).iteration_time
    exact = plan_bucket_caps(problem.profile, plan)  # its layout is the plan: T is the plan's
    caps = _single_caps(problem, plan)
    trials = []
    for m in caps:
        t, buckets = timed(bucket_cap_mb=m)
        trials.append((t, len(_boundaries(Plan.from_groups(profile, buckets)) ^ target), m, buckets))
    cap_time, _, cap, cap_buckets = _pick(trials)
    if not gains_enough(cap_time, default_time, min_gain):
        cap, cap_time, cap_buckets = None, default_time, default_buckets
    kept = not gains_enough(plan_time if exact is not None else cap_time, default_time, min_gain)
    if kept:
        recommended: dict[str, Any] = {}
        buckets = default_buckets
    elif exact is not None:
        recommended = {"bucket_cap_mb_list": list(exact)}
        buckets = plan.groups()
    else:
        recommended = {} if cap is None else {"bucket_cap_mb": cap}
        buckets = cap_buckets
    unused_time, _ = timed(find_unused_parameters=True, **recommended)
    through: tuple[str, ...] = ()
    if compressor is not None:
        ways = problem.message_encodings([int(profile.sizes[list(b)].sum()) for b in buckets],
                                         [list(b) for b in buckets])
        through = tuple(profile.names[i] for b, way in zip(buckets, ways) if way == compressor.name for i in b)
    cost = problem.cost
    unit, padding = None, ()
    if isinstance(cost, Aligned) and cost.padded:
        unit = cost.unit
        padding = tuple(int(p) for p in cost.padding([int(profile.sizes[list(b)].sum()) for b in buckets]))
    return DDPSettings(
        bucket_cap_mb_list=exact,
        bucket_cap_mb=cap,
        cap_iteration_time=cap_time,
        default_iteration_time=default_time,
        buckets=tuple(tuple(b) for b in buckets),
        plan_iteration_time=plan_time,
        find_unused_iteration_time=unused_time,
        candidates=len(caps),
        min_gain=min_gain,
        alignment_unit=unit,
        padding=padding,
        powersgd=powersgd,
        plain_iteration_time=plain_time,
        wire=wire_choice(problem),
        exact_names=tuple(profile.names[i] for i in problem.exact_tensors),
        compressor=compressor,
        through_names=through,
    )


def wire_choice(problem: Problem) -> tuple[tuple[int, str], ...] | None:
    """The encoding of a message of the problem's cost by its fp32 bytes, as
    ``((from_bytes, encoding), ...)`` starting from 0 (None: a cost without encodings): one
    step for :class:`~fusionopt.cost.Encoded`; for :class:`~fusionopt.cost.Cheapest`, a step
    at each of its :func:`~fusionopt.cost.crossovers` up to the profile's bytes, each the
    least whole number of bytes that takes the new encoding.

    >>> from fusionopt.cost import FP16, FP32, AlphaBeta
    >>> from fusionopt.model import Profile
    >>> link = AlphaBeta(25e-6, 0.8e-9)
    >>> wire_choice(Problem(Profile.from_arrays([4e6], [0.0], [1e-3]),
    ...                     Cheapest(link, [FP32, FP16.with_costs(seconds_per_message=40e-6)])))
    ((0, 'fp32'), (100001, 'fp16'))
    >>> wire_choice(Problem(Profile.from_arrays([4e6], [0.0], [1e-3]), Cheapest(link, [FP32, FP16])))  # free casts
    ((0, 'fp16'),)
    """
    cost = problem.cost
    if isinstance(cost, Encoded):
        return ((0, cost.encoding.name),)
    if not isinstance(cost, Cheapest):
        return None
    steps = [(0, cost.choose(1.0)[0])]          # a message has a byte at least (at 0 every encoding ties)
    for size in crossovers(cost.cost, cost.encodings, upto=max(problem.profile.total_bytes, 1)):
        start = max(int(math.ceil(size)), steps[-1][0] + 1)
        name = cost.choose(float(start))[0]
        while start - 1 > steps[-1][0] and cost.choose(float(start - 1))[0] == name:
            start -= 1                                   # the least whole size that takes it
        if name != steps[-1][1]:
            steps.append((start, name))
    return tuple(steps)


def _thresholds(plan: Plan) -> list[int]:
    sizes = sorted({int(b) for b in plan.message_bytes})
    if len(sizes) > HOROVOD_MAX_THRESHOLDS:
        picks = np.linspace(0, len(sizes) - 1, HOROVOD_MAX_THRESHOLDS).round().astype(int)
        sizes = [sizes[k] for k in sorted(set(picks.tolist()))]
    defaults = {int(threshold) for _, threshold in HOROVOD_DEFAULTS.values()}
    return sorted(set(sizes) | defaults)


def horovod_settings(problem: Problem, plan: Plan, *, backend: str = "nccl",
                     min_gain: float = MIN_GAIN) -> HorovodSettings:
    """Horovod's fusion threshold and cycle time closest to ``plan``, with its predicted ``T``;
    Horovod's current defaults where no pair is predicted at least ``min_gain`` faster.

    The grid: the plan's distinct message sizes (thinned to 16 quantiles when there are
    more) and Horovod's 64 and 128 MiB as thresholds, times cycle times of 0.1 to 10 ms;
    each pair is simulated through the ``horovod`` model under ``backend`` (``"nccl"``: GPU
    behaviour, a tick every cycle; ``"gloo"``/``"mpi"``: a cycle waits for its collectives)
    and the fastest kept.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> s = horovod_settings(problem, solve(problem, "dp").plan)
    >>> s.iteration_time <= s.default_iteration_time
    True
    >>> sorted(s.environment)
    ['HOROVOD_CYCLE_TIME', 'HOROVOD_FUSION_THRESHOLD']
    """
    min_gain = check_min_gain(min_gain)
    plan_time = _check(problem, plan)
    target = _boundaries(plan)
    thresholds = _thresholds(plan)
    default_cycle, default_threshold = HOROVOD_DEFAULTS["current"]
    trials = []
    for threshold in thresholds:
        for cycle_ms in HOROVOD_CYCLE_TIMES_MS:
            result = solve(problem, "horovod", cycle_time=cycle_ms / 1e3, fusion_threshold_bytes=threshold,
                           backend=backend)
            distance = len(_boundaries(result.plan) ^ target)
            trials.append((result.iteration_time, distance, (threshold, cycle_ms), result))
    default = solve(problem, "horovod", cycle_time=default_cycle, fusion_threshold_bytes=default_threshold,
                    backend=backend)
    t, _, (threshold, cycle_ms), result = _pick(trials)
    kept = not gains_enough(t, default.iteration_time, min_gain)
    if kept:
        t, threshold, cycle_ms, result = default.iteration_time, int(default_threshold), default_cycle * 1e3, default
    return HorovodSettings(
        backend=backend,
        fusion_threshold_bytes=threshold,
        cycle_time_ms=cycle_ms,
        messages=result.num_messages,
        iteration_time=t,
        plan_iteration_time=plan_time,
        default_iteration_time=default.iteration_time,
        candidates=len(trials),
        kept_defaults=kept,
        compression=result.stats["compression"],
    )
