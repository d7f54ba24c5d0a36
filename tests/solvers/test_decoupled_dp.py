"""decoupled-dp where the two groupings separate: tensor 0 ready last, any sync and update time."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, costs, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, Problem, Profile, simulate
from fusionopt.solvers import solve

MS = 1e-3


@settings(deadline=None, max_examples=80)
@given(profiles(max_n=6), st.one_of(alpha_beta, costs), st.one_of(alpha_beta, costs),
       st.sampled_from(["barrier", "layerwise"]), st.booleans())
def test_with_tensor_zero_last_the_dp_equals_brute_force(profile, rs, ag, sync, after):
    problem = Problem(profile, pattern=Decoupled(rs, ag, update_after_gather=after), sync=sync)
    brute = solve(problem, "decoupled-brute").iteration_time
    if profile.ready_order[-1] != 0 and not (sync == "barrier" and profile.U == 0):
        with pytest.raises(ValueError, match="^decoupled-dp is exact where the groupings separate"):
            solve(problem, "decoupled-dp")
        return
    exact = solve(problem, "decoupled-dp")
    assert exact.iteration_time == pytest.approx(brute, rel=1e-9, abs=1e-15)
    assert str(exact.status) == "OPTIMAL"
    assert simulate(problem, exact.plan).iteration_time == exact.iteration_time
    if "first_gather" in exact.stats:
        # T = s + g: the first all-gather starts at s.
        first = exact.timeline.message_start[exact.timeline.message_kind == 1][0]
        assert first == pytest.approx(exact.stats["first_gather"], rel=1e-12, abs=1e-15)


# MODEL.md 8.1's separation by hand. Tensors of 1 MB, forwards of 1 ms, gradients ready at
# 1 ms (t1) and 2.5 ms (t0, last), updates 3 ms (t1) and 0 (t0), halves of 2 ms + 1 ns/B.
UPDATE_CASE = Profile.from_arrays([1e6, 1e6], [MS] * 2, [1.5 * MS, MS], update=[0.0, 3 * MS])
HALF = AlphaBeta(2 * MS, 1e-9)


@pytest.mark.parametrize("sync, after, first, T", [
    # One reduce-scatter (2.5-6.5 ms) frees the channel first, but the updates then end at
    # 9.5; two ({t1} 1-4, {t0} 4-7) let t1's update run 4-7: s = 7. One gather 7-11, forwards
    # 11-13: T = 13 (layerwise and barrier alike).
    ("layerwise", False, 7, 13),
    ("barrier", False, 7, 13),
    # Updates after the gathers (DeAR): s is the last reduce-scatter's end, least with one
    # message, 6.5. Layerwise: one gather 6.5-10.5, then t0 (no update) 10.5-11.5, t1's
    # update 11.5-14.5 and forward 14.5-15.5: T = 15.5 (two gathers, {t0} 6.5-9.5 and {t1}
    # 9.5-12.5, hold t1's update to 12.5-15.5: T = 16.5). Barrier: the gather, then every
    # update, then the forwards: 10.5 + 3 + 2 = 15.5.
    ("layerwise", True, 6.5, 15.5),
    ("barrier", True, 6.5, 15.5),
])
def test_the_dp_separates_by_hand(sync, after, first, T):
    problem = Problem(UPDATE_CASE, pattern=Decoupled(HALF, HALF, update_after_gather=after), sync=sync)
    r = solve(problem, "decoupled-dp")
    assert round(r.stats["first_gather"] / MS, 9) == first
    assert round(r.iteration_time / MS, 9) == T == round(solve(problem, "decoupled-brute").iteration_time / MS, 9)


def test_the_dp_refuses_where_tensor_zero_ties_with_later_tensors():
    # Tensors 0 and 1 both ready at B, the ready order t0 before t1 (a weight before its bias),
    # update time: the best reduce-scatters depend on the gathers (docs/methods.md).
    tied = Profile.from_arrays([2e6, 1e6, 1e6], [MS] * 3, [0.0, 0.0, MS], update=[0.0, 2 * MS, 0.0],
                               ready_order=[0, 1, 2])
    problem = Problem(tied, pattern=Decoupled(HALF, HALF), sync="barrier")
    with pytest.raises(ValueError, match=r"^decoupled-dp is exact where the groupings separate \(tensor 0's gradient "
                                         r"ready last, or barrier sync without update time\), and tensor 1 is ready "
                                         r"with tensor 0 but after it in the ready order"):
        solve(problem, "decoupled-dp")


def test_the_dp_scales_and_never_loses_to_the_search():
    # 200 tensors, tensor 0 last, update time, layerwise: the DP at any size, at or below the
    # local search's plan (which it bounds: an exact optimum over the same space).
    rng = np.random.default_rng(0)
    n = 200
    profile = Profile.from_arrays(rng.integers(1, 64, n) * 2 ** 16, rng.uniform(0, MS, n), rng.uniform(0.1, 1, n) * MS,
                                  update=rng.uniform(0, 0.2, n) * MS)
    problem = Problem(profile, pattern=Decoupled(AlphaBeta(50e-6, 1e-10), AlphaBeta(50e-6, 1e-10)), sync="layerwise")
    exact = solve(problem, "decoupled-dp")
    search = solve(problem, "decoupled-opt", evaluations=300)
    assert str(exact.status) == "OPTIMAL" and exact.iteration_time <= search.iteration_time * (1 + 1e-12)
    assert exact.lower_bound <= exact.iteration_time
