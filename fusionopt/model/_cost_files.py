"""Benchmark output as cost models (MODEL.md section 2): :func:`read_nccl_tests` and
:func:`read_osu` turn the tables nccl-tests and the OSU micro-benchmarks print into a
:class:`~fusionopt.cost.PiecewiseLinear`, refusing a malformed table in one line
naming the file and the line."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


from fusionopt.model._cost import PiecewiseLinear, check_flag

_NCCL_LOG = re.compile(r"\bNCCL (INFO|WARN|TRACE)\b")


def _read_source(path_or_text: Any) -> tuple[str, str]:
    """The text to parse and a label for errors: the file name, or ``<text>``."""
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        return path_or_text, "<text>"
    if not isinstance(path_or_text, (str, os.PathLike)):
        raise ValueError("expected a file path or the benchmark output as text, got "
                         f"{type(path_or_text).__name__}")
    path = Path(path_or_text)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None


def _parse_size(token: str, where: str) -> int:
    try:
        size = int(token)
    except ValueError:
        raise ValueError(f"{where}: size {token!r} is not a whole number of bytes") from None
    if size < 0:
        raise ValueError(f"{where}: size {token} is negative: a message has 0 bytes or more")
    return size


def _parse_microseconds(token: str, where: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"{where}: time {token!r} is not a number of microseconds") from None
    return value * 1e-6


def _curve(sizes: list[int], times: list[float], repair: bool, source: str,
           what: str) -> PiecewiseLinear:
    if not sizes:
        raise ValueError(f"{source}: no data rows found (expected {what} output)")
    try:
        return PiecewiseLinear(sizes, times, repair=repair)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def read_nccl_tests(path_or_text: str | os.PathLike, *, in_place: bool = False,
                    repair: bool = True) -> PiecewiseLinear:
    """Read an nccl-tests ``all_reduce_perf`` table into a :class:`PiecewiseLinear`; or a
    ``reduce_scatter_perf`` or ``all_gather_perf`` table (MODEL.md section 8): their size
    column is the larger of the bytes sent and received, the collective's unsharded size
    ``S``, which is what a sharded plan prices its messages on.

    The table header is the comment line with ``size`` and ``time`` columns; columns are
    matched by name, so tables with and without the ``redop``/``root`` columns both work.
    Sizes are bytes; times are microseconds in the file and seconds in the result. Comment
    lines (the trailing ``# Avg bus bandwidth``), NCCL log lines and rows of size 0 are skipped.

    Parameters
    ----------
    path_or_text : str or path-like
        A file name, or the output itself (a ``str`` containing a newline is taken as text).
    in_place : bool, keyword-only
        Use the in-place time (the second ``time`` column) instead of the out-of-place one.
    repair : bool, keyword-only
        Passed to :class:`PiecewiseLinear`: average repeated sizes and take the running
        maximum of noisy times (default ``True``, as measured times jitter).

    Returns
    -------
    PiecewiseLinear
        Time in seconds of one collective (the table's) of ``S`` bytes.

    Raises
    ------
    ValueError
        On a malformed row (naming the file and line), a missing header, or no data rows.

    Examples
    --------
    >>> out = '''
    ... #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    ... #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
    ...         1024           256     float     sum      -1    20.00    0.05    0.09      0    19.00    0.05    0.09      0
    ...         2048           512     float     sum      -1    22.00    0.09    0.16      0    21.00    0.10    0.17      0
    ... # Avg bus bandwidth    : 0.12
    ... '''
    >>> c = read_nccl_tests(out)
    >>> c.sizes.tolist(), [round(t, 9) for t in c.times.tolist()]
    ([1024.0, 2048.0], [2e-05, 2.2e-05])
    >>> round(read_nccl_tests(out, in_place=True)(1024), 9)
    1.9e-05
    """
    in_place, repair = check_flag("in_place", in_place), check_flag("repair", repair)
    text, source = _read_source(path_or_text)
    columns: list[str] | None = None
    sizes: list[int] = []
    times: list[float] = []
    seen: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = f"{source}, line {lineno}"
        stripped = line.strip()
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if "size" in tokens and "time" in tokens:
                if columns is not None:
                    raise ValueError(f"{where}: a second table header; give one table per file")
                columns = tokens
                time_columns = [k for k, name in enumerate(tokens) if name == "time"]
                if in_place and len(time_columns) < 2:
                    raise ValueError(f"{where}: in_place=True but the header has no in-place "
                                     "time column")
                time_column = time_columns[1 if in_place else 0]
                size_column = tokens.index("size")
            continue
        # Lines before the header are the run's preamble (environment, NCCL logs).
        if not stripped or columns is None or _NCCL_LOG.search(stripped):
            continue
        fields = stripped.split()
        if len(fields) != len(columns):
            raise ValueError(f"{where}: expected {len(columns)} columns as in the header, "
                             f"found {len(fields)}")
        # A table mixing data types or reductions is several curves, not one.
        for name in ("type", "redop"):
            if name in columns:
                value = fields[columns.index(name)]
                first = seen.setdefault(name, (value, lineno))
                if first[0] != value:
                    raise ValueError(f"{where}: {name} {value!r} differs from {first[0]!r} on "
                                     f"line {first[1]}; give one {name} per file")
        size = _parse_size(fields[size_column], where)
        time = _parse_microseconds(fields[time_column], where)
        if size > 0:
            sizes.append(size)
            times.append(time)
    if columns is None:
        raise ValueError(f"{source}: no nccl-tests header line with 'size' and 'time' columns")
    return _curve(sizes, times, repair, source, "nccl-tests all_reduce_perf")


def read_osu(path_or_text: str | os.PathLike, *, repair: bool = True) -> PiecewiseLinear:
    """Read OSU micro-benchmark ``osu_allreduce`` output into a :class:`PiecewiseLinear`.

    The header is the comment line ``# Size  Avg Latency(us) ...`` (columns separated by two or
    more spaces, so extra columns such as ``Min Latency(us)``, ``Max Latency(us)`` and
    ``Iterations`` are allowed); the ``Avg Latency(us)`` column is used. Sizes are bytes;
    latencies are microseconds in the file and seconds in the result. Rows of size 0 are skipped.

    Parameters
    ----------
    path_or_text : str or path-like
        A file name, or the output itself (a ``str`` containing a newline is taken as text).
    repair : bool, keyword-only
        Passed to :class:`PiecewiseLinear` (default ``True``).

    Returns
    -------
    PiecewiseLinear
        Time in seconds of one collective (the table's) of ``S`` bytes.

    Raises
    ------
    ValueError
        On a malformed row (naming the file and line), a missing header, or no data rows.

    Examples
    --------
    >>> out = '''# OSU MPI Allreduce Latency Test v7.3
    ... # Datatype: MPI_FLOAT.
    ... # Size       Avg Latency(us)
    ... 4                       2.50
    ... 8                       2.60
    ... '''
    >>> c = read_osu(out)
    >>> c.sizes.tolist(), [round(t, 10) for t in c.times.tolist()]
    ([4.0, 8.0], [2.5e-06, 2.6e-06])
    """
    repair = check_flag("repair", repair)
    text, source = _read_source(path_or_text)
    columns: list[str] | None = None
    sizes: list[int] = []
    times: list[float] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = f"{source}, line {lineno}"
        stripped = line.strip()
        if stripped.startswith("#"):
            names = re.split(r"\s{2,}", stripped.lstrip("#").strip())
            if names and names[0].lower() == "size" and any("latency" in n.lower() for n in names):
                if columns is not None:
                    raise ValueError(f"{where}: a second table header; give one table per file")
                columns = names
                latency_column = _osu_latency_column(names, where)
            continue
        if not stripped or columns is None:
            continue
        fields = stripped.split()
        if len(fields) != len(columns):
            raise ValueError(f"{where}: expected {len(columns)} columns as in the header, "
                             f"found {len(fields)}")
        size = _parse_size(fields[0], where)
        time = _parse_microseconds(fields[latency_column], where)
        if size > 0:
            sizes.append(size)
            times.append(time)
    if columns is None:
        raise ValueError(f"{source}: no OSU header line '# Size  Avg Latency(us)'")
    return _curve(sizes, times, repair, source, "OSU osu_allreduce")


def _osu_latency_column(names: list[str], where: str) -> int:
    candidates = [k for k, n in enumerate(names) if n.lower().startswith("avg latency")]
    if not candidates:
        candidates = [k for k, n in enumerate(names) if "latency" in n.lower()]
        if len(candidates) != 1:
            raise ValueError(f"{where}: no 'Avg Latency(us)' column in {names!r}")
    column = candidates[0]
    if "(us)" not in names[column].replace(" ", ""):
        raise ValueError(f"{where}: latency column {names[column]!r} is not in microseconds (us)")
    return column


__all__ = ["read_nccl_tests", "read_osu"]
