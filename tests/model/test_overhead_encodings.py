"""A framework's own costs (``with_overhead``) on costs that carry encodings: the overhead goes
on the link under the encoding, so a message keeps the encoding its price was chosen in, and
each all-reduce of a compressed message pays it once."""

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta, Cheapest, Encoded, PowerSGD, with_message_overhead, with_overhead
from fusionopt.model import FullySharded, Plan, Problem, Profile, simulate

PROFILE = Profile.from_arrays([1048576, 1024], [1e-3, 1e-3], [1e-3, 1e-3], ["w", "b"], shapes=[(256, 1024), (256,)])
LINK = AlphaBeta(1e-4, 1e-8)
OVERHEAD = 5e-4


@pytest.mark.parametrize("cost", [Encoded(LINK, "fp16"), Cheapest(LINK, ["fp32", "fp16"]),
                                  Cheapest(LINK, ["fp32", "bf16"])])
def test_the_overhead_goes_under_the_encoding(cost):
    slower = with_message_overhead(cost, OVERHEAD)
    assert type(slower) is type(cost) and slower.cost == AlphaBeta(LINK.alpha + OVERHEAD, LINK.beta)
    sizes = np.array([0.0, 4.0, 1024.0, 1048576.0, 4e6])
    assert np.allclose(slower(sizes), np.where(sizes > 0, cost(sizes) + OVERHEAD, 0.0), rtol=0, atol=1e-15)
    # Each message keeps its encoding: the one its price is the cheapest in.
    problem = Problem(PROFILE, cost)
    plan = Plan.from_groups(PROFILE, [[1, 0]])
    faster, priced = problem, with_overhead(problem, per_step=0.0, per_message=OVERHEAD)
    low = [e.name for e in getattr(cost, "encodings", [getattr(cost, "encoding", None)]) if e.name != "fp32"]
    assert priced.message_encodings(plan.message_bytes) == faster.message_encodings(plan.message_bytes) == low
    assert simulate(priced, plan).iteration_time == pytest.approx(simulate(faster, plan).iteration_time + OVERHEAD,
                                                                  rel=1e-12)


def test_a_fully_sharded_problem_in_mixed_precision_takes_the_overhead():
    # FSDP2 under MixedPrecisionPolicy(param_dtype=bf16): both collectives carry bf16 and
    # keep it with the reducer's cost on (before, the pattern refused its own costs).
    profile = Profile.from_arrays([4e6, 2e6], [1e-3] * 2, [2e-3] * 2)
    problem = Problem(profile, pattern=FullySharded.from_network("10gbe", 8, param_dtype="bf16"))
    priced = with_overhead(problem, per_step=0.0, per_message=OVERHEAD)
    pattern = priced.pattern
    assert (pattern.reduce_scatter.encoding.name, pattern.all_gather.encoding.name) == ("bf16", "bf16")
    for mine, theirs in ((pattern.reduce_scatter, problem.pattern.reduce_scatter),
                         (pattern.all_gather, problem.pattern.all_gather)):
        assert float(mine(1e6)) == pytest.approx(float(theirs(1e6)) + OVERHEAD, rel=1e-12)


def test_each_all_reduce_of_a_compressed_message_pays_the_overhead_once():
    # torch's PowerSGD hook sends a bucket as three all-reduces (the uncompressed tensors, P,
    # Q): on the link with the overhead each costs OVERHEAD more, on fp32 (the hook sends its
    # matrices as they are), not on the cheapest encoding.
    hook = PowerSGD(rank=1)
    problem = Problem(PROFILE, Cheapest(LINK, ["fp32", "fp16"]), compressor=hook)
    priced = with_overhead(problem, per_step=0.0, per_message=OVERHEAD)
    sizes, tensors = np.array([float(PROFILE.total_bytes)]), [np.array([0, 1])]
    assert priced.compressed_messages(sizes, tensors)[0] == pytest.approx(
        problem.compressed_messages(sizes, tensors)[0] + 3 * OVERHEAD, rel=1e-12)
    by_hand = hook.message_seconds(AlphaBeta(LINK.alpha + OVERHEAD, LINK.beta), PROFILE, [0, 1])
    assert priced.compressed_messages(sizes, tensors)[0] == pytest.approx(by_hand, rel=1e-12)
    # By hand: w and b through the hook (3 x 0.6 ms + 1024 B of b, 1024 B of P and 4096 B of Q
    # at 10 ns/B = 1.86144 ms, against 0.6 ms + 524800 B = 5.848 ms in fp16); b alone in fp16
    # (0.6 ms + 512 B, against the hook's three all-reduces, two of them empty: 1.8 ms + 1024 B).
    for chosen, way in (([0, 1], "powersgd"), ([0], "powersgd"), ([1], "fp16")):
        size, carried = np.array([float(PROFILE.sizes[chosen].sum())]), [np.array(chosen)]
        assert priced.message_encodings(size, carried) == problem.message_encodings(size, carried) == [way]
    assert priced.compressed_messages(sizes, tensors)[0] == pytest.approx(1.86144e-3, rel=1e-9)


def test_an_encoding_buried_under_another_cost_is_refused_in_one_line():
    # Its messages would be priced in fp16 and named fp32 (the encoding is read off the top).
    from fusionopt.cost import Aligned, Composite

    aligned = dict(ranks=2, unit=16, slowdown=3.5, padded=True)
    for cost in (Aligned(Cheapest(LINK, ["fp32", "fp16"]), **aligned),
                 Composite([(Encoded(LINK, "fp16"), 1.0), (AlphaBeta(1e-5, 0.0), 1.0)])):
        with pytest.raises(ValueError, match=r"^all_reduce cost: (Aligned|Composite) wraps (Cheapest|Encoded)\(.*put "
                                             r"the encodings outside, around the link"):
            Problem(PROFILE, cost)
    outside = Problem(PROFILE, Cheapest(Aligned(LINK, **aligned), ["fp32", "fp16"]))
    assert outside.message_encodings([float(PROFILE.total_bytes)]) == ["fp16"]
    with pytest.raises(ValueError, match="^reduce_scatter cost: Aligned wraps Encoded"):
        Problem(PROFILE, pattern=FullySharded(Aligned(Encoded(LINK, "bf16"), **aligned), LINK))


def test_the_hook_on_every_bucket_takes_a_reducers_cost():
    # PowerSGD.priced carries the compute per message (a reducer's, per bucket); the cost per
    # step adds to the step exactly; a compute per byte still has no price under the hook.
    from fusionopt.solvers.baselines import ddp_powersgd

    hook = PowerSGD(rank=4)
    plain = Problem(PROFILE, LINK)
    assert hook.priced(Problem(PROFILE, LINK, message_compute=3e-4)).message_compute == 3e-4
    base = ddp_powersgd(plain, hook).iteration_time
    assert ddp_powersgd(with_overhead(plain, per_step=5e-4, per_message=0.0), hook).iteration_time == \
        pytest.approx(base + 5e-4, rel=1e-12)
    # One bucket (DDP's, of both tensors) ready at 2 ms: 0.3 ms of compute delays it by that.
    assert ddp_powersgd(with_overhead(plain, per_step=0.0, per_message=0.0, per_message_compute=3e-4),
                        hook).iteration_time == pytest.approx(base + 3e-4, rel=1e-12)
    with pytest.raises(ValueError, match="a compute per message aside.*message_compute on"):
        hook.priced(Problem(PROFILE, LINK, message_compute_per_byte=1e-12))
