"""Alignment cliffs (MODEL.md section 2.3): the Aligned cost by hand, in files, in the exact
fusion DP against brute force, and found (or not) by the calibration's fit."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import profiles

from fusionopt.cost import Aligned, AlphaBeta, cost_from_dict
from fusionopt.executor import alignment_sizes, fit_alignment
from fusionopt.model import Plan, Problem, Profile, best_bound, simulate
from fusionopt.solvers import solve

MS = 1e-3


def test_the_cliff_and_the_padding_by_hand():
    # Four ranks, 16-byte parts (64-byte steps), twice as slow misaligned: 1 ms + 1 ns/B.
    c = Aligned(AlphaBeta(MS, 1e-9), ranks=4, unit=16, slowdown=2.0)
    assert c.step == 64 and c.aligned([6400, 6404]).tolist() == [True, False]
    assert [round(c(s) / MS, 9) for s in (6400, 6404, 0)] == [1.0064, 2.012808, 0.0]
    padded = c.with_padding()
    assert padded.padding([6400, 6404, 6463]).tolist() == [0, 60, 1]
    assert [round(padded(s) / MS, 9) for s in (6400, 6404, 6463)] == [1.0064, 1.006464, 1.006464]
    assert c.affine is None and Aligned(AlphaBeta(MS, 1e-9), ranks=4, unit=16, slowdown=1.0).affine == (MS, 1e-9)
    # The aligned price is a lower bound of both: what the bounds use.
    assert c.least_seconds_per_byte(1e6) == AlphaBeta(MS, 1e-9).least_seconds_per_byte(1e6)


def test_files_round_trip_and_refusals():
    c = Aligned(AlphaBeta(MS, 1e-9), ranks=2, unit=16, slowdown=3.5, padded=True)
    assert cost_from_dict(c.to_dict()) == c and c.scaled(2.0)(4096) == pytest.approx(2 * c(4096))
    with pytest.raises(ValueError, match=r"^slowdown must be >= 1 \(a misaligned part is not faster\), got 0.5$"):
        Aligned(AlphaBeta(MS, 1e-9), ranks=2, unit=16, slowdown=0.5)
    with pytest.raises(ValueError, match="^unit must be a whole number >= 1, got 0$"):
        Aligned(AlphaBeta(MS, 1e-9), ranks=2, unit=0, slowdown=2.0)
    doc = c.to_dict()
    doc["ranks"] = "four"
    with pytest.raises(ValueError, match="^cost: ranks must be a whole number >= 1, got 'four'$"):
        cost_from_dict(doc)


@settings(deadline=None, max_examples=40)
@given(profile=profiles(1, 5), unit=st.sampled_from([8, 16, 64]), ranks=st.sampled_from([1, 2, 3]))
def test_the_exact_dp_is_brute_force_on_padded_messages(profile, unit, ranks):
    problem = Problem(profile, Aligned(AlphaBeta(2e-4, 1e-9), ranks=ranks, unit=unit, slowdown=2.0, padded=True))
    n = profile.n
    best = min(simulate(problem, Plan.from_cuts(profile, np.array(cuts, dtype=bool))).iteration_time
               for cuts in itertools.product([False, True], repeat=n - 1))
    result = solve(problem, "dp")
    assert result.iteration_time == pytest.approx(best, rel=1e-12)
    assert best_bound(problem) <= result.iteration_time * (1 + 1e-12)


def test_padding_pays_where_a_message_would_break_the_alignment():
    # Tensors of 6,294,530 and 6,292,992 bytes (horovod PR #3727's two fused sizes): on two
    # ranks with 16-byte parts, the first breaks the alignment and pays the 3.5x cliff unpadded;
    # padded by 30 bytes it pays their 7.5 ns.
    profile = Profile.from_arrays([6_294_530, 6_292_992], [MS, MS], [MS, MS])
    base = AlphaBeta(1e-4, 2.5e-10)
    cliff = Aligned(base, ranks=2, unit=16, slowdown=3.5)
    sizes = [6_294_530, 6_292_992]
    assert cliff.aligned(sizes).tolist() == [False, True] and cliff.padding(sizes).tolist() == [30, 0]
    assert cliff.of_sizes(np.array(sizes, dtype=float)).tolist() == [3.5 * base(sizes[0]), base(sizes[1])]
    padded = solve(Problem(profile, cliff.with_padding()), "wfbp")
    aligned = solve(Problem(profile, base), "wfbp")
    assert padded.iteration_time - aligned.iteration_time == pytest.approx(30 * 2.5e-10, rel=1e-6)
    # A problem takes only the padded price: the cliff is refused in one line that says so.
    with pytest.raises(ValueError, match=r"^cost model Aligned is not monotone: .*; a problem prices what padding "
                                         r"sends: Aligned\(\.\.\., padded=True\) \(the cliff itself is not "
                                         r"monotone, MODEL.md section 2.3\)$"):
        Problem(profile, cliff)


def test_the_fit_finds_the_cliff_the_times_show():
    sizes = alignment_sizes(4, 4096, 1 << 20)
    assert all(s % 8 == 0 for s in sizes)                  # whole 8-byte words: the executor can time them
    base = AlphaBeta(2e-5, 5e-10)
    rng = np.random.default_rng(0)
    noise = 1 + 0.02 * rng.standard_normal(len(sizes))     # 2% of measurement noise
    # A 2.5x cliff for parts not a multiple of 64 bytes: found, at 64, about 2.5x.
    cliff = [base(s) * (1.0 if s % (4 * 64) == 0 else 2.5) * e for s, e in zip(sizes, noise)]
    fit = fit_alignment(sizes, cliff, 4)
    assert isinstance(fit, Aligned) and (fit.ranks, fit.unit) == (4, 64)
    assert fit.slowdown == pytest.approx(2.5, rel=0.05)
    # The same noise and no cliff: none is kept.
    assert isinstance(fit_alignment(sizes, [base(s) * e for s, e in zip(sizes, noise)], 4), AlphaBeta)
    with pytest.raises(ValueError, match="needs two sizes aligned to 256 bytes a rank"):
        fit_alignment([1000, 2000], [1e-5, 2e-5], 4)
