"""Decoupled all-reduce (MODEL.md section 8.1): the pattern, its collectives and its rules.

ZeRO-1/2, Megatron's distributed optimiser and DeAR split each all-reduce into its two
halves: gradients are **reduce-scattered** as the backward produces them, each worker
updates its shard of the parameters (``u_i``, on the compute stream, after the backward),
and the new parameters are **all-gathered** before the forward that needs them. fusionopt
models the two kinds of message on one channel, in the plan's order, and judges them with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.Problem` built with
``pattern=Decoupled(...)`` (the timing rules are in
:func:`fusionopt.model.simulate_decoupled`):

* :class:`Decoupled`: the reduce-scatter and all-gather costs, each priced on a message's
  unsharded size (:func:`~fusionopt.cost.network` with ``collective=``);
* its plans are :class:`~fusionopt.model.DecoupledPlan` s: a reduce-scatter
  :class:`~fusionopt.model.Plan` and an all-gather ``Plan`` of the same profile and the
  order in which the channel runs their messages.

Examples
--------
>>> from fusionopt.model import DecoupledPlan, Profile
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
from typing import Any, ClassVar, Mapping

import numpy as np

from fusionopt.model._collectives import network
from fusionopt.model._cost import CommCost, Composite, cost_from_dict
from fusionopt.model._encoding import carried_in, check_dtype

from fusionopt.model._bounds import decoupled_lower_bound
from fusionopt.model._decoupled_plan import ALL_GATHER, DecoupledPlan
from fusionopt.model._decoupled_program import decoupled_program
from fusionopt.model._decoupled_timing import simulate_decoupled
from fusionopt.model._pattern import Pattern
from fusionopt.model._step_program import Program
from fusionopt.model._timeline import Timeline
from fusionopt.model._cost import check_flag

__all__ = ["Decoupled"]


@dataclass(frozen=True)
class Decoupled(Pattern):
    """The decoupled all-reduce pattern, by the two collectives of a decoupled all-reduce: ``reduce_scatter`` and ``all_gather``,
    each a :class:`~fusionopt.cost.CommCost` of a message's unsharded size in bytes.
    ``update_after_gather``: the all-gathers carry the reduced gradient shards and each tensor
    is updated just before its forward (DeAR), instead of each worker updating its shard
    after the backward and gathering parameters (ZeRO, Megatron; the default). ``workers``:
    the data-parallel size, when known (:meth:`from_network` sets it), for the methods whose
    rule depends on it (Megatron-LM's bucket size).

    >>> from fusionopt.cost import AlphaBeta
    >>> Decoupled(AlphaBeta(1e-4, 1e-9), "fast")
    Traceback (most recent call last):
    ...
    ValueError: all_gather must be a CommCost (e.g. AlphaBeta), got str
    """

    name: ClassVar[str] = "decoupled"
    words: ClassVar[str] = "decoupled"
    subject: ClassVar[str] = "the decoupled all-reduce"
    plan_type: ClassVar[type] = DecoupledPlan
    extension: ClassVar[str] = "decoupled"

    reduce_scatter: CommCost
    all_gather: CommCost
    update_after_gather: bool = False
    workers: int | None = None

    def __post_init__(self) -> None:
        for name in ("reduce_scatter", "all_gather"):
            value = getattr(self, name)
            if not isinstance(value, CommCost):
                raise ValueError(f"{name} must be a CommCost (e.g. AlphaBeta), got {type(value).__name__}")
        check_flag("update_after_gather", self.update_after_gather)
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, (int, np.integer))
                                         or self.workers < 1):
            raise ValueError(f"workers must be a whole number >= 1 or None, got {self.workers!r}")

    @classmethod
    def from_network(cls, name: str, workers: int, *, algorithm: str = "ring",
                     update_after_gather: bool = False) -> "Decoupled":
        """Both halves on a preset network (:func:`~fusionopt.cost.network`)."""
        return cls(network(name, workers, algorithm=algorithm, collective="reduce_scatter"),
                   network(name, workers, algorithm=algorithm, collective="all_gather"), update_after_gather,
                   int(workers))

    @classmethod
    def mixed_precision(cls, reduce_scatter: CommCost, all_gather: CommCost, *, param_dtype: str = "bf16",
                        grad_reduce_in_fp32: bool = False, update_after_gather: bool = False,
                        workers: int | None = None) -> "Decoupled":
        """Megatron-LM's DDP in mixed precision: ``reduce_scatter`` and ``all_gather`` priced as
        fp32 messages, carried as its buffers hold them (:class:`~fusionopt.cost.Encoded`).

        Read in NVIDIA/Megatron-LM at ``d98e8a6`` (``megatron/core/distributed``): the gradient
        buffer, and so the reduce-scatter, is in fp32 with ``grad_reduce_in_fp32=True`` (its
        ``DistributedDataParallelConfig`` default is False), else in the parameters' dtype
        (``param_and_grad_buffer.group_params_for_buffers``); the distributed optimiser
        all-gathers the parameters in their dtype. With ``update_after_gather`` (DeAR) the
        all-gathers carry reduced gradient shards, so the gradient's dtype. Megatron is not
        installable here: no run of it checks this.

        >>> from fusionopt.cost import AlphaBeta
        >>> d = Decoupled.mixed_precision(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9), grad_reduce_in_fp32=True)
        >>> round(d.reduce_scatter(4e6) * 1e3, 9), round(d.all_gather(4e6) * 1e3, 9)
        (4.0, 2.0)
        """
        check_dtype("param_dtype", param_dtype, optional=False)
        check_flag("grad_reduce_in_fp32", grad_reduce_in_fp32)
        gradient = "fp32" if grad_reduce_in_fp32 else param_dtype
        gather = gradient if update_after_gather else param_dtype
        return cls(carried_in(reduce_scatter, gradient), carried_in(all_gather, gather), update_after_gather, workers)

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

    @property
    def collectives(self) -> dict[str, CommCost]:
        return {"reduce_scatter": self.reduce_scatter, "all_gather": self.all_gather}

    def to_dict(self) -> dict[str, Any]:
        return {"reduce_scatter": self.reduce_scatter.to_dict(), "all_gather": self.all_gather.to_dict(),
                "update_after_gather": bool(self.update_after_gather), "workers": self.workers}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "decoupled") -> "Decoupled":
        """Rebuild the pattern from its :meth:`to_dict` form; one line naming ``source`` if
        it is not one."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a mapping, got {type(doc).__name__}")
        halves = [cost_from_dict(doc.get(half), source=f"{source}.{half}") for half in ("reduce_scatter", "all_gather")]
        return cls(*halves, bool(doc.get("update_after_gather", False)), doc.get("workers"))

    def channel_cost(self, given: Any) -> CommCost:
        if given is not None:
            raise ValueError("a decoupled problem is priced by its reduce-scatter and all-gather costs: "
                             "leave cost out (it is the all-reduce they make)")
        return self.all_reduce

    def check(self, problem: Any) -> None:
        self.refuse_options(problem)
        whole = [part for part in ("update_lump", "post_backward") if getattr(problem.profile, part)]
        if whole:
            raise ValueError(
                f"profile {problem.profile.name or 'without a name'!r} has {' and '.join(whole)} time; a decoupled "
                "all-reduce updates each tensor's shard after its reduce-scatter (MODEL.md section 8.1) and runs no "
                "DDP copies: step_parts='fit' spreads the lump over the tensors' update times and drops the copies")

    def _simulate(self, problem: Any, plan: DecoupledPlan, *, validate: bool, pieces: list | None) -> Timeline:
        return simulate_decoupled(problem, plan, validate=validate, pieces=pieces)

    def lower_bound(self, problem: Any, space: str = "any") -> float:
        return decoupled_lower_bound(problem)

    def program(self, problem: Any, plan: DecoupledPlan) -> Program:
        """The step program of ``plan`` (validated; an order that can never run is refused,
        naming it)."""
        self.simulate(problem, plan)
        return decoupled_program(problem, plan)
