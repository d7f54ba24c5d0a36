"""How every CP-SAT model of fusionopt is searched: the limits, the workers and the seed.

Two limits stop a search. ``time_limit`` is wall-clock seconds: where it stops depends on the
machine. ``deterministic_time`` is CP-SAT's own measure of work (its "deterministic time",
close to seconds on a typical core): a search stopped by it stops at the same point on every
machine, so a seeded run with it reproduces its plan and its proof exactly. With several
workers CP-SAT's search is reproducible only when the workers are interleaved in one
deterministic schedule (its ``interleave_search``), which is what a ``deterministic_time``
asks for here. One exception was seen: the rounds of the several-channel relaxation
(:mod:`fusionopt.solvers.exact._cpsat_channels`) with two interleaved workers sometimes took one
round in one run and two in another on a loaded host, ending at plans of the same ``T`` up
to its last digit; with one worker they reproduce.

Ctrl-C stops a search and keeps what it found: :func:`run_search` runs CP-SAT in a thread
of its own (with CP-SAT's own SIGINT handler off) while the caller's thread waits, so the
interrupt reaches Python at once; the search is then stopped, and :func:`raise_if_interrupted` raises
:class:`~fusionopt.solvers.Interrupted` with the judged plan once the encoder has
decoded it.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from fusionopt.solvers._result import Interrupted, Outcome, Status


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


def run_search(solver: Any, model: Any, callback: Any = None) -> tuple[int, bool]:
    """``(outcome, interrupted)``: ``solver.solve(model, callback)``, stopped early by Ctrl-C.

    On a ``KeyboardInterrupt`` the search is told to stop (``stop_search``) and this returns
    its outcome as CP-SAT reports it (a solution found so far, or none) with
    ``interrupted=True``; the encoder decodes it as usual and passes its result to
    :func:`raise_if_interrupted`.
    """
    solver.parameters.catch_sigint_signal = False
    box: dict[str, Any] = {}
    done = threading.Event()

    def search() -> None:
        try:
            box["outcome"] = solver.solve(model) if callback is None else solver.solve(model, callback)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=search, name="cp-sat", daemon=True)
    thread.start()
    interrupted = False
    # An Event, not Thread.join: a KeyboardInterrupt inside join can leave the thread's
    # state wrong (it then reads as ended while it still runs).
    while not done.is_set():
        try:
            done.wait(0.05)
        except KeyboardInterrupt:
            interrupted = True
            solver.stop_search()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["outcome"], interrupted


def raise_if_interrupted(result: Outcome) -> Outcome:
    """``result``, or :class:`~fusionopt.solvers.Interrupted` carrying it when its
    search was interrupted (status ``INTERRUPTED``)."""
    if result.status is Status.INTERRUPTED:
        raise Interrupted(result)
    return result
