"""What a run measured, beside what the model predicted: :class:`Measurement`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.executor._job import Job
from fusionopt.executor._programs import build_program, wire_encodings
from fusionopt.model._wire import compressed_collectives
from fusionopt.model._problem import Problem
from fusionopt.model._timeline import Timeline
from fusionopt.model._simulator import simulate

MEASUREMENT_SCHEMA = "fusionopt.measurement"
MEASUREMENT_VERSION = 1


def _frozen(values: Any, ndim: int) -> np.ndarray:
    array = np.array(values, dtype=np.float64)
    if array.size == 0:
        array = array.reshape((0,) * ndim)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Measurement:
    """A plan run through a backend: measured times, the model's prediction, a verdict.

    Times are seconds from the start of a step's backward, in the run's own time base:
    compute runs ``time_scale`` times the profile's seconds, and ``predicted`` simulates the
    problem with its compute scaled the same way (communication is never scaled).

    A message's time, start to end, is what a calibration times for ``c(S)`` (packing, the
    collective, unpacking; :func:`~fusionopt.executor.calibrate`), but a
    calibration's ranks run in lockstep, while in a run a rank that reaches a message first
    waits inside it for the others. ``lockstep_durations`` leaves that wait out (each
    message's shortest time over the ranks: the last to join waited for no one), so
    :attr:`lockstep_time` against :attr:`predicted_message_time` compares like with like;
    the rest of ``T - predicted T`` is the runner's: waits for other ranks, late wake-ups.

    Attributes
    ----------
    backend : str
    ranks : int
    sync : str
    time_scale : float
    emulated : bool
        True when transfers were emulated (one GPU holding its stream for ``c(S)``).
    iteration_times : ndarray, shape (iterations,)
        Measured ``T`` of each timed step: the slowest rank's.
    message_start, message_end : ndarray, shape (iterations, messages)
        Rank 0's measured start and end of each message, plan order (a parameter server's:
        each push message).
    pull_start, pull_end : ndarray, shape (iterations, pulls)
        A parameter server's: rank 0's measured start and end of each pull message (empty
        for the other patterns).
    reduced : ndarray, shape (iterations, n)
        Rank 0's measured ``C_i`` (NaN for a tensor no message carries).
    forward_start : ndarray, shape (iterations, n)
        Rank 0's ``phi_i``: when the emulated forward of tensor ``i`` started.
    predicted : Timeline
        :func:`~fusionopt.model.simulate` of the plan on the scaled problem.
    correct : bool
        Every byte of every tensor equalled the exact sum after every step on every rank.
    errors : tuple of str
        One line per wrong byte range found (rank, step, tensor, bytes, messages).
    checked_bytes : int
        Bytes compared with their exact sums, over all ranks and steps.
    steps : int
        Steps run, warm-up included (fewer than asked when a check failed).
    backward_late : float
        Largest delay of an emitted gradient past its ready time, over ranks and steps (for
        the sharded patterns: of any wake-up of the compute program: an emission, an update
        or a collective's issue).
    pattern : str
        ``"all-reduce"``, ``"decoupled"``, ``"fully-sharded"`` or ``"ps"``.
    collectives : tuple of (str, int, int)
        What rank 0's communication thread ran each step, in order: the kind
        (``"all-reduce"``, ``"reduce-scatter"``, ``"all-gather"``; ``"powersgd"`` for a
        message through torch's PowerSGD hook), the unsharded bytes and the bytes sent after
        padding to a multiple of the ranks (the hook's: its three all-reduces' bytes, twice).
        Empty where the backend's runner does not record them.
    collective_start, collective_end : ndarray, shape (iterations, messages)
        Rank 0's start and end of each message's collective alone, between its packing and
        its unpacking (empty where the backend's runner does not mark them).
    lockstep_durations : ndarray, shape (iterations, collectives)
        Each collective's shortest ``end - start`` over the ranks: its time once every rank
        had joined it, as a calibration times messages (a parameter server's pushes, then its
        pulls).
    check_times : ndarray, shape (iterations,)
        Seconds the slowest rank spent checking every byte after each timed step (after a
        barrier that ends the step on every rank: not part of ``T``).
    encodings : tuple of str
        Each collective's encoding on the wire, in the order of ``message_*`` (MODEL.md
        section 2.2; :func:`~fusionopt.executor.run`): ``"fp32"`` for a message sent as it
        is. Empty for a parameter-server plan, whose collectives all travel as they are.
    host_queue : ndarray, shape (iterations,)
        Device streams only: seconds the slowest rank's host took to queue each timed step,
        from its origin event to its last (empty elsewhere). A step the host queues more
        slowly than the device runs it is bound by the host's launches, not by the device.
    """

    backend: str
    ranks: int
    sync: str
    time_scale: float
    emulated: bool
    iteration_times: np.ndarray
    message_start: np.ndarray
    message_end: np.ndarray
    reduced: np.ndarray
    forward_start: np.ndarray
    predicted: Timeline
    correct: bool
    errors: tuple[str, ...]
    checked_bytes: int
    steps: int
    backward_late: float = 0.0
    description: str = ""
    pattern: str = "all-reduce"
    collectives: tuple[tuple[str, int, int], ...] = ()
    collective_start: np.ndarray = field(default_factory=lambda: _frozen([], 2))
    collective_end: np.ndarray = field(default_factory=lambda: _frozen([], 2))
    lockstep_durations: np.ndarray = field(default_factory=lambda: _frozen([], 2))
    check_times: np.ndarray = field(default_factory=lambda: _frozen([], 1))
    host_queue: np.ndarray = field(default_factory=lambda: _frozen([], 1))
    pull_start: np.ndarray = field(default_factory=lambda: _frozen([], 2))
    pull_end: np.ndarray = field(default_factory=lambda: _frozen([], 2))
    encodings: tuple[str, ...] = ()

    # ------------------------------------------------------------------ figures
    @property
    def iteration_time(self) -> float:
        """Median measured ``T`` over the timed steps (NaN if none completed)."""
        return float(np.median(self.iteration_times)) if self.iteration_times.size else math.nan

    @property
    def predicted_time(self) -> float:
        return self.predicted.iteration_time

    @property
    def relative_error(self) -> float:
        """``(measured - predicted) / predicted`` of the median ``T``."""
        return (self.iteration_time - self.predicted_time) / self.predicted_time

    @property
    def message_durations(self) -> np.ndarray:
        """Median measured ``end - start`` of each message over the timed steps."""
        if not self.message_end.size:
            return np.full(self.predicted.message_end.shape, math.nan)
        return np.median(self.message_end - self.message_start, axis=0)

    @property
    def message_time(self) -> float:
        """Rank 0's messages (a parameter server's pushes and pulls), start to end, summed
        over a step (median step), seconds."""
        start, end = self._channel_spans()
        return _median_sum(end - start)

    def _channel_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Rank 0's start and end of every collective, both channels (steps x collectives)."""
        if not self.pull_start.size:
            return self.message_start, self.message_end
        return np.hstack([self.message_start, self.pull_start]), np.hstack([self.message_end, self.pull_end])

    @property
    def lockstep_time(self) -> float:
        """:attr:`lockstep_durations` summed over a step (median step), seconds: what the
        calibrated ``c(S)`` of every message add up to, if the cost model is right."""
        return _median_sum(self.lockstep_durations)

    @property
    def predicted_message_time(self) -> float:
        """``sum_k c(S_k)``: the predicted messages' durations added up (a parameter
        server's pushes and pulls), seconds."""
        return self.predicted.busy + self.predicted.pull_busy

    @property
    def copy_times(self) -> tuple[float, float]:
        """Rank 0's packing and unpacking summed over a step (median steps), seconds; NaN
        where the collectives were not marked."""
        if not self.collective_start.size or not self.message_start.size:
            return math.nan, math.nan
        start, end = self._channel_spans()
        return _median_sum(self.collective_start - start), _median_sum(end - self.collective_end)

    @property
    def check_time(self) -> float:
        """Median seconds the slowest rank spent checking bytes after a step (not in ``T``)."""
        return float(np.median(self.check_times)) if self.check_times.size else math.nan

    @property
    def message_errors(self) -> np.ndarray:
        """Relative error of each message's median duration against ``c(S_k)``."""
        predicted = self.predicted.message_end - self.predicted.message_start
        return (self.message_durations - predicted) / predicted

    # ------------------------------------------------------------------ text and JSON
    def summary(self, *, messages: int = 10) -> str:
        """A few lines: measured against predicted, per message, and the verdict."""
        ms = 1e3
        lines = [
            f"backend        {self.description or self.backend}" + ("  [EMULATED LINK]" if self.emulated else ""),
            f"steps          {self.iteration_times.size} timed of {self.steps} run, time scale {self.time_scale:g}",
            f"measured T     {ms * self.iteration_time:.3f} ms (median; min {ms * _min(self.iteration_times):.3f}, "
            f"max {ms * _max(self.iteration_times):.3f})",
            f"predicted T    {ms * self.predicted_time:.3f} ms",
            f"error          {100 * self.relative_error:+.2f} %",
            f"messages       {self.predicted.message_end.size}",
        ]
        lines += self._message_time_lines()
        start = np.median(self.message_start, axis=0) if self.message_start.size else None
        end = np.median(self.message_end, axis=0) if self.message_end.size else None
        kinds = self.predicted.message_kind
        encoded = any(e != "fp32" for e in self.encodings)
        for k in range(min(messages, self.predicted.message_end.size)):
            got = "-" if start is None else f"{ms * start[k]:9.3f} -> {ms * end[k]:9.3f}"
            kind = "" if kinds is None else (" RS" if kinds[k] == 0 else " AG")
            carried = f" {self.encodings[k]:<5}" if encoded else ""
            lines.append(f"  {k:>4}{kind} {int(self.predicted.message_bytes[k]):>12d} B{carried}  measured {got} ms, predicted "
                         f"{ms * self.predicted.message_start[k]:9.3f} -> {ms * self.predicted.message_end[k]:9.3f} ms")
        if self.predicted.message_end.size > messages:
            lines.append(f"  ... {self.predicted.message_end.size - messages} more messages (use --json for all)")
        lines += self._pull_lines(messages)
        if self.correct:
            against = ("exact sums (PowerSGD's messages: with the hook's products of them)"
                       if "powersgd" in self.encodings else "exact sums")
            lines.append(f"correctness    ok: {self.checked_bytes} B compared with {against}, all equal")
        else:
            lines.append(f"correctness    FAILED: {len(self.errors)} wrong range(s); first: {self.errors[0]}")
        return "\n".join(lines)

    def _pull_lines(self, messages: int) -> list[str]:
        """A parameter server's pull messages, measured against predicted."""
        p = self.predicted
        if p.pull_end is None:
            return []
        ms = 1e3
        lines = [f"pulls          {p.pull_end.size}"]
        start = np.median(self.pull_start, axis=0) if self.pull_start.size else None
        end = np.median(self.pull_end, axis=0) if self.pull_end.size else None
        for m in range(min(messages, p.pull_end.size)):
            got = "-" if start is None else f"{ms * start[m]:9.3f} -> {ms * end[m]:9.3f}"
            lines.append(f"  {m:>4}    {int(p.pull_bytes[m]):>12d} B  measured {got} ms, predicted "
                         f"{ms * p.pull_start[m]:9.3f} -> {ms * p.pull_end[m]:9.3f} ms")
        if p.pull_end.size > messages:
            lines.append(f"  ... {p.pull_end.size - messages} more pulls (use --json for all)")
        return lines

    def _message_time_lines(self) -> list[str]:
        """The messages' time in all, measured the way a calibration measures ``c(S)``."""
        if not self.message_start.size:
            return []
        ms = 1e3
        pack, unpack = self.copy_times
        parts = "" if math.isnan(pack) else (
            f": pack {ms * pack:.3f}, collective {ms * _median_sum(self.collective_end - self.collective_start):.3f}, "
            f"unpack {ms * unpack:.3f} ms")
        lines = [f"message time   {ms * self.message_time:.3f} ms in all on rank 0 (median step){parts}"]
        if self.lockstep_durations.size:
            predicted = self.predicted_message_time
            error = (self.lockstep_time - predicted) / predicted if predicted > 0 else math.nan
            lines.append(f"               {ms * self.lockstep_time:.3f} ms once every rank had joined each message "
                         f"(as calibrate times c(S)); predicted sum of c(S) {ms * predicted:.3f} ms, "
                         f"error {100 * error:+.2f} %")
        if self.check_times.size:
            lines.append(f"checks         {ms * self.check_time:.3f} ms per step, after T (not in it)")
        return lines

    def to_dict(self) -> dict[str, Any]:
        p = self.predicted
        return {
            "schema": MEASUREMENT_SCHEMA, "version": MEASUREMENT_VERSION,
            "backend": self.backend, "description": self.description, "ranks": self.ranks,
            "sync": self.sync, "time_scale": self.time_scale, "emulated": self.emulated,
            "iteration_time": _json_float(self.iteration_time),
            "predicted_time": p.iteration_time,
            "relative_error": _json_float(self.relative_error),
            "iteration_times": self.iteration_times.tolist(),
            "message_start": self.message_start.tolist(),
            "message_end": self.message_end.tolist(),
            "reduced": [[_json_float(x) for x in row] for row in self.reduced.tolist()],
            "forward_start": self.forward_start.tolist(),
            "predicted": {"message_start": p.message_start.tolist(), "message_end": p.message_end.tolist(),
                          "message_bytes": p.message_bytes.tolist(),
                          "reduced": [_json_float(x) for x in p.reduced.tolist()],
                          "forward_start": p.forward_start.tolist()},
            "correct": self.correct, "errors": list(self.errors), "checked_bytes": self.checked_bytes,
            "steps": self.steps, "backward_late": self.backward_late,
            "pattern": self.pattern, "collectives": [list(c) for c in self.collectives],
            "collective_start": self.collective_start.tolist(), "collective_end": self.collective_end.tolist(),
            "lockstep_durations": self.lockstep_durations.tolist(),
            "lockstep_time": _json_float(self.lockstep_time),
            "predicted_message_time": self.predicted_message_time,
            "check_times": self.check_times.tolist(),
            "host_queue": self.host_queue.tolist(), "encodings": list(self.encodings),
            **({} if p.pull_end is None else {
                "pull_start": self.pull_start.tolist(), "pull_end": self.pull_end.tolist(),
                "predicted_pulls": {"pull_start": p.pull_start.tolist(), "pull_end": p.pull_end.tolist(),
                                    "pull_bytes": p.pull_bytes.tolist()}}),
        }


def _median_sum(per_message: np.ndarray) -> float:
    """Median over steps (rows) of a row's sum; NaN with no rows."""
    return float(np.median(per_message.sum(axis=1))) if per_message.size else math.nan


def _lockstep(records: Sequence[Mapping[str, Any]], timed: int) -> np.ndarray:
    """Each message's shortest ``end - start`` over the ranks, per timed step."""
    durations = [np.array(r["message_end"][:timed], dtype=np.float64) - np.array(r["message_start"][:timed],
                                                                                 dtype=np.float64)
                 for r in records]
    if not timed or any(d.shape != durations[0].shape for d in durations):
        return np.empty((0, 0))
    return np.min(durations, axis=0)


def _slowest(records: Sequence[Mapping[str, Any]], key: str, timed: int) -> np.ndarray:
    """Per timed step, the largest of the ranks' ``key`` (empty where a rank has none)."""
    values = [r.get(key, [])[:timed] for r in records]
    if not timed or any(len(v) != timed for v in values):
        return np.empty(0)
    return np.max(np.array(values, dtype=np.float64), axis=0)


def _min(values: np.ndarray) -> float:
    return float(values.min()) if values.size else math.nan


def _max(values: np.ndarray) -> float:
    return float(values.max()) if values.size else math.nan


def _json_float(value: float | None) -> float | None:
    """JSON has no NaN or infinity: both become null."""
    return None if value is None or not math.isfinite(value) else value


def assemble(job: Job, records: Sequence[Mapping[str, Any]], *, backend: str, description: str = "",
             emulated: bool = False) -> Measurement:
    """The :class:`Measurement` of ``job`` from every rank's record (rank order)."""
    records = sorted(records, key=lambda r: r["rank"])
    first = records[0]
    timed = min(len(r["iteration_times"]) for r in records)
    times = np.array([r["iteration_times"][:timed] for r in records], dtype=np.float64)
    iteration_times = times.max(axis=0) if timed else np.empty(0)
    errors: list[str] = []
    for line in first["errors"]:   # every rank holds every rank's verdict
        if line not in errors:
            errors.append(line)
    problem = job.scaled_problem()
    predicted = simulate(problem, job.plan, validate=False)
    # The channel's messages, then (a parameter server's) the pulls on the other channel.
    pushes = predicted.message_end.size if predicted.pull_end is not None else None
    start, end = (np.array(first[key][:timed], dtype=np.float64).reshape(timed, -1) if timed else np.empty((0, 0))
                  for key in ("message_start", "message_end"))
    return Measurement(
        backend=backend, ranks=len(records), sync=problem.sync, time_scale=job.time_scale,
        emulated=emulated, iteration_times=_frozen(iteration_times, 1),
        message_start=_frozen(start[:, :pushes], 2), message_end=_frozen(end[:, :pushes], 2),
        pull_start=_frozen(start[:, pushes:] if pushes is not None else [], 2),
        pull_end=_frozen(end[:, pushes:] if pushes is not None else [], 2),
        reduced=_frozen(first["reduced"][:timed], 2),
        forward_start=_frozen(first["forward_start"][:timed], 2), predicted=predicted,
        correct=not errors, errors=tuple(errors),
        checked_bytes=int(sum(r["checked_bytes"] for r in records)),
        steps=int(min(r["steps"] for r in records)),
        backward_late=float(max((max(r["backward_late"], default=0.0) for r in records), default=0.0)),
        description=description, pattern=job.pattern,
        collectives=tuple((str(k), int(b), int(p)) for k, b, p in first.get("collectives", [])),
        collective_start=_frozen(first.get("collective_start", [])[:timed], 2),
        collective_end=_frozen(first.get("collective_end", [])[:timed], 2),
        lockstep_durations=_frozen(_lockstep(records, timed), 2),
        check_times=_frozen(_slowest(records, "check_times", timed), 1),
        host_queue=_frozen(_slowest(records, "host_queue", timed), 1),
        encodings=_encodings(problem, job.plan),
    )


def _encodings(problem: Problem, plan: Any) -> tuple[str, ...]:
    """Each collective's encoding on the wire, as the ranks sent it (the compressor's name for
    a message sent through it; empty: a pattern whose collectives all travel as they are)."""
    program = build_program(problem, plan)
    encodings = wire_encodings(problem, program)
    if encodings is None:
        return ()
    through = compressed_collectives(problem, program)
    return tuple(problem.compressor.name if compressed else e.name for e, compressed in zip(encodings, through))
