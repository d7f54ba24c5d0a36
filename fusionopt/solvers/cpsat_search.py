"""How every CP-SAT model of fusionopt is searched: the limits, the workers and the seed.

Two limits stop a search. ``time_limit`` is wall-clock seconds: where it stops depends on the
machine. ``deterministic_time`` is CP-SAT's own measure of work (its "deterministic time",
close to seconds on a typical core): a search stopped by it stops at the same point on every
machine, so a seeded run with it reproduces its plan and its proof exactly. With several
workers CP-SAT's search is reproducible only when the workers are interleaved in one
deterministic schedule (its ``interleave_search``), which is what a ``deterministic_time``
asks for here.
"""

from __future__ import annotations

import math
from typing import Any


def check_deterministic_time(value: Any) -> float | None:
    """``value`` as a positive, finite float, or None; a clear ``ValueError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"deterministic_time must be a positive, finite number (CP-SAT's work units), got {value!r}")
    return float(value)


def set_search(solver: Any, *, seconds: float, workers: int, random_seed: int,
               deterministic_time: float | None = None) -> None:
    """Set ``solver``'s (a ``cp_model.CpSolver``) limits, workers and seed as the module says."""
    parameters = solver.parameters
    parameters.max_time_in_seconds = seconds
    parameters.num_workers = int(workers)
    parameters.random_seed = int(random_seed)
    if deterministic_time is not None:
        parameters.max_deterministic_time = deterministic_time
        parameters.interleave_search = int(workers) > 1
