"""Communication cost models: the time ``c(S)`` a message of ``S`` bytes holds a channel.

Every model satisfies MODEL.md section 2: ``c(0) = 0``, ``c`` non-decreasing, ``c(S) >= 0``,
and is vectorised over sizes (call it with a number or an array of byte counts; times come
back in seconds).

Models: :class:`AlphaBeta` (Hockney), :class:`PiecewiseLinear` (measured points) and
:class:`Composite` (a sum of models at scaled sizes). The collective all-reduce formulas and
the network presets, which all return an :class:`AlphaBeta`, live in
:mod:`fusionopt.model._collectives`; the readers of benchmark output (nccl-tests, OSU) in
:mod:`fusionopt.model._cost_files`.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fusionopt.model._profile_checks import float_column

__all__ = [
    "COST_SCHEMA",
    "COST_VERSION",
    "CommCost",
    "AlphaBeta",
    "PiecewiseLinear",
    "Composite",
    "cost_from_dict",
]

COST_SCHEMA = "fusionopt.cost"
COST_VERSION = 1


def _as_sizes(size: Any) -> np.ndarray:
    sizes = np.asarray(size, dtype=np.float64)
    if sizes.size and (np.isnan(sizes).any() or np.isinf(sizes).any()):
        raise ValueError("message size is NaN or infinite")
    if sizes.size and (sizes < 0).any():
        raise ValueError(f"message size is negative ({sizes[sizes < 0].flat[0]!r} bytes)")
    return sizes


def check_param(label: str, value: float) -> float:
    """``value`` as a finite float ``>= 0``; a ``ValueError`` naming ``label`` otherwise (a
    string or a bool is not a number here, though ``float`` would read one)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{label} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, got {value!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{label} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{label} must be >= 0, got {value!r}")
    return value


def check_flag(label: str, value: bool) -> bool:
    """``value`` if it is True or False (a numpy bool too); a ``ValueError`` naming ``label``
    otherwise (a string such as ``"no"`` is not read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{label} must be True or False, got {value!r}")
    return bool(value)


def check_count(label: str, value: Any, least: int = 1) -> int:
    """``value`` as an int if it is a whole number ``>= least`` (a numpy integer too, not a
    bool or a float); a ``ValueError`` naming ``label`` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{label} must be an integer >= {least}, got {value!r}")
    return int(value)


class CommCost(ABC):
    """A communication cost model ``c(S)`` in seconds for ``S`` bytes.

    Subclasses implement :meth:`_evaluate` on a float64 array of non-negative sizes and
    return 0 where the size is 0. ``affine`` is ``(alpha, beta)`` when ``c(S) = alpha + beta S``
    for every ``S > 0`` (solvers use it for fast paths), else ``None``.

    Examples
    --------
    >>> c = AlphaBeta(alpha=1e-3, beta=1e-9)
    >>> isinstance(c, CommCost), c.affine
    (True, (0.001, 1e-09))
    >>> round(c.scaled(2)(1e6), 9)
    0.004
    """

    def __call__(self, size: Any) -> Any:
        sizes = _as_sizes(size)
        times = self._evaluate(np.atleast_1d(sizes))
        if sizes.ndim == 0:
            return float(times[0])
        return times.reshape(sizes.shape)

    def of_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """Cost in seconds of each entry of ``sizes``, a 1-D float64 array of bytes already
        known to be finite and ``>= 0`` (a plan's message sizes): the same values as calling
        the model, without its checks, for the inner loops of simulators and searches."""
        return self._evaluate(sizes)

    @abstractmethod
    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        """Cost of each size in ``sizes`` (float64, all >= 0), in seconds."""

    @property
    def affine(self) -> tuple[float, float] | None:
        return None

    def least_seconds_per_byte(self, upto: float) -> float:
        """A lower bound on ``c(S) / S`` over every size ``0 < S <= upto`` bytes, in seconds per
        byte: messages of ``S_k <= upto`` bytes, ``sum S_k = N``, cost at least ``N`` times it.
        0 for a model that states none."""
        return 0.0

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with ``schema``, ``version`` and ``kind``; see :func:`cost_from_dict`."""

    @abstractmethod
    def scaled(self, k: float) -> "CommCost":
        """The same model with every time multiplied by ``k >= 0``."""


def _check_upto(upto: Any) -> float:
    """The largest size of :meth:`CommCost.least_seconds_per_byte`, bytes > 0 (no size lies in
    ``0 < S <= upto`` otherwise)."""
    if isinstance(upto, bool) or not isinstance(upto, numbers.Real) or not 0 < upto < math.inf:
        raise ValueError(f"upto must be a finite number of bytes > 0, got {upto!r}")
    return float(upto)


class AlphaBeta(CommCost):
    """Hockney's model ``c(S) = alpha + beta * S`` for ``S > 0`` and ``c(0) = 0``.

    Parameters
    ----------
    alpha : float
        Startup latency per message in seconds, ``>= 0``.
    beta : float
        Transfer time per byte in seconds per byte (inverse bandwidth), ``>= 0``.

    Examples
    --------
    >>> c = AlphaBeta(alpha=1e-3, beta=1e-9)
    >>> c(0), round(c(4e6), 9)
    (0.0, 0.005)
    >>> c([0, 1e6, 2e6]).round(9).tolist()
    [0.0, 0.002, 0.003]
    """

    def __init__(self, alpha: float, beta: float) -> None:
        self.alpha = check_param("alpha", alpha)
        self.beta = check_param("beta", beta)

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        return np.where(sizes > 0, self.alpha + self.beta * sizes, 0.0)

    @property
    def affine(self) -> tuple[float, float]:
        return (self.alpha, self.beta)

    def least_seconds_per_byte(self, upto: float) -> float:
        """``beta + alpha / upto``: ``c(S) / S`` falls as ``S`` grows.

        >>> AlphaBeta(alpha=1e-3, beta=1e-9).least_seconds_per_byte(1e6)
        2e-09
        """
        return self.beta + self.alpha / _check_upto(upto)

    def scaled(self, k: float) -> "AlphaBeta":
        k = check_param("scale", k)
        return AlphaBeta(self.alpha * k, self.beta * k)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "alpha_beta",
                "alpha": self.alpha, "beta": self.beta}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AlphaBeta) and (self.alpha, self.beta) == (other.alpha, other.beta)

    def __hash__(self) -> int:
        return hash(("AlphaBeta", self.alpha, self.beta))

    def __repr__(self) -> str:
        return f"AlphaBeta(alpha={self.alpha!r}, beta={self.beta!r})"


def _fmt_bytes(size: float) -> str:
    return str(int(size)) if float(size).is_integer() and abs(size) < 1e18 else repr(float(size))


def _fmt_seconds(time: float) -> str:
    # 12 digits hide the float noise of unit conversions (18.47 us -> 1.8469999999999998e-05 s).
    return f"{float(time):.12g}"


class PiecewiseLinear(CommCost):
    """Linear interpolation through measured ``(bytes, seconds)`` points.

    For ``s_1 <= S <= s_m`` the cost is the straight line between the neighbouring points; beyond
    the last point it continues along the last segment's slope (``>= 0``; zero with one point).
    For ``0 < S < s_1`` it is the first point's time: a positive message costs at least the
    smallest measured message, since every real message pays the startup latency. ``c(0) = 0``.

    Parameters
    ----------
    sizes : sequence of float
        Measured message sizes in bytes, positive and finite, in any order.
    times : sequence of float
        Measured times in seconds, finite and ``>= 0``, non-decreasing in size.
    repair : bool, keyword-only
        Clean up noisy measurements instead of rejecting them: points of equal size are
        replaced by one point at their mean time, then each time is replaced by the running
        maximum of the times at smaller or equal sizes, so that the curve is non-decreasing.
        Default ``False``: duplicates and decreasing times raise ``ValueError``.

    Examples
    --------
    >>> c = PiecewiseLinear([1e3, 1e4, 1e5], [1e-5, 2e-5, 1.1e-4])
    >>> c([0, 500, 1e3, 5.5e3, 1e5, 2e5]).round(9).tolist()
    [0.0, 1e-05, 1e-05, 1.5e-05, 0.00011, 0.00021]
    >>> PiecewiseLinear([1, 2, 3], [3e-6, 2e-6, 4e-6], repair=True).times.tolist()
    [3e-06, 3e-06, 4e-06]
    """

    def __init__(self, sizes: Sequence[float], times: Sequence[float], *, repair: bool = False) -> None:
        repair = check_flag("repair", repair)
        size_array = float_column("sizes", sizes)
        time_array = float_column("times", times)
        if size_array.size != time_array.size:
            raise ValueError(f"sizes and times differ in length ({size_array.size} sizes, "
                             f"{time_array.size} times)")
        if size_array.size == 0:
            raise ValueError("PiecewiseLinear needs at least one measured point")
        for i, (size, time) in enumerate(zip(size_array.tolist(), time_array.tolist())):
            if not math.isfinite(size) or size <= 0:
                raise ValueError(f"point {i}: size {size!r} B must be positive and finite")
            if not math.isfinite(time) or time < 0:
                raise ValueError(f"point {i} (size {_fmt_bytes(size)} B): time {_fmt_seconds(time)} s "
                                 "must be finite and >= 0")
        order = np.argsort(size_array, kind="stable")
        size_array, time_array = size_array[order], time_array[order]
        if repair:
            size_array, group = np.unique(size_array, return_inverse=True)
            time_array = np.bincount(group, weights=time_array) / np.bincount(group)
            time_array = np.maximum.accumulate(time_array)
        else:
            self._check_sorted(size_array, time_array, order)
        size_array.setflags(write=False)
        time_array.setflags(write=False)
        self._sizes, self._times = size_array, time_array
        self._slope = 0.0
        if size_array.size > 1:
            self._slope = float((time_array[-1] - time_array[-2]) / (size_array[-1] - size_array[-2]))


    @staticmethod
    def _check_sorted(sizes: np.ndarray, times: np.ndarray, order: np.ndarray) -> None:
        # Messages name the caller's point numbers, not the sorted positions.
        for k in range(1, sizes.size):
            if sizes[k] == sizes[k - 1]:
                first, second = sorted((int(order[k - 1]), int(order[k])))
                raise ValueError(f"points {first} and {second} both have size "
                                 f"{_fmt_bytes(sizes[k])} B (pass repair=True to average them)")
            if times[k] < times[k - 1]:
                raise ValueError(
                    f"point {int(order[k])} (size {_fmt_bytes(sizes[k])} B): time "
                    f"{_fmt_seconds(times[k])} s is below the previous point's "
                    f"{_fmt_seconds(times[k - 1])} s "
                    "(pass repair=True to take the running maximum)")

    @property
    def sizes(self) -> np.ndarray:
        """The measured sizes in bytes, strictly increasing (read-only)."""
        return self._sizes

    @property
    def times(self) -> np.ndarray:
        """The measured times in seconds, non-decreasing (read-only; repaired if asked)."""
        return self._times

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        # np.interp clamps to the first time below s_1, which is the rule we want there.
        inside = np.interp(sizes, self._sizes, self._times)
        last_size, last_time = self._sizes[-1], self._times[-1]
        beyond = last_time + self._slope * (sizes - last_size)
        times = np.where(sizes > last_size, beyond, inside)
        return np.where(sizes > 0, times, 0.0)

    @property
    def affine(self) -> tuple[float, float] | None:
        # The clamp below s_1 makes the curve flat there, so it is affine for every S > 0 only
        # when it is flat everywhere.
        if np.all(self._times == self._times[0]):
            return (float(self._times[0]), 0.0)
        return None

    def least_seconds_per_byte(self, upto: float) -> float:
        """The least ``c(S) / S`` over ``0 < S <= upto``. Between two neighbouring points the
        cost is ``a + b S``, so ``c(S) / S = a / S + b`` is monotone there, below the first
        point it is flat, and beyond the last it runs along the last slope: the least is at a
        measured point or at ``upto``.

        >>> c = PiecewiseLinear([1e3, 1e4, 1e5], [1e-5, 2e-5, 1.1e-4])
        >>> round(c.least_seconds_per_byte(1e5) * 1e9, 6), round(c.least_seconds_per_byte(5e3) * 1e9, 6)
        (1.1, 2.888889)
        """
        candidates = np.append(self._sizes[self._sizes <= upto], _check_upto(upto))
        return float((self._evaluate(candidates) / candidates).min())

    def scaled(self, k: float) -> "PiecewiseLinear":
        k = check_param("scale", k)
        return PiecewiseLinear(self._sizes, self._times * k)

    def to_dict(self) -> dict[str, Any]:
        points = [[size, time] for size, time in zip(self._sizes.tolist(), self._times.tolist())]
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "piecewise_linear",
                "points": points}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PiecewiseLinear) and np.array_equal(self._sizes, other._sizes)
                and np.array_equal(self._times, other._times))

    def __hash__(self) -> int:
        return hash(("PiecewiseLinear", self._sizes.tobytes(), self._times.tobytes()))

    def __repr__(self) -> str:
        return f"PiecewiseLinear(sizes={self._sizes.tolist()!r}, times={self._times.tolist()!r})"


class Composite(CommCost):
    """A sum of cost models at scaled sizes: ``c(S) = sum_k cost_k(scale_k * S)``.

    Use it for operations made of several transfers of one message, e.g. a reduce-scatter plus
    an all-gather, or a parameter-server push plus pull.

    Parameters
    ----------
    terms : sequence of (CommCost, float)
        Each part and the factor (``> 0``) applied to the message size before it is priced.

    Examples
    --------
    >>> push, pull = AlphaBeta(1e-4, 1e-9), AlphaBeta(2e-4, 1e-9)
    >>> c = Composite([(push, 1.0), (pull, 0.5)])
    >>> c(0), round(c(2e6), 9)
    (0.0, 0.0033)
    >>> tuple(round(x, 12) for x in c.affine)
    (0.0003, 1.5e-09)
    """

    def __init__(self, terms: Sequence[tuple[CommCost, float]]) -> None:
        checked = []
        for k, term in enumerate(terms):
            try:
                cost, scale = term
            except (TypeError, ValueError):
                raise ValueError(f"term {k}: expected a (cost, scale) pair, got {term!r}") from None
            if not isinstance(cost, CommCost):
                raise ValueError(f"term {k}: cost must be a CommCost, got {type(cost).__name__}")
            scale = check_param(f"term {k}: scale", scale)
            if scale == 0:
                raise ValueError(f"term {k}: scale must be > 0, got 0.0")
            checked.append((cost, scale))
        if not checked:
            raise ValueError("Composite needs at least one (cost, scale) term")
        self.terms: tuple[tuple[CommCost, float], ...] = tuple(checked)

    def _evaluate(self, sizes: np.ndarray) -> np.ndarray:
        total = np.zeros_like(sizes)
        for cost, scale in self.terms:
            total += cost._evaluate(sizes * scale)
        return total

    @property
    def affine(self) -> tuple[float, float] | None:
        alpha = beta = 0.0
        for cost, scale in self.terms:
            part = cost.affine
            if part is None:
                return None
            alpha += part[0]
            beta += part[1] * scale
        return (alpha, beta)

    def least_seconds_per_byte(self, upto: float) -> float:
        """Each part's least at its scaled sizes: ``c(S) / S = sum_k scale_k c_k(scale_k S) / (scale_k S)``."""
        return float(sum(scale * cost.least_seconds_per_byte(upto * scale) for cost, scale in self.terms))

    def scaled(self, k: float) -> "Composite":
        k = check_param("scale", k)
        return Composite([(cost.scaled(k), scale) for cost, scale in self.terms])

    def to_dict(self) -> dict[str, Any]:
        return {"schema": COST_SCHEMA, "version": COST_VERSION, "kind": "composite",
                "terms": [{"cost": cost.to_dict(), "scale": scale} for cost, scale in self.terms]}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Composite) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(("Composite", self.terms))

    def __repr__(self) -> str:
        return f"Composite({list(self.terms)!r})"


# The cost kinds other modules define, registered where they are defined
# (fusionopt.model._encoding): kind -> (its keys besides schema, version and kind, reader(doc, source)).
COST_KINDS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any], str], "CommCost"]]] = {}

# The keys each kind of cost file may hold ("calibration": what `fusionopt calibrate` measured).
_COST_KEYS = {kind: ("schema", "version", "kind", "calibration") + keys for kind, keys in
              {"alpha_beta": ("alpha", "beta"), "piecewise_linear": ("points",), "composite": ("terms",)}.items()}


def cost_from_dict(doc: Mapping[str, Any], *, source: str = "cost") -> CommCost:
    """Rebuild a cost model from its :meth:`CommCost.to_dict` form.

    Parameters
    ----------
    doc : mapping
        A dict with ``kind`` one of ``"alpha_beta"``, ``"piecewise_linear"``, ``"composite"``, or one
        registered in :data:`COST_KINDS` (``"encoded"``, ``"cheapest"``)
        (``schema`` and ``version`` are checked when present).
    source : str, keyword-only
        Where the dict came from, for error messages (a file name, a JSON path).

    Examples
    --------
    >>> c = Composite([(PiecewiseLinear([1e3, 1e6], [1e-5, 1e-3]), 2.0)])
    >>> cost_from_dict(c.to_dict()) == c
    True
    >>> cost_from_dict({"kind": "alpha_beta", "alpha": 1e-5, "beta": 1e-9})
    AlphaBeta(alpha=1e-05, beta=1e-09)
    """
    if not isinstance(doc, Mapping):
        raise ValueError(f"{source}: expected a JSON object for a cost model")
    schema = doc.get("schema", COST_SCHEMA)
    if schema != COST_SCHEMA:
        raise ValueError(f"{source}: schema is {schema!r}, expected {COST_SCHEMA!r}")
    if doc.get("version", COST_VERSION) != COST_VERSION:
        raise ValueError(f"{source}: unsupported cost version {doc.get('version')!r}")
    kind = doc.get("kind")
    known = _COST_KEYS.get(kind)
    if kind in COST_KINDS:
        known = ("schema", "version", "kind", "calibration", *COST_KINDS[kind][0])
    if known is not None:
        unknown = [key for key in doc if key not in known]
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r} in a {kind} cost (its keys: {', '.join(known)})")
    if kind == "alpha_beta":
        for key in ("alpha", "beta"):
            if key not in doc:
                raise ValueError(f"{source}: alpha_beta cost has no {key!r}")
        try:
            return AlphaBeta(doc["alpha"], doc["beta"])
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
    if kind == "piecewise_linear":
        return _piecewise_from_dict(doc, source)
    if kind == "composite":
        return _composite_from_dict(doc, source)
    if kind in COST_KINDS:
        return COST_KINDS[kind][1](doc, source)
    raise ValueError(f"{source}: unknown cost kind {kind!r}")


def _piecewise_from_dict(doc: Mapping[str, Any], source: str) -> PiecewiseLinear:
    points = doc.get("points")
    if not isinstance(points, list):
        raise ValueError(f"{source}: piecewise_linear cost needs a 'points' list of [size, time]")
    for i, point in enumerate(points):
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            raise ValueError(f"{source}: points[{i}] must be a [size, time] pair, got {point!r}")
    try:
        # Stored points were already repaired when measured; reject anything else.
        return PiecewiseLinear([p[0] for p in points], [p[1] for p in points])
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def _composite_from_dict(doc: Mapping[str, Any], source: str) -> Composite:
    terms = doc.get("terms")
    if not isinstance(terms, list):
        raise ValueError(f"{source}: composite cost needs a 'terms' list")
    parts = []
    for k, term in enumerate(terms):
        where = f"{source}.terms[{k}]"
        if not isinstance(term, Mapping) or "cost" not in term or "scale" not in term:
            raise ValueError(f"{where}: expected an object with 'cost' and 'scale'")
        parts.append((cost_from_dict(term["cost"], source=f"{where}.cost"), term["scale"]))
    try:
        return Composite(parts)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


# --- readers of benchmark output --------------------------------------------------------------

# NCCL_DEBUG=INFO interleaves log lines with the table; they are not data.
