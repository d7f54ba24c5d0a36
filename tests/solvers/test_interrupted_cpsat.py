"""Ctrl-C in a CP-SAT search: the search stops at once and its encoder keeps what it found.

CP-SAT catches SIGINT itself by default and ends as if its time ran out (status TIME_LIMIT,
exit 0 on the command line). ``run_search`` turns that off and runs the search in a thread
of its own, so the interrupt reaches Python, stops the search and is raised again as
``Interrupted`` carrying the judged plan."""

from __future__ import annotations

import _thread
import threading

import numpy as np
import pytest

pytest.importorskip("ortools")

from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.model import Decoupled, Problem, Profile, simulate, ParameterServer  # noqa: E402
from fusionopt.solvers import Status, solve  # noqa: E402
# White-box: the interrupt is injected into each encoder's private module (tests/test_public_api.py).
from fusionopt.solvers.exact import (  # noqa: E402
    _cpsat as cpsat, _cpsat_channels as cpsat_channels, _cpsat_partition as cpsat_partition,
    _cpsat_search as cpsat_search, _decoupled_cpsat as decoupled_cpsat, _ps_cpsat as ps_cpsat,
)
from fusionopt.solvers import Interrupted  # noqa: E402


class BlockingSolver:
    """Stands for a CpSolver whose search runs until it is told to stop."""

    def __init__(self) -> None:
        self.parameters = type("Parameters", (), {})()
        self.stopped = threading.Event()

    def solve(self, model, callback=None):
        assert self.stopped.wait(30), "the search was never told to stop"
        return "FEASIBLE so far"

    def stop_search(self) -> None:
        self.stopped.set()


def test_run_search_stops_the_search_on_ctrl_c_and_says_so():
    solver = BlockingSolver()
    threading.Timer(0.2, _thread.interrupt_main).start()     # Ctrl-C while the search runs
    outcome, interrupted = cpsat_search.run_search(solver, model=None)
    assert (outcome, interrupted) == ("FEASIBLE so far", True)
    assert solver.parameters.catch_sigint_signal is False and solver.stopped.is_set()


def test_run_search_without_an_interrupt_returns_the_search_as_it_ended():
    class Quick(BlockingSolver):
        def solve(self, model, callback=None):
            return ("done", model, callback)

    assert cpsat_search.run_search(Quick(), "model", "callback") == (("done", "model", "callback"), False)


def profile(n: int = 6) -> Profile:
    rng = np.random.default_rng(3)
    return Profile.from_arrays(rng.integers(1, 50, n) * 100_000, rng.uniform(0.1, 1.0, n) * 1e-3,
                               rng.uniform(0.2, 2.0, n) * 1e-3)


def interrupted_after_the_search(monkeypatch, module):
    """The module's search runs to its end, then reports Ctrl-C, as if it came at the last moment."""
    real = cpsat_search.run_search

    def search(solver, model, callback=None):
        return real(solver, model, callback)[0], True

    monkeypatch.setattr(module, "run_search", search)


CASES = {
    "cpsat": (cpsat, lambda: Problem(profile(), AlphaBeta(5e-4, 2e-10)), {}),
    "cpsat-partition": (cpsat_partition, lambda: Problem(profile(), AlphaBeta(5e-4, 2e-10)),
                        {"unit_parameters": 200_000}),
    "cpsat-channels": (cpsat_channels, lambda: Problem(profile(), AlphaBeta(5e-4, 2e-10), channels=2), {}),
    "decoupled-cpsat": (decoupled_cpsat, lambda: Problem(profile(4), pattern=Decoupled(
        AlphaBeta(5e-4, 2e-10), AlphaBeta(5e-4, 2e-10))), {}),
    "ps-cpsat": (ps_cpsat, lambda: Problem(profile(4), pattern=ParameterServer(AlphaBeta(5e-4, 2e-10)),
                                           sync="layerwise"), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_cp_sat_encoder_keeps_its_judged_plan(monkeypatch, case):
    module, problem_of, options = CASES[case]
    problem = problem_of()
    method = case if case in ("decoupled-cpsat", "ps-cpsat") else "cpsat"
    whole = solve(problem, method, **options)
    interrupted_after_the_search(monkeypatch, module)
    with pytest.raises(Interrupted) as stop:
        solve(problem, method, **options)
    kept = stop.value.result
    assert kept.status is Status.INTERRUPTED
    # The same search, so the same plan, judged by the simulator like every result.
    assert kept.iteration_time == whole.iteration_time == simulate(problem, kept.plan).iteration_time
    assert kept.lower_bound <= kept.iteration_time
