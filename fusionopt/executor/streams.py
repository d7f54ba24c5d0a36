"""The stream runner: one rank's step enqueued at once on a compute and a communication stream.

The host runner (:mod:`fusionopt.executor.runner`) emulates compute by sleeping on the host,
so the host's wake-up jitter is in every figure. On a GPU the whole step can instead be
queued on two device streams, and the device keeps the time (MODEL.md sections 3 and 4):

* **compute stream**: the backward ``b_{n-1}, ..., b_0`` as device work of exactly those
  durations (a spin kernel, or GEMMs sized to them), with an event recorded at each
  emission that makes a message ready (consecutive tensors between two such emissions run
  as one piece, as only those emissions can be observed);
* **communication stream**: the plan's messages in plan order, each waiting for its ready
  event, then packing its chunks into the fused buffer, all-reducing it and unpacking it,
  with events at its start and end;
* **compute stream again**: the next forward per ``sync``. Barrier: wait for the last
  message, run ``U``, then ``f_0, ..., f_{n-1}``. Layerwise: before the forward of tensor
  ``i``, wait for the message that completes it, then ``u_i`` and ``f_i``.

``T`` is the device time from the step's origin event to the end of the forward. Message
starts and ends, and each tensor's ``C_i``, are read from their events. ``phi_i`` is the
event at the start of each forward piece plus the exact durations before ``i`` within it.
Before the origin, a short *gate* of device work (``gate`` seconds) keeps the device busy
while the host queues the rest, so that the device never waits for the host.

The device side is a :class:`Streams` object; :mod:`fusionopt.executor.cuda_streams`
implements it with CuPy. Tests drive this runner with a virtual device whose streams keep
exact clocks, where the measured ``T`` must equal :func:`~fusionopt.model.simulator.simulate`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from fusionopt.executor.communicator import Communicator
from fusionopt.executor.errors import CollectiveTimeout
from fusionopt.executor.job import Job
from fusionopt.executor.layout import Layout
from fusionopt.executor.runner import RankRecord

class Streams(ABC):
    """A device's compute and communication streams, seen by the stream runner.

    ``compute`` and ``communication`` are opaque stream handles; events are opaque tokens.
    The communicator's all-reduce must enqueue on ``communication``.
    """

    compute: Any
    communication: Any
    mode: str = "spin"

    @abstractmethod
    def record(self, stream: Any) -> Any:
        """Record an event on ``stream`` now; return it."""

    @abstractmethod
    def wait(self, stream: Any, event: Any) -> None:
        """Make later work on ``stream`` wait for ``event``."""

    @abstractmethod
    def work(self, stream: Any, seconds: float) -> None:
        """Enqueue emulated compute of ``seconds`` on ``stream``."""

    @abstractmethod
    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds from event ``start`` to event ``end`` (both complete)."""

    @abstractmethod
    def done(self, event: Any) -> bool:
        """Whether the device has passed ``event``."""

    def on_communication(self) -> Any:
        """A context in which array operations (packing) run on the communication stream."""
        import contextlib

        return contextlib.nullcontext()


class StreamRunner:
    """Runs a :class:`Job` on one rank through ``comm`` and ``streams``; :meth:`run` returns its record.

    The record has the keys of the host runner's (see :func:`fusionopt.executor.runner.run_rank`),
    so :func:`~fusionopt.executor.measurement.assemble` reads either.
    """

    def __init__(self, comm: Communicator, streams: Streams, job: Job, *, gate: float = 2e-3) -> None:
        self.comm, self.streams, self.job = comm, streams, job
        self.problem = job.scaled_problem()
        self.profile = self.problem.profile
        if job.plan.has_release:
            raise ValueError("the CUDA-stream runner has no timer to hold a message until its release time; "
                             "run plans with release times (horovod's) with compute='host', or drop them "
                             "with plan.without_release()")
        self.layout = Layout(self.profile, job.plan, word_sizes=comm.word_sizes)
        self.timeout = job.timeout
        self.gate = float(gate)
        self.wake_points = sorted({m.need for m in self.layout.messages})

    def run(self) -> dict[str, Any]:
        record = RankRecord(self.comm, self.job, self.layout)
        self.grads, self.fused = record.grads, record.fused
        for step in range(self.job.steps):
            if record.add(step, self._step(step)):
                break
        return record.fields

    def _step(self, step: int) -> dict[str, Any]:
        comm, streams, profile, layout = self.comm, self.streams, self.profile, self.layout
        compute, channel = streams.compute, streams.communication
        n = profile.n
        self.grads.fill(step)
        comm.barrier(timeout=self.timeout)     # the fill is done on every rank

        streams.work(compute, self.gate)
        origin = streams.record(compute)
        streams.wait(channel, origin)

        # Backward in the ready order: one piece per stretch between observable emissions,
        # each the rise of the ready time along the order (a layer's tensors tie: its time sits
        # on its last tensor in forward order, which the ready order may put last of them).
        backward = profile.backward_steps
        ready_events: dict[int, Any] = {}
        emitted = 0
        for need in self.wake_points:
            streams.work(compute, float(backward[emitted:need].sum()))
            emitted = need
            ready_events[need] = streams.record(compute)
        streams.work(compute, float(backward[emitted:].sum()))
        backward_end = streams.record(compute)

        # Messages in plan order on the communication stream.
        starts, ends = [], []
        completes: dict[int, Any] = {}
        grads = self.grads.grads
        with streams.on_communication():
            for message in layout.messages:
                streams.wait(channel, ready_events[message.need])
                starts.append(streams.record(channel))
                fused = self.fused[: message.words]
                for p in message.pieces:
                    fused[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
                comm.allreduce(fused, timeout=self.timeout, tag=(step, message.index))
                for p in message.pieces:
                    grads[p.tensor][p.lo: p.hi] = fused[p.offset: p.offset + p.hi - p.lo]
                end = streams.record(channel)
                ends.append(end)
                for i in message.completes:
                    completes[i] = end

        # Forward per sync; each piece starts at an event, phi within it by exact durations.
        forward, update = profile.forward, profile.update
        piece_starts: list[tuple[Any, list[int], list[float]]] = []
        if self.problem.sync == "barrier":
            if ends:
                streams.wait(compute, ends[-1])
            streams.work(compute, profile.post_backward + profile.update_lump + profile.U)
            offsets = np.concatenate(([0.0], np.cumsum(forward)[:-1])).tolist()
            piece_starts.append((streams.record(compute), list(range(n)), offsets))
            streams.work(compute, profile.F)
        else:
            current: tuple[Any, list[int], list[float]] | None = None
            gate: Any = None
            pending = 0.0       # exact seconds of compute queued since the current piece began
            for i in range(n):
                event = completes.get(i)
                if current is None or (event is not None and event is not gate):
                    streams.work(compute, pending)
                    pending = 0.0
                    if event is not None:
                        streams.wait(compute, event)
                        gate = event
                    current = (streams.record(compute), [], [])
                    piece_starts.append(current)
                current[1].append(i)
                current[2].append(pending + float(update[i]))
                pending += float(update[i] + forward[i])
            streams.work(compute, pending)
        streams.work(compute, profile.host_overhead)       # the host's share ends the step (MODEL.md 4)
        finish = streams.record(compute)
        self._synchronize(finish, ends)

        phi = np.empty(n)
        for event, members, offsets in piece_starts:
            base = streams.elapsed(origin, event)
            for i, offset in zip(members, offsets):
                phi[i] = base + offset
        reduced = np.full(n, math.nan)
        for i, event in completes.items():
            reduced[i] = streams.elapsed(origin, event)
        late = max(0.0, streams.elapsed(origin, backward_end) - profile.B)
        return {
            "iteration_times": streams.elapsed(origin, finish),
            "message_start": [streams.elapsed(origin, e) for e in starts],
            "message_end": [streams.elapsed(origin, e) for e in ends],
            "reduced": reduced.tolist(),
            "forward_start": phi.tolist(),
            "backward_late": late,
        }

    def _synchronize(self, finish: Any, ends: list[Any]) -> None:
        """Wait for the step's last event; past the timeout, name the first unfinished message."""
        import time

        deadline = time.perf_counter() + self.timeout
        while not self.streams.done(finish):
            if time.perf_counter() > deadline:
                pending = next((k for k, e in enumerate(ends) if not self.streams.done(e)), None)
                what = self.layout.describe(pending) if pending is not None else "the forward"
                raise CollectiveTimeout(f"{what}: not complete within {self.timeout:g} s on rank "
                                        f"{self.comm.rank}")
            time.sleep(2e-5)


def run_stream_rank(comm: Communicator, streams: Streams, job: Job, *, gate: float = 2e-3) -> dict[str, Any]:
    """Run ``job`` on this rank on device streams; returns its record (plain lists, JSON-ready)."""
    return StreamRunner(comm, streams, job, gate=gate).run()


__all__ = ["StreamRunner", "Streams", "run_stream_rank"]
