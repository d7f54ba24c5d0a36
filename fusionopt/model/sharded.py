"""Fully sharded data parallelism (MODEL.md section 8.2): the pattern, its collectives and its rules.

FSDP and DeepSpeed ZeRO-3 keep each parameter sharded over the ``P`` workers between uses.
The model is cut into contiguous **units** (FSDP's ``fully_shard`` groups, ZeRO-3's fetch
buckets); before a unit computes, its parameters are **all-gathered**, and after its
backward its gradients are **reduce-scattered**. fusionopt judges such a schedule with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.problem.Problem` built with
``fully_sharded=FullySharded(...)`` (the timing rules are in
:func:`fusionopt.model.sharded_timing.simulate_sharded`):

* :class:`FullySharded`: the reduce-scatter and all-gather costs, each priced on a message's
  unsharded size, and the memory cap;
* its plans are :class:`~fusionopt.model.sharded_plan.ShardedPlan` s: the units, whether
  each is resharded after its forward, the forward and backward prefetch depths, and
  optionally a grouping of the reduce-scatters independent of the units.

Examples
--------
>>> from fusionopt.model.profile import Profile
>>> from fusionopt.model.sharded_plan import ShardedPlan
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = ShardedPlan.from_units(p, [[0, 1], [2]], reshard=[True, False])
>>> plan.bounds.tolist(), plan.unit_bytes(p).tolist(), plan.num_units
([0, 2, 3], [5000000, 2000000], 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionopt.model.collectives import network
from fusionopt.model.cost import CommCost, Composite

__all__ = ["FullySharded"]


@dataclass(frozen=True)
class FullySharded:
    """The collectives and the memory of a fully sharded problem.

    Parameters
    ----------
    reduce_scatter, all_gather : CommCost
        Seconds for a message of ``S`` bytes, ``S`` its unsharded size (MODEL.md section 8).
    memory_cap : float, optional
        ``M``, bytes: a plan is feasible when the most bytes of unsharded parameters and
        gradients whole at once (``M_peak``, MODEL.md section 8.2) is at most ``M``. None: no
        cap.
    channels : {"one", "two"}
        ``"one"`` (the default): every collective runs in issue order on one channel.
        ``"two"``: the all-gathers run first in, first out on their own channel and the
        reduce-scatters on theirs (FSDP2's streams); while both carry a transfer they share
        the bandwidth equally (each pays its own startup in full), so both costs must be
        affine (:func:`~fusionopt.model.sharded_timing.simulate_sharded`).
    blocking : bool
        False (the default): the compute stream only waits for a collective where it needs
        its result (a GPU's streams). True: the training thread waits out every collective
        it issues, from its issue to its end, so no compute overlaps one (FSDP2 on CPU with
        gloo, whose all-gathers and reduce-scatters are synchronous on the training thread).
        One channel only.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9), memory_cap=-1)
    Traceback (most recent call last):
    ...
    ValueError: memory_cap must be a positive number of bytes or None, got -1
    >>> FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9), channels=2)
    Traceback (most recent call last):
    ...
    ValueError: channels must be 'one' or 'two', got 2
    >>> FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9), channels="two", blocking=True)
    Traceback (most recent call last):
    ...
    ValueError: blocking collectives run one at a time on the training thread: channels must be 'one', got 'two'
    """

    reduce_scatter: CommCost
    all_gather: CommCost
    memory_cap: float | None = None
    channels: str = "one"
    blocking: bool = False

    def __post_init__(self) -> None:
        for name in ("reduce_scatter", "all_gather"):
            value = getattr(self, name)
            if not isinstance(value, CommCost):
                raise ValueError(f"{name} must be a CommCost (e.g. AlphaBeta), got {type(value).__name__}")
        cap = self.memory_cap
        if cap is not None:
            if (isinstance(cap, bool) or not isinstance(cap, (int, float, np.integer, np.floating))
                    or not math.isfinite(cap) or cap <= 0):
                raise ValueError(f"memory_cap must be a positive number of bytes or None, got {cap!r}")
            object.__setattr__(self, "memory_cap", float(cap))
        if not isinstance(self.channels, str) or self.channels not in ("one", "two"):
            raise ValueError(f"channels must be 'one' or 'two', got {self.channels!r}")
        if self.channels == "two":
            for name in ("reduce_scatter", "all_gather"):
                if getattr(self, name).affine is None:
                    raise ValueError(f"channels='two' needs affine costs (alpha + beta S): {name} is "
                                     f"{type(getattr(self, name)).__name__}, not affine")
        if not isinstance(self.blocking, (bool, np.bool_)):
            raise ValueError(f"blocking must be True or False, got {self.blocking!r}")
        object.__setattr__(self, "blocking", bool(self.blocking))
        if self.blocking and self.channels != "one":
            raise ValueError("blocking collectives run one at a time on the training thread: channels must be "
                             f"'one', got {self.channels!r}")

    @classmethod
    def from_network(cls, name: str, workers: int, *, algorithm: str = "ring",
                     memory_cap: float | None = None, channels: str = "one",
                     blocking: bool = False) -> "FullySharded":
        """Both collectives on a preset network (:func:`~fusionopt.model.collectives.network`).

        >>> s = FullySharded.from_network("10gbe", workers=2)
        >>> round(s.all_gather.alpha * 1e6, 9), round(s.reduce_scatter.beta * 1.25e9, 9)   # a; g/2
        (25.0, 0.5)
        """
        return cls(network(name, workers, algorithm=algorithm, collective="reduce_scatter"),
                   network(name, workers, algorithm=algorithm, collective="all_gather"), memory_cap, channels,
                   blocking)

    @property
    def all_reduce(self) -> CommCost:
        """A reduce-scatter then an all-gather of the same message: the all-reduce they make."""
        return Composite([(self.reduce_scatter, 1.0), (self.all_gather, 1.0)])

    def with_cap(self, memory_cap: float | None) -> "FullySharded":
        """The same collectives (channels, blocking) under another memory cap (bytes; None: no cap)."""
        return FullySharded(self.reduce_scatter, self.all_gather, memory_cap, self.channels, self.blocking)
