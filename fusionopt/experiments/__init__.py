"""Parameter sweeps: models x workers x networks x methods, solved in parallel, resumable.

The grid of cells, its results file and the runner that solves the cells in parallel and
resumes; :class:`Study` runs the papers' reproductions on the same cells.

A sweep is a list of :class:`Cell` s (built by :func:`cells`), each one zoo model on one
preset network solved by one method. :func:`run_sweep` solves the cells in worker
processes and appends one record per finished cell to a results file (JSON lines or
CSV); a sweep that was stopped, even by ``SIGKILL``, is resumed by running it again on
the same file: the cells already there are not solved again.

Only the parent process writes the file: each record is one complete line written by a
single ``os.write`` on a descriptor opened with ``O_APPEND``, then ``os.fsync``, so a kill
leaves at worst one partial last line, which the next run drops (with a warning).

Records (:data:`FIELDS`; times in seconds):

* ``model, device, batch, network, algorithm, workers, sync, method, precision, compute,
  optimizer``: the cell (the last three: the zoo profile's options, :func:`fusionopt.zoo.profile`;
  ``optimizer`` is ``"none"`` or ``"sgd"``; records of an older fusionopt lack them, are kept,
  and match no cell);
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

from fusionopt.experiments._grid import CELL_FIELDS, SYNCS, Cell, cell_problem, cells
from fusionopt.experiments._records import CSV_COLUMNS, FIELDS, pending_cells, read_results, record_key
from fusionopt.experiments._runner import CHEAP_BATCH, run_cell, run_cells, run_sweep
from fusionopt.experiments._study import Outcome, Study, compute_source, fmt_gain, fmt_ms, ratio, solve_methods

__all__ = [
    "CELL_FIELDS", "CHEAP_BATCH", "CSV_COLUMNS", "Cell", "FIELDS", "Outcome", "SYNCS", "Study", "cell_problem",
    "cells", "compute_source", "fmt_gain", "fmt_ms", "pending_cells", "ratio", "read_results", "record_key",
    "run_cell", "run_cells", "run_sweep", "solve_methods",
]
