"""The checks of a :class:`~fusionopt.model.Profile`'s fields: each takes what a user
gave and returns it as the profile stores it (read-only arrays, tuples), or raises one
``ValueError`` naming the tensor and the field at fault."""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

# Bytes per element of the dtypes a profile may name (torch's names, without "torch.").
DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "complex128": 16, "complex64": 8, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}


def frozen(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


def float_column(label: str, values: Any) -> np.ndarray:
    """``values`` as a new flat float64 array, or one ``ValueError`` naming ``label``."""
    try:
        column = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{label} must be numbers: {exc}") from None
    if column.ndim != 1:
        raise ValueError(f"{label} must be a flat sequence, got shape {column.shape}")
    return column


def check_times(kind: str, values: Sequence[float], names: Sequence[str]) -> np.ndarray:
    times = float_column(f"{kind} times", values)
    if np.isfinite(times).all() and not (times < 0).any():
        return times
    for i, t in enumerate(times):
        if math.isnan(t):
            raise ValueError(f"tensor {names[i]!r}: {kind} time is NaN")
        if math.isinf(t):
            raise ValueError(f"tensor {names[i]!r}: {kind} time is infinite")
        if t < 0:
            raise ValueError(f"tensor {names[i]!r}: {kind} time is negative ({float(t)!r} s)")
    return times


_MAX_BYTES = 2**63 - 1


def check_sizes(values: Sequence[int], names: Sequence[str]) -> np.ndarray:
    """Whole positive byte counts, one per tensor, whose sum a profile can hold (int64)."""
    sizes = _whole_bytes(values, names)
    if sizes.size and int(sizes.max()) > _MAX_BYTES // sizes.size:          # the sum may overflow: add exactly
        total = sum(map(int, sizes))
        if total > _MAX_BYTES:
            raise ValueError(f"the tensors' sizes sum to {total} bytes, more than 2**63 - 1, the most a profile "
                             "holds")
    return sizes


def _whole_bytes(values: Sequence[int], names: Sequence[str]) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "iu" and (values > 0).all() \
            and (values.size == 0 or int(values.max()) <= _MAX_BYTES):      # whole positive bytes already
        return values.astype(np.int64)
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
        whole = int(s) if isinstance(s, (int, np.integer)) else int(as_float)
        if whole > _MAX_BYTES:
            raise ValueError(f"tensor {names[i]!r}: size {whole} bytes is more than 2**63 - 1, the most a profile holds")
        sizes[i] = whole
    return sizes


def check_order(kind: str, order: Sequence[int], names: Sequence[str]) -> tuple[int, ...]:
    """A permutation of the tensors, given as forward indices (``0`` to ``n - 1``) or as names."""
    n = len(names)
    if isinstance(order, (tuple, list)) and len(order) == n and set(map(type, order)) <= {int}:
        indices = np.array(order, dtype=np.int64)             # forward indices: a permutation of them is it
        if n == 0 or (indices.min() >= 0 and indices.max() < n
                      and np.bincount(indices, minlength=n).max() == 1):
            return tuple(order)
    position = {nm: i for i, nm in enumerate(names)}
    if isinstance(order, (str, bytes)):
        raise ValueError(f"{kind} must be a sequence of tensor names or forward indices, got a string")
    indices = []
    for entry in order:
        if isinstance(entry, str):
            if entry not in position:
                raise ValueError(f"{kind} names {entry!r}, which is not a tensor of the profile")
            indices.append(position[entry])
        elif isinstance(entry, (int, np.integer)) and not isinstance(entry, (bool, np.bool_)):
            if not 0 <= int(entry) < n:
                raise ValueError(f"{kind} holds index {int(entry)}, out of range for {n} tensors")
            indices.append(int(entry))
        else:
            raise ValueError(f"{kind} holds {entry!r}: expected a tensor name or a forward index")
    seen: dict[int, int] = {}
    for k, i in enumerate(indices):
        if i in seen:
            raise ValueError(f"{kind} lists tensor {names[i]!r} twice (positions {seen[i]} and {k})")
        seen[i] = k
    if len(indices) != n:
        missing = next(names[i] for i in range(n) if i not in seen)
        raise ValueError(f"{kind} lists {len(indices)} of {n} tensors; {missing!r} is missing")
    return tuple(indices)


def check_part(part: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{part} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{part} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_dtypes(values: Sequence[str], names: Sequence[str], sizes: np.ndarray) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)):
        raise ValueError("dtypes must be a sequence of dtype names, one per tensor, got a string")
    dtypes = tuple(values)
    if len(dtypes) != len(names):
        raise ValueError(f"length mismatch: {len(names)} tensor names but {len(dtypes)} dtypes")
    for i, d in enumerate(dtypes):
        label = str(d).removeprefix("torch.")
        if label not in DTYPE_BYTES:
            raise ValueError(f"tensor {names[i]!r}: unknown dtype {d!r} (known: {', '.join(DTYPE_BYTES)})")
        if int(sizes[i]) % DTYPE_BYTES[label]:
            raise ValueError(f"tensor {names[i]!r}: {int(sizes[i])} bytes is not a whole number of "
                             f"{label} elements ({DTYPE_BYTES[label]} bytes each)")
    return tuple(str(d).removeprefix("torch.") for d in dtypes)


def check_shapes(values: Sequence[Sequence[int]], names: Sequence[str], sizes: np.ndarray,
                  element_bytes: np.ndarray) -> tuple[tuple[int, ...], ...]:
    shapes = tuple(values)
    if len(shapes) != len(names):
        raise ValueError(f"length mismatch: {len(names)} tensor names but {len(shapes)} shapes")
    if set(map(type, shapes)) <= {tuple}:                 # as a profile keeps them: checked at once
        dims = [d for shape in shapes for d in shape]
        if set(map(type, dims)) <= {int} and (not dims or min(dims) > 0) and \
                list(map(operator.mul, map(math.prod, shapes), element_bytes.tolist())) == sizes.tolist():
            return shapes
    out = []
    for i, shape in enumerate(shapes):
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise ValueError(f"tensor {names[i]!r}: shape must be a list of dimensions, got {shape!r}")
        dims = []
        for d in shape:
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d <= 0:
                raise ValueError(f"tensor {names[i]!r}: shape {list(shape)!r} must hold positive whole dimensions")
            dims.append(int(d))
        elements = math.prod(dims)
        if elements * int(element_bytes[i]) != int(sizes[i]):
            raise ValueError(f"tensor {names[i]!r}: shape {dims} holds {elements} elements of "
                             f"{int(element_bytes[i])} bytes, not its {int(sizes[i])} bytes")
        out.append(tuple(dims))
    return tuple(out)


__all__ = ["DTYPE_BYTES", "float_column", "check_dtypes", "check_order", "check_part", "check_shapes", "check_sizes", "check_times",
           "frozen"]
