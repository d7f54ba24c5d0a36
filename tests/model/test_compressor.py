"""PowerSGD as one choice per message (``Problem(compressor=PowerSGD(...))``, MODEL.md section
2.4): a message of whole tensors costs the cheaper of the cost's price and torch's
``powerSGD_hook``'s price of its tensors. The DP chooses the grouping and each message's
encoding or the hook together, held to brute force over every grouping and every choice,
priced by hand from the hook's split; the bounds stay bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import FP16, FP32, AlphaBeta, Cheapest, Encoded, PowerSGD
from fusionopt.model import (Decoupled, Plan, Problem, Profile, allreduce_program, best_bound, replay,
                             simulate)
from fusionopt.solvers import solve
from test_encoding import groupings

LINK = AlphaBeta(1e-4, 1e-9)
# w (256 x 1024, 1 MiB) and its bias b (256): the hook sends b, then w's P (256 x 4) and its
# Q (1024 x 4) factors: 1024 + 4096 + 16384 B.
PAIR = Profile.from_arrays([1048576, 1024], [1e-4, 1e-4], [2e-3, 1e-4], ["w", "b"], shapes=[(256, 1024), (256,)])


def test_a_message_through_the_hook_by_hand():
    problem = Problem(PAIR, LINK, compressor=PowerSGD(rank=4))
    assert problem.extensions == ("compressor",)
    # Fused: 3 x 100 us + 21504 B at 1 ns/B through the hook, against 100 us + 1049600 ns in fp32.
    assert problem.message_cost([1049600], [[0, 1]])[0] == pytest.approx(321.504e-6, rel=1e-12)
    assert problem.message_encodings([1049600], [[0, 1]]) == ["powersgd"]
    # b alone is not compressed: 1024 B in one all-reduce and two empty ones (300 us + 1024 ns)
    # cost more than 100 us + 1024 ns in fp32.
    assert problem.message_cost([1024], [[1]])[0] == pytest.approx(101.024e-6, rel=1e-12)
    assert problem.message_encodings([1024, 1048576], [[1], [0]]) == ["fp32", "powersgd"]
    # Half of w (a partition plan's slice): the hook sends whole gradients, so it goes as it is.
    assert problem.message_cost([524288], [[0]])[0] == pytest.approx(100e-6 + 524288e-9, rel=1e-12)
    # The fusion DP along the ready order prices the same message alike.
    assert problem.arc_cost(0, 2, 1049600.0) == pytest.approx(321.504e-6, rel=1e-12)
    # b is ready at 0.1 ms and sent alone in fp32 (done by 0.21 ms); w at 2.1 ms alone through
    # the hook, 3 x 100 us + 20480 ns: T = 2.42048 ms + 0.2 ms of forwards.
    result = solve(problem, "dp")
    assert result.iteration_time == pytest.approx(2.62048e-3, rel=1e-12)
    assert result.plan.groups() == [[1], [0]]
    assert simulate(problem, result.plan).iteration_time == pytest.approx(result.iteration_time, rel=1e-12)


def test_tensors_kept_exact_never_go_through_the_hook_where_it_alters_them():
    cost = Cheapest(LINK, [FP32, FP16])
    # b kept exact: the hook sends it as it is (a vector is never compressed), so it may ride along.
    kept_bias = Problem(PAIR, cost, exact_tensors=[1], compressor=PowerSGD(rank=4))
    assert kept_bias.message_encodings([1049600], [[0, 1]]) == ["powersgd"]
    # w kept exact: the hook would compress it, so its message goes in fp32.
    kept_weight = Problem(PAIR, cost, exact_tensors=[0], compressor=PowerSGD(rank=4))
    assert kept_weight.message_encodings([1049600], [[0, 1]]) == ["fp32"]
    assert kept_weight.message_cost([1049600], [[0, 1]])[0] == pytest.approx(100e-6 + 1049600e-9, rel=1e-12)
    assert kept_weight.arc_cost(0, 2, 1049600.0) == pytest.approx(100e-6 + 1049600e-9, rel=1e-12)


def test_what_the_compressor_cannot_carry_is_refused_in_one_line():
    hook = PowerSGD(rank=2)
    with pytest.raises(ValueError, match=r"^compressor must be a Compressor \(e\.g\. PowerSGD\), got str$"):
        Problem(PAIR, LINK, compressor="powersgd")
    with pytest.raises(ValueError, match=r"^compressor 'powersgd' sends an all-reduce's messages \(a DDP comm hook\), "
                                         r"and this problem is a decoupled"):
        Problem(PAIR, pattern=Decoupled(LINK, LINK), compressor=hook)
    with pytest.raises(ValueError, match=r"^compressor 'powersgd' prices a message by its tensors on one channel, "
                                         r"and this problem has channels = 2$"):
        Problem(PAIR, LINK, channels=2, compressor=hook)
    with pytest.raises(ValueError, match=r"^compressor 'powersgd': encoding 'fp16' casts on the compute stream"):
        Problem(PAIR, Encoded(LINK, FP16.with_costs(compute_per_byte=1e-12)), compressor=hook)
    with pytest.raises(ValueError, match=r"^PowerSGD: profile 'shapeless' has no tensor shapes"):
        Problem(Profile.from_arrays([8, 8], [0, 0], [1, 1], name="shapeless"), LINK, compressor=hook)
    with pytest.raises(ValueError, match=r"^horovod: Horovod's DistributedOptimizer has no powersgd"):
        solve(Problem(PAIR, LINK, compressor=hook), "horovod")
    with pytest.raises(ValueError, match=r"^the linear-time DP needs an affine cost \(AlphaBeta\) that prices a "
                                         r"message by its bytes alone"):
        solve(Problem(PAIR, LINK, compressor=hook), "dp", algorithm="linear")


def _hook_seconds(hook: PowerSGD, link: AlphaBeta, profile: Profile, group: list[int]) -> float:
    """A bucket's price from the hook's split, by the formula of MODEL.md section 2.4."""
    split = hook.split([profile.shapes[t] for t in group])
    walls = [4.0 * sum(part) for part in (split.uncompressed, split.p, split.q)]
    alpha, beta = link.affine
    return (sum(alpha + beta * w if w > 0 else alpha for w in walls) + hook.seconds_per_message
            + hook.seconds_per_byte * 4.0 * sum(split.numel) + hook.seconds_per_flop * sum(split.flops))


shapes = st.one_of(st.tuples(st.integers(1, 64)), st.tuples(st.integers(1, 64), st.integers(1, 64)))
seconds = st.floats(0.0, 2e-3)


@settings(deadline=None, max_examples=30)
@given(st.lists(st.tuples(shapes, seconds, seconds), min_size=1, max_size=5),
       st.builds(AlphaBeta, alpha=st.floats(0.0, 2e-4), beta=st.floats(1e-10, 2e-7)),
       st.builds(PowerSGD, rank=st.integers(1, 3), min_compression_rate=st.sampled_from([1.0, 2.0]),
                 seconds_per_flop=st.sampled_from([0.0, 1e-10]), seconds_per_message=st.sampled_from([0.0, 1e-4])),
       st.booleans(), st.sampled_from(["barrier", "layerwise"]), st.data())
def test_the_dp_is_the_joint_optimum_of_grouping_encoding_and_hook(tensors, link, hook, choose, sync, data):
    tensor_shapes = [s for s, _, _ in tensors]
    profile = Profile.from_arrays([4 * math.prod(s) for s in tensor_shapes], [f for _, f, _ in tensors],
                                  [b for _, _, b in tensors], shapes=tensor_shapes)
    exact = sorted(data.draw(st.sets(st.integers(0, profile.n - 1)))) if choose else []
    encodings = [FP32, FP16.with_costs(seconds_per_message=1e-4)] if choose else [FP32]
    cost = Cheapest(link, encodings)
    problem = Problem(profile, cost, sync=sync, exact_tensors=exact, compressor=hook)
    altered = hook.of_profile(profile).compressed
    # Brute force: every grouping, each message in every encoding its tensors allow, or the hook.
    best = np.inf
    for groups in groupings(profile.n):
        plan = Plan.from_groups(profile, groups)
        program = allreduce_program(Problem(profile, link, sync=sync), plan)
        prices = []
        for group, nbytes in zip(groups, plan.message_bytes):
            kept = set(exact).intersection(group)
            options = [Encoded(link, e)(float(nbytes)) for e in ([FP32] if kept else encodings)]
            if not any(altered[t] for t in kept):
                options.append(_hook_seconds(hook, link, profile, group))
            prices.append(min(options))
        best = min(best, replay(program, prices)["iteration_time"])
    result = solve(problem, "dp")
    assert result.iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)
    assert simulate(problem, result.plan).iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)
    assert solve(problem, "brute").iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)
    # The bounds hold, and the hook as a choice is never slower than none.
    assert best_bound(problem, "any") <= best * (1 + 1e-12)
    assert best_bound(problem, "fusion") <= best * (1 + 1e-12)
    without = Problem(profile, cost, sync=sync, exact_tensors=exact)
    assert best <= solve(without, "dp").iteration_time * (1 + 1e-12)


def test_cpsat_chooses_as_the_dp_does():
    pytest.importorskip("ortools", reason="CP-SAT needs the solvers extra (OR-Tools)")
    profile = Profile.from_arrays([1048576, 1024, 262144, 256, 65536], [1e-4] * 5, [1e-3, 1e-4, 1e-3, 1e-4, 5e-4],
                                  shapes=[(256, 1024), (256,), (256, 256), (64,), (128, 128)])
    for exact in ([], [1, 3], [0]):
        problem = Problem(profile, Cheapest(LINK, [FP32, FP16]), exact_tensors=exact,
                          compressor=PowerSGD(rank=4, seconds_per_flop=1e-12))
        times = {method: solve(problem, method).iteration_time for method in ("dp", "cpsat")}
        assert times["cpsat"] == pytest.approx(times["dp"], rel=1e-9)
