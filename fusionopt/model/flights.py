"""Messages in flight on channels that share one bandwidth (MODEL.md section 6).

A dispatched message runs a latency phase (seconds of its own) and then a transfer phase:
``w`` seconds of exclusive bandwidth, the transfers in flight sharing it equally (processor
sharing). Every event simulation of fusionopt advances its messages with these functions:
the event engine (:mod:`fusionopt.model.events`), the channel schedule of fusion plans
(:mod:`fusionopt.model.sharing`) and the priority dispatch (:mod:`fusionopt.model.dispatch`).
Amounts left within ``tolerance`` of zero count as done, so that floating-point rounding
does not leave a phantom event; the tolerance is :data:`EPS` times the run's scale.
"""

from __future__ import annotations

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
