"""Profiles as CSV files (MODEL.md section 2): one row per tensor in forward order, columns
``name,size_bytes,forward_s,backward_s,update_s`` (bytes and seconds) and optionally
``ready_index``, ``registration_index``, ``dtype`` and ``shape``. The profile's own JSON
schema is :meth:`Profile.to_dict <fusionopt.model.Profile.to_dict>`.

:func:`write_profile_csv` writes one atomically, :func:`profile_csv_text` is its text, and
:func:`read_profile_csv` reads one back, refusing a bad cell in one line naming the file,
the line and the column.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Mapping

from fusionopt.model._io import csv_text, read_csv_rows, write_text_atomic
from fusionopt.model._profile import Profile

CSV_COLUMNS = ("name", "size_bytes", "forward_s", "backward_s", "update_s")
CSV_EXTRA_COLUMNS = ("ready_index", "registration_index", "dtype", "shape")
_CSV_OPTIONAL = ("update_s",) + CSV_EXTRA_COLUMNS


def write_profile_csv(profile: Profile, path: str | Path) -> None:
    """Write the profile to ``path`` as CSV, atomically (temporary file, then rename).

    Columns ``name,size_bytes,forward_s,backward_s,update_s`` (bytes and seconds), one
    row per tensor in forward order. Times are written with Python's shortest exact
    float form, so :func:`read_profile_csv` gives the same numbers back. The profile's
    ``name``, ``dtype_bytes`` and ``metadata`` are not written.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = Profile.from_arrays([4e6, 1e6], [1e-3, 1e-3], [3e-3, 2e-3], ["fc1.weight", "fc2.weight"])
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.csv"
    >>> write_profile_csv(p, path)
    >>> print(path.read_text(), end="")
    name,size_bytes,forward_s,backward_s,update_s
    fc1.weight,4000000,0.001,0.003,0.0
    fc2.weight,1000000,0.001,0.002,0.0
    >>> read_profile_csv(path) == p
    True
    """
    write_text_atomic(path, profile_csv_text(profile))

def profile_csv_text(profile: Profile) -> str:
    """The CSV text that :func:`write_profile_csv` writes.

    Examples
    --------
    >>> print(profile_csv_text(Profile.from_arrays([8], [0.5], [0.25])), end="")
    name,size_bytes,forward_s,backward_s,update_s
    t0,8,0.5,0.25,0.0
    """
    if profile.W:
        given = ", ".join(f"{part} = {value:.6g} s" for part, value in profile.step_parts.items() if value)
        warnings.warn(f"profile {profile.name or 'without a name'!r}: its step parts ({given}) are not written: "
                      "CSV carries the tensors only; write JSON (Profile.write) to keep them", stacklevel=3)
    n = profile.n
    extras: list[tuple[str, list[str]]] = []
    if profile.ready_order != tuple(range(n - 1, -1, -1)):
        position = {i: k for k, i in enumerate(profile.ready_order)}
        extras.append(("ready_index", [str(position[i]) for i in range(n)]))
    if profile.registration_order != tuple(range(n)):
        position = {i: k for k, i in enumerate(profile.registration_order)}
        extras.append(("registration_index", [str(position[i]) for i in range(n)]))
    if profile.dtypes is not None:
        extras.append(("dtype", list(profile.dtypes)))
    if profile.shapes is not None:
        extras.append(("shape", ["x".join(str(d) for d in shape) for shape in profile.shapes]))
    rows = [
        [nm, int(profile.sizes[i]), repr(float(profile.forward[i])), repr(float(profile.backward[i])),
         repr(float(profile.update[i]))] + [column[i] for _, column in extras]
        for i, nm in enumerate(profile.names)
    ]
    return csv_text(list(CSV_COLUMNS) + [label for label, _ in extras], rows)

def read_profile_csv(
    path: str | Path,
    *,
    name: str = "",
    dtype_bytes: int = 4,
    metadata: Mapping[str, Any] | None = None,
) -> Profile:
    """Read a profile from the CSV file at ``path`` (format of :func:`write_profile_csv`).

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
    >>> read_profile_csv(path)
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
        if label not in CSV_COLUMNS + CSV_EXTRA_COLUMNS:
            raise ValueError(
                f"{source}: line {header_line}: unknown column {label!r} "
                f"(the columns are {', '.join(CSV_COLUMNS + CSV_EXTRA_COLUMNS)})"
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
    values: dict[str, list[Any]] = {label: [] for label in CSV_COLUMNS + CSV_EXTRA_COLUMNS}
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
        for label in CSV_EXTRA_COLUMNS:
            if label in columns:
                where = f"{source}: line {line}, column {label!r} (tensor {tensor!r})"
                values[label].append(_csv_extra(cells[columns[label]], label, where))
    optional: dict[str, Any] = {}
    for label, key in (("ready_index", "ready_order"), ("registration_index", "registration_order")):
        if label in columns:
            optional[key] = _order_from_positions(values[label], values["name"], f"{source}: column {label!r}")
    if "dtype" in columns:
        optional["dtypes"] = values["dtype"]
    if "shape" in columns:
        optional["shapes"] = values["shape"]
    try:
        return Profile.from_arrays(
            [int(v) for v in values["size_bytes"]], values["forward_s"], values["backward_s"], values["name"],
            update=values["update_s"], name=name, dtype_bytes=dtype_bytes, metadata=metadata, **optional,
        )
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def _csv_extra(cell: str, column: str, where: str) -> Any:
    """One cell of an optional CSV column: a position (whole number >= 0), a dtype name or a
    shape ``AxBxC``."""
    text = cell.strip()
    if column in ("ready_index", "registration_index"):
        try:
            position = int(text)
        except ValueError:
            raise ValueError(f"{where}: not a whole number: {text!r}") from None
        if position < 0:
            raise ValueError(f"{where}: negative ({text})")
        return position
    if column == "shape":
        try:
            return tuple(int(d) for d in text.split("x"))
        except ValueError:
            raise ValueError(f"{where}: not a shape of whole dimensions joined by 'x': {text!r}") from None
    if not text:
        raise ValueError(f"{where}: empty dtype")
    return text


def _order_from_positions(positions: list[int], names: list[str], where: str) -> list[int]:
    """Forward indices in the order their positions give, the positions ``0 .. n-1`` once each."""
    n = len(positions)
    holder: dict[int, str] = {}
    for nm, k in zip(names, positions):
        if k >= n:
            raise ValueError(f"{where}: tensor {nm!r} has position {k}, beyond the {n} tensors (positions count from 0)")
        if k in holder:
            raise ValueError(f"{where}: position {k} is given to both {holder[k]!r} and {nm!r}")
        holder[k] = nm
    order = [0] * n
    for i, k in enumerate(positions):
        order[k] = i
    return order


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


__all__ = ["CSV_COLUMNS", "CSV_EXTRA_COLUMNS", "profile_csv_text", "read_profile_csv", "write_profile_csv"]
