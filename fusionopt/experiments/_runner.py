"""Solving a sweep's cells: one cell (:func:`run_cell`), many on any
``concurrent.futures.Executor`` (:func:`run_cells`), or a whole sweep into its results file,
resumably (:func:`run_sweep`): the local process pool by default, Dask beyond one machine.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from numbers import Integral
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from fusionopt import __version__, zoo
from fusionopt.experiments._grid import CELL_FIELDS, Cell, cell_problem, distinct_cells
from fusionopt.experiments._records import (FIELDS, ZOO_OPTION_FIELDS, append_record, applied_limit,
                                           csv_header, encode_record, not_a_record, record_key, repair_results,
                                           results_format, scan_results, writer_lock)
from fusionopt import solvers
from fusionopt.model._cost import check_flag
from fusionopt.solvers._catalogue import time_limit_seconds
from fusionopt.solvers._registry import get_method


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
    (1, 'FEASIBLE', 0.345887)
    >>> record["throughput"] == 8 * record["compute_time"] / record["iteration_time"]
    True
    >>> run_cell(Cell("alexnet", "h100", 64, "10gbe", "ring", 8, "barrier", "p3"))["error"]
    "ValueError: p3 is for sync='layerwise' only ..."
    """
    if not isinstance(cell, Cell):
        raise ValueError(f"cell must be a Cell (fusionopt.experiments.cells makes them), got {type(cell).__name__}")
    time_limit = time_limit_seconds(time_limit)
    record: dict[str, Any] = {name: None for name in FIELDS}
    record.update(asdict(cell))
    record["fusionopt_version"] = __version__
    started = time.perf_counter()
    try:
        if cell.precision == "none" and str(cell.compute).strip().lower() != "roofline":
            raise ValueError("precision 'none' is a roofline estimate's (compute='roofline'); a calibrated profile "
                             "takes fp32 or bf16")
        profile = zoo.profile(cell.model, device=cell.device, batch=cell.batch,
                              precision=None if cell.precision == "none" else cell.precision,
                              compute=cell.compute, optimizer=None if cell.optimizer == "none" else cell.optimizer)
        record["compute_time"] = float(profile.compute_time)
        problem = cell_problem(cell, profile)
        options = {}
        record["time_limit"] = applied_limit(cell, time_limit)
        if record["time_limit"] is not None:
            options["time_limit"] = time_limit
        if search_workers is not None and "workers" in get_method(cell.method).options:
            options["workers"] = search_workers
        result = solvers.solve(problem, cell.method, **options)   # through the face: a test can stand in for it
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
    >>> from fusionopt.experiments import cells
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "sweep.jsonl")
    >>> grid = cells(["resnet50"], [8, 64], ["10gbe", "100gb-ib"], ["dp"])
    >>> records = run_sweep(grid, path, jobs=2, progress=False)
    >>> [(r["workers"], r["network"], round(r["throughput"], 2)) for r in records]   # in one worker's steps
    [(8, '10gbe', 2.01), (8, '100gb-ib', 7.99), (64, '10gbe', 13.92), (64, '100gb-ib', 63.59)]
    >>> with open(path) as handle:
    ...     len(handle.readlines())
    4
    >>> shutil.rmtree(folder)
    """
    fmt = results_format(path)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, Integral) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    time_limit = time_limit_seconds(time_limit)
    progress, retry_errors = check_flag("progress", progress), check_flag("retry_errors", retry_errors)
    cells = distinct_cells(cells)
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: folder {path.parent} does not exist")
    with writer_lock(path):
        return _run_locked(cells, path, fmt, jobs, time_limit, progress, retry_errors, executor)


def _run_locked(cells: list[Cell], path: Path, fmt: str, jobs: int, time_limit: float | None, progress: bool,
                retry_errors: bool, executor: Any = None) -> list[dict[str, Any]]:
    done: dict[tuple, dict[str, Any]] = {}
    if path.is_file():
        scan = scan_results(path, fmt)
        if scan.dropped:          # not this sweep's file, or edited by hand: never delete a user's lines
            number, line = scan.dropped[0]
            more = f" ({len(scan.dropped)} such lines)" if len(scan.dropped) > 1 else ""
            raise ValueError(f"{path}: line {number} is not a sweep record: {not_a_record(line, fmt)}{more}; "
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
            repair_results(path, fmt, scan)
        older = sum(any(name not in record for name in ZOO_OPTION_FIELDS) for record in scan.records)
        if older:
            print(f"fusionopt sweep: {path}: {older} record(s) of an older fusionopt name no precision, compute "
                  "or optimizer (which zoo compute they used cannot be told): kept, and their cells solved again",
                  file=sys.stderr)
        for record in scan.records:
            done.setdefault(record_key(record), record)
    pending = [cell for cell in cells if record_key(cell, time_limit) not in done]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        if fmt == "csv" and os.fstat(fd).st_size == 0:
            append_record(fd, csv_header())
        bar = _Progress(len(pending), len(cells) - len(pending), path, sys.stderr) if progress else None
        with contextlib.closing(_solve_all(pending, jobs, time_limit, executor)) as finished:
            for record in finished:
                append_record(fd, encode_record(record, fmt))
                done[record_key(record)] = record
                if bar is not None:
                    bar.update(record)
        if bar is not None:
            bar.close()
    finally:
        os.close(fd)
    return [done[record_key(cell, time_limit)] for cell in cells]

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
    except (KeyboardInterrupt, GeneratorExit):
        # Interrupted, or the records no longer wanted: the cells running are dropped with their
        # processes, or the interpreter's exit would wait for them to finish, unrecorded.
        _stop_workers(executor)
        raise
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


def _stop_workers(executor: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end ``executor``'s worker processes now (Python 3.14's
    ``terminate_workers``; before it, the processes the pool keeps, taken before its shutdown
    lets go of them)."""
    terminate = getattr(executor, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


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
        label = Cell(**{name: record[name] for name in CELL_FIELDS}).label
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
