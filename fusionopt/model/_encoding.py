"""What a message carries on the wire (MODEL.md section 2.2): an :class:`Encoding` per message.

A data-parallel job's gradients are fp32 (4 bytes an element), and a message of ``S`` bytes
of them may travel as they are or encoded: cast to fp16 or bf16 (torch's
``fp16_compress_hook`` and ``bf16_compress_hook``), which halves the bytes on the wire. An
encoding has

* ``wire_ratio``: bytes on the wire per byte of fp32 gradients (fp16 and bf16: 0.5);
* ``seconds_per_byte`` and ``seconds_per_message``: what encoding and decoding cost a
  message of ``S`` bytes, ``seconds_per_message + seconds_per_byte * S`` (the casts, and the
  launches that run them) on the message's path, before and after its collective, like the
  collective itself;
* ``compute_per_byte`` and ``compute_per_message``: what encoding costs the compute stream
  instead, where the framework encodes on the backward's stream before it posts the message
  (DDP's compress hooks cast each bucket in the hook's call, on the stream of the backward
  that made it ready; the copy back runs in the collective's callback, on the message's
  path). A problem whose cost is :class:`Encoded` runs them as its per-message compute
  (MODEL.md section 2.1: ``message_compute`` and ``message_compute_per_byte``), so they delay
  the rest of the backward;
* ``unit_roundoff``: ``u`` of the wire's format, ``2**-11`` for fp16 and ``2**-8`` for bf16
  (0: lossless), and ``underflow``: the most a rounding into its subnormal range can be off,
  half its smallest subnormal (``2**-25`` for fp16, ``2**-134`` for bf16).
  :meth:`Encoding.error_bound` and :meth:`Encoding.error_floor` bound the error it introduces.

:class:`Encoded` is the cost of a message carried in an encoding:
``c_e(S) = c(wire_ratio * S) + seconds_per_message + seconds_per_byte * S`` (0 for
``S = 0``). :class:`Cheapest` is the cheapest of several encodings' costs at each size: a
step's ``T`` only grows with any message's duration, so for a fixed grouping the best
encoding of each message is its cheapest, and the exact fusion DP on :class:`Cheapest`
chooses the grouping and every message's encoding together
(:func:`encodings_of` reads the choice back). :func:`crossovers` gives the sizes where the
cheapest encoding changes.

Examples
--------
A 10 GbE-like link, ``alpha = 25 us``, ``beta = 0.8 ns/B``, and an fp16 cast costing 40 us a
message: fp16 pays from 100 kB (``40 us / (0.4 ns/B)``).

>>> from fusionopt.cost import AlphaBeta
>>> link = AlphaBeta(25e-6, 0.8e-9)
>>> fp16 = FP16.with_costs(seconds_per_message=40e-6)
>>> c = Cheapest(link, [FP32, fp16])
>>> [round(x * 1e6, 6) for x in (c(5e4), c(1e6))], c.choose([5e4, 1e6])
([65.0, 465.0], ['fp32', 'fp16'])
>>> [round(s) for s in crossovers(link, [FP32, fp16], upto=1e9)]
[100000]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.model._cost import (COST_KINDS, COST_SCHEMA, COST_VERSION, CommCost, Composite, check_param,
                                   cost_from_dict)


@dataclass(frozen=True)
class Encoding:
    """How a message travels (module docstring): its name, the bytes on the wire per byte of
    fp32 gradients, the seconds it costs per byte and per message, and its format's unit
    roundoff (0: lossless)."""

    name: str
    wire_ratio: float = 1.0
    seconds_per_byte: float = 0.0
    seconds_per_message: float = 0.0
    unit_roundoff: float = 0.0
    underflow: float = 0.0
    compute_per_byte: float = 0.0
    compute_per_message: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"an encoding needs a name, got {self.name!r}")
        for label in ("wire_ratio", "seconds_per_byte", "seconds_per_message", "unit_roundoff", "underflow",
                      "compute_per_byte", "compute_per_message"):
            object.__setattr__(self, label, check_param(f"encoding {self.name!r}: {label}", getattr(self, label)))
        if self.wire_ratio == 0:
            raise ValueError(f"encoding {self.name!r}: wire_ratio must be > 0, got 0.0")
        if self.unit_roundoff >= 0.5:
            raise ValueError(f"encoding {self.name!r}: unit_roundoff must be below 0.5, got {self.unit_roundoff!r}")

    @property
    def lossless(self) -> bool:
        return self.unit_roundoff == 0.0

    @property
    def on_compute(self) -> bool:
        """Whether part of its cost runs on the compute stream (``compute_per_byte`` or
        ``compute_per_message`` above 0)."""
        return self.compute_per_byte > 0 or self.compute_per_message > 0

    def with_costs(self, *, seconds_per_byte: float | None = None, seconds_per_message: float | None = None,
                   compute_per_byte: float | None = None, compute_per_message: float | None = None) -> "Encoding":
        """The same encoding with its casts priced (seconds per fp32 byte, and per message): on
        the message's path, and on the compute stream (each left as it was where None)."""
        given = {"seconds_per_byte": seconds_per_byte, "seconds_per_message": seconds_per_message,
                 "compute_per_byte": compute_per_byte, "compute_per_message": compute_per_message}
        return replace(self, **{label: value for label, value in given.items() if value is not None})

    def error_bound(self, ranks: int) -> float:
        """A bound on the error of each averaged element, relative to the mean of the ranks'
        absolute values ``(1/P) sum_r |g_r|``: the cast, the division by ``P`` and the ``P - 1``
        additions of the sum each round once in the wire's format, so
        ``|computed - mean| <= gamma_{P+1} (1/P) sum_r |g_r|`` with
        ``gamma_k = k u / (1 - k u)`` (Higham, *Accuracy and Stability of Numerical
        Algorithms*, 2nd ed., section 4.2), whatever order the collective adds in, while every
        value is in the format's normal range; :meth:`error_floor` adds what rounding into
        its subnormal range may. The cast back to fp32 is exact. Overflow (an fp16 value
        above 65504) is not bounded. 0 for a lossless encoding (fp32 sums round too, but no
        more than the default's).

        >>> round(FP16.error_bound(2) * 2**11, 6), BF16.error_bound(1024) > 1, FP32.error_bound(8)
        (3.004401, True, 0.0)
        """
        if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
            raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
        if self.lossless:
            return 0.0
        k = (ranks + 1) * self.unit_roundoff
        return math.inf if k >= 1 else k / (1 - k)

    def error_floor(self, ranks: int) -> float:
        """The absolute error rounding into the subnormal range may add to each averaged
        element: each rounding ``fl(x) = x (1 + delta) + eta``, ``|eta| <= underflow``; the
        ``P`` casts' ``eta`` reach the mean divided by ``P``, the ``P`` divisions' and the
        ``P - 1`` additions' whole, each grown by later roundings at most ``1 + gamma_{P+1}``:
        ``2 P underflow (1 + gamma_{P+1})``. The error is within
        ``error_bound(P) (1/P) sum_r |g_r| + error_floor(P)``.

        >>> round(FP16.error_floor(2) / 2**-25, 6)
        4.005868
        """
        gamma = self.error_bound(ranks)
        return 2 * ranks * self.underflow * (1 + gamma)

    def to_dict(self) -> dict[str, Any]:
        doc = {"name": self.name, "wire_ratio": self.wire_ratio, "seconds_per_byte": self.seconds_per_byte,
               "seconds_per_message": self.seconds_per_message, "unit_roundoff": self.unit_roundoff,
               "underflow": self.underflow}
        doc.update({label: getattr(self, label) for label in ("compute_per_byte", "compute_per_message")
                    if getattr(self, label)})                  # written where given
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "encoding") -> "Encoding":
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object for an encoding")
        unknown = sorted(set(doc) - {"name", "wire_ratio", "seconds_per_byte", "seconds_per_message",
                                     "unit_roundoff", "underflow", "compute_per_byte", "compute_per_message"})
        if unknown:
            raise ValueError(f"{source}: unknown field(s) {', '.join(unknown)}")
        try:
            return cls(**doc)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from None


FP32 = Encoding("fp32")
"""The gradients as they are: the default, lossless."""
FP16 = Encoding("fp16", wire_ratio=0.5, unit_roundoff=2.0 ** -11, underflow=2.0 ** -25)
"""torch's ``fp16_compress_hook``: cast to IEEE half precision (11-bit significand)."""
BF16 = Encoding("bf16", wire_ratio=0.5, unit_roundoff=2.0 ** -8, underflow=2.0 ** -134)
"""torch's ``bf16_compress_hook``: cast to bfloat16 (8-bit significand)."""
ENCODINGS = {e.name: e for e in (FP32, FP16, BF16)}


def encoding_named(name: str | Encoding) -> Encoding:
    """The preset called ``name`` (an :class:`Encoding` is returned as it is); one line naming
    the presets otherwise."""
    if isinstance(name, Encoding):
        return name
    try:
        return ENCODINGS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown encoding {name!r}: choose one of {', '.join(ENCODINGS)}, or give an "
                         "Encoding") from None


def check_dtype(label: str, value: Any, *, optional: bool = True) -> None:
    """``value`` names a dtype the encodings know (or is None, where ``optional``); one line
    naming ``label`` otherwise."""
    if (value is None and optional) or (isinstance(value, str) and value in ENCODINGS):
        return
    raise ValueError(f"{label} must be one of {', '.join(ENCODINGS)}{' or None' if optional else ''}, got {value!r}")


def carried_in(cost: CommCost, dtype: str) -> CommCost:
    """``cost`` (of fp32 messages) for messages carried in ``dtype``: itself for fp32, else
    :class:`Encoded` at the encoding's default cast cost."""
    return cost if dtype == "fp32" else Encoded(cost, dtype)


class Encoded(CommCost):
    """``c_e(S) = cost(wire_ratio S) + seconds_per_message + seconds_per_byte S``, 0 for ``S = 0``:
    a message of ``S`` fp32 bytes carried in ``encoding``. The encoding's compute-stream part
    (:attr:`compute_terms`) is not in ``c_e``: a problem with this cost runs it on the compute
    stream (:attr:`~fusionopt.model.Problem.message_compute_terms`).

    >>> from fusionopt.cost import AlphaBeta
    >>> c = Encoded(AlphaBeta(1e-4, 1e-9), FP16.with_costs(seconds_per_byte=1e-11))
    >>> round(c(1e6) * 1e6, 6), c(0), tuple(round(x, 15) for x in c.affine)
    (610.0, 0.0, (0.0001, 5.1e-10))
    """

    def __init__(self, cost: CommCost, encoding: Encoding | str) -> None:
        if not isinstance(cost, CommCost):
            raise ValueError(f"cost must be a CommCost, got {type(cost).__name__}")
        self.cost, self.encoding = cost, encoding_named(encoding)

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        e = self.encoding
        times = self.cost._evaluate(sizes * e.wire_ratio) + e.seconds_per_message + e.seconds_per_byte * sizes
        return np.where(sizes > 0, times, 0.0)

    @property
    def affine(self) -> tuple[float, float] | None:
        part = self.cost.affine
        if part is None:
            return None
        e = self.encoding
        return part[0] + e.seconds_per_message, part[1] * e.wire_ratio + e.seconds_per_byte

    @property
    def compute_terms(self) -> tuple[float, float]:
        """``(seconds per message, seconds per fp32 byte)`` the encoding costs the compute stream."""
        return self.encoding.compute_per_message, self.encoding.compute_per_byte

    def on_path_only(self) -> "Encoded":
        """The same cost without the encoding's compute-stream part."""
        return Encoded(self.cost, replace(self.encoding, compute_per_byte=0.0, compute_per_message=0.0))

    def least_seconds_per_byte(self, upto: float) -> float:
        """``c_e(S) / S = r c(r S) / (r S) + seconds_per_message / S + seconds_per_byte``, each
        term at its least for ``S <= upto``."""
        e = self.encoding
        return (e.wire_ratio * self.cost.least_seconds_per_byte(upto * e.wire_ratio)
                + e.seconds_per_message / upto + e.seconds_per_byte)

    def scaled(self, k: float) -> "Encoded":
        k = check_param("scale", k)
        e = self.encoding
        return Encoded(self.cost.scaled(k), replace(e, seconds_per_byte=e.seconds_per_byte * k,
                                                    seconds_per_message=e.seconds_per_message * k))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "encoded", "cost": self.cost.to_dict(),
                "encoding": self.encoding.to_dict()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encoded) and (self.cost, self.encoding) == (other.cost, other.encoding)

    def __hash__(self) -> int:
        return hash(("Encoded", self.cost, self.encoding))

    def __repr__(self) -> str:
        return f"Encoded({self.cost!r}, {self.encoding.name!r})"


class Cheapest(CommCost):
    """The cheapest of ``encodings`` at each size: ``c(S) = min_e c_e(S)`` on ``cost``
    (:class:`Encoded`), the first listed winning ties. :meth:`choose` names the encoding of
    each size."""

    def __init__(self, cost: CommCost, encodings: Sequence[Encoding | str]) -> None:
        if not isinstance(cost, CommCost):
            raise ValueError(f"cost must be a CommCost, got {type(cost).__name__}")
        chosen = [encoding_named(e) for e in encodings]
        if not chosen:
            raise ValueError("Cheapest needs at least one encoding")
        names = [e.name for e in chosen]
        if len(set(names)) != len(names):
            raise ValueError(f"encodings must have distinct names, got {names}")
        for e in chosen:
            if e.on_compute:
                raise ValueError(f"Cheapest: encoding {e.name!r} runs part of its cast on the compute stream, which "
                                 "a choice by each message's time cannot weigh: price it on the message's path "
                                 "(seconds_per_byte, seconds_per_message), or give that one encoding to Encoded")
        self.cost, self.encodings = cost, tuple(chosen)
        self.terms = tuple(Encoded(cost, e) for e in chosen)

    def _times(self, sizes: np.ndarray) -> np.ndarray:
        return np.stack([term._evaluate(sizes) for term in self.terms])

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        return self._times(sizes).min(axis=0)

    def choose(self, sizes: Any) -> list[str]:
        """The cheapest encoding's name at each of ``sizes`` (bytes)."""
        times = self._times(np.atleast_1d(np.asarray(sizes, dtype=np.float64)))
        return [self.encodings[k].name for k in times.argmin(axis=0).tolist()]

    @property
    def affine(self) -> tuple[float, float] | None:
        return self.terms[0].affine if len(self.terms) == 1 else None

    def least_seconds_per_byte(self, upto: float) -> float:
        return min(term.least_seconds_per_byte(upto) for term in self.terms)

    def scaled(self, k: float) -> "Cheapest":
        k = check_param("scale", k)
        return Cheapest(self.cost.scaled(k), [term.scaled(k).encoding for term in self.terms])

    def to_dict(self) -> dict[str, Any]:
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "cheapest", "cost": self.cost.to_dict(),
                "encodings": [e.to_dict() for e in self.encodings]}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cheapest) and (self.cost, self.encodings) == (other.cost, other.encodings)

    def __hash__(self) -> int:
        return hash(("Cheapest", self.cost, self.encodings))

    def __repr__(self) -> str:
        return f"Cheapest({self.cost!r}, {[e.name for e in self.encodings]!r})"


def encodings_of(sizes: Any, cost: CommCost) -> list[str]:
    """Each message's encoding under ``cost`` (``message_bytes`` of a plan): :class:`Cheapest`'s
    choice, an :class:`Encoded` cost's one encoding, ``"fp32"`` for any other cost."""
    count = len(np.atleast_1d(sizes))
    if isinstance(cost, Cheapest):
        return cost.choose(sizes)
    return [cost.encoding.name if isinstance(cost, Encoded) else FP32.name] * count


def crossovers(cost: CommCost, encodings: Sequence[Encoding | str], *, upto: float,
               tolerance: float = 1.0) -> list[float]:
    """The message sizes (bytes, up to ``upto``) at which the cheapest of ``encodings`` on
    ``cost`` changes, in increasing order: found on a grid of sizes spaced by a factor of
    ``2**(1/8)`` from 1 byte, each located by bisection to within ``tolerance`` bytes
    (the returned size is the smallest where the new one is cheapest)."""
    cheapest = Cheapest(cost, encodings)
    upto = check_param("upto", upto)
    if upto < 1:
        return []
    grid = np.unique(np.concatenate((2.0 ** np.arange(0.0, math.log2(upto), 0.125), [upto])))
    names = cheapest.choose(grid)
    found = []
    for k in range(1, len(grid)):
        if names[k] != names[k - 1]:
            lo, hi = grid[k - 1], grid[k]
            while hi - lo > tolerance:
                mid = 0.5 * (lo + hi)
                if cheapest.choose(mid)[0] == names[k - 1]:
                    lo = mid
                else:
                    hi = mid
            found.append(float(hi))
    return found


def compute_encodings(cost: Any) -> list[Encoded]:
    """The :class:`Encoded` costs with a compute-stream part in ``cost`` and the costs it wraps
    (``cost.cost``, down the chain)."""
    found = []
    while isinstance(cost, CommCost):
        if isinstance(cost, Encoded) and cost.encoding.on_compute:
            found.append(cost)
        cost = getattr(cost, "cost", None)
    return found


def lossy_encodings(cost: Any) -> list[Encoding]:
    """The lossy encodings in ``cost`` and the costs it wraps (``cost.cost``, down the chain):
    an :class:`Encoded` cost's, and those a :class:`Cheapest` chooses from."""
    return [e for e in encoding_table(cost).values() if not e.lossless]


def encoding_table(cost: Any) -> dict[str, Encoding]:
    """Every encoding a message priced by ``cost`` may travel in, by name: fp32, an
    :class:`Encoded` cost's and those a :class:`Cheapest` chooses from, in ``cost`` and the
    costs it wraps (``cost.cost``, down the chain)."""
    found = {FP32.name: FP32}
    while isinstance(cost, CommCost):
        if isinstance(cost, Encoded):
            found[cost.encoding.name] = cost.encoding
        elif isinstance(cost, Cheapest):
            found.update((e.name, e) for e in cost.encodings)
        cost = getattr(cost, "cost", None)
    return found


def wire_link(cost: CommCost) -> CommCost:
    """What the wire's bytes cost under ``cost``: the link an :class:`Encoded` or
    :class:`Cheapest` cost wraps (its ``cost``), ``cost`` itself otherwise."""
    return cost.cost if isinstance(cost, (Encoded, Cheapest)) else cost


def buried_encoding(cost: CommCost) -> CommCost | None:
    """An :class:`Encoded` or :class:`Cheapest` cost inside ``cost`` below its top (in the
    cost it wraps, or a :class:`~fusionopt.cost.Composite`'s terms), or None. A message's
    encoding is read off the top of its cost (:func:`encodings_of`), so one buried there
    would be priced but never named: ``Aligned(Cheapest(link, ...))`` must be written
    ``Cheapest(Aligned(link), ...)``.

    >>> from fusionopt.cost import AlphaBeta, Aligned
    >>> link = AlphaBeta(1e-4, 1e-9)
    >>> buried_encoding(Cheapest(Aligned(link, ranks=2, unit=16, slowdown=2.0), ["fp32", "fp16"])) is None
    True
    >>> buried_encoding(Aligned(Encoded(link, "fp16"), ranks=2, unit=16, slowdown=2.0))
    Encoded(AlphaBeta(alpha=0.0001, beta=1e-09), 'fp16')
    """
    def inside(c: CommCost) -> list[CommCost]:
        if isinstance(c, Composite):
            return [term for term, _ in c.terms]
        wrapped = getattr(c, "cost", None)
        return [wrapped] if isinstance(wrapped, CommCost) else []

    pending = inside(cost)
    while pending:
        c = pending.pop()
        if isinstance(c, (Encoded, Cheapest)):
            return c
        pending.extend(inside(c))
    return None


def _encoded_from_dict(doc: Mapping[str, Any], source: str) -> Encoded:
    return Encoded(cost_from_dict(doc.get("cost"), source=f"{source}.cost"),
                   Encoding.from_dict(doc.get("encoding"), source=f"{source}.encoding"))


def _cheapest_from_dict(doc: Mapping[str, Any], source: str) -> Cheapest:
    encodings = doc.get("encodings")
    if not isinstance(encodings, list):
        raise ValueError(f"{source}: a cheapest cost needs an 'encodings' list")
    try:
        return Cheapest(cost_from_dict(doc.get("cost"), source=f"{source}.cost"),
                        [Encoding.from_dict(e, source=f"{source}.encodings[{k}]") for k, e in enumerate(encodings)])
    except ValueError as exc:
        raise ValueError(exc if str(exc).startswith(source) else f"{source}: {exc}") from None


COST_KINDS.update(encoded=(("cost", "encoding"), _encoded_from_dict),
                  cheapest=(("cost", "encodings"), _cheapest_from_dict))

__all__ = ["BF16", "Cheapest", "ENCODINGS", "Encoded", "Encoding", "FP16", "FP32", "buried_encoding", "carried_in",
           "check_dtype", "crossovers", "encoding_named", "encodings_of"]
