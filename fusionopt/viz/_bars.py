"""What a timeline draws, without matplotlib: :func:`timeline_bars` (every bar of a Gantt
chart: the compute pieces, each message or collective on its channel, the exposed
communication) and :func:`memory_steps` (the unsharded bytes over a fully sharded step).

Times are seconds from the start of the backward (of the forward on a fully sharded step), as
in :class:`~fusionopt.model.Timeline`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, KINDS, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._decoupled_program import decoupled_program
from fusionopt.model._plan import Plan
from fusionopt.model._pattern import Pattern, require_pattern
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_program import sharded_program
from fusionopt.model._timeline import Timeline
from fusionopt.model._simulator import compute_pieces, simulate


# The compute stream, simulated again from the problem and plan, must agree with the
# timeline drawn to this relative tolerance: the event-driven simulator that records it
# stops each task within 1e-13 of the time scale, the plain model's recursion rounds alike.
_MATCH_RTOL = 1e-6


KIND_NAMES = {
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


def resolve_source(source: Any, problem: Problem, plan: Any, *, fn: str) -> tuple[Timeline, Any, str | None]:
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


def channel_rows(problem: Problem) -> list[str]:
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
    rows = channel_rows(problem)
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
    simulation's memory step function (:func:`~fusionopt.model.simulate_sharded`),
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile, FullySharded
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> problem = Problem(profile, pattern=FullySharded(half, half))
    >>> times, nbytes = memory_steps(ShardedPlan([0, 3]), problem)
    >>> (times * 1e3).round(9).tolist(), nbytes.tolist()
    ([0.0, 11.0, 19.0, 25.0, 33.0], [7000000, 7000000, 14000000, 7000000, 0])
    """
    require_pattern(problem, "fully-sharded", "memory_steps")
    timeline, _, _ = resolve_source(source, problem, plan, fn="memory_steps")
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
    (:func:`~fusionopt.model.compute_pieces`); their forward starts and end are
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
        What to draw: a solver's :class:`~fusionopt.solvers.Result`, a plan (it is
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Problem, Profile
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
    timeline, plan, _ = resolve_source(source, problem, plan, fn="timeline_bars")
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
                             rows=channel_rows(problem))

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


__all__ = ["Bar", "memory_steps", "timeline_bars"]
