"""A decoupled all-reduce's plan (MODEL.md section 8.1): its two groupings and their order.

A :class:`DecoupledPlan` holds a reduce-scatter :class:`~fusionopt.model.Plan` and an
all-gather ``Plan`` of the same profile (each sends every byte exactly once; the two
groupings may differ) and the order in which the channel runs their messages. Its JSON
document (:data:`DECOUPLED_SCHEMA`) is read and written here; the pattern that judges it is
:class:`~fusionopt.model.Decoupled`.

Examples
--------
>>> from fusionopt.model import Profile
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = DecoupledPlan.from_groups(p, reduce_scatter=[[2], [1, 0]], all_gather=[[0, 1, 2]])
>>> plan.order.tolist(), plan.validate(p).num_messages
([0, 0, 1], 3)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._plan import Plan
from fusionopt.model._profile import Profile

__all__ = ["DecoupledPlan", "REDUCE_SCATTER", "ALL_GATHER", "KINDS", "DECOUPLED_SCHEMA", "DECOUPLED_VERSION"]

DECOUPLED_SCHEMA = "fusionopt.decoupledplan"
DECOUPLED_VERSION = 1

REDUCE_SCATTER, ALL_GATHER = 0, 1
KINDS = ("reduce-scatter", "all-gather")
REDUCERS = ("reduce_scatter", "all_reduce")


class DecoupledPlan:
    """A reduce-scatter plan, an all-gather plan and the channel's order of their messages.

    Parameters
    ----------
    reduce_scatter, all_gather : Plan
        Each sends every byte of every tensor exactly once (MODEL.md section 3); message
        release times are kept (a message starts no earlier than its release).
    order : sequence of int, optional
        The channel's order: ``0`` for the next reduce-scatter message, ``1`` for the next
        all-gather message, each plan's messages taken in their own order. Default: every
        reduce-scatter, then every all-gather.
    reduce_with : {"reduce_scatter", "all_reduce"}
        The collective the gradient messages use: a reduce-scatter (default), or an
        all-reduce of which each worker keeps its shard (DeepSpeed ZeRO-1/2 as deployed),
        priced at ``c_RS + c_AG``.
    """

    __slots__ = ("reduce_scatter", "all_gather", "order", "reduce_with")

    def __init__(self, reduce_scatter: Plan, all_gather: Plan, order: Sequence[int] | np.ndarray | None = None,
                 reduce_with: str = "reduce_scatter") -> None:
        for name, plan in (("reduce_scatter", reduce_scatter), ("all_gather", all_gather)):
            if not isinstance(plan, Plan):
                raise ValueError(f"{name} must be a Plan, got {type(plan).__name__}")
        counts = (reduce_scatter.num_messages, all_gather.num_messages)
        if order is None:
            kinds = np.repeat(np.array([REDUCE_SCATTER, ALL_GATHER], dtype=np.int8), counts)
        else:
            kinds = np.asarray(order)
            if kinds.ndim != 1 or not np.isin(kinds, (REDUCE_SCATTER, ALL_GATHER)).all():
                raise ValueError("order must list 0 (reduce-scatter) and 1 (all-gather) for each message")
            kinds = kinds.astype(np.int8)
            got = (int((kinds == REDUCE_SCATTER).sum()), int((kinds == ALL_GATHER).sum()))
            if got != counts:
                raise ValueError(f"order has {got[0]} reduce-scatter and {got[1]} all-gather entries; "
                                 f"the plans have {counts[0]} and {counts[1]} messages")
        kinds.setflags(write=False)
        if reduce_with not in REDUCERS:
            raise ValueError(f"unknown reduce_with {reduce_with!r}: choose 'reduce_scatter' or 'all_reduce'")
        self.reduce_scatter, self.all_gather, self.order = reduce_scatter, all_gather, kinds
        self.reduce_with = reduce_with

    @classmethod
    def from_groups(cls, profile: Profile, reduce_scatter: Sequence[Sequence[int]],
                    all_gather: Sequence[Sequence[int]], order: Sequence[int] | None = None,
                    reduce_with: str = "reduce_scatter") -> "DecoupledPlan":
        """Whole-tensor messages: ``reduce_scatter`` and ``all_gather`` list each message's tensors."""
        return cls(Plan.from_groups(profile, reduce_scatter), Plan.from_groups(profile, all_gather), order, reduce_with)

    def plan(self, kind: int) -> Plan:
        """The plan of ``kind`` (:data:`REDUCE_SCATTER` or :data:`ALL_GATHER`)."""
        return self.reduce_scatter if kind == REDUCE_SCATTER else self.all_gather

    @property
    def num_messages(self) -> int:
        return self.reduce_scatter.num_messages + self.all_gather.num_messages

    def validate(self, profile: Profile) -> "DecoupledPlan":
        """Check that each plan sends every byte of ``profile`` exactly once; return self."""
        for kind, plan in ((REDUCE_SCATTER, self.reduce_scatter), (ALL_GATHER, self.all_gather)):
            try:
                plan.validate(profile)
            except ValueError as exc:
                raise ValueError(f"{KINDS[kind]} plan: {exc}") from None
        return self

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, DecoupledPlan):
            return NotImplemented
        return (self.reduce_scatter == other.reduce_scatter and self.all_gather == other.all_gather
                and np.array_equal(self.order, other.order) and self.reduce_with == other.reduce_with)

    def __hash__(self) -> int:
        return hash((self.reduce_scatter, self.all_gather, self.order.tobytes(), self.reduce_with))

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (schema ``fusionopt.decoupledplan``, version 1).

        >>> p = Profile.from_arrays([8, 8], [0.0] * 2, [1.0] * 2)
        >>> plan = DecoupledPlan.from_groups(p, [[1], [0]], [[0, 1]], order=[0, 1, 0], reduce_with="all_reduce")
        >>> DecoupledPlan.from_dict(plan.to_dict()) == plan
        True
        """
        return {
            "schema": DECOUPLED_SCHEMA,
            "version": DECOUPLED_VERSION,
            "reduce_with": self.reduce_with,
            "order": self.order.tolist(),
            "reduce_scatter": self.reduce_scatter.to_dict(),
            "all_gather": self.all_gather.to_dict(),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "decoupled plan") -> "DecoupledPlan":
        """Read :meth:`to_dict`'s form; anything malformed is one ``ValueError`` naming ``source``."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        if doc.get("schema") != DECOUPLED_SCHEMA:
            raise ValueError(f"{source}: schema is {doc.get('schema')!r}, expected {DECOUPLED_SCHEMA!r}")
        if doc.get("version") != DECOUPLED_VERSION:
            raise ValueError(f"{source}: unsupported decoupled plan version {doc.get('version')!r} "
                             f"(this fusionopt reads {DECOUPLED_VERSION})")
        unknown = sorted(set(doc) - {"schema", "version", "reduce_with", "order", "reduce_scatter", "all_gather"})
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r}")
        parts = {}
        for label in ("reduce_scatter", "all_gather"):
            if label not in doc:
                raise ValueError(f"{source}: no {label!r} plan")
            parts[label] = Plan.from_dict(doc[label], source=f"{source}: {label}")
        order = doc.get("order")
        if not isinstance(order, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in order):
            raise ValueError(f"{source}: 'order' must be a list of 0 (reduce-scatter) and 1 (all-gather)")
        try:
            return cls(parts["reduce_scatter"], parts["all_gather"], order, doc.get("reduce_with", "reduce_scatter"))
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def write(self, path: str | Path) -> None:
        """Write the plan as JSON to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> "DecoupledPlan":
        """Read a decoupled plan JSON file; a malformed one raises ``ValueError`` naming the file."""
        return cls.from_dict(read_json_document(path), source=str(path))

    def __repr__(self) -> str:
        return (f"DecoupledPlan({self.reduce_scatter.num_messages} reduce-scatter and "
                f"{self.all_gather.num_messages} all-gather messages)")
