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
         "forward": 1.2e-4, "backward": 2.4e-4, "update": 0.0},   # update optional
        ...
      ]
    }

CSV form (:meth:`Profile.to_csv`, :meth:`Profile.read_csv`): a header naming the columns,
then one row per tensor in forward order; ``update_s`` may be left out (0 s). The name,
``dtype_bytes`` and metadata of a profile do not travel in CSV::

    name,size_bytes,forward_s,backward_s,update_s
    conv1.weight,37632,0.00012,0.00024,0.0
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model._io import csv_text, read_csv_rows, read_json_document, write_json_atomic, write_text_atomic

PROFILE_SCHEMA = "fusionopt.profile"
PROFILE_VERSION = 1
CSV_COLUMNS = ("name", "size_bytes", "forward_s", "backward_s", "update_s")
_CSV_OPTIONAL = ("update_s",)


def _frozen(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


def _check_times(kind: str, values: Sequence[float], names: Sequence[str]) -> np.ndarray:
    try:
        times = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{kind} times must be numbers: {exc}") from None
    if times.ndim != 1:
        raise ValueError(f"{kind} times must be a flat sequence, got shape {times.shape}")
    for i, t in enumerate(times):
        if math.isnan(t):
            raise ValueError(f"tensor {names[i]!r}: {kind} time is NaN")
        if math.isinf(t):
            raise ValueError(f"tensor {names[i]!r}: {kind} time is infinite")
        if t < 0:
            raise ValueError(f"tensor {names[i]!r}: {kind} time is negative ({float(t)!r} s)")
    return times


def _check_sizes(values: Sequence[int], names: Sequence[str]) -> np.ndarray:
    sizes = np.empty(len(values), dtype=np.int64)
    for i, s in enumerate(values):
        if isinstance(s, (bool, np.bool_)):
            raise ValueError(f"tensor {names[i]!r}: size must be an integer number of bytes, got {s!r}")
        try:
            as_float = float(s)
        except (TypeError, ValueError):
            raise ValueError(f"tensor {names[i]!r}: size must be a number of bytes, got {s!r}") from None
        if math.isnan(as_float):
            raise ValueError(f"tensor {names[i]!r}: size is NaN")
        if math.isinf(as_float):
            raise ValueError(f"tensor {names[i]!r}: size is infinite")
        if as_float != int(as_float):
            raise ValueError(f"tensor {names[i]!r}: size must be a whole number of bytes, got {s!r}")
        if as_float < 0:
            raise ValueError(f"tensor {names[i]!r}: size is negative ({s!r} bytes)")
        if as_float == 0:
            raise ValueError(f"tensor {names[i]!r}: size is zero bytes")
        sizes[i] = int(as_float)
    return sizes


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

    Examples
    --------
    MODEL.md section 5: three tensors, forward order.

    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], forward=[1e-3, 1e-3, 1e-3],
    ...                         backward=[3e-3, 2e-3, 1e-3])
    >>> p.n, p.B, p.F
    (3, 0.006, 0.003)
    >>> p.ready_times.round(6).tolist()   # tensor 0 is ready last, at B
    [0.006, 0.003, 0.001]
    """

    names: tuple[str, ...]
    sizes: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    update: np.ndarray
    name: str = ""
    dtype_bytes: int = 4
    metadata: Mapping[str, Any] = field(default_factory=dict)

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
        object.__setattr__(self, "sizes", _frozen(_check_sizes(self.sizes, names)))
        object.__setattr__(self, "forward", _frozen(_check_times("forward", self.forward, names)))
        object.__setattr__(self, "backward", _frozen(_check_times("backward", self.backward, names)))
        object.__setattr__(self, "update", _frozen(_check_times("update", self.update, names)))
        object.__setattr__(self, "dtype_bytes", int(self.dtype_bytes))
        object.__setattr__(self, "metadata", dict(self.metadata))
        # r_i = sum_{k >= i} b_k: backward runs n-1 .. 0 from time 0.
        ready = np.cumsum(self.backward[::-1])[::-1].copy()
        object.__setattr__(self, "_ready", _frozen(ready))

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

        Examples
        --------
        >>> Profile.from_arrays([8, 8], [0.0, 0.0], [1.0, 2.0]).names
        ('t0', 't1')
        >>> Profile.from_arrays([8, 0], [0.0, 0.0], [1.0, 2.0])
        Traceback (most recent call last):
        ...
        ValueError: tensor 't1': size is zero bytes
        """
        sizes = list(sizes)
        forward = list(forward)
        backward = list(backward)
        if names is None:
            names = [f"t{i}" for i in range(len(sizes))]
        names = list(names)
        update = [0.0] * len(names) if update is None else list(update)
        return cls(
            names=tuple(names),
            sizes=sizes,  # type: ignore[arg-type]  # validated in __post_init__
            forward=forward,  # type: ignore[arg-type]
            backward=backward,  # type: ignore[arg-type]
            update=update,  # type: ignore[arg-type]
            name=name,
            dtype_bytes=dtype_bytes,
            metadata=metadata or {},
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
    def B(self) -> float:
        """Total backward time in seconds."""
        return float(self._ready[0])  # type: ignore[attr-defined]

    @property
    def F(self) -> float:
        """Total forward time in seconds."""
        return float(self.forward.sum())

    @property
    def U(self) -> float:
        """Total optimiser-update time in seconds."""
        return float(self.update.sum())

    @property
    def total_bytes(self) -> int:
        """Sum of the gradient sizes in bytes."""
        return int(self.sizes.sum())

    @property
    def compute_time(self) -> float:
        """``B + F + U`` in seconds: the iteration time with free communication."""
        return self.B + self.F + self.U

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
            tensors.append(entry)
        return {
            "schema": PROFILE_SCHEMA,
            "version": PROFILE_VERSION,
            "name": self.name,
            "dtype_bytes": self.dtype_bytes,
            "metadata": dict(self.metadata),
            "tensors": tensors,
        }

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
        tensors = doc.get("tensors")
        if not isinstance(tensors, list):
            raise ValueError(f"{source}: 'tensors' must be a list of tensor objects")
        names, sizes, fwd, bwd, upd = [], [], [], [], []
        for k, t in enumerate(tensors):
            if not isinstance(t, Mapping):
                raise ValueError(f"{source}: tensors[{k}] is not an object")
            label = t.get("name", f"tensors[{k}]")
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
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise ValueError(f"{source}: 'metadata' must be an object")
        try:
            return cls.from_arrays(
                sizes, fwd, bwd, names, update=upd, name=str(doc.get("name") or ""),
                dtype_bytes=doc.get("dtype_bytes", 4), metadata=metadata,
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

    # ------------------------------------------------------------------ CSV
    def to_csv(self, path: str | Path) -> None:
        """Write the profile to ``path`` as CSV, atomically (temporary file, then rename).

        Columns ``name,size_bytes,forward_s,backward_s,update_s`` (bytes and seconds), one
        row per tensor in forward order. Times are written with Python's shortest exact
        float form, so :meth:`read_csv` gives the same numbers back. The profile's
        ``name``, ``dtype_bytes`` and ``metadata`` are not written.

        Examples
        --------
        >>> import pathlib, tempfile
        >>> p = Profile.from_arrays([4e6, 1e6], [1e-3, 1e-3], [3e-3, 2e-3], ["fc1.weight", "fc2.weight"])
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.csv"
        >>> p.to_csv(path)
        >>> print(path.read_text(), end="")
        name,size_bytes,forward_s,backward_s,update_s
        fc1.weight,4000000,0.001,0.003,0.0
        fc2.weight,1000000,0.001,0.002,0.0
        >>> Profile.read_csv(path) == p
        True
        """
        write_text_atomic(path, self.to_csv_text())

    def to_csv_text(self) -> str:
        """The CSV text that :meth:`to_csv` writes.

        Examples
        --------
        >>> print(Profile.from_arrays([8], [0.5], [0.25]).to_csv_text(), end="")
        name,size_bytes,forward_s,backward_s,update_s
        t0,8,0.5,0.25,0.0
        """
        rows = [
            [nm, int(self.sizes[i]), repr(float(self.forward[i])), repr(float(self.backward[i])),
             repr(float(self.update[i]))]
            for i, nm in enumerate(self.names)
        ]
        return csv_text(list(CSV_COLUMNS), rows)

    @classmethod
    def read_csv(
        cls,
        path: str | Path,
        *,
        name: str = "",
        dtype_bytes: int = 4,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Profile":
        """Read a profile from the CSV file at ``path`` (format of :meth:`to_csv`).

        The header is required and names each column once, in any order; ``update_s`` may
        be left out (0 s). Sizes are whole numbers of bytes ``> 0``, times seconds ``>= 0``.
        ``name``, ``dtype_bytes`` and ``metadata`` are given to the profile as they are,
        since CSV does not carry them.

        Raises
        ------
        FileNotFoundError
            No file at ``path``.
        ValueError
            Naming the file, and the line and column of a bad cell: an empty file, a missing,
            unknown or repeated column, a row with the wrong number of cells, a cell that is
            not a number, NaN, infinite or negative, a size that is zero or not whole, a
            repeated tensor name.

        Examples
        --------
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "bad.csv"
        >>> _ = path.write_text("name,size_bytes,forward_s,backward_s\\nfc1.weight,4096,0.001,fast\\n")
        >>> Profile.read_csv(path)
        Traceback (most recent call last):
        ...
        ValueError: ...bad.csv: line 2, column 'backward_s' (tensor 'fc1.weight'): not a number: 'fast'
        """
        source = str(path)
        rows = read_csv_rows(path)
        if not rows:
            raise ValueError(f"{source}: empty file: expected a header line {','.join(CSV_COLUMNS)}")
        header_line, header = rows[0]
        columns: dict[str, int] = {}
        for k, cell in enumerate(header):
            label = cell.strip()
            if label not in CSV_COLUMNS:
                raise ValueError(
                    f"{source}: line {header_line}: unknown column {label!r} "
                    f"(the columns are {', '.join(CSV_COLUMNS)})"
                )
            if label in columns:
                raise ValueError(f"{source}: line {header_line}: column {label!r} repeated")
            columns[label] = k
        for label in CSV_COLUMNS:
            if label not in columns and label not in _CSV_OPTIONAL:
                raise ValueError(
                    f"{source}: line {header_line}: missing column {label!r} "
                    f"(the header must name {', '.join(c for c in CSV_COLUMNS if c not in _CSV_OPTIONAL)})"
                )
        if len(rows) == 1:
            raise ValueError(f"{source}: no tensor rows after the header: profile is empty")
        values: dict[str, list[Any]] = {label: [] for label in CSV_COLUMNS}
        for line, cells in rows[1:]:
            if len(cells) != len(header):
                raise ValueError(f"{source}: line {line}: {len(cells)} cells, expected {len(header)} (one per column)")
            tensor = cells[columns["name"]].strip()
            if not tensor:
                raise ValueError(f"{source}: line {line}, column 'name': empty tensor name")
            values["name"].append(tensor)
            for label in CSV_COLUMNS[1:]:
                if label not in columns:
                    values[label].append(0.0)
                    continue
                where = f"{source}: line {line}, column {label!r} (tensor {tensor!r})"
                values[label].append(_csv_number(cells[columns[label]], label, where))
        try:
            return cls.from_arrays(
                [int(v) for v in values["size_bytes"]], values["forward_s"], values["backward_s"], values["name"],
                update=values["update_s"], name=name, dtype_bytes=dtype_bytes, metadata=metadata,
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None


def _csv_number(cell: str, column: str, where: str) -> float | int:
    """One numeric CSV cell, checked: a finite number ``>= 0``; for sizes, a whole number ``> 0``."""
    text = cell.strip()
    if column == "size_bytes":
        try:  # whole numbers exactly, past float's 2**53
            whole = int(text)
        except ValueError:
            pass
        else:
            if whole < 0:
                raise ValueError(f"{where}: negative ({text} bytes)")
            if whole == 0:
                raise ValueError(f"{where}: zero bytes")
            return whole
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: not a number: {text!r}") from None
    unit = "bytes" if column == "size_bytes" else "s"
    if math.isnan(value):
        raise ValueError(f"{where}: NaN")
    if math.isinf(value):
        raise ValueError(f"{where}: infinite")
    if value < 0:
        raise ValueError(f"{where}: negative ({text} {unit})")
    if column == "size_bytes":
        if value != int(value):
            raise ValueError(f"{where}: not a whole number of bytes: {text!r}")
        if value == 0:
            raise ValueError(f"{where}: zero bytes")
    return value

