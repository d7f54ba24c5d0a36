"""Decoupled all-reduce (MODEL.md section 8.1): the pattern, its collectives and its rules.

ZeRO-1/2, Megatron's distributed optimiser and DeAR split each all-reduce into its two
halves: gradients are **reduce-scattered** as the backward produces them, each worker
updates its shard of the parameters (``u_i``, on the compute stream, after the backward),
and the new parameters are **all-gathered** before the forward that needs them. fusionopt
models the two kinds of message on one channel, in the plan's order, and judges them with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.problem.Problem` built with
``decoupled=Decoupled(...)`` (the timing rules are in
:func:`fusionopt.model.decoupled_timing.simulate_decoupled`):

* :class:`Decoupled`: the reduce-scatter and all-gather costs, each priced on a message's
  unsharded size (:func:`~fusionopt.model.collectives.network` with ``collective=``);
* its plans are :class:`~fusionopt.model.decoupled_plan.DecoupledPlan` s: a reduce-scatter
  :class:`~fusionopt.model.plan.Plan` and an all-gather ``Plan`` of the same profile and the
  order in which the channel runs their messages.

Examples
--------
>>> from fusionopt.model.decoupled_plan import DecoupledPlan
>>> from fusionopt.model.profile import Profile
>>> d = Decoupled.from_network("10gbe", workers=8)
>>> round(d.reduce_scatter.alpha * 1e6, 9), round(d.all_gather.beta * 1.25e9, 9)   # 7 a; 7/8 g
(175.0, 0.875)
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = DecoupledPlan.from_groups(p, reduce_scatter=[[2], [1, 0]], all_gather=[[0, 1, 2]])
>>> plan.order.tolist(), plan.validate(p).num_messages
([0, 0, 1], 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusionopt.model.collectives import network
from fusionopt.model.cost import CommCost, Composite

from fusionopt.model.decoupled_plan import ALL_GATHER

__all__ = ["Decoupled"]


@dataclass(frozen=True)
class Decoupled:
    """The two collectives of a decoupled all-reduce: ``reduce_scatter`` and ``all_gather``,
    each a :class:`~fusionopt.model.cost.CommCost` of a message's unsharded size in bytes.
    ``update_after_gather``: the all-gathers carry the reduced gradient shards and each tensor
    is updated just before its forward (DeAR), instead of each worker updating its shard
    after the backward and gathering parameters (ZeRO, Megatron; the default). ``workers``:
    the data-parallel size, when known (:meth:`from_network` sets it), for the methods whose
    rule depends on it (Megatron-LM's bucket size).

    >>> from fusionopt.model.cost import AlphaBeta
    >>> Decoupled(AlphaBeta(1e-4, 1e-9), "fast")
    Traceback (most recent call last):
    ...
    ValueError: all_gather must be a CommCost (e.g. AlphaBeta), got str
    """

    reduce_scatter: CommCost
    all_gather: CommCost
    update_after_gather: bool = False
    workers: int | None = None

    def __post_init__(self) -> None:
        for name in ("reduce_scatter", "all_gather"):
            value = getattr(self, name)
            if not isinstance(value, CommCost):
                raise ValueError(f"{name} must be a CommCost (e.g. AlphaBeta), got {type(value).__name__}")
        if not isinstance(self.update_after_gather, (bool, np.bool_)):
            raise ValueError(f"update_after_gather must be True or False, got {self.update_after_gather!r}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, (int, np.integer))
                                         or self.workers < 1):
            raise ValueError(f"workers must be a whole number >= 1 or None, got {self.workers!r}")

    @classmethod
    def from_network(cls, name: str, workers: int, *, algorithm: str = "ring",
                     update_after_gather: bool = False) -> "Decoupled":
        """Both halves on a preset network (:func:`~fusionopt.model.collectives.network`)."""
        return cls(network(name, workers, algorithm=algorithm, collective="reduce_scatter"),
                   network(name, workers, algorithm=algorithm, collective="all_gather"), update_after_gather,
                   int(workers))

    @property
    def all_reduce(self) -> CommCost:
        """A reduce-scatter then an all-gather of the same message: the all-reduce they make."""
        return Composite([(self.reduce_scatter, 1.0), (self.all_gather, 1.0)])

    def cost(self, kind: int, reduce_with: str = "reduce_scatter") -> CommCost:
        """The cost of a message of ``kind`` (:data:`REDUCE_SCATTER` or :data:`ALL_GATHER`);
        a gradient message reduced by an all-reduce costs :attr:`all_reduce`."""
        if kind == ALL_GATHER:
            return self.all_gather
        return self.all_reduce if reduce_with == "all_reduce" else self.reduce_scatter
