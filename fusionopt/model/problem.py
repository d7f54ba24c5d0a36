"""A scheduling problem: a workload, a cost model and a synchronisation rule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionopt.model.cost import CommCost
from fusionopt.model.profile import Profile

SYNC_MODES = ("barrier", "layerwise")


@dataclass(frozen=True, eq=False)
class Problem:
    """Everything a plan is judged on: ``profile``, communication ``cost`` and ``sync``.

    Parameters
    ----------
    profile : Profile
        The workload (MODEL.md section 1).
    cost : CommCost
        Time of a message of ``S`` bytes on the channel (MODEL.md section 2).
    sync : {"barrier", "layerwise"}
        When the next forward may start (MODEL.md section 4): after every gradient is
        reduced (``"barrier"``: DDP, Horovod, MG-WFBP) or tensor by tensor as each gradient
        is reduced (``"layerwise"``: P3, ByteScheduler, US-Byte).

    Examples
    --------
    >>> from fusionopt.model.cost import AlphaBeta
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> Problem(p, AlphaBeta(1e-3, 1e-9)).sync
    'barrier'
    >>> Problem(p, AlphaBeta(1e-3, 1e-9), sync="eager")
    Traceback (most recent call last):
    ...
    ValueError: unknown sync 'eager': choose one of 'barrier', 'layerwise'
    """

    profile: Profile
    cost: CommCost
    sync: str = "barrier"

    def __post_init__(self) -> None:
        if not isinstance(self.profile, Profile):
            raise ValueError(f"profile must be a Profile, got {type(self.profile).__name__}")
        if not isinstance(self.cost, CommCost):
            raise ValueError(f"cost must be a CommCost (e.g. AlphaBeta), got {type(self.cost).__name__}")
        if self.sync not in SYNC_MODES:
            choices = ", ".join(repr(s) for s in SYNC_MODES)
            raise ValueError(f"unknown sync {self.sync!r}: choose one of {choices}")
        check_cost(self.cost, self.profile)


def check_cost(cost: CommCost, profile: Profile) -> None:
    """Probe ``cost`` for MODEL.md section 2's rules on the sizes ``profile`` can send.

    The built-in models enforce ``c(0) = 0``, ``c >= 0`` and monotonicity by construction;
    a user's own ``CommCost`` is probed at 0, at every tensor size, at the total and on a
    geometric grid up to it, and rejected with the first violation named.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> class Decreasing(AlphaBeta):
    ...     def _evaluate(self, sizes):
    ...         return np.where(sizes > 0, 1.0 / (1.0 + sizes), 0.0)
    >>> p = Profile.from_arrays([4, 8], [0, 0], [1, 1])
    >>> Problem(p, Decreasing(0, 0))
    Traceback (most recent call last):
    ...
    ValueError: cost model Decreasing is not monotone: c(1 B) = 0.5 s > c(2 B) = 0.333333 s
    """
    total = max(profile.total_bytes, 1)
    label = type(cost).__name__
    grid = np.unique(np.concatenate((
        [0.0, 1.0, float(total)],
        profile.sizes.astype(np.float64),
        np.round(np.geomspace(1.0, float(total), num=256)),
    )))
    times = np.asarray(cost(grid), dtype=np.float64)
    if times.shape != grid.shape:
        raise ValueError(f"cost model {label} returned {times.shape} times for {grid.shape} sizes")
    bad = ~np.isfinite(times)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"cost model {label}: c({grid[k]:.0f} B) = {times[k]!r} is not finite")
    if times[0] != 0.0:
        raise ValueError(f"cost model {label}: c(0) = {times[0]:.6g} s, must be 0")
    if (times < 0).any():
        k = int(np.argmax(times < 0))
        raise ValueError(f"cost model {label}: c({grid[k]:.0f} B) = {times[k]:.6g} s is negative")
    drops = np.flatnonzero(np.diff(times) < 0)
    if drops.size:
        k = int(drops[0])
        raise ValueError(
            f"cost model {label} is not monotone: c({grid[k]:.0f} B) = {times[k]:.6g} s > "
            f"c({grid[k + 1]:.0f} B) = {times[k + 1]:.6g} s"
        )

    def __repr__(self) -> str:
        return f"Problem({self.profile!r}, {self.cost!r}, sync={self.sync!r})"
