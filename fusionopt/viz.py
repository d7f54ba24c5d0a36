"""Pictures of schedules: timelines (Gantt charts) of one plan and comparison plots of sweeps.

Pure helpers compute what is drawn and are tested on their own:
:func:`timeline_bars` (every bar of a Gantt chart: the compute pieces, each message or
collective on its channel, the exposed communication), :func:`memory_steps` (the unsharded
bytes over a fully sharded step) and :func:`sweep_series` (one line per method of a sweep). :func:`plot_timeline` and :func:`plot_sweep` draw them with matplotlib and return
the figure; :func:`save_timeline` and :func:`save_sweep` write PNG or SVG files.

matplotlib is imported only inside the drawing functions; without it they raise an
``ImportError`` naming the ``plot`` extra (``pip install 'fusionopt[plot]'``). The pure
helpers need numpy only.

Times in the helpers' results are seconds from the start of the backward (of the forward on
a fully sharded step), as in :class:`~fusionopt.model.timeline.Timeline`; the pictures show
milliseconds.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model.decoupled_plan import ALL_GATHER, KINDS, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model.decoupled_program import decoupled_program
from fusionopt.model.plan import Plan
from fusionopt.model.pattern import Pattern, require_pattern
from fusionopt.model.problem import Problem
from fusionopt.model.ps_plan import PSPlan
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.model.sharded_program import sharded_program
from fusionopt.model.timeline import Timeline
from fusionopt.model.simulator import compute_pieces, simulate
from fusionopt.model._io import write_bytes_atomic

__all__ = [
    "Bar", "IMAGE_FORMATS", "SWEEP_METRICS", "image_format", "memory_steps", "plot_sweep", "plot_timeline",
    "save_sweep", "save_timeline", "sweep_series", "timeline_bars",
]

IMAGE_FORMATS = ("png", "svg")
SWEEP_METRICS = ("scaling_efficiency", "throughput", "iteration_time")

# The compute stream, simulated again from the problem and plan, must agree with the
# timeline drawn to this relative tolerance: the event-driven simulator that records it
# stops each task within 1e-13 of the time scale, the plain model's recursion rounds alike.
_MATCH_RTOL = 1e-6

_KIND_COLORS = {
    "backward": "#4c72b0",
    "forward": "#55a868",
    "update": "#9a9a9a",
    "pack": "#dd8452",
    "post_backward": "#c8a2c8",
    "update_lump": "#6f6f6f",
    "host_overhead": "#d9c27a",
    "exposed": "#fbe3e3",
}
_ROW_COLORS = {                      # two alternating shades, so neighbouring messages part
    "message": ("#8172b3", "#b7aee0"),
    "push": ("#8172b3", "#b7aee0"),
    "pull": ("#2a8fa8", "#86c8da"),
    "reduce-scatter": ("#8172b3", "#b7aee0"),
    "all-gather": ("#da8b2f", "#f2c48d"),
    "all-reduce": ("#937860", "#c9b29b"),
}
_MEMORY_COLOR = "#2a8fa8"
_EXPOSED_EDGE = "#c44e52"
_KIND_NAMES = {
    "backward": "backward",
    "forward": "next forward",
    "update": "optimiser update",
    "pack": "packing (copy)",
    "message": "message",
    "push": "push",
    "pull": "pull",
    "post_backward": "post-backward work",
    "update_lump": "optimiser (not per tensor)",
    "host_overhead": "host overhead",
    "reduce-scatter": "reduce-scatter",
    "all-gather": "all-gather",
    "all-reduce": "all-reduce (gradients)",
}
_SHORT_KINDS = {"reduce-scatter": "RS", "all-gather": "AG", "all-reduce": "AR"}


# ============================================================================ timelines
@dataclass(frozen=True)
class Bar:
    """One bar of a timeline chart.

    Attributes
    ----------
    row : str
        ``"compute"``, ``"channel"`` (``"channel 1"`` .. ``"channel K"`` with ``K > 1``
        concurrent channels), ``"push"`` and ``"pull"`` on a parameter server, or
        ``"all-gather channel"`` and ``"reduce-scatter channel"`` on a fully sharded step
        with two channels.
    start, end : float
        Seconds from the start of the backward (of the forward on a fully sharded step).
    kind : str
        ``"backward"``, ``"forward"``, ``"update"``, ``"pack"`` (packing a fused message on
        the compute stream), a step part (``"post_backward"``, ``"update_lump"``,
        ``"host_overhead"``), ``"message"``, ``"push"``, ``"pull"``, a collective of a
        decoupled or fully sharded step (``"reduce-scatter"``, ``"all-gather"``, or
        ``"all-reduce"`` for the gradients of a decoupled plan that reduces with
        all-reduces), or ``"exposed"``: an interval in which the compute stream waits for
        communication.
    label : str
        What the bar says when it is wide enough: ``"m3: t12-t17"`` is message 3 (channel
        order, from 0) carrying tensors 12 to 17 (forward index, from 0); ``"RS2: t5-t7"``
        a decoupled plan's reduce-scatter message 2, ``"AG u3: t9-t12"`` a fully sharded
        step's all-gather of unit 3 (``g3``: reduce-scatter group 3).
    short : str
        A shorter label for narrower bars (the number of tensors, or the size).
    index : int or None
        The message's index in its channel's order (a collective's in the step's channel
        order), or the tensor of a compute piece.
    tensor : int or None
        The first tensor (smallest forward index) the bar concerns.
    fused : bool
        A message carrying more than one tensor.
    """

    row: str
    start: float
    end: float
    kind: str
    label: str = ""
    short: str = ""
    index: int | None = None
    tensor: int | None = None
    fused: bool = False

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


def _resolve(source: Any, problem: Problem, plan: Any, *, fn: str) -> tuple[Timeline, Any, str | None]:
    """The timeline, the plan and the method name (if known) behind ``source``."""
    if not isinstance(problem, Problem):
        raise ValueError(f"{fn} needs the Problem the plan was simulated on (its profile gives the compute "
                         f"stream), got {type(problem).__name__}")
    method = None
    if isinstance(source, tuple(Pattern.named(name).plan_type for name in Pattern.names())):
        if plan is not None:
            raise ValueError(f"{fn}: give the plan once, as the first argument or as plan=, not both")
        return simulate(problem, source), source, None
    if isinstance(source, Timeline):
        timeline = source
        if plan is None:
            raise ValueError(f"{fn}: a Timeline does not record which tensors each message carries; "
                             "pass plan= (or pass the Result or the Plan instead)")
    elif hasattr(source, "plan") and hasattr(source, "timeline") and hasattr(source, "method"):
        if plan is not None and plan is not source.plan:
            raise ValueError(f"{fn}: the Result carries its own plan; leave plan= out")
        plan, method = source.plan, source.method
        timeline = source.timeline if source.timeline is not None else simulate(problem, plan)
    else:
        raise ValueError(f"{fn} draws a Result, a Plan, a PSPlan, a DecoupledPlan, a ShardedPlan or a Timeline "
                         f"(with plan=), got {type(source).__name__}")
    pattern = problem.pattern
    if not isinstance(plan, pattern.plan_type):
        raise ValueError(f"{fn}: {pattern.article()} {pattern.words} problem needs a {pattern.plan_type.__name__}, "
                         f"got {type(plan).__name__}")
    if isinstance(plan, (DecoupledPlan, ShardedPlan)):
        sizes = np.asarray(_program(problem, plan).nbytes, dtype=np.int64)
    else:
        sizes = (plan.push if isinstance(plan, PSPlan) else plan).message_bytes
    if len(sizes) != len(timeline.message_start) or not np.array_equal(sizes, timeline.message_bytes):
        raise ValueError(f"{fn}: the plan's messages ({len(sizes)}, {int(sizes.sum())} B) "
                         f"differ from the timeline's ({len(timeline.message_start)}, "
                         f"{int(timeline.message_bytes.sum())} B): they do not belong together")
    return timeline, plan, method


def _program(problem: Problem, plan: DecoupledPlan | ShardedPlan):
    """The step program of a decoupled or fully sharded plan: its collectives in channel order."""
    if isinstance(plan, ShardedPlan):
        return sharded_program(problem, plan)
    return decoupled_program(problem, plan)


def _tensor_text(message, sizes: np.ndarray) -> tuple[str, str, bool]:
    """The tensor part of a message label, its short form, and whether it is fused."""
    return _tensors_text(message.tensors, message.nbytes, len(message.chunks), sizes)


def _tensors_text(tensors: Sequence[int], nbytes: int, pieces: int, sizes: np.ndarray) -> tuple[str, str, bool]:
    """The tensor part of a label of ``nbytes`` in ``pieces`` byte ranges of ``tensors``, its
    short form, and whether it is fused."""
    tensors = sorted(set(int(i) for i in tensors))
    size = _format_bytes(nbytes)
    if not tensors:
        return "nothing", size, False
    if len(tensors) == 1:
        (i,) = tensors
        whole = nbytes == int(sizes[i]) and pieces == 1
        return (f"t{i}" if whole else f"part of t{i}"), size, False
    if tensors[-1] - tensors[0] + 1 == len(tensors):
        text = f"t{tensors[0]}-t{tensors[-1]}"
    else:
        text = f"{len(tensors)} tensors in t{tensors[0]}-t{tensors[-1]}"
    return text, f"{len(tensors)} tensors", True


def _format_bytes(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def _message_bars(plan: Plan, start: np.ndarray, end: np.ndarray, sizes: np.ndarray, *, kind: str,
                  rows: Sequence[str]) -> list[Bar]:
    """One bar per message; with several rows (channels), each message on the first row free
    at its start (at most ``len(rows)`` are in flight at once)."""
    free = [-math.inf] * len(rows)
    bars = []
    for k, message in enumerate(plan.messages):
        s, e = float(start[k]), float(end[k])
        lane = next((j for j, f in enumerate(free) if f <= s), int(np.argmin(free)))
        free[lane] = e
        text, short, fused = _tensor_text(message, sizes)
        if message.release > 0.0:            # the framework posted it then (Horovod's tick)
            text += f", posted at {1e3 * message.release:.4g} ms"
        bars.append(Bar(rows[lane], s, e, kind, label=f"m{k}: {text}", short=short, index=k,
                        tensor=min(message.tensors), fused=fused))
    return bars


def _channel_rows(problem: Problem) -> list[str]:
    """The rows of the communication, top to bottom."""
    if problem.pattern.is_a("ps"):
        return ["push", "pull"]
    if problem.pattern.is_a("fully-sharded") and problem.pattern.channels == "two":
        return [f"{KINDS[ALL_GATHER]} channel", f"{KINDS[REDUCE_SCATTER]} channel"]
    if problem.channels > 1:
        return [f"channel {j + 1}" for j in range(problem.channels)]
    return ["channel"]


def _collective_bars(problem: Problem, plan: DecoupledPlan | ShardedPlan, timeline: Timeline) -> list[Bar]:
    """One bar per collective of a decoupled or fully sharded step, in channel order, of the
    kind the timeline reports; on a fully sharded step with two channels, the all-gathers on
    one row and the reduce-scatters on the other."""
    program = _program(problem, plan)
    kinds = timeline.message_collectives(getattr(plan, "reduce_with", "reduce_scatter"))
    rows = _channel_rows(problem)
    sharded = isinstance(plan, ShardedPlan)
    grouped = sharded and plan.reduce_bounds is not None
    again = set(program.roles.get("regather", ())) if sharded else set()     # a unit's backward all-gathers
    sizes = problem.profile.sizes
    bars = []
    for c, (spec, kind) in enumerate(zip(program.collectives, kinds)):
        text, short, fused = _tensors_text(spec.tensors, spec.nbytes, len(spec.chunks), sizes)
        if sharded:                       # named by the unit (or reduce-scatter group) it carries
            carried = f"{'g' if grouped and spec.kind == REDUCE_SCATTER else 'u'}{spec.unit}"
            name, short = f"{_SHORT_KINDS[kind]} {carried}{' (backward)' if c in again else ''}", carried
        else:                             # by its index among the plan's messages of its kind
            name = f"{_SHORT_KINDS[kind]}{spec.unit}"
        if spec.release > 0.0:
            text += f", posted at {1e3 * spec.release:.4g} ms"
        row = rows[0] if len(rows) == 1 else f"{KINDS[spec.kind]} channel"
        bars.append(Bar(row, float(timeline.message_start[c]), float(timeline.message_end[c]), kind,
                        label=f"{name}: {text}", short=short, index=c, tensor=min(spec.tensors, default=0),
                        fused=fused))
    return bars


def memory_steps(source: Any, problem: Problem, *, plan: ShardedPlan | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of unsharded parameters and gradients whole over a fully sharded step: the
    simulation's memory step function (:func:`~fusionopt.model.sharded_timing.simulate_sharded`),
    from 0 to the iteration time ``T``.

    Parameters
    ----------
    source : Result, ShardedPlan or Timeline
        As for :func:`timeline_bars`.
    problem : Problem
        A fully sharded problem.
    plan : ShardedPlan, optional
        The plan of a ``Timeline`` source.

    Returns
    -------
    (ndarray, ndarray)
        ``times`` (seconds from the start of the forward, ascending, the first 0 and the last
        ``T``) and ``nbytes`` (int64): ``nbytes[k]`` bytes are whole from ``times[k]`` until
        ``times[k + 1]``; its largest value is the timeline's ``peak_memory``.

    Examples
    --------
    MODEL.md 8.2's worked check (one unit, resharded): the parameters (7 MB) are whole from the
    all-gather at 0 to the end of the forward at 11 ms and again from the second all-gather
    at 11 ms to the end of the backward at 25 ms; the gradients from the backward's start at
    19 ms to the end of the reduce-scatter at 33 ms: 14 MB at the peak.

    >>> from fusionopt.model import AlphaBeta, Problem, Profile
    >>> from fusionopt.model.sharded import FullySharded
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> problem = Problem(profile, pattern=FullySharded(half, half))
    >>> times, nbytes = memory_steps(ShardedPlan([0, 3]), problem)
    >>> (times * 1e3).round(9).tolist(), nbytes.tolist()
    ([0.0, 11.0, 19.0, 25.0, 33.0], [7000000, 7000000, 14000000, 7000000, 0])
    """
    require_pattern(problem, "fully-sharded", "memory_steps")
    timeline, _, _ = _resolve(source, problem, plan, fn="memory_steps")
    times = timeline.memory_time.tolist()
    levels = timeline.memory_bytes.tolist()
    if not times or times[0] > 0.0:
        times, levels = [0.0] + times, [0] + levels
    T = timeline.iteration_time
    if times[-1] < T:
        times, levels = times + [T], levels + [levels[-1]]
    return np.asarray(times, dtype=np.float64), np.asarray(levels, dtype=np.int64)


def timeline_bars(source: Any, problem: Problem, *, plan: Any = None) -> list[Bar]:
    """Every bar of the timeline chart of a plan: compute pieces, messages, exposed waits.

    The compute stream (row ``"compute"``) runs the backward of tensors ``n-1 .. 0`` from
    time 0, then the optimiser updates and the next step's forward: all after the last
    message under ``sync="barrier"``, tensor by tensor as each gradient is reduced under
    ``"layerwise"`` (MODEL.md section 4). With contention, compute runs ``kappa`` times
    slower while a message is in flight; with packing on the compute stream, the packing
    of each fused message follows the backward that makes it ready; on a parameter server
    with partitioned compute, backward and forward pieces follow the push and pull chunks
    (MODEL.md section 6). The pieces are the model's
    (:func:`~fusionopt.model.simulator.compute_pieces`); their forward starts and end are
    checked against the timeline's ``forward_start`` and ``T``, so that a timeline of
    another problem is refused.

    Messages go on row ``"channel"`` (``"channel 1"`` .. ``"channel K"`` with ``K``
    concurrent channels, each message on the first one free at its start), or on rows
    ``"push"`` and ``"pull"`` on a parameter server; their start and end are the timeline's
    ``message_start`` and ``message_end`` (``pull_start`` and ``pull_end``).

    Bars of kind ``"exposed"`` (row ``"compute"``) are the intervals in which the compute
    stream waits for communication: the gaps between its pieces. In the plain model (no contention, no partitioned
    compute) their widths add up to the timeline's ``exposed = T - (B + F + U)``; with
    contention or compute overheads, ``exposed`` also counts the slowed or extra compute.

    Parameters
    ----------
    source : Result, Plan, PSPlan or Timeline
        What to draw: a solver's :class:`~fusionopt.solvers.result.Result`, a plan (it is
        simulated), or a timeline together with its ``plan``.
    problem : Problem
        The problem the plan is judged on.
    plan : Plan or PSPlan, optional
        The plan of a ``Timeline`` source.

    Returns
    -------
    list of Bar
        Compute bars in stream order (zero-length pieces left out), then the messages in
        channel order (pushes, then pulls), then the exposed waits in time order. Seconds.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``, groups ``{t3}, {t2, t1}`` (0-based ``{2}``,
    ``{1, 0}``): the second message ends at 14 ms, 8 ms after the backward; the forward
    waits for it.

    >>> from fusionopt.model import AlphaBeta, Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> bars = timeline_bars(Plan.from_groups(profile, [[2], [1, 0]]), problem)
    >>> [(b.kind, round(b.start * 1e3, 9), round(b.end * 1e3, 9)) for b in bars if b.row == "compute"]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('backward', 0.0, 1.0), ('backward', 1.0, 3.0), ('backward', 3.0, 6.0),
     ('forward', 14.0, 15.0), ('forward', 15.0, 16.0), ('forward', 16.0, 17.0),
     ('exposed', 6.0, 14.0)]
    >>> [(b.label, round(b.start * 1e3, 9), round(b.end * 1e3, 9)) for b in bars if b.row == "channel"]
    [('m0: t2', 1.0, 6.0), ('m1: t0-t1', 6.0, 14.0)]
    """
    timeline, plan, _ = _resolve(source, problem, plan, fn="timeline_bars")
    profile = problem.profile
    sizes = profile.sizes
    T = timeline.iteration_time
    if isinstance(plan, PSPlan):
        comm = _message_bars(plan.push, timeline.message_start, timeline.message_end, sizes, kind="push", rows=["push"])
        comm += _message_bars(plan.pull, timeline.pull_start, timeline.pull_end, sizes, kind="pull", rows=["pull"])
    elif isinstance(plan, (DecoupledPlan, ShardedPlan)):
        comm = _collective_bars(problem, plan, timeline)
    else:
        comm = _message_bars(plan, timeline.message_start, timeline.message_end, sizes, kind="message",
                             rows=_channel_rows(problem))

    pieces = compute_pieces(problem, plan)
    compute, waits = [], []
    forward_start = np.full(profile.n, math.nan)
    clock = 0.0
    for piece in pieces:
        if piece.start > clock:
            waits.append((clock, piece.start))
        if piece.kind == "forward" and math.isnan(forward_start[piece.tensor]):
            forward_start[piece.tensor] = piece.start
        if piece.end > piece.start:
            compute.append(Bar("compute", piece.start, piece.end, piece.kind, label=profile.names[piece.tensor],
                               index=piece.tensor, tensor=piece.tensor))
        clock = piece.end
    scale = _MATCH_RTOL * max(T, 1e-300)
    if abs(clock - T) > scale or np.max(np.abs(forward_start - timeline.forward_start)) > scale:
        raise ValueError(f"timeline_bars: the compute stream of this problem and plan ends at {clock:.9g} s, the "
                         f"timeline at T = {T:.9g} s: the timeline does not belong to this problem and plan")
    exposed = [Bar("compute", s, e, "exposed", label="exposed", short="exposed")
               for s, e in waits if e - s > 1e-9 * T]
    return compute + comm + exposed


# ============================================================================ sweeps
_METRIC_LABELS = {          # (axis label, figure title)
    "scaling_efficiency": ("scaling efficiency", "Scaling efficiency (B + F + U) / T against workers"),
    "throughput": ("throughput (one-worker steps)", "Throughput in one worker's steps, P (B + F + U + W) / T, against workers"),
    "iteration_time": ("iteration time T (ms)", "Iteration time T against workers"),
}
_VARIANT_KEYS = ("device", "batch", "precision", "compute", "optimizer", "algorithm", "sync")


def _is_error(record: Mapping[str, Any]) -> bool:
    return str(record.get("status", "")).upper() == "ERROR"


def _check_metric(metric: str) -> None:
    if metric not in SWEEP_METRICS:
        raise ValueError(f"unknown metric {metric!r}: choose one of {', '.join(repr(m) for m in SWEEP_METRICS)}")


def _select(records: Iterable[Mapping[str, Any]], model: str | None, network: str | None) -> list[Mapping[str, Any]]:
    records = list(records)
    for r in records:
        if not isinstance(r, Mapping):
            raise ValueError(f"a sweep record is a mapping (dict), got {type(r).__name__}")
        for key in ("model", "network", "method", "workers"):
            if key not in r:
                raise ValueError(f"sweep record without {key!r}: {dict(r)!r}")
    chosen = []
    for key, wanted in (("model", model), ("network", network)):
        if wanted is None:
            continue
        values = sorted({str(r[key]) for r in records})
        if str(wanted) not in values:
            raise ValueError(f"no sweep record has {key} {wanted!r}: the records hold {', '.join(map(repr, values))}")
    for r in records:
        if model is not None and str(r["model"]) != str(model):
            continue
        if network is not None and str(r["network"]) != str(network):
            continue
        chosen.append(r)
    return chosen


def _panels(records: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The (model, network) pairs in order of first appearance."""
    return list(dict.fromkeys((str(r["model"]), str(r["network"])) for r in records))


def sweep_series(records: Iterable[Mapping[str, Any]], metric: str = "scaling_efficiency", *,
                 model: str | None = None, network: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One line per method of a sweep: the workers and the metric's values.

    Parameters
    ----------
    records : iterable of dict
        Rows of a sweep (``fusionopt.sweep.read_results``), each with at least ``model``,
        ``network``, ``method``, ``workers``, ``status`` and the metric. Records with status
        ``"ERROR"`` carry no numbers and are skipped.
    metric : {"scaling_efficiency", "throughput", "iteration_time"}
        The value drawn: ``(B + F + U) / T`` (a fraction), the throughput in one worker's steps
        ``P (B + F + U) / T``, or ``T`` in seconds.
    model, network : str, optional
        Keep only the records of this model and network. Without them, the records must
        hold a single model and a single network (``ValueError`` lists the choices).

    Returns
    -------
    dict
        ``{label: (workers, values)}``, labels in order of first appearance, workers
        ascending (int), values as float. The label is the method; when the records differ
        in ``device``, ``batch``, ``precision``, ``compute``, ``optimizer``, ``algorithm`` or
        ``sync``, those values follow it in parentheses, so that every line is one setting.

    Examples
    --------
    >>> records = [
    ...     {"model": "resnet50", "network": "10gbe", "method": "dp", "workers": 8, "status": "OPTIMAL",
    ...      "scaling_efficiency": 0.9},
    ...     {"model": "resnet50", "network": "10gbe", "method": "dp", "workers": 4, "status": "OPTIMAL",
    ...      "scaling_efficiency": 0.95},
    ...     {"model": "resnet50", "network": "10gbe", "method": "wfbp", "workers": 4, "status": "ERROR",
    ...      "scaling_efficiency": None},
    ... ]
    >>> {k: (w.tolist(), v.tolist()) for k, (w, v) in sweep_series(records).items()}
    {'dp': ([4, 8], [0.95, 0.9])}
    >>> sweep_series(records + [dict(records[0], model="vgg16")])
    Traceback (most recent call last):
    ...
    ValueError: the records hold 2 models: 'resnet50', 'vgg16'; choose one with model=
    """
    _check_metric(metric)
    chosen = _select(records, model, network)
    for key in ("model", "network"):
        values = list(dict.fromkeys(str(r[key]) for r in chosen))
        if len(values) > 1:
            raise ValueError(f"the records hold {len(values)} {key}s: {', '.join(map(repr, values))}; "
                             f"choose one with {key}=")
    return _series(chosen, metric)


def _series(records: list[Mapping[str, Any]], metric: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    valid = [r for r in records if not _is_error(r)]
    varying = [k for k in _VARIANT_KEYS if len({str(r.get(k)) for r in valid}) > 1]
    points: dict[str, dict[int, float]] = {}
    for r in valid:
        label = str(r["method"])
        if varying:
            label += " (" + ", ".join(f"{k} {r.get(k)}" for k in varying) + ")"
        try:
            workers = int(r["workers"])
            # Records of older sweeps called the throughput "speedup".
            value = float(r[metric] if metric != "throughput" or "throughput" in r else r["speedup"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"sweep record of {r['method']!r} at {r['workers']!r} workers (status "
                             f"{r.get('status')!r}): {metric} is {r.get(metric)!r}, not a number") from None
        line = points.setdefault(label, {})
        if workers in line:
            raise ValueError(f"two sweep records of {label!r} at {workers} workers ({r['model']}, {r['network']}): "
                             "the records differ in a field other than model, network, device, batch, "
                             "precision, compute, optimizer, algorithm and sync")
        line[workers] = value
    out = {}
    for label, line in points.items():
        workers = np.array(sorted(line), dtype=np.int64)
        out[label] = (workers, np.array([line[w] for w in workers.tolist()], dtype=np.float64))
    return out


# ============================================================================ drawing
def _matplotlib():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("fusionopt's plots need matplotlib: pip install 'fusionopt[plot]'") from exc
    return matplotlib


def _new_figure(figsize: tuple[float, float], managed: bool):
    """A figure: through pyplot when the caller gets it back (so ``plt.show()`` works), else
    a bare figure that nothing keeps alive (saving renders it with Agg or the SVG backend,
    whatever the display)."""
    _matplotlib()
    if managed:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize)
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def image_format(path: str | os.PathLike) -> str:
    """The image format of an output file, by its extension: ``"png"`` or ``"svg"``.

    Examples
    --------
    >>> image_format("docs/timeline.SVG")
    'svg'
    >>> image_format("timeline.pdf")
    Traceback (most recent call last):
    ...
    ValueError: timeline.pdf: unknown image format .pdf: write .png or .svg
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in IMAGE_FORMATS:
        raise ValueError(f"{path}: unknown image format {'.' + ext if ext else '(no extension)'}: "
                         "write .png or .svg")
    return ext


def _image_paths(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[tuple[str, str]]:
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths:
        raise ValueError("no output file given: name a .png or .svg file")
    return [(os.fspath(p), image_format(p)) for p in paths]


# Beyond this a figure's PNG runs to gigabytes (and matplotlib runs out of memory).
MAX_DPI = 2400


def _write_figure(fig, paths: list[tuple[str, str]], dpi: float) -> list[str]:
    """Render ``fig`` to each path atomically (a temporary file in the same folder, then
    ``os.replace``)."""
    import matplotlib

    if not (isinstance(dpi, (int, float)) and 0 < dpi <= MAX_DPI):
        raise ValueError(f"dpi must be a number in (0, {MAX_DPI}], got {dpi!r} (a print-quality PNG needs 300)")
    written = []
    for path, ext in paths:
        buffer = io.BytesIO()
        # A fixed hash salt and no date keep an SVG of the same figure byte-identical.
        with matplotlib.rc_context({"svg.hashsalt": "fusionopt"}):
            fig.savefig(buffer, format=ext, dpi=dpi, bbox_inches="tight",
                        metadata={"Date": None} if ext == "svg" else {"Software": None})
        write_bytes_atomic(path, buffer.getvalue())
        written.append(path)
    return written


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.4g}"


def _label_fits(text: str, width_in: float, fontsize: float) -> bool:
    # DejaVu Sans averages about 0.6 em per character; keep a margin on both sides.
    return len(text) * 0.6 * fontsize / 72 + 6 / 72 <= width_in


def plot_timeline(source: Any, problem: Problem, *, plan: Plan | PSPlan | None = None, ax=None,
                  title: str | None = None, label_messages: bool = True, color_by: str = "kind",
                  legend: bool = True, xlim: tuple[float, float] | None = None,
                  figsize: tuple[float, float] | None = None):
    """A Gantt chart of one training step under a plan.

    One row for the compute stream (backward pieces from tensor ``n-1`` down to 0, then the
    next forward, at the times the sync rule gives them) and one row per channel (``push``
    and ``pull`` on a parameter server), each message a bar labelled with its index and the
    tensors it carries (``m3: t12-t17``; the number of tensors or the size when the bar is
    narrow; nothing when it is narrower still). The compute stream's waits for
    communication are cross-hatched in red; the exposed communication ``T - (B + F + U)``
    in ms is written on the widest of them (when it fits) and in the title. Dotted line:
    the end of the backward (``B``, or later when contention, packing or compute overheads
    stretch it); dashed: the iteration time ``T``. The x axis is in ms from the start of
    the backward. What is drawn is :func:`timeline_bars`.

    Parameters
    ----------
    source : Result, Plan, PSPlan or Timeline
        See :func:`timeline_bars`.
    problem : Problem
        The problem the plan is judged on.
    plan : Plan or PSPlan, optional
        The plan of a ``Timeline`` source.
    ax : matplotlib Axes, optional
        Draw into these axes (e.g. one panel of a comparison); default: a new figure.
    title : str, optional
        A first title line; the second always gives the method, ``T``, the exposed time and
        the number of messages.
    label_messages : bool
        Write the labels on the message bars that are wide enough.
    color_by : {"kind", "tensor"}
        Colour bars by what they are (backward, forward, message, ...), or by tensor
        (viridis over the forward index; a message by its first tensor, hatched when it
        fuses several; forward pieces lighter than backward ones).
    legend : bool
        Draw the legend (below the axes).
    xlim : (float, float), optional
        The x axis range in ms (to compare several plans on one scale); default 0 to
        ``1.02 T``.
    figsize : (float, float), optional
        Inches, for a new figure; default 11 wide and 0.6 per row plus 1.6 tall.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new pyplot figure unless ``ax`` is given).

    Raises
    ------
    ImportError
        Without matplotlib (``pip install 'fusionopt[plot]'``).

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> import matplotlib.pyplot as plt
    >>> from fusionopt.model import AlphaBeta, Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> fig = plot_timeline(Plan.from_groups(profile, [[2], [1, 0]]), problem)
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['compute', 'channel']
    >>> plt.close(fig)
    """
    return _timeline_figure(source, problem, plan, ax=ax, managed=True, title=title, label_messages=label_messages,
                            color_by=color_by, legend=legend, xlim=xlim, figsize=figsize)


def _timeline_figure(source, problem, plan, *, ax, managed, title=None, label_messages=True, color_by="kind",
                     legend=True, xlim=None, figsize=None, fn="plot_timeline"):
    if color_by not in ("kind", "tensor"):
        raise ValueError(f"unknown color_by {color_by!r}: choose 'kind' or 'tensor'")
    timeline, plan, method = _resolve(source, problem, plan, fn=fn)
    bars = timeline_bars(timeline, problem, plan=plan)
    rows = ["compute"] + _channel_rows(problem)
    memory_ax = None
    if ax is None:
        gantt = 1.6 + 0.6 * len(rows)
        if problem.pattern.is_a("fully-sharded"):         # the memory step function under the chart
            fig = _new_figure(figsize or (11.0, gantt + 2.2), managed=managed)
            ax, memory_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [gantt - 1.0, 1.4],
                                                                          "hspace": 0.12})
        else:
            fig = _new_figure(figsize or (11.0, gantt), managed=managed)
            ax = fig.add_subplot()
    else:
        _matplotlib()
        fig = ax.figure
    _draw_timeline(ax, bars, rows, timeline, problem, method, title=title, label_messages=label_messages,
                   color_by=color_by, legend=legend, xlim=xlim, under=memory_ax)
    if memory_ax is not None:
        _draw_memory(memory_ax, *memory_steps(timeline, problem, plan=plan), timeline, problem)
    return fig


def _draw_memory(ax, times: np.ndarray, nbytes: np.ndarray, timeline: Timeline, problem: Problem) -> None:
    """The unsharded bytes over the step (MiB against ms), the peak marked, the cap dashed."""
    mib = nbytes / 2**20
    ax.step(1e3 * times, mib, where="post", color=_MEMORY_COLOR, lw=1.2, label="unsharded parameters and gradients")
    ax.fill_between(1e3 * times, mib, step="post", color=_MEMORY_COLOR, alpha=0.18, lw=0)
    peak = timeline.peak_memory / 2**20
    at = float(times[int(np.argmax(nbytes))])
    ax.plot([1e3 * at], [peak], marker="v", color=_MEMORY_COLOR, ms=5, ls="none")
    ax.annotate(f"peak {peak:.4g} MiB", (1e3 * at, peak), xytext=(4, 4), textcoords="offset points", fontsize=8,
                color=_MEMORY_COLOR)
    cap = problem.pattern.memory_cap
    top = peak
    if cap is not None:
        over = timeline.peak_memory > cap
        ax.axhline(cap / 2**20, color=_EXPOSED_EDGE, ls="--", lw=1.0,
                   label=f"memory cap {cap / 2**20:.4g} MiB{': over it' if over else ''}")
        top = max(top, cap / 2**20)
    ax.axvline(1e3 * timeline.iteration_time, color=_EXPOSED_EDGE, ls="--", lw=1.2)
    ax.set_ylim(0, top * 1.5 if top > 0 else 1.0)                 # room for the legend above the peak
    ax.set_ylabel("memory (MiB)", fontsize=9)
    ax.set_xlabel("time from the start of the forward (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncol=2)


def _draw_timeline(ax, bars: list[Bar], rows: list[str], timeline: Timeline, problem: Problem, method: str | None,
                   *, title, label_messages, color_by, legend, xlim, under=None) -> None:
    """The Gantt chart into ``ax``; ``under``: axes drawn below it (the memory), which the
    legend goes below and which carry the x axis' label."""
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    import matplotlib

    profile = problem.profile
    T = timeline.iteration_time
    # The backward ends at B, later with contention, packing on the compute stream or pieces' overheads.
    B = max((b.end for b in bars if b.kind in ("backward", "pack")), default=0.0)
    sharded = problem.pattern.is_a("fully-sharded")          # its step starts with the forward
    plain_backward = not sharded and abs(B - profile.B) <= 1e-9 * max(T, 1e-300)
    left, right = (0.0, 1e3 * T * 1.02) if xlim is None else (float(xlim[0]), float(xlim[1]))
    if not right > left:
        raise ValueError(f"xlim must be (left, right) in ms with left < right, got {xlim!r}")
    span = (right - left) / 1e3                                      # seconds across the axes
    y = {row: len(rows) - 1 - j for j, row in enumerate(rows)}       # first row on top
    height = 0.72
    cmap = matplotlib.colormaps["viridis"]
    top = max(profile.n - 1, 1)
    shade: dict[tuple[str, str], int] = {}
    present: dict[str, Any] = {}

    # Piece boundaries (thin white edges) only where a piece is wide enough to show them.
    fig_width = ax.figure.get_figwidth() * ax.get_position().width
    min_edged = 0.04 / fig_width * span
    for bar in bars:
        if bar.kind == "exposed":
            continue
        if bar.kind in _ROW_COLORS:
            if color_by == "tensor":
                color = cmap(bar.tensor / top)
            else:
                parity = shade.get((bar.row, bar.kind), 0)
                shade[(bar.row, bar.kind)] = parity + 1
                color = _ROW_COLORS[bar.kind][parity % 2]
            style = dict(facecolor=color, edgecolor="black", linewidth=0.4,
                         hatch="///" if color_by == "tensor" and bar.fused else None)
        else:
            edge = bar.duration >= min_edged
            if color_by == "tensor" and bar.kind in ("backward", "forward"):
                color = cmap(bar.tensor / top)
                style = dict(facecolor=color, edgecolor="white" if bar.kind == "backward" else "black",
                             linewidth=0.3 if edge else 0.0, alpha=1.0 if bar.kind == "backward" else 0.55)
            else:
                style = dict(facecolor=_KIND_COLORS[bar.kind], edgecolor="white", linewidth=0.3 if edge else 0.0)
        ax.broken_barh([(1e3 * bar.start, 1e3 * bar.duration)], (y[bar.row] - height / 2, height), **style)
        present.setdefault(bar.kind, style)

    exposed = [b for b in bars if b.kind == "exposed"]
    for bar in exposed:
        ax.broken_barh([(1e3 * bar.start, 1e3 * bar.duration)], (y["compute"] - height / 2, height),
                       facecolor=_KIND_COLORS["exposed"], edgecolor=_EXPOSED_EDGE, linewidth=0.8, hatch="xxx")

    ax.set_xlim(left, right)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_yticks([y[row] for row in rows])
    ax.set_yticklabels(rows)
    ax.axvline(1e3 * B, color="black", ls=":", lw=1)
    ax.axvline(1e3 * T, color=_EXPOSED_EDGE, ls="--", lw=1.2)
    b_text, t_text = ("B " if plain_backward else "backward ends "), f"T = {_ms(T)} ms "
    if _label_fits(t_text, fig_width * (T - B) / span / 1.15, 8):      # T's label, right of B, leaves room
        ax.text(1e3 * B, len(rows) - 0.45, b_text, ha="right", va="center", fontsize=8)
    ax.text(1e3 * T, len(rows) - 0.45, t_text, ha="right", va="center", fontsize=8, color=_EXPOSED_EDGE)
    if under is None:
        ax.set_xlabel(f"time from the start of the {'forward' if sharded else 'backward'} (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)

    if exposed:
        widest = max(exposed, key=lambda b: b.duration)
        text = f"exposed {_ms(timeline.exposed)} ms"
        if _label_fits(text, fig_width * widest.duration / span / 1.15, 8):
            ax.text(1e3 * (widest.start + widest.end) / 2, y["compute"], text, ha="center", va="center",
                    fontsize=8, color=_EXPOSED_EDGE, fontweight="bold",
                    bbox=dict(facecolor="white", edgecolor="none", pad=1.0, alpha=0.85))

    if label_messages:
        # Axes width in inches per second of the x axis; a margin for the layout shrinking it.
        inches_per_second = fig_width / span / 1.15
        for bar in bars:
            if bar.kind not in _ROW_COLORS:
                continue
            width = bar.duration * inches_per_second
            text = next((t for t in (bar.label, bar.short) if t and _label_fits(t, width, 7)), None)
            if text is not None:
                ax.text(1e3 * (bar.start + bar.end) / 2, y[bar.row], text, ha="center", va="center", fontsize=7,
                        color="black", clip_on=True,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.6, alpha=0.7)
                        if color_by == "tensor" else None)

    n_messages = timeline.num_messages
    summary = f"{method + ': ' if method else ''}T = {_ms(T)} ms, exposed {_ms(timeline.exposed)} ms, "
    if timeline.message_kind is None:
        summary += f"{n_messages} message{'s' if n_messages != 1 else ''}, {problem.sync} sync"
    else:
        counts = {kind: sum(1 for b in bars if b.kind == kind) for kind in ("all-gather", "reduce-scatter", "all-reduce")}
        summary += f"{n_messages} collective{'s' if n_messages != 1 else ''} (" + ", ".join(
            f"{count} {kind}{'s' if count != 1 else ''}" for kind, count in counts.items() if count) + ")"
        summary += (f", peak memory {timeline.peak_memory / 2**20:.4g} MiB" if sharded
                    else f", {problem.sync} sync")
    ax.set_title(summary if title is None else f"{title}\n{summary}", fontsize=10)

    if legend:
        handles = []
        for kind in ("backward", "forward", "update", "pack", "post_backward", "update_lump", "host_overhead",
                     "message", "push", "pull", "all-gather", "reduce-scatter", "all-reduce"):
            if kind not in present:
                continue
            style = dict(present[kind])
            if color_by == "tensor":
                style["facecolor"] = "gray"
                style["hatch"] = None
            name = "forward" if kind == "forward" and sharded else _KIND_NAMES[kind]     # the step's own
            handles.append(Patch(label=name, **style))
        if color_by == "tensor" and any(b.fused for b in bars):
            handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="fused message"))
        handles.append(Patch(facecolor=_KIND_COLORS["exposed"], edgecolor=_EXPOSED_EDGE, hatch="xxx",
                             label="compute waits for communication"))
        handles.append(Line2D([], [], color="black", ls=":",
                              label="B: end of the backward" if plain_backward else "end of the backward"))
        handles.append(Line2D([], [], color=_EXPOSED_EDGE, ls="--", label="T: iteration time"))
        # Below the tick labels and the x label (of the axes under it): about 0.55 inch lower.
        box = ax.get_position()
        bottom = (under or ax).get_position().y0 - 0.55 / ax.figure.get_figheight()
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=((box.x0 + box.x1) / 2, bottom),
                  bbox_transform=ax.figure.transFigure, ncol=min(len(handles), 6), fontsize=8, frameon=False)


def save_timeline(source: Any, problem: Problem, path: str | os.PathLike | Sequence[str | os.PathLike], *,
                  dpi: float = 110, **options: Any) -> list[str]:
    """Draw :func:`plot_timeline` and write it to ``path`` (one path or several).

    The format follows each file's extension, ``.png`` or ``.svg`` (anything else is a
    ``ValueError`` naming the file, raised before drawing). Each file is written through a
    temporary file in its folder and ``os.replace``, so a reader never sees half an image.
    The figure is not kept: nothing is left open in pyplot.

    Parameters
    ----------
    dpi : float
        Resolution of PNG files (dots per inch).
    **options
        Keyword arguments of :func:`plot_timeline` (``plan``, ``title``, ``color_by``, ...).

    Returns
    -------
    list of str
        The paths written.

    Examples
    --------
    >>> save_timeline(None, None, "timeline.jpg")
    Traceback (most recent call last):
    ...
    ValueError: timeline.jpg: unknown image format .jpg: write .png or .svg
    """
    paths = _image_paths(path)
    if "ax" in options:
        raise ValueError("save_timeline draws its own figure; leave ax out")
    allowed = {"plan", "title", "label_messages", "color_by", "legend", "xlim", "figsize"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"save_timeline got unknown option(s) {', '.join(unknown)}: use {', '.join(sorted(allowed))}")
    plan = options.pop("plan", None)
    fig = _timeline_figure(source, problem, plan, ax=None, managed=False, fn="save_timeline", **options)
    try:
        return _write_figure(fig, paths, dpi)
    finally:
        fig.clear()


def plot_sweep(records: Iterable[Mapping[str, Any]], *, metric: str = "scaling_efficiency", model: str | None = None,
               network: str | None = None, ax=None, title: str | None = None, log_y: bool = False):
    """Each method's metric against the number of workers, one line per method.

    The x axis is logarithmic in base 2 (the workers swept), each point a marker; every
    method keeps its colour and marker across panels. Records of several models or
    networks are drawn as small multiples, one panel per (model, network) pair (rows:
    models, columns: networks), sharing the y axis; ``model`` and ``network`` keep one of
    each. Records with status ``"ERROR"`` carry no numbers: they are left out and a note
    under the plot counts them.

    Parameters
    ----------
    records : iterable of dict
        Rows of a sweep (see :func:`sweep_series`).
    metric : {"scaling_efficiency", "throughput", "iteration_time"}
        The y axis: ``(B + F + U) / T``, the throughput in one worker's steps ``P (B + F + U) / T``
        (log scale, with the ideal ``P`` dotted), or ``T`` in ms.
    model, network : str, optional
        Keep only these.
    ax : matplotlib Axes, optional
        Draw into these axes; the records (after ``model`` and ``network``) must then hold
        one model and one network.
    title : str, optional
        The figure's title; default names the metric.
    log_y : bool
        A logarithmic y axis in every panel, so that a network of small values is not
        flattened by one of large values (the throughput's axis is always logarithmic).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib (``pip install 'fusionopt[plot]'``).
    ValueError
        No valid record, an unknown metric, model or network, or several panels for one ``ax``.

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> import matplotlib.pyplot as plt
    >>> records = [{"model": m, "network": "10gbe", "method": "dp", "workers": p, "status": "OPTIMAL",
    ...             "scaling_efficiency": e}
    ...            for m in ("resnet50", "vgg16") for p, e in ((4, 0.9), (8, 0.8))]
    >>> fig = plot_sweep(records)
    >>> [a.get_title() for a in fig.axes]
    ['resnet50, 10gbe', 'vgg16, 10gbe']
    >>> plt.close(fig)
    """
    return _plot_sweep(records, metric=metric, model=model, network=network, ax=ax, title=title, managed=True,
                       log_y=log_y)


def _plot_sweep(records, *, metric, model, network, ax, title, managed, log_y=False):
    _check_metric(metric)
    chosen = _select(records, model, network)
    panels = _panels(chosen)
    errors = [r for r in chosen if _is_error(r)]
    if not panels or len(errors) == len(chosen):
        raise ValueError(f"no sweep record with numbers to plot ({len(errors)} with status ERROR)")
    if ax is not None and len(panels) > 1:
        choices = "; ".join(f"{m}, {n}" for m, n in panels)
        raise ValueError(f"one Axes draws one model and one network, the records hold {len(panels)}: {choices}; "
                         "choose with model= and network=, or leave ax out for one panel each")
    models = list(dict.fromkeys(m for m, _ in panels))
    networks = list(dict.fromkeys(n for _, n in panels))
    shared = metric != "iteration_time"          # fractions and throughputs compare across panels; times do not
    if ax is None:
        nrows, ncols = len(models), len(networks)
        fig = _new_figure((1.2 + 4.2 * ncols, 1.0 + 3.1 * nrows), managed=managed)
        grid = fig.subplots(nrows, ncols, squeeze=False, sharey=shared)
        axes = {(m, n): grid[models.index(m)][networks.index(n)] for m, n in panels}
        for r in range(nrows):
            for c in range(ncols):
                if (models[r], networks[c]) not in axes:
                    grid[r][c].axis("off")
    else:
        _matplotlib()
        fig = ax.figure
        axes = {panels[0]: ax}

    import matplotlib
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    series = {key: _series([r for r in chosen if (str(r["model"]), str(r["network"])) == key], metric)
              for key in panels}
    # Colours and markers by name, so a method looks the same in every picture.
    labels = sorted({label for s in series.values() for label in s})
    colors = matplotlib.colormaps["tab10"].colors
    markers = "osD^vP*Xph<>"
    scale = 1e3 if metric == "iteration_time" else 1.0
    for key, panel_ax in axes.items():
        all_workers: set[int] = set()
        for label, (workers, values) in series[key].items():
            j = labels.index(label)
            panel_ax.plot(workers, values * scale, marker=markers[j % len(markers)], color=colors[j % len(colors)],
                          lw=1.4, ms=5, label=label)
            all_workers.update(workers.tolist())
        if metric == "throughput" and all_workers:
            ideal = sorted(all_workers)
            panel_ax.plot(ideal, ideal, color="gray", lw=0.8, ls=":", label="ideal (throughput = workers)")
            panel_ax.set_yscale("log", base=2)
            panel_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        elif log_y:
            panel_ax.set_yscale("log")
        panel_ax.set_xscale("log", base=2)
        ticks = sorted(all_workers)
        panel_ax.xaxis.set_major_locator(FixedLocator(ticks))
        panel_ax.xaxis.set_minor_locator(NullLocator())
        panel_ax.set_xticklabels([str(w) for w in ticks], fontsize=8)
        panel_ax.set_xlabel("workers")
        panel_ax.grid(True, alpha=0.3)
        if len(axes) > 1 or ax is None:
            panel_ax.set_title(f"{key[0]}, {key[1]}", fontsize=10)
        if not shared or ax is not None or networks.index(key[1]) == 0:
            panel_ax.set_ylabel(_METRIC_LABELS[metric][0])
    if metric == "scaling_efficiency" and not log_y:
        # From 0; up to 1 when the efficiencies come near it, else just above the largest.
        largest = max(float(v.max()) for s in series.values() for _, v in s.values())
        top = 1.05 if largest > 0.5 else largest * 1.15
        for panel_ax in axes.values():
            panel_ax.set_ylim(0, max(top, largest * 1.03))
            if top >= 1.0:
                panel_ax.axhline(1.0, color="gray", lw=0.8, ls=":")

    # The legend lists the lines top to bottom as they end (largest workers) in the first panel.
    def rank(label: str) -> tuple[int, float]:
        for s in series.values():
            if label in s:
                return 0, -float(s[label][1][-1])
        return 1, 0.0

    entries: dict[str, Any] = {}
    for panel_ax in axes.values():
        for h, n in zip(*panel_ax.get_legend_handles_labels()):
            entries.setdefault(n, h)
    names = sorted((n for n in entries if n in labels), key=rank) + [n for n in entries if n not in labels]
    handles = [entries[n] for n in names]
    if ax is None:
        ncol = len(names) if len(names) <= 7 else math.ceil(len(names) / 2)
        note = 0.2 if errors else 0.0                      # inches for the note on skipped records
        fig.legend(handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, note / fig.get_figheight()))
        legend_height = 0.1 + 0.22 * math.ceil(len(names) / ncol) + note
        fig.suptitle(title or _METRIC_LABELS[metric][1], fontsize=11)
        # The panels stay below the title (0.3 in) and above the legend.
        fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 1 - 0.3 / fig.get_figheight()))
    else:
        ax.legend(handles, names, fontsize=8)
        if title:
            ax.set_title(title, fontsize=10)
    if errors:
        shown = ", ".join(f"{r['method']} at {r['workers']}" for r in errors[:6])
        more = f" and {len(errors) - 6} more" if len(errors) > 6 else ""
        fig.text(0.01, 0.005, f"skipped {len(errors)} record{'s' if len(errors) != 1 else ''} with status ERROR: "
                 f"{shown}{more}", fontsize=7, color="gray", ha="left", va="bottom")
    return fig


def save_sweep(records: Iterable[Mapping[str, Any]], path: str | os.PathLike | Sequence[str | os.PathLike], *,
               dpi: float = 110, **options: Any) -> list[str]:
    """Draw :func:`plot_sweep` and write it to ``path`` (one path or several), ``.png`` or
    ``.svg`` by extension, atomically, like :func:`save_timeline`.

    Parameters
    ----------
    dpi : float
        Resolution of PNG files (dots per inch).
    **options
        Keyword arguments of :func:`plot_sweep` (``metric``, ``model``, ``network``, ``title``,
        ``log_y``).

    Returns
    -------
    list of str
        The paths written.

    Examples
    --------
    >>> save_sweep([], "sweep.pdf")
    Traceback (most recent call last):
    ...
    ValueError: sweep.pdf: unknown image format .pdf: write .png or .svg
    """
    paths = _image_paths(path)
    if "ax" in options:
        raise ValueError("save_sweep draws its own figure; leave ax out")
    allowed = {"metric", "model", "network", "title", "log_y"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"save_sweep got unknown option(s) {', '.join(unknown)}: use {', '.join(sorted(allowed))}")
    fig = _plot_sweep(records, metric=options.get("metric", "scaling_efficiency"), model=options.get("model"),
                      network=options.get("network"), ax=None, title=options.get("title"), managed=False,
                      log_y=bool(options.get("log_y", False)))
    try:
        return _write_figure(fig, paths, dpi)
    finally:
        fig.clear()
