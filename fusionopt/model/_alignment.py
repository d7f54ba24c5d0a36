"""Alignment cliffs: a message whose per-rank payload breaks an alignment costs more (MODEL.md
section 2.3).

Collective libraries move each rank's part of a message in aligned pieces; a part that is not
a whole number of them can take a slower path. Two reports put numbers on it: a fused Horovod
all-gather of 6,292,992 bytes took under 2 ms and one of 6,294,530 bytes over 7 ms (horovod
PR #3727), and FSDP2 payloads that are not a multiple of 16 bytes per rank run far slower
(pytorch issue #195450). Frameworks that know it pad: Megatron-LM rounds each bucket's end up
to ``lcm(dp, 128)`` elements, or ``lcm(dp, 128, 2**16)`` with ``pad_buckets_for_high_nccl_busbw``
(``megatron/core/optimizer/param_layout.py``, ``bucket_end_divisor``, read at ``d98e8a6``);
Horovod pads its fusion buffer on GPUs.

:class:`Aligned` prices a message with the cliff, or as the framework that pads sends it; the
cliff's unit and height come from a calibration (:func:`fusionopt.executor.fit_alignment`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fusionopt.model._cost import COST_KINDS, COST_SCHEMA, COST_VERSION, CommCost, check_param, cost_from_dict
from fusionopt.model._cost import check_flag

__all__ = ["Aligned"]


class Aligned(CommCost):
    """``c(S) = cost(S)`` when ``S`` splits over ``ranks`` into parts that are whole multiples
    of ``unit`` bytes (``S`` a multiple of ``ranks x unit``), else ``slowdown x cost(S)``;
    with ``padded=True``, what a framework that pads its messages to that alignment sends:
    ``cost(S')``, ``S'`` the least multiple of ``ranks x unit`` at or above ``S``. 0 for ``S = 0``.

    Parameters
    ----------
    cost : CommCost
        The price of an aligned message, seconds against its bytes.
    ranks : int
        Ranks the message is split over.
    unit : int
        The alignment of each rank's part, bytes.
    slowdown : float
        How much longer a message with a misaligned part takes, ``>= 1``.
    padded : bool
        Price what padding to the alignment sends instead of the cliff. A
        :class:`~fusionopt.model.Problem` takes only this price: every cost it takes is
        nondecreasing (MODEL.md section 2), and the cliff is not; the cliff is what a
        framework that does not pad pays, priced message by message.

    Examples
    --------
    Two ranks, 16-byte parts and a 3.5x cliff (horovod PR #3727's 2 ms against 7 ms):

    >>> from fusionopt.cost import AlphaBeta
    >>> c = Aligned(AlphaBeta(1e-4, 1e-9), ranks=2, unit=16, slowdown=3.5)
    >>> [round(c(s) * 1e6, 6) for s in (6_291_456, 6_291_460)]
    [6391.456, 22370.11]
    >>> round(c.with_padding()(6_291_460) * 1e6, 6), c.padding(np.array([6_291_456, 6_291_460])).tolist()
    (6391.488, [0, 28])
    """

    monotone_hint = ("; a problem prices what padding sends: Aligned(..., padded=True) (the cliff itself is not "
                     "monotone, MODEL.md section 2.3)")

    def __init__(self, cost: CommCost, *, ranks: int, unit: int, slowdown: float, padded: bool = False) -> None:
        if not isinstance(cost, CommCost):
            raise ValueError(f"cost must be a CommCost, got {type(cost).__name__}")
        for label, value in (("ranks", ranks), ("unit", unit)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{label} must be a whole number >= 1, got {value!r}")
        slowdown = check_param("slowdown", slowdown)
        if slowdown < 1.0:
            raise ValueError(f"slowdown must be >= 1 (a misaligned part is not faster), got {slowdown!r}")
        check_flag("padded", padded)
        self.cost, self.ranks, self.unit = cost, int(ranks), int(unit)
        self.slowdown, self.padded = slowdown, bool(padded)

    @property
    def step(self) -> int:
        """``ranks x unit``: the sizes that align are its multiples (bytes)."""
        return self.ranks * self.unit

    def aligned(self, sizes: Any) -> np.ndarray:
        """Whether each size splits into aligned parts."""
        return np.asarray(sizes, dtype=np.float64) % self.step == 0

    def padding(self, sizes: Any) -> np.ndarray:
        """Bytes padding adds to each size to align it."""
        sizes = np.asarray(sizes, dtype=np.int64)
        return (-sizes) % self.step

    def with_padding(self, padded: bool = True) -> "Aligned":
        """The same cliff, priced as a framework that pads (or not) sends its messages."""
        return Aligned(self.cost, ranks=self.ranks, unit=self.unit, slowdown=self.slowdown, padded=padded)

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        if self.padded:
            times = self.cost._evaluate(np.ceil(sizes / self.step) * self.step)
        else:
            times = self.cost._evaluate(sizes) * np.where(sizes % self.step == 0, 1.0, self.slowdown)
        return np.where(sizes > 0, times, 0.0)

    @property
    def affine(self) -> tuple[float, float] | None:
        return self.cost.affine if self.slowdown == 1.0 and not self.padded else None

    def least_seconds_per_byte(self, upto: float) -> float:
        """The aligned price's: the cliff and the padding only add (for a nondecreasing ``cost``)."""
        return self.cost.least_seconds_per_byte(upto)

    def scaled(self, k: float) -> "Aligned":
        return Aligned(self.cost.scaled(k), ranks=self.ranks, unit=self.unit, slowdown=self.slowdown,
                       padded=self.padded)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "aligned", "cost": self.cost.to_dict(),
                "ranks": self.ranks, "unit": self.unit, "slowdown": self.slowdown, "padded": self.padded}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Aligned) and (self.cost, self.ranks, self.unit, self.slowdown, self.padded) == (
            other.cost, other.ranks, other.unit, other.slowdown, other.padded)

    def __hash__(self) -> int:
        return hash(("Aligned", self.cost, self.ranks, self.unit, self.slowdown, self.padded))

    def __repr__(self) -> str:
        return (f"Aligned({self.cost!r}, ranks={self.ranks}, unit={self.unit}, slowdown={self.slowdown!r}, "
                f"padded={self.padded})")


def _aligned_from_dict(doc: Mapping[str, Any], source: str) -> Aligned:
    try:
        return Aligned(cost_from_dict(doc.get("cost"), source=f"{source}.cost"), ranks=doc.get("ranks"),
                       unit=doc.get("unit"), slowdown=doc.get("slowdown"), padded=doc.get("padded", False))
    except ValueError as exc:
        raise ValueError(exc if str(exc).startswith(source) else f"{source}: {exc}") from None


COST_KINDS.update(aligned=(("cost", "ranks", "unit", "slowdown", "padded"), _aligned_from_dict))
