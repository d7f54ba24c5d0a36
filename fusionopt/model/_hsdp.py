"""Hybrid sharded data parallelism (HSDP; MODEL.md section 8.2 on each mesh axis): the pattern.

HSDP lays the ``P = R x S`` workers on a two-dimensional mesh: parameters are sharded over
the ``S`` workers of a shard group (often one machine) and replicated over the ``R`` shard
groups. Per unit, as FSDP2 runs it on a 2-D mesh (``fully_shard(mesh=...)`` with a
``(replicate, shard)`` mesh; torch 2.13, ``_fsdp_collectives.foreach_reduce``):

* the parameters are all-gathered over the shard group, ``c_AG,S(b)`` for ``b`` unsharded
  bytes;
* the gradients are reduce-scattered over the shard group, then each worker's ``b / S``
  bytes of reduced shard are all-reduced over the replicate group: ``c_RS,S(b) + c_AR,R(b / S)``.

:class:`HSDP` is a :class:`~fusionopt.model.FullySharded` whose reduce-scatter is that
sum (a :class:`~fusionopt.cost.Composite` of the two axes' costs) and whose all-gather
is the shard axis's, so the fully sharded step (units, resharding, prefetch, the memory cap),
its simulator, its lower bound and every fully sharded method (``fsdp2`` with FSDP2's
defaults, ``sharded-brute`` on small instances, ...) apply to it unchanged.

Reconstruction: torch 2.13 issues each all-reduce on a stream of its own that waits for the
reduce-scatter, so one unit's all-reduce may overlap the next unit's reduce-scatter; the
model runs the two back to back on the reduce-scatter's channel, so it never predicts them
overlapped (a bound from above on that part of the step).

Examples
--------
>>> from fusionopt.model import Problem, Profile, ShardedPlan, simulate
>>> h = HSDP.from_network("100gb-ib", replicas=2, shards=8, shard_network="nvlink-h100")
>>> h.name, h.workers, round(h.reduce_scatter(8e6) * 1e6, 3), round(h.all_gather(8e6) * 1e6, 3)
('hsdp', 16, 106.556, 22.556)
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> round(simulate(Problem(p, pattern=h), ShardedPlan.from_units(p, [[0, 1], [2]])).iteration_time * 1e3, 6)
9.098333
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from fusionopt.model._collectives import network
from fusionopt.model._cost import CommCost, Composite, cost_from_dict
from fusionopt.model._overhead import with_message_overhead
from fusionopt.model._sharded import FullySharded

__all__ = ["HSDP"]


class HSDP(FullySharded):
    """Hybrid sharded data parallelism: ``shards`` workers per shard group, the shard axis's
    ``shard_reduce_scatter`` and ``shard_all_gather`` (each of a message's unsharded bytes)
    and the replicate axis's ``replicate_all_reduce`` over ``replicas`` groups (of the bytes
    it carries, ``b / shards``). ``memory_cap``, ``channels`` and ``blocking`` are
    :class:`~fusionopt.model.FullySharded`'s.

    >>> from fusionopt.cost import AlphaBeta
    >>> HSDP(AlphaBeta(1e-5, 1e-10), AlphaBeta(1e-5, 1e-10), AlphaBeta(1e-4, 1e-9), shards=0, replicas=2)
    Traceback (most recent call last):
    ...
    ValueError: shards must be a whole number >= 1, got 0
    """

    name: ClassVar[str] = "hsdp"
    words: ClassVar[str] = "hybrid sharded"
    subject: ClassVar[str] = "HSDP"
    extension: ClassVar[str] = "hsdp"

    def __init__(self, shard_reduce_scatter: CommCost, shard_all_gather: CommCost, replicate_all_reduce: CommCost,
                 *, shards: int, replicas: int, memory_cap: float | None = None, channels: str = "one",
                 blocking: bool = False) -> None:
        _check_counts(shards, replicas)
        if not isinstance(replicate_all_reduce, CommCost):
            raise ValueError(f"replicate_all_reduce must be a CommCost, got {type(replicate_all_reduce).__name__}")
        gradients = Composite([(shard_reduce_scatter, 1.0), (replicate_all_reduce, 1.0 / shards)])
        super().__init__(gradients, shard_all_gather, memory_cap, channels, blocking)
        for label, value in (("shard_reduce_scatter", shard_reduce_scatter), ("replicate_all_reduce", replicate_all_reduce),
                             ("shards", shards), ("replicas", replicas)):
            object.__setattr__(self, label, value)

    @classmethod
    def from_network(cls, name: str, *, replicas: int, shards: int, shard_network: str | None = None,
                     algorithm: str = "ring", **options: Any) -> "HSDP":
        """Both axes on preset networks (:func:`~fusionopt.cost.network`): the
        replicate axis on ``name``, the shard axis on ``shard_network`` (default ``name``).
        ``options``: ``memory_cap``, ``channels``, ``blocking``."""
        _check_counts(shards, replicas)
        inner = name if shard_network is None else shard_network
        return cls(network(inner, shards, algorithm=algorithm, collective="reduce_scatter"),
                   network(inner, shards, algorithm=algorithm, collective="all_gather"),
                   network(name, replicas, algorithm=algorithm), shards=shards, replicas=replicas, **options)

    @property
    def workers(self) -> int:
        """``P = R x S``."""
        return self.replicas * self.shards

    @property
    def collectives(self) -> dict[str, CommCost]:
        return {"reduce_scatter": self.shard_reduce_scatter, "all_gather": self.all_gather,
                "all_reduce": self.replicate_all_reduce}

    def with_cap(self, memory_cap: float | None) -> "HSDP":
        return self._with(memory_cap=memory_cap)

    def with_message_overhead(self, seconds: float, per_byte: float = 0.0) -> "HSDP":
        """``seconds + per_byte * S`` more on each collective call of ``S`` bytes: the
        reduce-scatter, the all-reduce after it and the all-gather."""
        more = [with_message_overhead(cost, seconds, per_byte)
                for cost in (self.shard_reduce_scatter, self.all_gather, self.replicate_all_reduce)]
        return HSDP(*more, shards=self.shards, replicas=self.replicas,
                    memory_cap=self.memory_cap, channels=self.channels, blocking=self.blocking)

    def _with(self, **changes: Any) -> "HSDP":
        settings = {"shards": self.shards, "replicas": self.replicas, "memory_cap": self.memory_cap,
                    "channels": self.channels, "blocking": self.blocking, **changes}
        return HSDP(self.shard_reduce_scatter, self.all_gather, self.replicate_all_reduce, **settings)

    def to_dict(self) -> dict[str, Any]:
        return {"shard_reduce_scatter": self.shard_reduce_scatter.to_dict(), "shard_all_gather": self.all_gather.to_dict(),
                "replicate_all_reduce": self.replicate_all_reduce.to_dict(), "shards": self.shards,
                "replicas": self.replicas, "memory_cap": self.memory_cap, "channels": self.channels,
                "blocking": bool(self.blocking)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "hsdp") -> "HSDP":
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a mapping, got {type(doc).__name__}")
        costs = [cost_from_dict(doc.get(key), source=f"{source}.{key}")
                 for key in ("shard_reduce_scatter", "shard_all_gather", "replicate_all_reduce")]
        return cls(*costs, shards=doc.get("shards"), replicas=doc.get("replicas"), memory_cap=doc.get("memory_cap"),
                   channels=doc.get("channels", "one"), blocking=bool(doc.get("blocking", False)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HSDP) and self.to_dict() == other.to_dict()

    __hash__ = FullySharded.__hash__

    def __repr__(self) -> str:
        extras = "".join(f", {key}={getattr(self, key)!r}" for key, default in
                         (("memory_cap", None), ("channels", "one"), ("blocking", False)) if getattr(self, key) != default)
        return (f"HSDP({self.shard_reduce_scatter!r}, {self.all_gather!r}, {self.replicate_all_reduce!r}, "
                f"shards={self.shards}, replicas={self.replicas}{extras})")


def _check_counts(shards: Any, replicas: Any) -> None:
    for label, value in (("shards", shards), ("replicas", replicas)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a whole number >= 1, got {value!r}")
