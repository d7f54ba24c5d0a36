"""The program of a step (MODEL.md sections 3, 4 and 8): what the compute stream does, and where
it issues and waits for each collective.

Both sharded patterns are stated once, as a :class:`Program`, by
:func:`~fusionopt.model.sharded_program` (8.2) and
:func:`~fusionopt.model._decoupled_program.decoupled_program` (8.1), and the plain all-reduce
by :func:`~fusionopt.model.allreduce_program` (sections 3 and 4). The simulator runs the
program on the model's clock (:func:`run_program`); the executor runs the same program on a rank,
sleeping where it computes and blocking where it waits. A program has two parts:

* **collectives**, in the order the channel runs them (first in, first out). Each has a kind
  (0 reduce-scatter, 1 all-gather, 2 all-reduce), its unsharded bytes, what it carries, and a **gate**: it
  may start once counter ``gate`` has reached ``need`` and ``release`` seconds of the step
  have passed (no gate: as soon as the one before it has ended and its release has passed);
* **ops**, the compute stream's program, on a compute clock ``clock`` (seconds from the
  start of the step):

  - ``(AT, t)``: ``clock = max(clock, t)`` (the backward's emissions, at ready times);
  - ``(COMPUTE, s)``: ``clock += s`` (an optional third field labels the task for the
    compute stream's pieces, :func:`run_program`);
  - ``(SPAN, s, issues)``: ``s`` seconds of compute during which each ``(before, gate,
    value)`` of ``issues`` is published ``before`` seconds ahead of the span's end (never
    before its start); then ``clock += s`` (gradients that become ready inside a unit's
    backward);
  - ``(PUBLISH, gate, value)``: at ``clock``, counter ``gate`` becomes ``value`` (a gradient
    emitted, an update done, a collective issued); the values a gate takes only grow;
  - ``(EMIT, gate, value, t)``: the same at time ``t`` (seconds), the clock unmoved (the
    all-reduce's backward emitting each gradient at its ready time);
  - ``(WAIT, c)``: ``clock = max(clock, end of collective c)``;
  - ``(MARK, name, index)``: ``clock`` is recorded as ``marks[name][index]`` (a unit's
    forward starting, the optimiser: what the timeline and the memory account read).

  One gate is the channel's own: ``CHANNEL`` with need ``k + 1`` waits for collective ``k``,
  earlier on the channel, to end (an all-gather of reduced shards after its tensors'
  reduce-scatters). Running the collectives in order already satisfies it; it says what the
  collective waits for.

  The step ends at the final ``clock``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from fusionopt.model._fifo import fifo_job
from fusionopt.model._timeline import ComputePiece

AT, COMPUTE, SPAN, PUBLISH, EMIT, WAIT, MARK = "at", "compute", "span", "publish", "emit", "wait", "mark"
FORWARD = "forward"                      # the mark where a tensor's forward (or its unit's) starts
CHANNEL = "channel"                      # the gate of an earlier collective's end: need k + 1 for collective k


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective of the channel.

    ``chunks`` are ``(tensor, lo, hi)`` byte ranges in buffer order (their concatenation is
    the message's unsharded bytes); the collective may start once counter ``gate`` has
    reached ``need`` (no gate: when the one before it has ended) and ``release`` seconds of
    the step have passed. ``unit`` is the plan's index of what it carries (message of its
    kind, unit, or reduce-scatter group); ``label`` names it in errors.
    """

    kind: int
    chunks: tuple[tuple[int, int, int], ...]
    gate: str | None
    need: int
    release: float
    unit: int
    label: str

    @property
    def nbytes(self) -> int:
        return sum(hi - lo for _, lo, hi in self.chunks)

    @property
    def tensors(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(t for t, _, _ in self.chunks))


class Program:
    """A step: the channel's collectives and the compute stream's ops.

    Built by appending (:meth:`collective`, ``ops.append``); the builders are the only
    writers. Per collective ``c``: ``kind[c]`` (0 reduce-scatter, 1 all-gather),
    ``nbytes[c]`` (unsharded bytes), and in :attr:`collectives` its chunks, gate, need,
    release (seconds), the plan's index of what it carries (``unit``) and a label.

    ``reduced_by[i]`` / ``gathered_by[i]``: the collective whose end is tensor ``i``'s
    ``D_i`` (its last reduce-scatter) and its gathered time (its last all-gather; for a fully
    sharded plan its unit's forward all-gather), or -1. Tensor ``i``'s forward starts at
    ``marks[FORWARD][forward_mark[i]] + forward_offset[i]`` (:meth:`forward_start`).
    ``roles``: what the builder names for the timeline (e.g. each unit's collectives).

    ``channel[c]``: the channel collective ``c`` runs on (0 unless the builder says; the
    parameter server's pulls run on channel 1, beside its pushes). ``after[c]``: pairs
    ``(k, s)``: collective ``c`` starts no earlier than ``s`` seconds after collective ``k``
    ended (the servers' update between a push and the pull of its bytes).
    ``gathers_to_tensors``: its all-gathers land in per-tensor parameters (decoupled and
    parameter-server steps), not in a unit's flat parameters (fully sharded steps).
    """

    def __init__(self, pattern: str, sizes: Sequence[int]) -> None:
        self.pattern = pattern
        self.sizes = sizes                               # the profile's bytes per tensor
        self.ops: list[tuple] = []
        self.kind: list[int] = []
        self.nbytes: list[int] = []
        self.meta: list[tuple] = []                      # (gate, need, release, unit, label, tensors, chunks)
        self.reduced_by: tuple[int, ...] = ()
        self.gathered_by: tuple[int, ...] = ()
        self.forward_mark: np.ndarray = np.zeros(0, dtype=np.int64)
        self.forward_offset: np.ndarray = np.zeros(0)
        self.roles: dict[str, object] = {}
        self.channel: list[int] = []
        self.after: dict[int, tuple[tuple[int, float], ...]] = {}
        self.gathers_to_tensors = False
        self._specs: tuple[CollectiveSpec, ...] | None = None

    def collective(self, kind: int, unit: int, nbytes: int, gate: str | None, need: int, release: float,
                   label: tuple, tensors: Sequence[int] = (), chunks: tuple = (), channel: int = 0) -> int:
        """Append a collective carrying whole ``tensors`` or byte ``chunks`` on ``channel``;
        its index. ``label`` is a format string and its arguments (formatted when asked for)."""
        self.kind.append(kind)
        self.channel.append(channel)
        self.nbytes.append(nbytes)
        self.meta.append((gate, need, release, unit, label, tensors, chunks))
        return len(self.kind) - 1

    @property
    def num_collectives(self) -> int:
        return len(self.kind)

    @property
    def channels(self) -> int:
        """How many channels its collectives run on."""
        return max(self.channel, default=0) + 1

    @property
    def units(self) -> list[int]:
        """Each collective's ``unit`` (the plan's index of what it carries)."""
        return [meta[3] for meta in self.meta]

    def label(self, c: int) -> str:
        """Collective ``c`` in words."""
        text, *args = self.meta[c][4]
        return text.format(*args)

    @property
    def collectives(self) -> tuple[CollectiveSpec, ...]:
        """Every collective in channel order, with its byte ranges spelled out."""
        if self._specs is None:
            specs = []
            for c, (gate, need, release, unit, _, tensors, chunks) in enumerate(self.meta):
                ranges = chunks or tuple((int(i), 0, int(self.sizes[i])) for i in tensors)
                specs.append(CollectiveSpec(self.kind[c], ranges, gate, need, release, unit, self.label(c)))
            self._specs = tuple(specs)
        return self._specs

    def forward_start(self, marks: dict[str, dict[int, float]]) -> np.ndarray:
        """``phi_i`` (seconds) from a run's marks: NaN where a mark is missing."""
        recorded = marks.get(FORWARD, {})
        starts = np.asarray([recorded.get(k, math.nan) for k in range(int(self.forward_mark.max(initial=-1)) + 1)])
        return starts[self.forward_mark] + self.forward_offset if len(starts) else np.zeros(0)


class Channel(Protocol):
    """Where a program's collectives run: told each gate as it is published, asked when a
    collective ends (it then runs as far as it must)."""

    def publish(self, gate: str, value: int, time: float) -> None: ...

    def ended(self, c: int) -> float: ...

    def finish(self) -> None: ...


class Fifo:
    """One channel running the program's collectives one at a time in order, collective
    ``c`` lasting ``durations[c]`` seconds: ``issue = max(release, when its gate reached
    its need)``, ``start = max(issue, end of the one before)``, ``end = start + duration``
    (:func:`~fusionopt.model._fifo.fifo_job`). Collectives are timed in order as soon as
    their gates are reached (a gate's values only grow, so the first publish that reaches a
    need is when it was reached); one waited for before that can never run."""

    def __init__(self, program: Program, durations: Sequence[float]) -> None:
        self.meta, self.durations = program.meta, durations
        self.program = program
        self.values: dict[str, list[int]] = {}
        self.times: dict[str, list[float]] = {}
        self.issue: list[float] = []
        self.start: list[float] = []
        self.end: list[float] = []
        self.free = -math.inf

    def publish(self, gate: str, value: int, time: float) -> None:
        if gate in self.values:
            self.values[gate].append(value)
            self.times[gate].append(time)
        else:
            self.values[gate], self.times[gate] = [value], [time]
        self._advance(len(self.meta) - 1, gate, value)

    def ended(self, c: int) -> float:
        if c >= len(self.end):
            self._advance(c, None, 0)
            if c >= len(self.end):
                k = len(self.end)
                gate, need = self.meta[k][:2]
                raise RuntimeError(f"{self.program.label(k)} waits for {gate} {need}, which the program "
                                   "never publishes before it needs the collective")
        return self.end[c]

    def _advance(self, c: int, gate: str | None, value: int) -> None:
        """Time collectives in order up to ``c`` while their gates have reached their needs,
        ``gate`` having just reached ``value``."""
        meta, end, durations = self.meta, self.end, self.durations
        issue, starts = self.issue, self.start
        free = self.free
        k = len(end)
        while k <= c:
            mine, need, release = meta[k][0], meta[k][1], meta[k][2]
            if mine is None:
                issued = release
            elif mine == CHANNEL:                     # an earlier collective's end, known by now
                reached = end[need - 1]
                issued = reached if reached > release else release
            else:
                if mine == gate and need > value:     # the gate's latest value: not reached yet
                    break
                values = self.values.get(mine, ())
                first = bisect.bisect_left(values, need)  # the first publish that reached it
                if first == len(values):
                    break
                reached = self.times[mine][first]
                issued = reached if reached > release else release
            start, free = fifo_job(issued, durations[k], free)
            issue.append(issued)
            starts.append(start)
            end.append(free)
            k += 1
        self.free = free

    def finish(self) -> None:
        if self.meta:
            self.ended(len(self.meta) - 1)


def run_program(program: Program, channel: Channel, *,
        pieces: list[ComputePiece] | None = None) -> tuple[float, dict[str, dict[int, float]]]:
    """Run ``program``'s ops on the model's clock against ``channel``; then every collective
    to its end. Returns the step's end (seconds) and the marks.

    A channel with a ``compute(clock, seconds)`` method runs the compute too (contention:
    the stream slows while collectives run, and they while it computes): it is handed each
    ``COMPUTE`` and returns when the work ends. With ``pieces`` a list, each ``COMPUTE`` op
    that carries a label ``(kind, tensor, message)`` (a third field) is appended to it as a
    :class:`~fusionopt.model.ComputePiece` from where it starts to where it ends."""
    clock = 0.0
    marks: dict[str, dict[int, float]] = {}
    publish, ended = channel.publish, channel.ended
    compute = getattr(channel, "compute", None)
    for op in program.ops:
        code = op[0]
        if code == PUBLISH:
            publish(op[1], op[2], clock)
        elif code == COMPUTE:
            begin = clock
            clock = clock + op[1] if compute is None else compute(clock, op[1])
            if pieces is not None and len(op) > 2:
                kind, tensor, message = op[2]
                pieces.append(ComputePiece(kind, tensor, begin, clock, message))
        elif code == WAIT:
            end = ended(op[1])
            clock = end if end > clock else clock
        elif code == MARK:
            marks.setdefault(op[1], {})[op[2]] = clock
        elif code == SPAN:
            end = clock + op[1]
            for before, gate, value in op[2]:
                at = end - before
                publish(gate, value, at if at > clock else clock)
            clock = end
        elif code == AT:
            clock = op[1] if op[1] > clock else clock
        elif code == EMIT:
            publish(op[1], op[2], op[3])
        else:
            raise ValueError(f"unknown op {op!r}")
    channel.finish()
    return clock, marks


def replay(program: Program, durations: Sequence[float]) -> dict[str, object]:
    """Run ``program`` on one channel of the model's clock, collective ``c`` lasting
    ``durations[c]``: the step's ``iteration_time``, the collectives' ``start`` and ``end``
    and the tensors' ``forward_start``. Given the durations of a timeline of the same plan,
    it is that timeline (the executor's measured durations give its expected times)."""
    fifo = Fifo(program, [float(d) for d in durations])
    clock, marks = run_program(program, fifo)
    return {"iteration_time": clock, "start": fifo.start, "end": fifo.end,
            "forward_start": program.forward_start(marks).tolist()}


def durations(program: Program, costs: dict[int, Any]) -> list[float]:
    """Each collective's time on one channel (seconds): ``costs[kind]`` (a
    :class:`~fusionopt.cost.CommCost`) of its unsharded bytes."""
    kinds = np.asarray(program.kind, dtype=np.int64)
    nbytes = np.asarray(program.nbytes, dtype=np.float64)
    out = np.zeros(len(kinds))
    for kind, cost in costs.items():
        mine = kinds == kind
        out[mine] = cost.of_sizes(nbytes[mine])
    return out.tolist()


__all__ = ["AT", "COMPUTE", "SPAN", "PUBLISH", "EMIT", "WAIT", "MARK", "FORWARD", "CHANNEL", "CollectiveSpec", "Program",
           "Channel", "Fifo", "durations", "run_program", "replay"]
