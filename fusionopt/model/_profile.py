"""The workload of one data-parallel training step: a :class:`Profile`.

A profile lists the model's gradient tensors in **forward (model) order** (index 0 is
nearest the input), each with its gradient size in bytes and the forward, backward and
optional optimiser-update compute time attributed to it, in seconds (MODEL.md section 1).

JSON schema (``version`` 1)::

    {
      "schema": "fusionopt.profile",
      "version": 1,
      "name": "resnet50",              # optional, free text
      "dtype_bytes": 4,                # bytes per gradient element (default 4)
      "metadata": {...},               # optional, free JSON object (device, batch, source)
      "tensors": [                     # forward order
        {"name": "conv1.weight", "size": 37632,
         "forward": 1.2e-4, "backward": 2.4e-4, "update": 0.0,    # update optional
         "dtype": "float32", "shape": [64, 3, 7, 7]},             # optional
        ...
      ],
      "ready_order": ["conv1.bias", "conv1.weight", ...],   # optional (see below)
      "registration_order": ["conv1.weight", ...],          # optional
      "step": {"update_lump": 2e-3, "post_backward": 1e-3,  # optional, seconds, each
               "host_overhead": 5e-3}                       #   written when not 0
    }

Besides its tensors' times, a step has three named parts that belong to no tensor (MODEL.md
section 4): ``update_lump`` (optimiser step and ``zero_grad`` time not split by tensor),
``post_backward`` (the framework's work once the gradients are reduced, DDP's copy of each
reduced bucket into ``.grad``) and ``host_overhead`` (time the step waits for the host: data
loading, Python, launches).

Two orders besides the forward order tell what a framework sees (the model specification,
section 1): ``ready_order``, the tensors in the order autograd accumulates their gradients
(default: reverse forward order), and ``registration_order``, the order of
``model.parameters()`` (default: forward order). The ready order may only reorder tensors
whose gradients are ready at the same moment (a layer's weight and bias): the ready times
stay ``r_i = sum_{k >= i} b_k``. Both are written only when they differ from the default.

CSV form (:mod:`fusionopt.model._profile_csv`: its writer and reader): a header naming the columns,
then one row per tensor in forward order; ``update_s`` may be left out (0 s). Four optional
columns carry what JSON carries per tensor or as orders: ``ready_index`` (the tensor's
position in the ready order, 0 first), ``registration_index``, ``dtype`` and ``shape``
(dimensions joined by ``x``, e.g. ``64x3x7x7``); the writer adds each only when the profile
has it. The name, ``dtype_bytes``, metadata and step parts of a profile do not travel in CSV (the writer
warns when it leaves step parts out)::

    name,size_bytes,forward_s,backward_s,update_s
    conv1.weight,37632,0.00012,0.00024,0.0
"""

from __future__ import annotations

import functools

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._profile_checks import (DTYPE_BYTES, check_dtypes, check_order, check_part, check_shapes,
                                            check_sizes, check_times, float_column, frozen)

PROFILE_SCHEMA = "fusionopt.profile"
PROFILE_VERSION = 1
# What a profile's JSON may hold, at the top and per tensor.
_PROFILE_KEYS = ("schema", "version", "name", "dtype_bytes", "metadata", "tensors", "ready_order",
                 "registration_order", "step")
_TENSOR_KEYS = ("name", "size", "forward", "backward", "update", "dtype", "shape")
# The parts of a step that belong to no tensor (MODEL.md section 4), seconds.
STEP_PARTS = ("update_lump", "post_backward", "host_overhead")


def _entries(label: str, values: Any) -> list[Any]:
    """``values`` as a list, one entry per tensor; a string or a scalar is refused naming ``label``."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{label} must be a sequence, one entry per tensor, got the string {values!r}")
    try:
        return list(values)
    except TypeError:
        raise ValueError(f"{label} must be a sequence, one entry per tensor, got {values!r}") from None


@dataclass(frozen=True, eq=False)
class Profile:
    """Per-tensor gradient sizes and compute times of one training step.

    Build one with :meth:`from_arrays` (or :meth:`read`); the constructor validates its
    inputs and stores read-only numpy arrays.

    Attributes
    ----------
    names : tuple of str
        Tensor names, forward order, unique.
    sizes : ndarray of int64
        Gradient size of each tensor in bytes, all ``> 0``.
    forward, backward, update : ndarray of float64
        Forward, backward and optimiser-update time of each tensor in seconds, all ``>= 0``.
    name : str
        Name of the model (free text).
    dtype_bytes : int
        Bytes per gradient element (used by schedulers that slice by parameter count).
    metadata : dict
        Free information: device, batch size, source of the timings.
    ready_order : tuple of int
        Forward indices in the order autograd accumulates the gradients (the *backward
        order* of the model specification: fusion plans are contiguous in it, DDP and
        Horovod fill their buckets in it). Default ``n-1, ..., 0``. It may only reorder
        tensors that are ready at the same moment, since the ready times stay
        ``r_i = sum_{k >= i} b_k``; a constructor given names or indices checks that.
    registration_order : tuple of int
        Forward indices in the order ``model.parameters()`` yields them (DDP's initial
        buckets and ByteScheduler's priorities follow it). Default ``0, ..., n-1``.
    dtypes : tuple of str or None
        Each tensor's dtype (torch's names: ``"float32"``, ``"bfloat16"``, ...); DDP
        buckets and Horovod fuses one dtype at a time. ``None``: every tensor has one dtype
        of ``dtype_bytes`` bytes.
    shapes : tuple of tuple of int or None
        Each tensor's shape, when known (ByteScheduler cuts whole rows of the first
        dimension).
    update_lump, post_backward, host_overhead : float
        The step's parts that belong to no tensor, in seconds, ``>= 0`` (default 0; MODEL.md
        section 4): optimiser and ``zero_grad`` time not split by tensor; the framework's
        work after every gradient is reduced (DDP's bucket copies into ``.grad``); time the
        compute stream waits for the host. ``W`` is their sum and :attr:`parts` names every
        part of the step.

    Examples
    --------
    MODEL.md section 5: three tensors, forward order.

    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], forward=[1e-3, 1e-3, 1e-3],
    ...                         backward=[3e-3, 2e-3, 1e-3])
    >>> p.n, p.B, p.F
    (3, 0.006, 0.003)
    >>> p.ready_times.round(6).tolist()   # tensor 0 is ready last, at B
    [0.006, 0.003, 0.001]

    A layer's weight and bias are ready together (its time sits on the bias, the layer's
    last tensor in forward order); autograd accumulates a convolution's weight first:

    >>> conv = Profile.from_arrays([1728, 64], [0.0, 1e-3], [0.0, 2e-3], ["conv.weight", "conv.bias"],
    ...                            ready_order=["conv.weight", "conv.bias"])
    >>> conv.ready_order, conv.ready_times.tolist()
    ((0, 1), [0.002, 0.002])
    >>> Profile.from_arrays([1728, 64], [0.0, 1e-3], [1e-3, 2e-3], ["conv.weight", "conv.bias"],
    ...                     ready_order=["conv.weight", "conv.bias"])
    Traceback (most recent call last):
    ...
    ValueError: ready_order puts tensor 'conv.weight' (ready at 0.003 s) before 'conv.bias' (ready at 0.002 s): it may only reorder tensors ready at the same moment
    """

    names: tuple[str, ...]
    sizes: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    update: np.ndarray
    name: str = ""
    dtype_bytes: int = 4
    metadata: Mapping[str, Any] = field(default_factory=dict)
    ready_order: Sequence[int] | None = None
    registration_order: Sequence[int] | None = None
    dtypes: Sequence[str] | None = None
    shapes: Sequence[Sequence[int]] | None = None
    update_lump: float = 0.0
    post_backward: float = 0.0
    host_overhead: float = 0.0

    def __post_init__(self) -> None:
        names = tuple(str(x) for x in self.names)
        n = len(names)
        if n == 0:
            raise ValueError("profile is empty: it needs at least one tensor")
        seen: dict[str, int] = {}
        for i, nm in enumerate(names):
            if nm in seen:
                raise ValueError(f"tensor {nm!r}: name repeated (positions {seen[nm]} and {i})")
            seen[nm] = i
        lengths = {
            "sizes": len(self.sizes),
            "forward": len(self.forward),
            "backward": len(self.backward),
            "update": len(self.update),
        }
        for label, length in lengths.items():
            if length != n:
                raise ValueError(
                    f"length mismatch: {n} tensor names but {length} {label} values"
                )
        if isinstance(self.dtype_bytes, bool) or not isinstance(self.dtype_bytes, (int, np.integer)) or self.dtype_bytes <= 0:
            raise ValueError(f"dtype_bytes must be a positive integer, got {self.dtype_bytes!r}")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "sizes", frozen(check_sizes(self.sizes, names)))
        object.__setattr__(self, "forward", frozen(check_times("forward", self.forward, names)))
        object.__setattr__(self, "backward", frozen(check_times("backward", self.backward, names)))
        object.__setattr__(self, "update", frozen(check_times("update", self.update, names)))
        object.__setattr__(self, "dtype_bytes", int(self.dtype_bytes))
        object.__setattr__(self, "metadata", dict(self.metadata))
        self._set_ready(self.ready_order)
        registration = (tuple(range(n)) if self.registration_order is None
                        else check_order("registration_order", self.registration_order, names))
        object.__setattr__(self, "registration_order", registration)
        if self.dtypes is not None:
            dtypes = check_dtypes(self.dtypes, names, self.sizes)
            element = np.array([DTYPE_BYTES[d] for d in dtypes], dtype=np.int64)
        else:
            dtypes = None
            element = np.full(n, self.dtype_bytes, dtype=np.int64)
        object.__setattr__(self, "dtypes", dtypes)
        object.__setattr__(self, "_element_bytes", frozen(element))
        if self.shapes is not None:
            object.__setattr__(self, "shapes", check_shapes(self.shapes, names, self.sizes, element))
        for part in STEP_PARTS:
            object.__setattr__(self, part, check_part(part, getattr(self, part)))

    def _set_ready(self, ready_order: Sequence[int | str] | None) -> None:
        """The ready times from ``backward`` and the ready order, checked against them."""
        names = self.names
        # r_i = sum_{k >= i} b_k: backward runs n-1 .. 0 from time 0.
        ready = np.cumsum(self.backward[::-1])[::-1].copy()
        order = (tuple(range(len(names) - 1, -1, -1)) if ready_order is None
                 else check_order("ready_order", ready_order, names))
        backward_order = np.array(order, dtype=np.int64)
        along = ready[backward_order]
        late = np.flatnonzero(along[:-1] > along[1:])                        # a tensor before one ready earlier
        if late.size:
            a, b = order[int(late[0])], order[int(late[0]) + 1]
            raise ValueError(
                f"ready_order puts tensor {names[a]!r} (ready at {ready[a]:.6g} s) before {names[b]!r} "
                f"(ready at {ready[b]:.6g} s): it may only reorder tensors ready at the same moment"
            )
        object.__setattr__(self, "_ready", frozen(ready))
        object.__setattr__(self, "ready_order", order)
        object.__setattr__(self, "_backward_order", frozen(backward_order))

    def with_backward(self, backward: Iterable[float], *, keep_order: bool = True) -> "Profile":
        """The same profile with other backward times (seconds per tensor, forward order),
        checked as the constructor checks them, the other fields taken as they are (faster
        than ``dataclasses.replace``, which checks them all again). The ready order is kept,
        and must still only reorder tensors ready at one moment (one line otherwise), or with
        ``keep_order=False`` set to the reverse forward order.

        >>> p = Profile.from_arrays([8, 8], [0.0, 0.0], [0.0, 0.0], ready_order=[0, 1])
        >>> p.with_backward([1.0, 2.0], keep_order=False).ready_times.tolist()
        [3.0, 2.0]
        >>> p.with_backward([1.0, 2.0])
        Traceback (most recent call last):
        ...
        ValueError: ready_order puts tensor 't0' (ready at 3 s) before 't1' (ready at 2 s): it may only reorder tensors ready at the same moment
        """
        new = object.__new__(Profile)
        fields = {key: value for key, value in self.__dict__.items() if key not in _CACHED}
        new.__dict__.update(fields, metadata=dict(self.metadata))
        iterator = hasattr(backward, "__iter__") and not hasattr(backward, "__len__")
        times = float_column("backward times", list(backward) if iterator else backward)
        if times.size != self.n:
            raise ValueError(f"length mismatch: {self.n} tensor names but {times.size} backward values")
        object.__setattr__(new, "backward", frozen(check_times("backward", times, self.names)))
        new._set_ready(self.ready_order if keep_order else None)
        return new

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(
        cls,
        sizes: Iterable[float],
        forward: Iterable[float],
        backward: Iterable[float],
        names: Iterable[str] | None = None,
        *,
        update: Iterable[float] | None = None,
        name: str = "",
        dtype_bytes: int = 4,
        metadata: Mapping[str, Any] | None = None,
        ready_order: Sequence[int | str] | None = None,
        registration_order: Sequence[int | str] | None = None,
        dtypes: Sequence[str] | None = None,
        shapes: Sequence[Sequence[int]] | None = None,
        update_lump: float = 0.0,
        post_backward: float = 0.0,
        host_overhead: float = 0.0,
    ) -> "Profile":
        """Build a profile from per-tensor arrays in forward order.

        Parameters
        ----------
        sizes : sequence of int
            Gradient sizes in bytes (whole numbers, ``> 0``).
        forward, backward : sequence of float
            Compute times in seconds (``>= 0``).
        names : sequence of str, optional
            Tensor names; default ``t0, t1, ...``.
        update : sequence of float, optional
            Optimiser-update times in seconds; default 0.
        ready_order, registration_order : sequence of int or str, optional
            The two orders of the class docstring, as forward indices or tensor names.
        dtypes, shapes : sequence, optional
            Per-tensor dtype names and shapes (class docstring).
        update_lump, post_backward, host_overhead : float, optional
            The step's parts that belong to no tensor, seconds (class docstring); default 0.

        Examples
        --------
        >>> Profile.from_arrays([8, 8], [0.0, 0.0], [1.0, 2.0]).names
        ('t0', 't1')
        >>> Profile.from_arrays([8, 0], [0.0, 0.0], [1.0, 2.0])
        Traceback (most recent call last):
        ...
        ValueError: tensor 't1': size is zero bytes
        """
        sizes, forward, backward = (_entries(label, values) for label, values in
                                    (("sizes", sizes), ("forward", forward), ("backward", backward)))
        names = [f"t{i}" for i in range(len(sizes))] if names is None else _entries("names", names)
        update = [0.0] * len(names) if update is None else _entries("update", update)
        return cls(
            names=tuple(names),
            sizes=sizes,  # type: ignore[arg-type]  # validated in __post_init__
            forward=forward,  # type: ignore[arg-type]
            backward=backward,  # type: ignore[arg-type]
            update=update,  # type: ignore[arg-type]
            name=name,
            dtype_bytes=dtype_bytes,
            metadata=metadata or {},
            ready_order=ready_order,
            registration_order=registration_order,
            dtypes=dtypes,
            shapes=shapes,
            update_lump=update_lump,
            post_backward=post_backward,
            host_overhead=host_overhead,
        )

    # ------------------------------------------------------------------ derived figures
    @property
    def n(self) -> int:
        """Number of gradient tensors."""
        return len(self.names)

    @property
    def ready_times(self) -> np.ndarray:
        """Ready time ``r_i`` of each tensor's gradient in seconds, forward order."""
        return self._ready  # type: ignore[attr-defined]

    @property
    def backward_steps(self) -> np.ndarray:
        """Seconds of backward from one gradient to the next along the ready order (the first
        from the start of the backward): ``ready_times[backward_order]``, differenced. Equal to
        ``backward`` read in that order unless ``ready_order`` reorders tensors ready at one
        moment; then the time sits on the last of them.

        >>> Profile.from_arrays([8, 8], [0.0, 0.0], [0.0, 2e-3], ready_order=[0, 1]).backward_steps.tolist()
        [0.002, 0.0]
        """
        return np.diff(self.ready_times[self.backward_order], prepend=0.0)

    @property
    def backward_order(self) -> np.ndarray:
        """``ready_order`` as a read-only int64 array: forward indices in the order the
        gradients become ready (ready times non-decreasing along it)."""
        return self._backward_order  # type: ignore[attr-defined]

    @property
    def element_bytes(self) -> np.ndarray:
        """Bytes per element of each tensor (its dtype's, else ``dtype_bytes``), forward order."""
        return self._element_bytes  # type: ignore[attr-defined]

    @property
    def has_default_orders(self) -> bool:
        """True when the ready order is reverse forward order and the registration order is
        forward order."""
        n = self.n
        return (self.ready_order == tuple(range(n - 1, -1, -1))
                and self.registration_order == tuple(range(n)))

    def with_orders(self, *, ready_order: Sequence[int | str] | None = None,
                    registration_order: Sequence[int | str] | None = None) -> "Profile":
        """The same profile with other orders (each left as it is when not given)."""
        return Profile(
            names=self.names, sizes=self.sizes, forward=self.forward, backward=self.backward,
            update=self.update, name=self.name, dtype_bytes=self.dtype_bytes, metadata=self.metadata,
            ready_order=self.ready_order if ready_order is None else ready_order,
            registration_order=self.registration_order if registration_order is None else registration_order,
            dtypes=self.dtypes, shapes=self.shapes, **self.step_parts,
        )

    def with_step_parts(self, **parts: float) -> "Profile":
        """The same profile with other step parts (``update_lump``, ``post_backward``,
        ``host_overhead``, seconds); the parts not given stay as they are.

        >>> p = Profile.from_arrays([8], [1.0], [2.0]).with_step_parts(host_overhead=0.5)
        >>> p.W, p.compute_time
        (0.5, 3.5)
        """
        unknown = sorted(set(parts) - set(STEP_PARTS))
        if unknown:
            raise ValueError(f"unknown step part {unknown[0]!r}: the parts are {', '.join(STEP_PARTS)}")
        return dataclasses.replace(self, **parts)

    def spread_step_parts(self, *parts: str) -> "Profile":
        """The same profile with the named step parts (``update_lump``, ``post_backward``)
        moved onto the tensors' update times, in proportion to their bytes: tensor ``i``'s
        update grows by ``part * s_i / sum s`` seconds and the part becomes 0 (MODEL.md
        section 4.1). An optimiser's and a gradient copy's time is linear in the bytes; the
        step's compute time ``B + F + U + W`` is kept (to rounding).

        >>> p = Profile.from_arrays([2e6, 1e6, 1e6], [0.0] * 3, [1.0] * 3, update_lump=4.0)
        >>> spread = p.spread_step_parts("update_lump")
        >>> spread.update.tolist(), spread.update_lump
        ([2.0, 1.0, 1.0], 0.0)
        """
        if not parts:
            raise ValueError("name the step parts to spread: update_lump, post_backward or both")
        for part in parts:
            if part == "host_overhead":
                raise ValueError("host_overhead is time the step waits for the host, not work on the tensors: "
                                 "it cannot be spread over their updates")
            if part not in STEP_PARTS:
                raise ValueError(f"unknown step part {part!r}: the parts to spread are update_lump and post_backward")
        moved = sum(getattr(self, part) for part in dict.fromkeys(parts))
        update = self.update + moved * self.sizes.astype(np.float64) / float(self.total_bytes)
        return dataclasses.replace(self, update=update, **{part: 0.0 for part in parts})

    def tail(self, count: int, name: str | None = None) -> "Profile":
        """The last ``count`` tensors in forward order (the first gradients the backward makes
        ready), with their times, orders, dtypes and shapes; ``name`` defaults to this one's.
        The step parts of the whole step (``W``) are not carried: a tail is part of a model.

        >>> p = Profile.from_arrays([4, 8, 8], [0.0] * 3, [1e-3, 0.0, 2e-3], ready_order=[1, 2, 0]).tail(2)
        >>> p.names, p.ready_order
        (('t1', 't2'), (0, 1))
        """
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= self.n:
            raise ValueError(f"count must be a whole number in 1..{self.n}, got {count!r}")
        start = self.n - int(count)
        keep = slice(start, self.n)
        return Profile(
            names=self.names[keep], sizes=self.sizes[keep], forward=self.forward[keep],
            backward=self.backward[keep], update=self.update[keep],
            name=self.name if name is None else name, dtype_bytes=self.dtype_bytes, metadata=self.metadata,
            ready_order=[i - start for i in self.ready_order if i >= start],
            registration_order=[i - start for i in self.registration_order if i >= start],
            dtypes=None if self.dtypes is None else self.dtypes[keep],
            shapes=None if self.shapes is None else self.shapes[keep],
        )

    def scaled(self, factor: float) -> "Profile":
        """The same tensors and orders with every forward, backward and update time, and the
        step parts, multiplied by ``factor`` (``>= 0``): ties in ready time stay ties, so the
        ready order holds.

        >>> p = Profile.from_arrays([8, 8], [1e-3, 0.0], [0.0, 2e-3], ready_order=[0, 1]).scaled(0.5)
        >>> p.F, p.B, p.ready_order
        (0.0005, 0.001, (0, 1))
        """
        if isinstance(factor, bool) or not isinstance(factor, (int, float, np.integer, np.floating)) \
                or not math.isfinite(factor) or factor < 0:
            raise ValueError(f"a compute scale must be a finite number >= 0, got {factor!r}")
        return Profile(
            names=self.names, sizes=self.sizes, forward=self.forward * factor, backward=self.backward * factor,
            update=self.update * factor, name=self.name, dtype_bytes=self.dtype_bytes, metadata=self.metadata,
            ready_order=self.ready_order, registration_order=self.registration_order,
            dtypes=self.dtypes, shapes=self.shapes,
            **{part: value * factor for part, value in self.step_parts.items()},
        )

    @property
    def B(self) -> float:
        """Total backward time in seconds."""
        return float(self._ready[0])  # type: ignore[attr-defined]

    @functools.cached_property
    def F(self) -> float:
        """Total forward time in seconds."""
        return float(self.forward.sum())

    @functools.cached_property
    def forward_before(self) -> np.ndarray:
        """Per tensor (forward order), the seconds of forward of the tensors before it,
        ``f_0 + ... + f_(i-1)`` as a running sum less its own ``f_i`` (read-only)."""
        return frozen(np.cumsum(self.forward) - self.forward)

    @functools.cached_property
    def U(self) -> float:
        """Total optimiser-update time in seconds."""
        return float(self.update.sum())

    @property
    def W(self) -> float:
        """The step parts that belong to no tensor, summed, in seconds: ``update_lump +
        post_backward + host_overhead`` (MODEL.md section 4)."""
        return self.update_lump + self.post_backward + self.host_overhead

    @property
    def step_parts(self) -> dict[str, float]:
        """``update_lump``, ``post_backward`` and ``host_overhead`` by name, in seconds."""
        return {part: getattr(self, part) for part in STEP_PARTS}

    @property
    def parts(self) -> dict[str, float]:
        """Where a step's compute time goes, in seconds: ``forward`` (``F``), ``backward``
        (``B``), ``update`` (``U``, per tensor), then the three step parts; they sum to
        :attr:`compute_time`.

        >>> p = Profile.from_arrays([8, 8], [1.0, 2.0], [4.0, 3.0], update_lump=0.5)
        >>> p.parts
        {'forward': 3.0, 'backward': 7.0, 'update': 0.0, 'update_lump': 0.5, 'post_backward': 0.0, 'host_overhead': 0.0}
        """
        return {"forward": self.F, "backward": self.B, "update": self.U, **self.step_parts}

    @property
    def total_bytes(self) -> int:
        """Sum of the gradient sizes in bytes."""
        return int(self.sizes.sum())

    @functools.cached_property
    def compute_time(self) -> float:
        """``B + F + U + W`` in seconds: the iteration time with free communication."""
        return self.B + self.F + self.U + self.W

    def index(self, name: str) -> int:
        """Forward index of the tensor called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no tensor named {name!r} in profile {self.name!r}") from None

    def __len__(self) -> int:
        return self.n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Profile):
            return NotImplemented
        return (
            self.names == other.names
            and self.name == other.name
            and self.dtype_bytes == other.dtype_bytes
            and np.array_equal(self.sizes, other.sizes)
            and np.array_equal(self.forward, other.forward)
            and np.array_equal(self.backward, other.backward)
            and np.array_equal(self.update, other.update)
            and dict(self.metadata) == dict(other.metadata)
            and self.ready_order == other.ready_order
            and self.registration_order == other.registration_order
            and self.dtypes == other.dtypes
            and self.shapes == other.shapes
            and self.step_parts == other.step_parts
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        label = f"{self.name!r}, " if self.name else ""
        return (
            f"Profile({label}n={self.n}, bytes={self.total_bytes}, "
            f"B={self.B:.6g} s, F={self.F:.6g} s, U={self.U:.6g} s)"
        )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """The profile as a JSON-ready dict (schema in the module docstring)."""
        tensors = []
        for i, nm in enumerate(self.names):
            entry: dict[str, Any] = {
                "name": nm,
                "size": int(self.sizes[i]),
                "forward": float(self.forward[i]),
                "backward": float(self.backward[i]),
            }
            if self.update[i] != 0.0:
                entry["update"] = float(self.update[i])
            if self.dtypes is not None:
                entry["dtype"] = self.dtypes[i]
            if self.shapes is not None:
                entry["shape"] = list(self.shapes[i])
            tensors.append(entry)
        doc: dict[str, Any] = {
            "schema": PROFILE_SCHEMA,
            "version": PROFILE_VERSION,
            "name": self.name,
            "dtype_bytes": self.dtype_bytes,
            "metadata": dict(self.metadata),
            "tensors": tensors,
        }
        if self.ready_order != tuple(range(self.n - 1, -1, -1)):
            doc["ready_order"] = [self.names[i] for i in self.ready_order]
        if self.registration_order != tuple(range(self.n)):
            doc["registration_order"] = [self.names[i] for i in self.registration_order]
        step = {part: value for part, value in self.step_parts.items() if value != 0.0}
        if step:
            doc["step"] = step
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "profile") -> "Profile":
        """Build a profile from the dict form of :meth:`to_dict`, naming ``source`` in errors."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object, got {type(doc).__name__}")
        schema = doc.get("schema", PROFILE_SCHEMA)
        if schema != PROFILE_SCHEMA:
            raise ValueError(f"{source}: schema is {schema!r}, expected {PROFILE_SCHEMA!r}")
        version = doc.get("version")
        if version != PROFILE_VERSION:
            raise ValueError(f"{source}: unsupported profile version {version!r} (this fusionopt reads {PROFILE_VERSION})")
        unknown = [key for key in doc if key not in _PROFILE_KEYS]
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r} (a profile holds {', '.join(_PROFILE_KEYS)})")
        tensors = doc.get("tensors")
        if not isinstance(tensors, list):
            raise ValueError(f"{source}: 'tensors' must be a list of tensor objects")
        names, sizes, fwd, bwd, upd, dtypes, shapes = [], [], [], [], [], [], []
        for k, t in enumerate(tensors):
            if not isinstance(t, Mapping):
                raise ValueError(f"{source}: tensors[{k}] is not an object")
            label = t.get("name", f"tensors[{k}]")
            unknown = [key for key in t if key not in _TENSOR_KEYS]
            if unknown:
                raise ValueError(f"{source}: tensor {label!r} has an unknown key {unknown[0]!r} "
                                 f"(a tensor holds {', '.join(_TENSOR_KEYS)})")
            for key in ("name", "size", "forward", "backward"):
                if key not in t:
                    raise ValueError(f"{source}: tensor {label!r} has no {key!r}")
            for key in ("size", "forward", "backward", "update"):
                value = t.get(key)
                if value is None and key == "update":
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{source}: tensor {label!r}: {key!r} must be a number, got {value!r}")
            names.append(t["name"])
            sizes.append(t["size"])
            fwd.append(t["forward"])
            bwd.append(t["backward"])
            upd.append(t.get("update") or 0.0)
            dtypes.append(t.get("dtype"))
            shapes.append(t.get("shape"))
        optional = {}
        for key, values in (("dtype", dtypes), ("shape", shapes)):
            given = [v is not None for v in values]
            if any(given) and not all(given):
                missing = names[given.index(False)]
                raise ValueError(f"{source}: tensor {missing!r} has no {key!r}, though other tensors have one: "
                                 f"give every tensor a {key!r} or none")
            if all(given) and values:
                optional[key + "s"] = values
        for key in ("ready_order", "registration_order"):
            if key in doc:
                if not isinstance(doc[key], list):
                    raise ValueError(f"{source}: {key!r} must be a list of tensor names")
                optional[key] = doc[key]
        step = doc.get("step") or {}
        if not isinstance(step, Mapping):
            raise ValueError(f"{source}: 'step' must be an object of {', '.join(STEP_PARTS)} (seconds)")
        for part, value in step.items():
            if part not in STEP_PARTS:
                raise ValueError(f"{source}: 'step' has an unknown part {part!r} (the parts are {', '.join(STEP_PARTS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{source}: step part {part!r} must be a number of seconds, got {value!r}")
            optional[part] = value
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ValueError(f"{source}: 'metadata' must be an object")
        try:
            return cls.from_arrays(
                sizes, fwd, bwd, names, update=upd, name=str(doc.get("name") or ""),
                dtype_bytes=doc.get("dtype_bytes", 4), metadata=metadata, **optional,
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def to_json(self) -> str:
        """The profile as a JSON string."""
        return json.dumps(self.to_dict(), indent=1)

    def write(self, path: str | Path) -> None:
        """Write the profile to ``path`` as JSON, atomically (temporary file, then rename)."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> "Profile":
        """Read a profile JSON file; malformed files raise ``ValueError`` naming the file."""
        return cls.from_dict(read_json_document(path), source=str(path))


# The cached figures of a profile, which one with other times computes afresh.
_CACHED = frozenset(name for name, value in vars(Profile).items() if isinstance(value, functools.cached_property))
