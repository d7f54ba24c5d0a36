"""Messages in flight on channels that share one bandwidth (MODEL.md section 6).

A dispatched message runs a latency phase (seconds of its own) and then a transfer phase:
``w`` seconds of exclusive bandwidth, the transfers in flight sharing it equally (processor
sharing). Every event simulation of fusionopt advances its messages with these functions:
the event engine (:mod:`fusionopt.model._events`), the channel schedule of fusion plans
(:mod:`fusionopt.model._sharing`) and the priority dispatch (:mod:`fusionopt.model._dispatch`).
Amounts left within ``tolerance`` of zero count as done, so that floating-point rounding
does not leave a phantom event; the tolerance is :data:`EPS` times the run's scale.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

EPS = 1e-13


class Flight:
    """One message in flight: ``message`` (its index), the ``latency`` and ``transfer``
    seconds it has left."""

    __slots__ = ("message", "latency", "transfer")

    def __init__(self, message: int, latency: float, transfer: float) -> None:
        self.message, self.latency, self.transfer = message, float(latency), float(transfer)

    @property
    def done(self) -> bool:
        return self.latency <= 0.0 and self.transfer <= 0.0


def tolerance(scale: float) -> float:
    """The amount below which work left counts as done, for a run of ``scale`` seconds."""
    return EPS * (scale + 1e-300)


def advance(amount: float, progress: float, tolerance: float) -> float:
    """``amount - progress``, or 0 when that is within ``tolerance`` of done."""
    left = amount - progress
    return 0.0 if left <= tolerance else left


def transfers(flights: list[Flight]) -> int:
    """How many flights are in their transfer phase (sharing the bandwidth)."""
    return sum(1 for f in flights if f.latency <= 0.0)


def time_to_next(flights: list[Flight], share: int) -> list[float]:
    """Seconds until each flight ends its current phase, ``share`` transfers sharing."""
    return [f.latency if f.latency > 0.0 else f.transfer * share for f in flights]


def fly(flights: list[Flight], step: float, share: int, tolerance: float) -> list[Flight]:
    """Advance every flight by ``step`` seconds (``share`` transfers sharing the bandwidth);
    return those whose latency phase ended in this step (their transfer begins now)."""
    starting = []
    for f in flights:
        if f.latency > 0.0:
            f.latency = advance(f.latency, step, tolerance)
            if f.latency <= 0.0:
                starting.append(f)
        else:
            f.transfer = advance(f.transfer, step / share, tolerance)
    return starting


class SharedChannels(ABC):
    """Channels whose messages in flight share one bandwidth beside a compute stream: the
    stepping of an event channel policy of the step programs' engine
    (:mod:`fusionopt.model._step_program`). While at least one message is in flight the stream
    computes at ``1 / slowdown`` of full speed; while it computes, the flights progress at
    ``1 / comm_slowdown``. A policy says what happens at a moment (:meth:`_instant`: which
    messages start, which end, in its order) and what else may come (:meth:`_arrivals`); the
    engine hands it each compute task (:meth:`compute`) and each wait (:meth:`ended`), so its
    clock is the stream's. ``end`` holds each message's end (``inf`` until it ends)."""

    def __init__(self, slowdown: float, comm_slowdown: float, tolerance: float, count: int) -> None:
        self.slowdown, self.comm_slowdown, self.tolerance = slowdown, comm_slowdown, tolerance
        self.flights: list[Flight] = []
        self.end = [math.inf] * count
        self.clock = 0.0

    def compute(self, clock: float, work: float) -> float:
        """Run a compute task of ``work`` seconds at full speed from ``clock`` (the policy's
        own), the flights progressing meanwhile; returns when the task ends."""
        assert clock == self.clock, "the engine hands over the stream at the policy's clock"
        remaining = work
        pace = 1.0 / self.comm_slowdown
        while remaining > 0.0:
            self._instant()
            flights = self.flights
            rate = 1.0 / self.slowdown if flights else 1.0
            candidates = [remaining / rate]
            share = transfers(flights)
            candidates.extend(seconds / pace for seconds in time_to_next(flights, share))
            self._arrivals(candidates)
            step = min(candidates)
            self.clock += step
            remaining = advance(remaining, step * rate, self.tolerance)
            fly(flights, step * pace, share, self.tolerance)
        return self.clock

    def ended(self, c: int) -> float:
        """The end of message ``c``, running the flights alone (the stream waits) until it is known."""
        while True:
            self._instant()
            if self.end[c] != math.inf:
                return self.end[c]
            share = transfers(self.flights)
            candidates = time_to_next(self.flights, share)
            self._arrivals(candidates)
            if not candidates:
                raise RuntimeError(f"the step stalled: the stream waits for message {c}, which never runs")
            step = min(candidates)
            self.clock += step
            fly(self.flights, step, share, self.tolerance)

    def finish(self) -> None:
        for c in range(len(self.end)):
            self.ended(c)

    def _landed(self) -> list[int]:
        """The messages whose flights are done, taken off the channels (in flight order)."""
        done = [f for f in self.flights if f.done]
        for flight in done:
            self.flights.remove(flight)
        return [flight.message for flight in done]

    @abstractmethod
    def _instant(self) -> None:
        """Start and end what does so at ``clock``, until nothing changes."""

    def _arrivals(self, candidates: list[float]) -> None:
        """Add the seconds until anything else the policy awaits (a release time)."""
