"""What a run measured, beside what the model predicted: :class:`Measurement`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.executor.job import Job
from fusionopt.model.timeline import Timeline
from fusionopt.model.simulator import simulate

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
        Rank 0's measured start and end of each message, plan order.
    reduced : ndarray, shape (iterations, n)
        Rank 0's measured ``C_i`` (NaN for a tensor no message carries).
    forward_start : ndarray, shape (iterations, n)
        Rank 0's ``phi_i``: when the emulated forward of tensor ``i`` started.
    predicted : Timeline
        :func:`~fusionopt.model.simulator.simulate` of the plan on the scaled problem.
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
        ``"all-reduce"``, ``"decoupled"`` or ``"fully-sharded"``.
    collectives : tuple of (str, int, int)
        Sharded patterns: what rank 0's communication thread ran each step, in order: the
        kind (``"reduce-scatter"``, ``"all-gather"``), the unsharded bytes and the bytes
        sent after padding to a multiple of the ranks. Empty for an all-reduce plan.
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
        start = np.median(self.message_start, axis=0) if self.message_start.size else None
        end = np.median(self.message_end, axis=0) if self.message_end.size else None
        kinds = self.predicted.message_kind
        for k in range(min(messages, self.predicted.message_end.size)):
            got = "-" if start is None else f"{ms * start[k]:9.3f} -> {ms * end[k]:9.3f}"
            kind = "" if kinds is None else (" RS" if kinds[k] == 0 else " AG")
            lines.append(f"  {k:>4}{kind} {int(self.predicted.message_bytes[k]):>12d} B  measured {got} ms, predicted "
                         f"{ms * self.predicted.message_start[k]:9.3f} -> {ms * self.predicted.message_end[k]:9.3f} ms")
        if self.predicted.message_end.size > messages:
            lines.append(f"  ... {self.predicted.message_end.size - messages} more messages (use --json for all)")
        if self.correct:
            lines.append(f"correctness    ok: {self.checked_bytes} B compared with exact sums, all equal")
        else:
            lines.append(f"correctness    FAILED: {len(self.errors)} wrong range(s); first: {self.errors[0]}")
        return "\n".join(lines)

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
        }


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
    return Measurement(
        backend=backend, ranks=len(records), sync=problem.sync, time_scale=job.time_scale,
        emulated=emulated, iteration_times=_frozen(iteration_times, 1),
        message_start=_frozen(first["message_start"][:timed], 2),
        message_end=_frozen(first["message_end"][:timed], 2),
        reduced=_frozen(first["reduced"][:timed], 2),
        forward_start=_frozen(first["forward_start"][:timed], 2), predicted=predicted,
        correct=not errors, errors=tuple(errors),
        checked_bytes=int(sum(r["checked_bytes"] for r in records)),
        steps=int(min(r["steps"] for r in records)),
        backward_late=float(max((max(r["backward_late"], default=0.0) for r in records), default=0.0)),
        description=description, pattern=job.pattern,
        collectives=tuple((str(k), int(b), int(p)) for k, b, p in first.get("collectives", [])),
    )
