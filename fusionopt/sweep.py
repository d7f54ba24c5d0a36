"""Parameter sweeps: models x workers x networks x methods, solved in parallel, resumable.

A sweep is a list of :class:`Cell` s (built by :func:`cells`), each one zoo model on one
preset network solved by one method. :func:`run_sweep` solves the cells in worker
processes and appends one record per finished cell to a results file (JSON lines or
CSV); a sweep that was stopped, even by ``SIGKILL``, is resumed by running it again on
the same file: the cells already there are not solved again.

Only the parent process writes the file: each record is one complete line written by a
single ``os.write`` on a descriptor opened with ``O_APPEND``, then ``os.fsync``, so a kill
leaves at worst one partial last line, which the next run drops (with a warning).

Records (:data:`FIELDS`; times in seconds):

* ``model, device, batch, network, algorithm, workers, sync, method``: the cell;
* ``time_limit``: the time limit its solve ran under (None for a method without one): a
  rerun with another limit solves those cells again;
* ``iteration_time``: the plan's simulated iteration time;
* ``compute_time``: ``B + F + U + W`` of the profile, one worker's iteration time without
  communication;
* ``scaling_efficiency``: ``compute_time / iteration_time``;
* ``throughput``: ``workers * compute_time / iteration_time``, the job's steps per unit
  time in one worker's (``workers`` at perfect scaling; "speedup" is kept for a ratio of two
  iteration times, as ``compare`` reports it; records of older sweeps call this ``speedup``);
* ``lower_bound`` (or None), ``status``, ``messages`` (in the plan), ``solve_seconds``
  (wall time of the solve) and ``fusionopt_version``.

A cell whose solve raised gets ``status`` ``"ERROR"``, an ``error`` message and None for
the figures it lacks; it counts as finished.

Examples
--------
>>> import os, shutil, tempfile
>>> folder = tempfile.mkdtemp()
>>> path = os.path.join(folder, "sweep.jsonl")
>>> todo = cells(["alexnet"], [8], ["10gbe"], ["wfbp", "dp"])
>>> records = run_sweep(todo, path, jobs=1, progress=False)
>>> [(r["method"], r["status"], r["messages"]) for r in records]
[('wfbp', 'FEASIBLE', 16), ('dp', 'OPTIMAL', 2)]
>>> run_sweep(todo, path, jobs=1, progress=False) == records   # nothing solved again
True
>>> read_results(path) == records
True
>>> shutil.rmtree(folder)
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, fields
from numbers import Integral
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from fusionopt import __version__, zoo
from fusionopt.model.collectives import network
from fusionopt.model.problem import Problem
from fusionopt.model._io import write_bytes_atomic
from fusionopt.solvers.registry import default_methods, get_method, solve

__all__ = ["Cell", "FIELDS", "cells", "pending_cells", "read_results", "run_cell", "run_sweep"]

SYNCS = ("barrier", "layerwise")


@dataclass(frozen=True)
class Cell:
    """One point of a sweep: a zoo model on a preset network, solved by one method.

    Attributes
    ----------
    model : str
        A zoo model (:func:`fusionopt.zoo.models`).
    device : str
        A zoo device preset for the roofline compute estimate.
    batch : int
        Samples per worker per step.
    network : str
        A network preset (:func:`fusionopt.cost.networks`).
    algorithm : str
        The all-reduce algorithm (:data:`fusionopt.cost.ALGORITHMS`).
    workers : int
        Number of workers ``P >= 1``.
    sync : {"barrier", "layerwise"}
    method : str
        A registered method (:func:`fusionopt.methods`).
    """

    model: str
    device: str
    batch: int
    network: str
    algorithm: str
    workers: int
    sync: str
    method: str

    @property
    def label(self) -> str:
        """``"model workers network method"``, as the progress bar shows it."""
        return f"{self.model} {self.workers} {self.network} {self.method}"


CELL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Cell))
#: The keys of every record, in order (an ERROR record adds ``error``).
FIELDS: tuple[str, ...] = CELL_FIELDS + (
    "time_limit",          # the solve's time limit, for the methods that take one (else None)
    "iteration_time", "compute_time", "scaling_efficiency", "throughput", "lower_bound", "status",
    "messages", "solve_seconds", "fusionopt_version",
)
_CSV_COLUMNS = FIELDS + ("error",)
_INT_FIELDS = frozenset({"batch", "workers", "messages"})
_FLOAT_FIELDS = frozenset({"time_limit", "iteration_time", "compute_time", "scaling_efficiency", "throughput", "lower_bound",
                           "solve_seconds"})
_FORMATS = {".jsonl": "jsonl", ".csv": "csv"}


# ---------------------------------------------------------------------- the cells
def cells(
    models: Iterable[str],
    workers: Iterable[int],
    networks: Iterable[str],
    methods: Iterable[str] | None = None,
    *,
    device: str = "h100",
    batch: int = 64,
    sync: str = "barrier",
    algorithm: str = "ring",
) -> list[Cell]:
    """The cartesian product models x workers x networks x methods, validated.

    Methods the registry runs on other problems only are left out, with one line on
    stderr naming them: parameter-server methods (a sweep solves all-reduce problems) and,
    under ``sync="barrier"``, the layerwise-only ones.

    Parameters
    ----------
    models : iterable of str
        Zoo model names (case-insensitive).
    workers : iterable of int
        Worker counts, each at least 1.
    networks : iterable of str
        Network preset names (case-insensitive).
    methods : iterable of str, optional
        Method names; default the registry's default comparison for ``sync``
        (:func:`fusionopt.solvers.default_methods`).
    device : str
        Zoo device preset for the compute estimate (default ``"h100"``).
    batch : int
        Samples per worker per step (default 64).
    sync : {"barrier", "layerwise"}
    algorithm : str
        All-reduce algorithm for the network presets (default ``"ring"``).

    Returns
    -------
    list of Cell
        In the order models, then workers, then networks, then methods (the last varies
        fastest); repeated names are counted once.

    Raises
    ------
    ValueError
        For an unknown model, device, network, algorithm, method or sync, a worker count
        below 1, a batch that is not a positive integer, an empty list, or when no method
        is left to run; the message names the culprit and, for names, lists the known ones.

    Examples
    --------
    >>> grid = cells(["resnet18", "alexnet"], [8, 64], ["10gbe"], ["wfbp", "dp"])
    >>> len(grid), grid[0].label, grid[-1].label
    (8, 'resnet18 8 10gbe wfbp', 'alexnet 64 10gbe dp')
    >>> grid[0]   # doctest: +NORMALIZE_WHITESPACE
    Cell(model='resnet18', device='h100', batch=64, network='10gbe', algorithm='ring', workers=8,
         sync='barrier', method='wfbp')
    >>> cells(["resnet18"], [0], ["10gbe"], ["wfbp"])
    Traceback (most recent call last):
    ...
    ValueError: workers must be integers >= 1, got 0
    >>> cells(["resnet18"], [8], ["10gbe"], ["wfpb"])
    Traceback (most recent call last):
    ...
    ValueError: unknown method 'wfpb'; known methods: ...
    """
    models = _distinct("models", models)
    workers = _distinct("workers", workers)
    networks = _distinct("networks", networks)
    if sync not in SYNCS:
        raise ValueError(f"unknown sync {sync!r}; known: {', '.join(SYNCS)}")
    for count in workers:
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 1:
            raise ValueError(f"workers must be integers >= 1, got {count!r}")
    workers = [int(count) for count in workers]
    # zoo.profile names an unknown model or device and a bad batch, listing the known ones.
    profiles = {model.strip().lower(): zoo.profile(model, device=device, batch=batch) for model in models}
    device = device.strip().lower()
    for name in networks:
        for count in workers:      # fitted presets know some worker counts only
            network(name, count, algorithm=algorithm)
    networks = list(dict.fromkeys(name.lower() for name in networks))
    if methods is None:
        first = next(iter(profiles.values()))
        methods = default_methods(Problem(first, network(networks[0], workers[0], algorithm=algorithm), sync=sync))
    methods = _distinct("methods", methods)
    entries = [get_method(name) for name in methods]
    ps = [m.name for m in entries if m.ps_only]
    layerwise = [m.name for m in entries if m.layerwise_only and not m.ps_only and sync != "layerwise"]
    notes = []
    if layerwise:
        notes.append(f"{', '.join(layerwise)} (layerwise-only: they need sync 'layerwise')")
    if ps:
        notes.append(f"{', '.join(ps)} (parameter-server methods: a sweep solves all-reduce problems)")
    kept = [name for name in methods if name not in ps and name not in layerwise]
    if not kept:
        raise ValueError(f"no method left to run: skipped {'; '.join(notes)}")
    if notes:
        print(f"fusionopt sweep: skipping {'; '.join(notes)}", file=sys.stderr)
    return [Cell(model, device, batch, name, algorithm, count, sync, method)
            for model in profiles for count in workers for name in networks for method in kept]


def _distinct(kind: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, (str, bytes)):
        values = [values]
    values = list(dict.fromkeys(values))
    if not values:
        raise ValueError(f"{kind}: give at least one")
    return values


# ---------------------------------------------------------------------- one cell
def run_cell(cell: Cell, *, time_limit: float | None = None, search_workers: int | None = None) -> dict[str, Any]:
    """Solve one cell; its record (see :data:`FIELDS`), never an exception from the solve.

    Parameters
    ----------
    cell : Cell
    time_limit : float, optional
        Seconds, passed as ``time_limit`` to the methods that take that option (the
        anytime searches); the others ignore it.
    search_workers : int, optional
        Passed as ``workers`` to the methods that take it (CP-SAT's search threads): one
        per task when a cluster runs many cells at once.

    Returns
    -------
    dict
        The record, keys :data:`FIELDS` in order, times in seconds. When building the
        problem or solving raised, ``status`` is ``"ERROR"``, the figures it lacks are
        None and ``error`` holds ``"ExceptionType: message"`` on one line.

    Examples
    --------
    >>> record = run_cell(Cell("alexnet", "h100", 64, "10gbe", "ring", 8, "barrier", "single"))
    >>> record["messages"], record["status"], round(record["iteration_time"], 6)
    (1, 'FEASIBLE', 0.343208)
    >>> record["throughput"] == 8 * record["compute_time"] / record["iteration_time"]
    True
    >>> run_cell(Cell("alexnet", "h100", 64, "10gbe", "ring", 8, "barrier", "p3"))["error"]
    "ValueError: p3 is for sync='layerwise' only ..."
    """
    record: dict[str, Any] = {name: None for name in FIELDS}
    record.update(asdict(cell))
    record["fusionopt_version"] = __version__
    started = time.perf_counter()
    try:
        profile = zoo.profile(cell.model, device=cell.device, batch=cell.batch)
        record["compute_time"] = float(profile.compute_time)
        problem = Problem(profile, network(cell.network, cell.workers, algorithm=cell.algorithm), sync=cell.sync)
        options = {}
        record["time_limit"] = _applied_limit(cell, time_limit)
        if record["time_limit"] is not None:
            options["time_limit"] = time_limit
        if search_workers is not None and "workers" in get_method(cell.method).options:
            options["workers"] = search_workers
        result = solve(problem, cell.method, **options)
    except Exception as exc:   # a failed cell is a record; the sweep goes on
        record["status"] = "ERROR"
        record["solve_seconds"] = time.perf_counter() - started
        record["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())
        return record
    timeline = result.timeline
    efficiency = float(timeline.scaling_efficiency()) if timeline.iteration_time > 0 else None
    record.update(
        iteration_time=float(result.iteration_time),
        scaling_efficiency=efficiency,
        throughput=None if efficiency is None else cell.workers * efficiency,
        lower_bound=None if result.lower_bound is None else float(result.lower_bound),
        status=str(result.status),
        messages=int(result.num_messages),
        solve_seconds=float(result.solve_seconds),
    )
    return record


# ---------------------------------------------------------------------- the results file
def _format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(f"{os.fspath(path)}: unknown results format {suffix or '(no extension)'!r}; "
                         f"use {' or '.join(_FORMATS)}")
    return _FORMATS[suffix]


def _applied_limit(cell: Cell, time_limit: float | None) -> float | None:
    """The time limit a cell's solve runs under: ``time_limit`` for a method that takes one."""
    if time_limit is None:
        return None
    try:
        return float(time_limit) if "time_limit" in get_method(cell.method).options else None
    except ValueError:            # an unknown method: its record is an ERROR either way
        return None


def _key(item: Cell | dict[str, Any], time_limit: float | None = None) -> tuple:
    """What identifies a result: the cell, and the time limit its solve ran under (a rerun
    with another limit solves the limited cells again)."""
    if isinstance(item, Cell):
        return tuple(getattr(item, name) for name in CELL_FIELDS) + (_applied_limit(item, time_limit),)
    return tuple(item.get(name) for name in CELL_FIELDS) + (item.get("time_limit"),)


def _encode(record: dict[str, Any], fmt: str) -> bytes:
    if fmt == "jsonl":
        return (json.dumps(record) + "\n").encode("utf-8")
    return _csv_line(["" if record.get(c) is None else record.get(c) for c in _CSV_COLUMNS])


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
    if column in _CSV_COLUMNS:
        return text
    for parse in (int, float):     # a column of another writer: numbers when they read as one
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def _parse_line(line: bytes, fmt: str, header: list[str] | None) -> dict[str, Any] | None:
    """The record on one complete line (without its newline), or None when it is not one."""
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
                                           for name in CELL_FIELDS if name not in _INT_FIELDS):
        return None
    if any(isinstance(record.get(name), bool) or not isinstance(record.get(name), int)
           for name in ("batch", "workers")):
        return None
    return record


@dataclass
class _Scan:
    """A results file read line by line: the good lines (bytes, with newline) and their
    records, the complete lines that are not records as ``(line number, text)``, and a
    last line cut short (no newline) in ``torn``."""

    header: bytes | None
    lines: list[bytes]
    records: list[dict[str, Any]]
    dropped: list[tuple[int, bytes]]
    torn: tuple[int, bytes] | None = None


def _scan(path: Path, fmt: str) -> _Scan:
    data = path.read_bytes()
    pieces = data.split(b"\n")
    complete, tail = pieces[:-1], pieces[-1]  # tail: b"" when the file ends with a newline
    scan = _Scan(None, [], [], [])
    first = 1
    header: list[str] | None = None
    if fmt == "csv" and complete:
        found = complete[0].decode("utf-8", errors="replace")
        if found != ",".join(_CSV_COLUMNS):
            older = ",".join("speedup" if c == "throughput" else c for c in _CSV_COLUMNS if c != "time_limit")
            if found == older:
                raise ValueError(f"{path}: a sweep CSV file of an older fusionopt (no time_limit column, "
                                 "'speedup' for throughput): write this sweep to a new file")
            raise ValueError(f"{path}: not a sweep CSV file: its header is {found[:80]!r}, "
                             f"expected {','.join(_CSV_COLUMNS)!r}")
        scan.header = complete[0] + b"\n"
        header = list(_CSV_COLUMNS)
        complete = complete[1:]
        first = 2
    elif fmt == "csv":
        header = list(_CSV_COLUMNS)
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


def _preview(line: bytes) -> str:
    text = line.decode("utf-8", errors="replace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


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
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "sweep.csv")
    >>> _ = run_sweep(cells(["alexnet"], [8, 16], ["10gbe"], ["single"]), path, jobs=1, progress=False)
    >>> [(r["workers"], r["messages"], "error" in r) for r in read_results(path)]
    [(8, 1, False), (16, 1, False)]
    >>> shutil.rmtree(folder)
    """
    fmt = _format(path)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    scan = _scan(path, fmt)
    if scan.dropped:
        number, line = scan.dropped[0]
        raise ValueError(f"{path}: line {number} is not a sweep record: {_preview(line)}")
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
    fmt = _format(path)
    path = Path(path)
    records = _scan(path, fmt).records if path.is_file() else []
    done = {_key(r) for r in records if not (retry_errors and r["status"] == "ERROR")}
    return [cell for cell in dict.fromkeys(cells) if _key(cell, time_limit) not in done]


def _repair(path: Path, fmt: str, scan: _Scan) -> None:
    """Rewrite ``path`` with its good lines only (atomically), saying on stderr what went."""
    header = scan.header if scan.header is not None else (_csv_line(_CSV_COLUMNS) if fmt == "csv" else b"")
    mode = path.stat().st_mode & 0o777
    write_bytes_atomic(path, header + b"".join(scan.lines))
    os.chmod(path, mode)
    parts = []
    if scan.torn is not None:
        parts.append(f"a last line cut short (line {scan.torn[0]}: {_preview(scan.torn[1])})")
    if scan.dropped:
        shown = "; ".join(f"line {number}: {_preview(line)}" for number, line in scan.dropped[:3])
        more = f" and {len(scan.dropped) - 3} more" if len(scan.dropped) > 3 else ""
        parts.append(f"{len(scan.dropped)} line(s) that are not records ({shown}{more})")
    if parts:
        print(f"fusionopt sweep: warning: {path}: dropped {' and '.join(parts)}; kept {len(scan.records)} "
              f"record(s)", file=sys.stderr)


def _append(fd: int, line: bytes) -> None:
    written = os.write(fd, line)       # one write: a kill cuts at most this line
    if written != len(line):
        raise OSError(f"short write: {written} of {len(line)} bytes (disk full?)")
    os.fsync(fd)


# ---------------------------------------------------------------------- the sweep
def run_sweep(
    cells: Iterable[Cell],
    path: str | os.PathLike,
    *,
    jobs: int | None = None,
    time_limit: float | None = None,
    progress: bool = True,
    retry_errors: bool = False,
    executor: Any = None,
) -> list[dict[str, Any]]:
    """Solve the cells not yet recorded in ``path`` in parallel, appending each record as it
    arrives; return the records of all ``cells``.

    The file's format follows its extension: ``.jsonl`` (one JSON object a line) or
    ``.csv`` (a header line written when the file is created). Cells already recorded,
    matched on the :class:`Cell` fields and, for the methods that take one, the
    ``time_limit`` their record was solved under, are not solved again (a rerun with another
    limit solves those cells again and adds their records); a partial last line (a sweep killed while writing it) is dropped first by
    rewriting the file atomically, with a warning on stderr. A file with a complete line
    that is not a record is not a sweep's: it is refused, and left as it is. Records of other cells in
    the file are kept there, not returned.

    Parameters
    ----------
    cells : iterable of Cell
        From :func:`cells`; repeated cells are solved once.
    path : str or path-like
        The results file; created when missing (its folder must exist).
    jobs : int, optional
        Worker processes; default ``os.cpu_count()``. ``jobs=1`` solves in this process.
    time_limit : float, optional
        Seconds per solve for the methods that take a ``time_limit`` option.
    progress : bool
        Show progress on stderr: a bar redrawn per cell on a terminal, else about ten
        lines in all.
    retry_errors : bool
        Solve again the cells whose record has status ``ERROR`` (their old records are
        removed from the file first, atomically); by default an ERROR record counts as done.
    executor : concurrent.futures.Executor, optional
        The engine that runs the cells instead of the local process pool (``jobs`` is then
        not used): a Dask cluster's, ``distributed.Client(...).get_executor()``, say. Only
        this process writes the file; the cheap cells go :data:`CHEAP_BATCH` to a task,
        CP-SAT runs one search worker per task, and the cells of a task that fails are
        named and left for the next run (``RuntimeError`` after the others are written).

    One sweep at a time may write a file: a second one started on the same file while the
    first runs stops with a ``RuntimeError`` (a lock on ``<path>.lock``, where the system
    has ``fcntl``).

    Returns
    -------
    list of dict
        One record per cell, in the order of ``cells`` (see :data:`FIELDS`).

    Raises
    ------
    ValueError
        For an unknown extension, a CSV file with another header, a file with lines that are
        not records, a bad ``jobs`` or ``time_limit``.
    RuntimeError
        When a worker process died (the records written so far stay; run again to go on),
        or another sweep is writing ``path``.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "sweep.jsonl")
    >>> grid = cells(["resnet50"], [8, 64], ["10gbe", "100gb-ib"], ["dp"])
    >>> records = run_sweep(grid, path, jobs=2, progress=False)
    >>> [(r["workers"], r["network"], round(r["throughput"], 2)) for r in records]   # in one worker's steps
    [(8, '10gbe', 0.22), (8, '100gb-ib', 2.03), (64, '10gbe', 1.52), (64, '100gb-ib', 14.15)]
    >>> with open(path) as handle:
    ...     len(handle.readlines())
    4
    >>> shutil.rmtree(folder)
    """
    fmt = _format(path)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, Integral) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    cells = list(dict.fromkeys(cells))
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: folder {path.parent} does not exist")
    with _writer_lock(path):
        return _run_locked(cells, path, fmt, jobs, time_limit, progress, retry_errors, executor)


@contextlib.contextmanager
def _writer_lock(path: Path):
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


def _run_locked(cells: list[Cell], path: Path, fmt: str, jobs: int, time_limit: float | None, progress: bool,
                retry_errors: bool, executor: Any = None) -> list[dict[str, Any]]:
    done: dict[tuple, dict[str, Any]] = {}
    if path.is_file():
        scan = _scan(path, fmt)
        if scan.dropped:          # not this sweep's file, or edited by hand: never delete a user's lines
            number, line = scan.dropped[0]
            more = f" ({len(scan.dropped)} such lines)" if len(scan.dropped) > 1 else ""
            raise ValueError(f"{path}: line {number} is not a sweep record: {_preview(line)}{more}; "
                             "this is not a sweep's results file: write the sweep to another file")
        retried: list[int] = []
        if retry_errors:
            retried = [i for i, record in enumerate(scan.records) if record["status"] == "ERROR"]
            if retried:
                keep = sorted(set(range(len(scan.records))) - set(retried))
                scan.lines = [scan.lines[i] for i in keep]
                scan.records = [scan.records[i] for i in keep]
                print(f"fusionopt sweep: {path}: solving {len(retried)} ERROR cell(s) again", file=sys.stderr)
        if scan.dropped or scan.torn is not None or retried:
            _repair(path, fmt, scan)
        for record in scan.records:
            done.setdefault(_key(record), record)
    pending = [cell for cell in cells if _key(cell, time_limit) not in done]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        if fmt == "csv" and os.fstat(fd).st_size == 0:
            _append(fd, _csv_line(_CSV_COLUMNS))
        bar = _Progress(len(pending), len(cells) - len(pending), path, sys.stderr) if progress else None
        with contextlib.closing(_solve_all(pending, jobs, time_limit, executor)) as finished:
            for record in finished:
                _append(fd, _encode(record, fmt))
                done[_key(record)] = record
                if bar is not None:
                    bar.update(record)
        if bar is not None:
            bar.close()
    finally:
        os.close(fd)
    return [done[_key(cell, time_limit)] for cell in cells]


# Cells of a method without a time limit (a baseline, the DP) take milliseconds: on an
# injected executor (a cluster) this many go in one task, so that a task lasts about a second.
CHEAP_BATCH = 16


def run_cells(cells: Sequence[Cell], *, time_limit: float | None = None,
              search_workers: int | None = None) -> list[dict[str, Any]]:
    """:func:`run_cell` on each of ``cells``: one task of a sweep on an injected executor."""
    return [run_cell(cell, time_limit=time_limit, search_workers=search_workers) for cell in cells]


def _tasks(pending: list[Cell]) -> list[list[Cell]]:
    """The cells grouped into tasks: the cheap ones :data:`CHEAP_BATCH` at a time, the
    others (searches with a time limit, brute force) one each."""
    def cheap(cell: Cell) -> bool:
        try:
            return cell.method != "brute" and "time_limit" not in get_method(cell.method).options
        except ValueError:
            return True
    quick = [c for c in pending if cheap(c)]
    tasks = [quick[k: k + CHEAP_BATCH] for k in range(0, len(quick), CHEAP_BATCH)]
    return tasks + [[c] for c in pending if not cheap(c)]


def _solve_on(executor: Any, pending: list[Cell], time_limit: float | None) -> Iterable[dict[str, Any]]:
    """Records of ``pending`` from an injected ``concurrent.futures.Executor`` (a Dask
    client's, say), as tasks finish. A task that fails (its worker died and the engine gave
    up on it) loses no record: its cells are named and left for the next run."""
    running = {executor.submit(run_cells, task, time_limit=time_limit, search_workers=1): task
               for task in _tasks(pending)}
    lost: list[Cell] = []
    reason = ""
    try:
        while running:
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                task = running.pop(future)
                try:
                    records = future.result()
                except Exception as exc:  # noqa: BLE001 - the engine's failure, reported below
                    lost.extend(task)
                    reason = " ".join(f"{type(exc).__name__}: {exc}".split())
                    continue
                yield from records
    finally:
        for future in running:
            future.cancel()
    if lost:
        position = {cell: k for k, cell in enumerate(pending)}
        lost.sort(key=position.__getitem__)         # named in the sweep's order, whatever finished first
        shown = ", ".join(cell.label for cell in lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        raise RuntimeError(f"{len(lost)} cell(s) were lost with their task ({shown}; {reason}); the records "
                           "written so far are kept: run the same sweep again to solve them")


def _solve_all(pending: list[Cell], jobs: int, time_limit: float | None,
               executor: Any = None) -> Iterable[dict[str, Any]]:
    """Records of ``pending`` in the order they finish."""
    if not pending:
        return
    if executor is not None:
        yield from _solve_on(executor, pending, time_limit)
        return
    if jobs == 1:
        for cell in pending:
            yield run_cell(cell, time_limit=time_limit)
        return
    executor = ProcessPoolExecutor(max_workers=min(jobs, len(pending)), initializer=_worker_started,
                                   initargs=(os.getpid(),))
    try:
        running = {executor.submit(run_cell, cell, time_limit=time_limit) for cell in pending}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
    except BrokenProcessPool:
        raise RuntimeError("a sweep worker process died (out of memory or killed?); the records written so far "
                           "are kept: run the same sweep again to go on") from None
    finally:
        # On an interrupt, start no new cell; the ones running finish in their processes.
        executor.shutdown(wait=False, cancel_futures=True)


def _worker_started(parent: int) -> None:
    # The parent owns the terminal's Ctrl-C, and a worker whose parent was killed exits
    # instead of waiting forever on the task queue.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


class _Progress:
    """Progress on stderr: a bar redrawn per cell on a terminal, else about ten lines."""

    WIDTH = 20

    def __init__(self, total: int, skipped: int, path: Path, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.every = 1 if self.tty else max(1, math.ceil(total / 10))
        self.done = self.errors = self.shown = 0
        self.started = time.monotonic()
        if total == 0 or skipped:
            self._line(f"sweep: {skipped} cell(s) already in {path}, {total} to run")

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def update(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.errors += record["status"] == "ERROR"
        elapsed = time.monotonic() - self.started
        eta = _clock(elapsed / self.done * (self.total - self.done))
        label = f"{record['model']} {record['workers']} {record['network']} {record['method']}"
        errors = f"  {self.errors} error(s)" if self.errors else ""
        if self.tty:
            filled = self.WIDTH * self.done // self.total
            text = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} cells  {label}  " \
                   f"ETA {eta}{errors}"
            self.stream.write("\r" + text.ljust(self.shown))
            self.stream.flush()
            self.shown = len(text)
        elif self.done % self.every == 0 or self.done == self.total:
            self._line(f"sweep: {self.done}/{self.total} cells  {label}  ETA {eta}{errors}")

    def close(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
