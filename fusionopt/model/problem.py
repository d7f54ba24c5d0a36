"""A scheduling problem: a workload, a cost model and a synchronisation rule."""

from __future__ import annotations

from dataclasses import dataclass

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

    def __repr__(self) -> str:
        return f"Problem({self.profile!r}, {self.cost!r}, sync={self.sync!r})"
