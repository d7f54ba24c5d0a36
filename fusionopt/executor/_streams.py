"""The stream runner: one rank's step enqueued at once on a compute and a communication stream.

The host runner (:mod:`fusionopt.executor._runner`) emulates compute by sleeping on the host,
so the host's wake-up jitter is in every figure. On a GPU the whole step can instead be
queued on two device streams, and the device keeps the time (MODEL.md sections 3 and 4).
The runner queues the plan's step program (:mod:`fusionopt.model._step_program`; an
all-reduce plan's, :mod:`fusionopt.model._allreduce_program`), the one the simulator and the
host runner run:

* **compute stream**: the backward as device work of exactly its durations (a spin kernel,
  or GEMMs sized to them), with an event recorded at each emission the program names (where
  some message becomes ready; the backward between two of them runs as one piece, as only
  those can be observed); then the program's waits, updates and forwards, each stretch of
  compute between two waits as one piece;
* **communication stream**: the program's collectives in channel order, each waiting for
  the event of the emission that reached its gate, then packing its chunks into the fused
  buffer, all-reducing it and unpacking it, with events at its start and end (a message the
  model prices in fp16 or bf16 packed narrowed into a wire buffer and unpacked widened, as
  :mod:`fusionopt.executor._layout` says); a collective is queued once the compute stream is
  about to wait for it (or at the step's end), so the whole backward is queued first.

``T`` is the device time from the step's origin event to the end of the forward. Message
starts and ends, and each tensor's ``C_i``, are read from their events. ``phi_i`` is the
compute stream's last event before tensor ``i``'s forward plus the exact durations queued
after it.
Before the origin, a short *gate* of device work (``gate`` seconds) keeps the device busy
while the host queues the rest, so that the device never waits for the host.

The device side is a :class:`Streams` object; :mod:`fusionopt.executor._cuda_streams`
implements it with CuPy. Tests drive this runner with a virtual device whose streams keep
exact clocks, where the measured ``T`` must equal :func:`~fusionopt.model.simulate`.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from fusionopt.executor._communicator import Communicator
from fusionopt.executor._errors import CollectiveTimeout
from fusionopt.executor._job import Job
from fusionopt.executor._layout import WORD_DTYPES
from fusionopt.executor._shards import ShardLayout
from fusionopt.executor._programs import build_program, wire_encodings
from fusionopt.executor._runner import RankRecord
from fusionopt.model._step_program import AT, COMPUTE, EMIT, FORWARD, MARK, WAIT

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

    The record has the keys of the host runner's (see :func:`fusionopt.executor._runner.run_rank`),
    so :func:`~fusionopt.executor.assemble` reads either.
    """

    def __init__(self, comm: Communicator, streams: Streams, job: Job, *, gate: float = 2e-3) -> None:
        self.comm, self.streams, self.job = comm, streams, job
        self.problem = job.scaled_problem()
        self.profile = self.problem.profile
        if job.plan.has_release:
            raise ValueError("the CUDA-stream runner has no timer to hold a message until its release time; "
                             "run plans with release times (horovod's) with compute='host', or drop them "
                             "with plan.without_release()")
        self.program = build_program(self.problem, job.plan)         # an all-reduce plan's (Job checks)
        # Each message in the encoding the model prices it in (narrowed words; _layout).
        self.layout = ShardLayout(self.profile, self.program.collectives, size=comm.size, word_sizes=comm.word_sizes,
                                  encodings=wire_encodings(self.problem, self.program), backend=comm.name)
        self.timeout = job.timeout
        self.gate = float(gate)

    def run(self) -> dict[str, Any]:
        record = RankRecord(self.comm, self.job, self.layout)
        self.grads, self.fused = record.grads, record.fused
        self.wires = {width: self.comm.empty(most, WORD_DTYPES[width])
                      for width, (most, _) in self.layout.wire_words.items()}
        for step in range(self.job.steps):
            if record.add(step, self._step(step)):
                break
        return record.fields

    def _step(self, step: int) -> dict[str, Any]:
        comm, streams, profile, program = self.comm, self.streams, self.profile, self.program
        compute = streams.compute
        n = profile.n
        self.grads.fill(step)
        comm.barrier(timeout=self.timeout)     # the fill is done on every rank

        streams.work(compute, self.gate)
        origin = streams.record(compute)
        queued = time.perf_counter()
        streams.wait(streams.communication, origin)
        self.starts: list[Any] = []
        self.ends: list[Any] = []
        self.published: dict[str, list[tuple[int, Any]]] = {}

        # The program's ops on the compute stream. Compute is queued as one piece of device
        # work per stretch between observable points (an emission, a wait, the backward's end);
        # ``base`` is the compute stream's last event and ``offset`` the exact seconds queued
        # after it, so a forward mark is ``elapsed(origin, base) + offset``. The collectives are
        # queued in channel order on the communication stream as the compute stream needs
        # their ends, each waiting for the event of the emission that reached its gate.
        pending = 0.0                                  # seconds not yet queued
        base, offset = origin, 0.0
        backward = 0.0                                 # model seconds of the backward queued
        backward_end = None
        waited: set[int] = set()
        phi = np.empty(n)
        marks: list[tuple[int, Any]] = []              # (tensor, the event its forward's offset runs from)
        for op in program.ops:
            code = op[0]
            if code == COMPUTE:
                pending += op[1]
                offset += op[1]
            elif code == MARK:
                if op[1] == FORWARD:
                    phi[op[2]] = offset                # relative to base, resolved below
                    marks.append((op[2], base))
            elif code in (EMIT, AT):
                until = op[3] if code == EMIT else op[1]
                if until > backward:
                    pending += until - backward
                    backward = until
                self._queue(pending)
                pending, base, offset = 0.0, streams.record(compute), 0.0
                if code == EMIT:
                    self.published.setdefault(op[1], []).append((op[2], base))
                else:
                    backward_end = base
            elif code == WAIT:
                c = op[1]
                if c in waited:                        # already behind the stream: nothing to wait for
                    continue
                self._issue_until(c, step)
                self._queue(pending)
                streams.wait(compute, self.ends[c])
                waited.add(c)
                pending, base, offset = 0.0, streams.record(compute), 0.0
            else:
                raise ValueError(f"the stream runner queues an all-reduce program's ops, not {code!r}")
        self._issue_until(program.num_collectives - 1, step)
        self._queue(pending)
        finish = streams.record(compute)
        queued = time.perf_counter() - queued
        self._synchronize(finish, self.ends)

        for i, event in marks:
            phi[i] += streams.elapsed(origin, event)
        ended = [streams.elapsed(origin, e) for e in self.ends]
        reduced = [ended[c] if c >= 0 else math.nan for c in program.reduced_by]
        late = 0.0 if backward_end is None else max(0.0, streams.elapsed(origin, backward_end) - profile.B)
        return {
            "iteration_times": streams.elapsed(origin, finish),
            "message_start": [streams.elapsed(origin, e) for e in self.starts],
            "message_end": ended,
            "reduced": reduced,
            "forward_start": phi.tolist(),
            "backward_late": late,
            "host_queue": queued,
        }

    def _queue(self, seconds: float) -> None:
        """Queue ``seconds`` of device work on the compute stream (none for nothing)."""
        if seconds > 0.0:
            self.streams.work(self.streams.compute, seconds)

    def _issue_until(self, c: int, step: int) -> None:
        """Queue the collectives up to ``c`` (channel order) on the communication stream, each
        after the event of the emission that reached its gate: pack, all-reduce, unpack."""
        streams, channel, grads = self.streams, self.streams.communication, self.grads.grads
        collectives = self.program.collectives
        with streams.on_communication():
            for k in range(len(self.ends), c + 1):
                spec = collectives[k]
                event = next((e for value, e in self.published.get(spec.gate, ()) if value >= spec.need), None)
                if event is None:
                    raise RuntimeError(f"{spec.label} waits for {spec.gate} {spec.need}, which the program never "
                                       "emits before the compute stream needs it")
                streams.wait(channel, event)
                self.starts.append(streams.record(channel))
                message = self.layout.collectives[k]
                fused = (self.wires[message.wire_bytes] if message.narrowed else self.fused)[: message.words]
                for p in message.pieces:
                    fused[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
                self.comm.allreduce(fused, timeout=self.timeout, tag=(step, message.index))
                for p in message.pieces:
                    grads[p.tensor][p.lo: p.hi] = fused[p.offset: p.offset + p.hi - p.lo]
                self.ends.append(streams.record(channel))

    def _synchronize(self, finish: Any, ends: list[Any]) -> None:
        """Wait for the step's last event; past the timeout, name the first unfinished message."""
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
