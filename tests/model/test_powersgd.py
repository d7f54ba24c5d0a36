"""PowerSGD on the wire (``fusionopt.cost.PowerSGD``): the hook's split of each tensor by hand,
a bucket's price by hand, the priced problem held to the bucket-by-bucket price replayed by the
engine for every grouping (so the DP on it is the optimum under the hook), DDP with the hook,
and the refusals."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta, PiecewiseLinear, PowerSGD
from fusionopt.model import Plan, Problem, Profile, allreduce_program, replay, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import ddp_buckets, ddp_powersgd
from test_encoding import groupings

LINK = AlphaBeta(25e-6, 0.8e-9)


def _profile(shapes, backward=None, name="net"):
    sizes = [4 * math.prod(s) for s in shapes]
    n = len(shapes)
    return Profile.from_arrays(sizes, [1e-4] * n, backward or [1e-3] * n, [f"t{i}" for i in range(n)],
                               shapes=shapes, name=name)


def test_the_hooks_split_by_hand():
    split = PowerSGD(rank=4).split([(256, 1024), (256,), (64, 3, 3, 3), (8, 8), (1, 512), (2, 100)])
    # (64, 27) at rank 4: (64 + 27) 4 x 2 = 728 < 1728; (8, 8): 16 x 4 x 2 = 128 > 64; (1, 512)
    # and (2, 100) clip the rank to 1 and 2: 513 x 2 > 512 and 102 x 2 x 2 = 408 > 200.
    assert split.compressed == (True, False, True, False, False, False)
    assert split.p == (1024, 0, 256, 0, 0, 0) and split.q == (4096, 0, 108, 0, 0, 0)
    assert split.uncompressed == (0, 256, 0, 64, 512, 200)
    assert split.flops == (6 * 256 * 1024 * 4, 0, 6 * 64 * 27 * 4, 0, 0, 0)
    assert split.elements == (1032, 1280, 4204)
    # torch's test is strict: (n + m) r rate == n m stays whole.
    assert PowerSGD(rank=1, min_compression_rate=2).split([(4, 4)]).compressed == (False,)
    assert PowerSGD(rank=1, min_compression_rate=1.9).split([(4, 4)]).compressed == (True,)
    assert split.of([0, 1]).compression_rate() == pytest.approx((262144 + 256) / (5120 + 256))


def test_a_buckets_price_by_hand_on_any_cost():
    profile = _profile([(256, 1024), (256,)])
    psgd = PowerSGD(rank=4, seconds_per_byte=1e-12, seconds_per_flop=1e-13, seconds_per_message=5e-6)
    # Three all-reduces: 1,024 B uncompressed, 4,096 B of P, 16,384 B of Q; compute 5 us +
    # 1,049,600 B x 1 ps + 6,291,456 flops x 0.1 ps.
    compute = 5e-6 + 1049600e-12 + 6291456e-13
    assert psgd.message_seconds(LINK, profile, [0, 1]) == pytest.approx(
        3 * 25e-6 + 0.8e-9 * (1024 + 4096 + 16384) + compute, rel=1e-12)
    # Alone, the weight issues an empty uncompressed all-reduce too, at its startup alpha.
    assert psgd.message_seconds(LINK, profile, [0]) == pytest.approx(
        3 * 25e-6 + 0.8e-9 * (4096 + 16384) + compute - 1024e-12, rel=1e-12)
    # On a measured cost the empty P and Q all-reduces cost what one of a byte does.
    step = PiecewiseLinear([1e2, 1e4, 1e6], [1e-5, 1e-4, 1e-3])
    assert psgd.message_seconds(step, profile, [1]) == pytest.approx(
        step(1024.0) + 2 * step(1.0) + 5e-6 + 1024e-12, rel=1e-12)


def _shapes():
    dims = st.integers(1, 40)
    return st.lists(st.one_of(st.tuples(dims), st.tuples(dims, dims), st.tuples(dims, dims, st.integers(1, 3))),
                    min_size=1, max_size=5)


@settings(deadline=None, max_examples=40)
@given(_shapes(), st.lists(st.floats(1e-5, 2e-3), min_size=5, max_size=5), st.floats(1e-6, 1e-3),
       st.floats(1e-10, 1e-8), st.integers(1, 4), st.floats(1.0, 3.0), st.floats(0.0, 1e-11),
       st.floats(0.0, 1e-12), st.floats(0.0, 1e-4), st.sampled_from(["barrier", "layerwise"]))
def test_the_priced_problem_is_the_hook_bucket_by_bucket(shapes, backward, alpha, beta, rank, rate, per_byte,
                                                         per_flop, per_message, sync):
    profile = _profile(shapes, backward[:len(shapes)])
    link = AlphaBeta(alpha, beta)
    psgd = PowerSGD(rank=rank, min_compression_rate=rate, seconds_per_byte=per_byte, seconds_per_flop=per_flop,
                    seconds_per_message=per_message)
    priced = psgd.priced(Problem(profile, link, sync=sync))
    # Each tensor's size is rounded to a whole byte: at most half a byte's time a tensor.
    tolerance = 0.5 * beta * profile.n + 1e-15
    best = math.inf
    for groups in groupings(profile.n):
        # Every bucket priced as the hook sends it (message_seconds, on the real profile),
        # the step replayed by the engine, against the priced problem's simulation.
        plan = Plan.from_groups(profile, groups)
        program = allreduce_program(Problem(profile, link, sync=sync), plan)
        durations = [psgd.message_seconds(link, profile, [c.tensor for c in m.chunks]) for m in plan.messages]
        expected = replay(program, durations)["iteration_time"]
        assert simulate(priced, Plan.from_groups(priced.profile, groups)).iteration_time == pytest.approx(
            expected, rel=1e-9, abs=tolerance)
        best = min(best, expected)
    assert solve(priced, "dp").iteration_time == pytest.approx(best, rel=1e-9, abs=tolerance)


def test_ddp_with_the_hook_keeps_ddps_buckets_and_prices_them():
    shapes = [(512, 1024)] * 3 + [(1024,)] * 3
    profile = _profile(shapes, [2e-3] * 6)
    problem = Problem(profile, LINK)
    psgd = PowerSGD(rank=2, start_iter=100, seconds_per_flop=1e-12)
    result = ddp_powersgd(problem, psgd, steps=1000, bucket_cap_mb=2)
    buckets = ddp_buckets(profile, bucket_cap_mb=2)
    assert result.stats["buckets"] == buckets
    assert result.stats["compressed"] == ["t0", "t1", "t2"]
    priced = psgd.priced(problem)
    plain = simulate(problem, Plan.from_groups(profile, buckets)).iteration_time
    assert result.iteration_time == simulate(priced, Plan.from_groups(priced.profile, buckets)).iteration_time
    assert result.stats["plain_step"] == plain
    assert result.stats["mean_step"] == pytest.approx(0.1 * plain + 0.9 * result.iteration_time, rel=1e-12)
    # Rank 2 sends (512 + 1024) 2 of 524,288 elements a weight: the exposed time after the
    # backward (B = 12 ms) is far shorter.
    assert result.iteration_time - profile.B < 0.5 * (plain - profile.B)
    # The optimum under the hook never loses to DDP's buckets under it.
    assert solve(priced, "dp").iteration_time <= result.iteration_time + 1e-12


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^PowerSGD: start_iter must be > 1 with error feedback or warm start"):
        PowerSGD(start_iter=1)
    assert PowerSGD(start_iter=0, use_error_feedback=False, warm_start=False).start_iter == 0
    with pytest.raises(ValueError, match=r"^PowerSGD: rank must be an integer >= 1, got 0$"):
        PowerSGD(rank=0)
    with pytest.raises(ValueError, match=r"^PowerSGD: tensor 'scale' is 0-d"):
        PowerSGD().of_profile(Profile.from_arrays([4, 8], [0, 0], [1, 1], ["scale", "w"], shapes=[(), (2,)]))
    with pytest.raises(ValueError, match=r"^PowerSGD: profile 'bare' has no tensor shapes"):
        PowerSGD().priced(Problem(Profile.from_arrays([8], [0], [1], name="bare"), LINK))
    profile = _profile([(8, 8)])
    with pytest.raises(ValueError, match=r"needs an affine cost .* PiecewiseLinear is not"):
        PowerSGD().priced(Problem(profile, PiecewiseLinear([1e2, 1e4, 1e6], [1e-5, 1e-4, 1e-3])))
    with pytest.raises(ValueError, match=r"^PowerSGD prices the plain all-reduce's messages \(a compute per message "
                                         r"aside\), and this problem has copy_cost on$"):
        PowerSGD().priced(Problem(profile, LINK, copy_cost=1e-9))
    with pytest.raises(ValueError, match=r"no per-byte term \(beta = 0\)$"):
        PowerSGD(seconds_per_flop=1e-12).priced(Problem(profile, AlphaBeta(1e-3, 0.0)))
    with pytest.raises(ValueError, match=r"^powersgd must be a PowerSGD, got str$"):
        ddp_powersgd(Problem(profile, LINK), "powersgd")
    with pytest.raises(ValueError, match=r"^PowerSGD: steps must be an integer >= 1, got 0$"):
        PowerSGD().mean_step(1.0, 0.5, 0)
