"""Ctrl-C in an anytime search (sharded-opt, layerwise-opt, gradssa, of-wfbp): an
``Interrupted`` whose result is the best plan evaluated before it, judged like any result;
before a first plan, a plain ``KeyboardInterrupt``.

The interrupt is raised from the search's own evaluator after a set number of calls, so the
best plan so far is known exactly: the least value the evaluator returned."""

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile, simulate
from fusionopt.solvers import Status, solve
# White-box: the interrupt is injected into the searches' private evaluators (tests/test_public_api.py).
from fusionopt.solvers import _warm as warm
from fusionopt.solvers.searches import _sharded_opt as sharded_opt, _ssa as ssa, LayerwiseEvaluator, layerwise_opt
from fusionopt.solvers import Interrupted

MS = 1e-3
RTOL = 1e-9          # the searches' fast evaluators against the simulator
ENDLESS = 10**9


def random_profile(n: int, seed: int) -> Profile:
    rng = np.random.default_rng(seed)
    return Profile.from_arrays(rng.integers(1, 50, n) * 100_000, rng.uniform(0.1, 1.0, n) * MS,
                               rng.uniform(0.2, 2.0, n) * MS)


def interrupt_after(monkeypatch, owner, name: str, calls: int) -> list:
    """Make ``owner.name`` raise KeyboardInterrupt on call number ``calls + 1``; returns the
    values of the calls before it."""
    original = getattr(owner, name)
    values = []

    def counted(*args, **kwargs):
        if len(values) == calls:
            raise KeyboardInterrupt
        value = original(*args, **kwargs)
        values.append(value)
        return value

    monkeypatch.setattr(owner, name, counted)
    return values


def stopped(search, *args, **options) -> KeyboardInterrupt:
    """The KeyboardInterrupt ``search(*args, **options)`` ends with (caught here, so that a
    wrong kind fails the test instead of stopping the test run)."""
    try:
        search(*args, **options)
    except KeyboardInterrupt as stop:
        return stop
    pytest.fail("the search ended without the interrupt")


def kept(search, *args, **options):
    """The result an interrupted ``search`` keeps."""
    stop = stopped(search, *args, **options)
    assert isinstance(stop, Interrupted), "a plain KeyboardInterrupt: the best plan so far is lost"
    return stop.result


def judged(result, problem) -> float:
    """Check ``result`` is an interrupted search's certified plan; return its T in seconds."""
    assert result.status is Status.INTERRUPTED
    again = simulate(problem, result.plan, validate=True).iteration_time
    assert again == result.iteration_time
    assert result.lower_bound is not None and result.lower_bound <= result.iteration_time
    return result.iteration_time


@pytest.mark.parametrize("calls", [3, 12])
def test_gradssa_interrupted_keeps_the_best_plan_scored(monkeypatch, calls):
    problem = Problem(random_profile(40, 1), AlphaBeta(0.5 * MS, 2e-10))
    scored = interrupt_after(monkeypatch, ssa, "score_cuts", calls)
    result = kept(solve, problem, "gradssa", iterations=ENDLESS, rng=0)
    best = min(float(np.min(times)) for times in scored)
    assert judged(result, problem) == pytest.approx(best, rel=RTOL)
    seeds = result.stats["seeds"]
    assert result.iteration_time <= min(seeds.values()) * (1 + RTOL)
    assert result.method == "gradssa"


def test_of_wfbp_interrupted_in_gradssa_names_itself(monkeypatch):
    problem = Problem(random_profile(40, 1), AlphaBeta(0.5 * MS, 2e-10))
    scored = interrupt_after(monkeypatch, ssa, "score_cuts", 5)
    result = kept(solve, problem, "of-wfbp", iterations=ENDLESS, rng=0)
    assert result.method == "of-wfbp" and result.stats["case"] == "gradssa"
    assert judged(result, problem) == pytest.approx(min(float(np.min(t)) for t in scored), rel=RTOL)


def test_gradssa_interrupted_before_its_seeds_are_scored_has_no_plan(monkeypatch):
    problem = Problem(random_profile(40, 1), AlphaBeta(0.5 * MS, 2e-10))
    interrupt_after(monkeypatch, ssa, "score_cuts", 0)
    assert not isinstance(stopped(solve, problem, "gradssa", iterations=ENDLESS, rng=0), Interrupted)


@pytest.mark.parametrize("calls", [1, 40])
def test_layerwise_opt_interrupted_keeps_the_best_plan_evaluated(monkeypatch, calls):
    problem = Problem(random_profile(12, 2), AlphaBeta(0.3 * MS, 1e-9), sync="layerwise")
    evaluated = interrupt_after(monkeypatch, LayerwiseEvaluator, "__call__", calls)
    result = kept(solve, problem, "layerwise-opt", kicks=ENDLESS, time_limit=1e6)
    assert judged(result, problem) == pytest.approx(min(evaluated), rel=RTOL)
    assert result.iteration_time <= min(result.stats["start_times"].values()) * (1 + RTOL)


def test_layerwise_opt_interrupted_in_its_starts_keeps_the_best_start(monkeypatch):
    problem = Problem(random_profile(12, 2), AlphaBeta(0.3 * MS, 1e-9), sync="layerwise")
    alone = {name: solve(problem, name).iteration_time for name in ("wfbp", "single")}
    interrupt_after(monkeypatch, warm, "start", 2)             # the third start is stopped
    result = kept(layerwise_opt, problem, starts=("wfbp", "single", "dp"))
    assert result.stats["start_times"] == alone
    assert judged(result, problem) == pytest.approx(min(alone.values()), rel=RTOL)


def test_layerwise_opt_interrupted_in_its_first_start_has_no_plan(monkeypatch):
    problem = Problem(random_profile(12, 2), AlphaBeta(0.3 * MS, 1e-9), sync="layerwise")
    interrupt_after(monkeypatch, warm, "start", 0)
    assert not isinstance(stopped(layerwise_opt, problem, starts=("wfbp", "single")), Interrupted)


SHARDED_ENDLESS = {"atoms": "tensor", "kicks": ENDLESS, "max_evaluations": ENDLESS, "time_limit": 1e6}


def sharded_problem(cap=None) -> Problem:
    half = AlphaBeta(0.2 * MS, 1e-9)
    return Problem(random_profile(10, 3), pattern=FullySharded(half, half, memory_cap=cap))


@pytest.mark.parametrize("calls", [1, 60])
def test_sharded_opt_interrupted_keeps_the_best_plan_scored(monkeypatch, calls):
    problem = sharded_problem()
    scores = interrupt_after(monkeypatch, sharded_opt, "plan_score", calls)
    result = kept(solve, problem, "sharded-opt", **SHARDED_ENDLESS)
    assert result.stats["stopped"] == "interrupted" and result.stats["evaluations"] == calls
    assert judged(result, problem) == pytest.approx(min(t for over, t in scores if over == 0), rel=1e-12)


def test_sharded_opt_interrupted_keeps_only_a_plan_within_the_cap(monkeypatch):
    # A cap of three times the largest tensor: some plans scored before the interrupt are
    # over it (checked below), and the plan kept is the best of those within it.
    cap = 3.0 * float(random_profile(10, 3).sizes.max())
    problem = sharded_problem(cap)
    scores = interrupt_after(monkeypatch, sharded_opt, "plan_score", 60)
    result = kept(solve, problem, "sharded-opt", **SHARDED_ENDLESS)
    within = [t for over, t in scores if over == 0]
    assert within and len(within) < len(scores)
    assert result.timeline.peak_memory <= cap
    assert judged(result, problem) == pytest.approx(min(within), rel=1e-12)


def test_sharded_opt_interrupted_before_a_plan_within_the_cap_has_no_plan(monkeypatch):
    interrupt_after(monkeypatch, sharded_opt, "plan_score", 0)
    assert not isinstance(stopped(solve, sharded_problem(), "sharded-opt", atoms="tensor"), Interrupted)
