"""Fully sharded data parallelism (MODEL.md section 8.2): the pattern, its collectives and its rules.

FSDP and DeepSpeed ZeRO-3 keep each parameter sharded over the ``P`` workers between uses.
The model is cut into contiguous **units** (FSDP's ``fully_shard`` groups, ZeRO-3's fetch
buckets); before a unit computes, its parameters are **all-gathered**, and after its
backward its gradients are **reduce-scattered**. fusionopt judges such a schedule with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.Problem` built with
``pattern=FullySharded(...)`` (the timing rules are in
:func:`fusionopt.model.simulate_sharded`):

* :class:`FullySharded`: the reduce-scatter and all-gather costs, each priced on a message's
  unsharded size, and the memory cap;
* its plans are :class:`~fusionopt.model.ShardedPlan` s: the units, whether
  each is resharded after its forward, the forward and backward prefetch depths, and
  optionally a grouping of the reduce-scatters independent of the units.

Examples
--------
>>> from fusionopt.model import Profile, ShardedPlan
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = ShardedPlan.from_units(p, [[0, 1], [2]], reshard=[True, False])
>>> plan.bounds.tolist(), plan.unit_bytes(p).tolist(), plan.num_units
([0, 2, 3], [5000000, 2000000], 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from fusionopt.model._collectives import network
from fusionopt.model._bounds import sharded_lower_bound
from fusionopt.model._cost import CommCost, Composite, cost_from_dict
from fusionopt.model._encoding import ENCODINGS, Encoded, carried_in, check_dtype
from fusionopt.model._overhead import with_message_overhead
from fusionopt.model._pattern import Pattern
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._sharded_program import sharded_program
from fusionopt.model._sharded_timing import simulate_sharded
from fusionopt.model._step_program import Program
from fusionopt.model._timeline import Timeline
from fusionopt.model._cost import check_flag

__all__ = ["FullySharded"]


@dataclass(frozen=True)
class FullySharded(Pattern):
    """The fully sharded pattern: the collectives and the memory of a fully sharded problem.

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
        affine (:func:`~fusionopt.model.simulate_sharded`).
    blocking : bool
        False (the default): the compute stream only waits for a collective where it needs
        its result (a GPU's streams). True: the training thread waits out every collective
        it issues, from its issue to its end, so no compute overlaps one (FSDP2 on CPU with
        gloo, whose all-gathers and reduce-scatters are synchronous on the training thread).
        One channel only.
    param_dtype, reduce_dtype : {"fp32", "fp16", "bf16"} or None
        FSDP2's ``MixedPrecisionPolicy`` (torch 2.13, ``_fully_shard/_fsdp_api.py``): the
        unsharded parameters, and so the all-gather, in ``param_dtype``; the gradients
        reduced in ``reduce_dtype``, or in ``param_dtype`` where that is None. None: the
        profile's fp32 throughout. They set what is whole (MODEL.md 8.2's ``M_peak``): the
        gathered and persistent parameters at ``param_dtype``'s width, the unsharded gradients
        at the wider of ``param_dtype`` (computed in it) and the reduce dtype (the
        reduce-scatter's input is cast to it: FSDP2's ``foreach_reduce``; counting the wider
        for the whole span is a reconstruction). What the collectives carry is their costs':
        a low-precision dtype needs its cost carried in it (:class:`~fusionopt.cost.Encoded`,
        as :meth:`mixed_precision` builds), and a profile of fp32 tensors.

    >>> from fusionopt.cost import AlphaBeta
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

    name: ClassVar[str] = "fully-sharded"
    words: ClassVar[str] = "fully sharded"
    subject: ClassVar[str] = "fully_sharded"
    plan_type: ClassVar[type] = ShardedPlan
    extension: ClassVar[str] = "fully_sharded"

    reduce_scatter: CommCost
    all_gather: CommCost
    memory_cap: float | None = None
    channels: str = "one"
    blocking: bool = False
    param_dtype: str | None = None
    reduce_dtype: str | None = None

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
        check_flag("blocking", self.blocking)
        object.__setattr__(self, "blocking", bool(self.blocking))
        if self.blocking and self.channels != "one":
            raise ValueError("blocking collectives run one at a time on the training thread: channels must be "
                             f"'one', got {self.channels!r}")
        for label in ("param_dtype", "reduce_dtype"):
            check_dtype(label, getattr(self, label))
        for label, dtype, cost in (("all_gather", self.gather_dtype, self.all_gather),
                                   ("reduce_scatter", self.scatter_dtype, self.reduce_scatter)):
            carried = cost.encoding.name if isinstance(cost, Encoded) else "fp32"
            if carried != dtype:
                raise ValueError(f"param_dtype={self.param_dtype!r} and reduce_dtype={self.reduce_dtype!r} carry the "
                                 f"{label.replace('_', '-')} in {dtype}, but its cost carries {carried}: give "
                                 f"{label}=Encoded(cost, {dtype!r}), or build it with FullySharded.mixed_precision")

    @property
    def gather_dtype(self) -> str:
        """What the all-gathers carry: ``param_dtype``, else fp32."""
        return self.param_dtype or "fp32"

    @property
    def scatter_dtype(self) -> str:
        """What the reduce-scatters carry: ``reduce_dtype``, else ``param_dtype``, else fp32."""
        return self.reduce_dtype or self.param_dtype or "fp32"

    @property
    def whole_widths(self) -> tuple[float, float]:
        """Bytes whole per profile (fp32) byte: of an unsharded parameter, and of an unsharded
        gradient (the wider of ``param_dtype`` and the reduce dtype)."""
        param = ENCODINGS[self.gather_dtype].wire_ratio
        return param, max(param, ENCODINGS[self.scatter_dtype].wire_ratio)

    @classmethod
    def mixed_precision(cls, reduce_scatter: CommCost, all_gather: CommCost, *, param_dtype: str | None,
                        reduce_dtype: str | None = None, **options: Any) -> "FullySharded":
        """FSDP2 under ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``: ``reduce_scatter``
        and ``all_gather`` priced as fp32 messages, each carried in its dtype
        (:class:`~fusionopt.cost.Encoded`; the casts at the encoding's default cost, none).
        ``options``: ``memory_cap``, ``channels``, ``blocking``.

        >>> from fusionopt.cost import AlphaBeta
        >>> s = FullySharded.mixed_precision(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9), param_dtype="bf16",
        ...                                  reduce_dtype="fp32")
        >>> round(s.all_gather(4e6) * 1e3, 9), round(s.reduce_scatter(4e6) * 1e3, 9), s.whole_widths
        (2.0, 4.0, (0.5, 1.0))
        """
        check_dtype("param_dtype", param_dtype)
        check_dtype("reduce_dtype", reduce_dtype)
        return cls(carried_in(reduce_scatter, reduce_dtype or param_dtype or "fp32"),
                   carried_in(all_gather, param_dtype or "fp32"),
                   param_dtype=param_dtype, reduce_dtype=reduce_dtype, **options)

    @classmethod
    def from_network(cls, name: str, workers: int, *, algorithm: str = "ring",
                     memory_cap: float | None = None, channels: str = "one",
                     blocking: bool = False, param_dtype: str | None = None,
                     reduce_dtype: str | None = None) -> "FullySharded":
        """Both collectives on a preset network (:func:`~fusionopt.cost.network`).

        >>> s = FullySharded.from_network("10gbe", workers=2)
        >>> round(s.all_gather.alpha * 1e6, 9), round(s.reduce_scatter.beta * 1.25e9, 9)   # a; g/2
        (25.0, 0.5)
        """
        return cls.mixed_precision(network(name, workers, algorithm=algorithm, collective="reduce_scatter"),
                                   network(name, workers, algorithm=algorithm, collective="all_gather"),
                                   param_dtype=param_dtype, reduce_dtype=reduce_dtype, memory_cap=memory_cap,
                                   channels=channels, blocking=blocking)

    @property
    def all_reduce(self) -> CommCost:
        """A reduce-scatter then an all-gather of the same message: the all-reduce they make."""
        return Composite([(self.reduce_scatter, 1.0), (self.all_gather, 1.0)])

    def with_cap(self, memory_cap: float | None) -> "FullySharded":
        """The same collectives (channels, blocking, dtypes) under another memory cap (bytes; None: no cap)."""
        return FullySharded(self.reduce_scatter, self.all_gather, memory_cap, self.channels, self.blocking,
                            self.param_dtype, self.reduce_dtype)

    def with_message_overhead(self, seconds: float, per_byte: float = 0.0) -> "FullySharded":
        return FullySharded(with_message_overhead(self.reduce_scatter, seconds, per_byte),
                            with_message_overhead(self.all_gather, seconds, per_byte), self.memory_cap, self.channels,
                            self.blocking, self.param_dtype, self.reduce_dtype)

    def without_cap(self) -> "FullySharded":
        return self.with_cap(None)

    @property
    def collectives(self) -> dict[str, CommCost]:
        return {"reduce_scatter": self.reduce_scatter, "all_gather": self.all_gather}

    def to_dict(self) -> dict[str, Any]:
        document = {"reduce_scatter": self.reduce_scatter.to_dict(), "all_gather": self.all_gather.to_dict(),
                    "memory_cap": self.memory_cap, "channels": self.channels, "blocking": bool(self.blocking)}
        if self.param_dtype is not None or self.reduce_dtype is not None:
            document.update(param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype)
        return document

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "sharded") -> "FullySharded":
        """Rebuild the pattern from its :meth:`to_dict` form; one line naming ``source`` if
        it is not one."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a mapping, got {type(doc).__name__}")
        halves = [cost_from_dict(doc.get(half), source=f"{source}.{half}") for half in ("reduce_scatter", "all_gather")]
        return cls(*halves, doc.get("memory_cap"), doc.get("channels", "one"), bool(doc.get("blocking", False)),
                   doc.get("param_dtype"), doc.get("reduce_dtype"))

    def channel_cost(self, given: Any) -> CommCost:
        if given is not None:
            raise ValueError("a fully sharded problem is priced by its reduce-scatter and all-gather costs: "
                             "leave cost out (it is the all-reduce they make)")
        return self.all_reduce

    def check(self, problem: Any) -> None:
        if problem.sync != "barrier":
            raise ValueError(f"a fully sharded step has its own order (MODEL.md section 8.2: forward, backward, "
                             f"optimiser), so sync does not apply; leave it at 'barrier', not {problem.sync!r}")
        self.refuse_options(problem)
        if (self.param_dtype or self.reduce_dtype) and not (problem.profile.element_bytes == 4).all():
            widths = sorted(set(problem.profile.element_bytes.tolist()) - {4})
            raise ValueError(f"param_dtype and reduce_dtype recast a profile of fp32 tensors: profile "
                             f"{problem.profile.name or 'without a name'!r} has tensors of {widths} bytes an element")
        if problem.profile.post_backward:
            raise ValueError(
                f"profile {problem.profile.name or 'without a name'!r} has post_backward time (DDP's copies of the "
                "reduced buckets), which a fully sharded step does not run: drop it with step_parts='fit'")

    def _simulate(self, problem: Any, plan: ShardedPlan, *, validate: bool, pieces: list | None) -> Timeline:
        return simulate_sharded(problem, plan, validate=validate, pieces=pieces)

    def lower_bound(self, problem: Any, space: str = "any") -> float:
        return sharded_lower_bound(problem)

    def program(self, problem: Any, plan: ShardedPlan) -> Program:
        """The step program of ``plan`` (validated); one communicator only."""
        self.require_plan(plan)
        if self.channels != "one":
            raise ValueError("the executor runs one communicator: FullySharded(channels='two') is not executable")
        plan.validate(problem.profile)
        return sharded_program(problem, plan)
