"""The results file of a sweep: one record per finished cell, JSON lines or CSV.

Only the parent process writes it: each record is one complete line written by a single
``os.write`` on a descriptor opened with ``O_APPEND``, then ``os.fsync``, so a kill leaves at
worst one partial last line, which the next run drops (with a warning). A record is keyed by
its cell and the time limit its solve ran under (:func:`record_key`), so a rerun solves
only what is missing or ran under another limit.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from fusionopt.experiments._grid import CELL_FIELDS, Cell, distinct_cells
from fusionopt.model._io import write_bytes_atomic
from fusionopt.solvers._catalogue import time_limit_seconds
from fusionopt.solvers._registry import get_method

#: The keys of every record, in order (an ERROR record adds ``error``).
FIELDS: tuple[str, ...] = CELL_FIELDS + (
    "time_limit",          # the solve's time limit, for the methods that take one (else None)
    "iteration_time", "compute_time", "scaling_efficiency", "throughput", "lower_bound", "status",
    "messages", "solve_seconds", "fusionopt_version",
)

CSV_COLUMNS = FIELDS + ("error",)

_INT_FIELDS = frozenset({"batch", "workers", "messages"})

_FLOAT_FIELDS = frozenset({"time_limit", "iteration_time", "compute_time", "scaling_efficiency", "throughput", "lower_bound",
                           "solve_seconds"})

_FORMATS = {".jsonl": "jsonl", ".csv": "csv"}

#: The cell's zoo options that records of an older fusionopt do not have: such a record is
#: kept, but matches no cell (its compute cannot be told), so its cell is solved again.
ZOO_OPTION_FIELDS = ("precision", "compute", "optimizer")


def results_format(path: str | os.PathLike) -> str:
    """``"jsonl"`` or ``"csv"``, from the file's extension; one line naming the path otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(f"{os.fspath(path)}: unknown results format {suffix or '(no extension)'!r}; "
                         f"use {' or '.join(_FORMATS)}")
    return _FORMATS[suffix]


def applied_limit(cell: Cell, time_limit: float | None) -> float | None:
    """The time limit a cell's solve runs under: ``time_limit`` for a method that takes one."""
    time_limit = time_limit_seconds(time_limit)
    if time_limit is None:
        return None
    try:
        options = get_method(cell.method).options
    except ValueError:            # an unknown method: its record is an ERROR either way
        return None
    return time_limit if "time_limit" in options else None


def record_key(item: Cell | dict[str, Any], time_limit: float | None = None) -> tuple:
    """What identifies a result: the cell, and the time limit its solve ran under (a rerun
    with another limit solves the limited cells again)."""
    if isinstance(item, Cell):
        return tuple(getattr(item, name) for name in CELL_FIELDS) + (applied_limit(item, time_limit),)
    return tuple(item.get(name) for name in CELL_FIELDS) + (item.get("time_limit"),)


def encode_record(record: dict[str, Any], fmt: str) -> bytes:
    """One record as one complete line of the results file, in format ``fmt``."""
    if fmt == "jsonl":
        return (json.dumps(record) + "\n").encode("utf-8")
    return _csv_line(["" if record.get(c) is None else record.get(c) for c in CSV_COLUMNS])


def csv_header() -> bytes:
    """The header line of a CSV results file."""
    return _csv_line(CSV_COLUMNS)


def _csv_line(values: Sequence[Any]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue().encode("utf-8")


def _csv_value(column: str, text: str) -> Any:
    if text == "":
        return None
    if column in _INT_FIELDS:
        return int(text)
    if column in _FLOAT_FIELDS:
        return float(text)
    if column in CSV_COLUMNS:
        return text
    for parse in (int, float):     # a column of another writer: numbers when they read as one
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def _parse_line(line: bytes, fmt: str, header: list[str] | None, figures: bool = True) -> dict[str, Any] | None:
    """The record on one complete line (without its newline), or None when it is not one
    (with ``figures=False``, whatever its figures)."""
    try:
        text = line.decode("utf-8")
        if fmt == "jsonl":
            record = json.loads(text)
        else:
            row = next(csv.reader([text]))
            if header is None or len(row) != len(header):
                return None
            record = {column: _csv_value(column, value) for column, value in zip(header, row)}
            if record.get("error") is None:
                record.pop("error", None)
    except (UnicodeDecodeError, ValueError, StopIteration, csv.Error):
        return None
    if not isinstance(record, dict) or any(not isinstance(record.get(name), str)
                                           for name in CELL_FIELDS if name not in _INT_FIELDS
                                           and not (name in ZOO_OPTION_FIELDS and name not in record)):
        return None
    if any(isinstance(record.get(name), bool) or not isinstance(record.get(name), int) or record[name] < 1
           for name in ("batch", "workers")):
        return None
    messages = record.get("messages")
    if messages is not None and (isinstance(messages, bool) or not isinstance(messages, int) or messages < 1):
        return None
    if not isinstance(record.get("status"), str):
        return None
    return None if figures and _bad_figure(record) else record


def _bad_figure(record: dict[str, Any]) -> str | None:
    """Why a record's figures are not a sweep's: its times (seconds) and ratios are numbers
    >= 0 where given (a plot would draw anything else); None when they are."""
    for name in sorted(_FLOAT_FIELDS):
        value = record.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value < math.inf):
            return f"its {name} {value!r} is not a number >= 0"
    return None


@dataclass
class ResultsScan:
    """A results file read line by line: the good lines (bytes, with newline) and their
    records, the complete lines that are not records as ``(line number, text)``, and a
    last line cut short (no newline) in ``torn``."""

    header: bytes | None
    lines: list[bytes]
    records: list[dict[str, Any]]
    dropped: list[tuple[int, bytes]]
    torn: tuple[int, bytes] | None = None


def scan_results(path: Path, fmt: str) -> ResultsScan:
    """Read a results file: its records, the lines that are not records and a torn last line."""
    data = path.read_bytes()
    pieces = data.split(b"\n")
    complete, tail = pieces[:-1], pieces[-1]  # tail: b"" when the file ends with a newline
    scan = ResultsScan(None, [], [], [])
    first = 1
    header: list[str] | None = None
    if fmt == "csv" and complete:
        found = complete[0].decode("utf-8", errors="replace")
        if found != ",".join(CSV_COLUMNS):
            columns = [c for c in CSV_COLUMNS if c not in ZOO_OPTION_FIELDS]
            oldest = ",".join("speedup" if c == "throughput" else c for c in columns if c != "time_limit")
            if found == oldest:
                raise ValueError(f"{path}: a sweep CSV file of an older fusionopt (no time_limit column, "
                                 "'speedup' for throughput): write this sweep to a new file")
            if found == ",".join(columns):
                raise ValueError(f"{path}: a sweep CSV file of an older fusionopt (no precision, compute and "
                                 "optimizer columns: which zoo compute its cells used cannot be told): write "
                                 "this sweep to a new file")
            raise ValueError(f"{path}: not a sweep CSV file: its header is {found[:80]!r}, "
                             f"expected {','.join(CSV_COLUMNS)!r}")
        scan.header = complete[0] + b"\n"
        complete = complete[1:]
        first = 2
    if fmt == "csv":
        header = list(CSV_COLUMNS)
    for number, line in enumerate(complete, start=first):
        record = _parse_line(line, fmt, header)
        if record is None:
            scan.dropped.append((number, line))
        else:
            scan.lines.append(line + b"\n")
            scan.records.append(record)
    if tail:   # every record is written with its newline: a line without one was cut short
        scan.torn = (first + len(complete), tail)
    return scan


def preview_line(line: bytes) -> str:
    """A short quoted preview of a line of a file, for error messages."""
    text = line.decode("utf-8", errors="replace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


def not_a_record(line: bytes, fmt: str) -> str:
    """A line that is not a sweep record, in words: its preview, and which figure is wrong
    when it is a record but for its figures."""
    record = _parse_line(line, fmt, list(CSV_COLUMNS) if fmt == "csv" else None, figures=False)
    why = _bad_figure(record) if record is not None else None
    return preview_line(line) + (f" ({why})" if why else "")


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a sweep results file (``.jsonl`` or ``.csv``), in file order.

    Numbers come back as ``int`` (batch, workers, messages) or ``float`` (times in
    seconds, ratios), empty or null values as None; an ``error`` key only on ERROR
    records. A last line without its newline (a sweep still writing, or one killed while
    writing) is ignored.

    Parameters
    ----------
    path : str or path-like

    Raises
    ------
    ValueError
        For an unknown extension, a CSV header that is not a sweep's, or a complete line
        that is not a record (the message names the file and line).
    FileNotFoundError
        When there is no such file.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from fusionopt.experiments import cells, run_sweep
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "sweep.csv")
    >>> _ = run_sweep(cells(["alexnet"], [8, 16], ["10gbe"], ["single"]), path, jobs=1, progress=False)
    >>> [(r["workers"], r["messages"], "error" in r) for r in read_results(path)]
    [(8, 1, False), (16, 1, False)]
    >>> shutil.rmtree(folder)
    """
    fmt = results_format(path)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    scan = scan_results(path, fmt)
    if scan.dropped:
        number, line = scan.dropped[0]
        raise ValueError(f"{path}: line {number} is not a sweep record: {not_a_record(line, fmt)}")
    return scan.records


def pending_cells(cells: Iterable[Cell], path: str | os.PathLike, *, retry_errors: bool = False,
                  time_limit: float | None = None) -> list[Cell]:
    """The cells without a record in ``path`` yet (all of them when there is no file), a
    record of a method with a time limit counting only under the same ``time_limit``; with
    ``retry_errors``, also those whose record has status ``ERROR``.

    Lines that are not records are ignored here (:func:`run_sweep` drops them).

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from fusionopt.experiments import cells, run_sweep
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "sweep.jsonl")
    >>> grid = cells(["alexnet"], [8, 16], ["10gbe"], ["single"])
    >>> len(pending_cells(grid, path))
    2
    >>> _ = run_sweep(grid[:1], path, jobs=1, progress=False)
    >>> [cell.workers for cell in pending_cells(grid, path)]
    [16]
    >>> shutil.rmtree(folder)
    """
    fmt = results_format(path)
    path = Path(path)
    records = scan_results(path, fmt).records if path.is_file() else []
    done = {record_key(r) for r in records if not (retry_errors and r["status"] == "ERROR")}
    return [cell for cell in distinct_cells(cells) if record_key(cell, time_limit) not in done]


def repair_results(path: Path, fmt: str, scan: ResultsScan) -> None:
    """Rewrite ``path`` with its good lines only (atomically), saying on stderr what went."""
    header = scan.header if scan.header is not None else (csv_header() if fmt == "csv" else b"")
    mode = path.stat().st_mode & 0o777
    write_bytes_atomic(path, header + b"".join(scan.lines))
    os.chmod(path, mode)
    parts = []
    if scan.torn is not None:
        parts.append(f"a last line cut short (line {scan.torn[0]}: {preview_line(scan.torn[1])})")
    if scan.dropped:
        shown = "; ".join(f"line {number}: {not_a_record(line, fmt)}" for number, line in scan.dropped[:3])
        more = f" and {len(scan.dropped) - 3} more" if len(scan.dropped) > 3 else ""
        parts.append(f"{len(scan.dropped)} line(s) that are not records ({shown}{more})")
    if parts:
        print(f"fusionopt sweep: warning: {path}: dropped {' and '.join(parts)}; kept {len(scan.records)} "
              f"record(s)", file=sys.stderr)


def append_record(fd: int, line: bytes) -> None:
    """Write ``line`` with one ``os.write`` on an ``O_APPEND`` descriptor, then ``fsync``."""
    written = os.write(fd, line)       # one write: a kill cuts at most this line
    if written != len(line):
        raise OSError(f"short write: {written} of {len(line)} bytes (disk full?)")
    os.fsync(fd)


@contextlib.contextmanager
def writer_lock(path: Path):
    """Hold an exclusive lock on ``<path>.lock`` while a sweep writes ``path``."""
    try:
        import fcntl
    except ImportError:        # no advisory locks on this system: one writer is up to the user
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            # A POSIX record lock: unlike flock, the worker processes forked while it is held
            # do not inherit it, so it ends with this sweep.
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(f"{path}: another sweep is writing this file (it holds {lock_path.name}); "
                               "wait for it, or write another file") from None
        try:
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)       # the sweep that held it removed that file as it finished: lock the new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()         # while still held, so a sweep that opened it sees it gone
        os.close(fd)
