"""OF-WFBP: the closed-form cases without search, GradSSA otherwise."""

import pytest
from hypothesis import given, settings

from strategies import problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate
from fusionopt.solvers import Status, solve
from fusionopt.solvers.exact import closed_form

MS = 1e-3


def profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])


def test_closed_form_cases_need_no_search():
    wfbp = solve(Problem(profile(), AlphaBeta(1e-4, 1e-10)), "of-wfbp")
    assert (wfbp.method, wfbp.stats["case"], wfbp.plan.groups()) == ("of-wfbp", "wfbp", [[2], [1], [0]])
    single = solve(Problem(profile(), AlphaBeta(6 * MS, 1e-9)), "of-wfbp")
    assert single.stats["case"] == "single" and single.plan.groups() == [[2, 1, 0]]
    assert single.status is Status.OPTIMAL and single.iteration_time == pytest.approx(22 * MS, rel=1e-12)


def test_otherwise_gradssa_reaches_the_optimum_of_model_section_5():
    result = solve(Problem(profile(), AlphaBeta(3 * MS, 1e-9)), "of-wfbp", rng=0)
    assert result.stats["case"] == "gradssa"
    assert result.plan.groups() == [[2], [1, 0]]
    assert result.iteration_time == pytest.approx(17 * MS, rel=1e-12)


def test_caps_and_extensions_skip_the_closed_forms():
    capped = solve(Problem(profile(), AlphaBeta(1e-4, 1e-10)), "of-wfbp", max_message_bytes=4e6, rng=0)
    assert capped.stats["case"] == "gradssa" and capped.plan.message_bytes.max() <= 4e6
    extended = Problem(profile(), AlphaBeta(1e-4, 1e-10), contention=2.0)
    assert closed_form(extended) is None
    assert solve(extended, "of-wfbp", rng=0).stats["case"] == "gradssa"


@settings(deadline=None, max_examples=20)
@given(problem=problems(max_n=7))
def test_never_worse_than_the_closed_form_and_never_better_than_the_dp(problem):
    result = solve(problem, "of-wfbp", rng=0, iterations=5)
    optimum = solve(problem, "dp").iteration_time
    assert result.iteration_time >= optimum * (1 - 1e-9)
    known = closed_form(problem)
    if known is not None:
        assert result.iteration_time == pytest.approx(simulate(problem, known.plan).iteration_time, rel=1e-12)
        assert result.iteration_time == pytest.approx(optimum, rel=1e-9)       # the closed form's claim
