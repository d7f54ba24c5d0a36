"""DeepSpeed ZeRO-3 (``zero3``) and TorchInductor's FSDP bucketing (``inductor``) as fully
sharded plans (MODEL.md 8.2, with reduce-scatter groups)."""

import pytest

from fusionopt import zoo
from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import FullySharded, Problem, Profile, compute_pieces, sharded_lower_bound
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import inductor_cap_mb, inductor_plan, zero3_plan

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)
NAMES = ["emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "h.1.fc.bias", "ln.weight"]


def small(forward=(0,) * 6, backward=(0,) * 6):
    # 10, 6, 1, 6, 1, 2 elements of 4 bytes.
    return Profile.from_arrays([40, 24, 4, 24, 4, 8], list(forward), list(backward), names=NAMES)


def gpt2(network="100gb-ib", workers=64):
    return Problem(zoo.profile("gpt2", device="h100", batch=8),
                   pattern=FullySharded.from_network(network, workers=workers))


def test_zero3_layouts_by_hand():
    p = small()
    # Buckets of 8 elements, persistence at 1: the top-level module owns no tensor, so its hook
    # prefetches the first bucket, emb (10 >= 8); 6 + 0 (persistent) + 6 = 12 >= 8 closes the
    # next after tensor 3; the rest (1 persistent + 2) is the last unit.
    plan = zero3_plan(p, prefetch_bucket_size=8, param_persistence_threshold=1, reduce_bucket_size=12)
    assert plan.bounds.tolist() == [0, 1, 4, 6] and plan.names == ("emb", "h.0.fc", "h.1.fc")
    # Gradients from the end: 2 + 1 + 6 + 1 = 10; + 6 > 12 closes before tensor 1; 6 + 10 > 12 before 0.
    assert plan.reduce_bounds.tolist() == [0, 1, 2, 6]
    assert plan.forward_prefetch == plan.backward_prefetch == 3 and not plan.reshard.any()
    # With no tensor persistent, buckets of 7: 6 + 1 = 7 closes after each bias.
    assert zero3_plan(p, prefetch_bucket_size=7, param_persistence_threshold=0).bounds.tolist() == [0, 1, 3, 5, 6]
    # At 5, the biases and ln (2) persist and count nothing: 6 + 6 = 12 closes after tensor 3.
    assert zero3_plan(p, prefetch_bucket_size=7, param_persistence_threshold=5).bounds.tolist() == [0, 1, 4, 6]
    assert zero3_plan(p, prefetch_bucket_size=7).bounds.tolist() == [0, 6]     # 1e5: every tensor persists
    # No prefetch: a unit per module, gathered at its own hook.
    none = zero3_plan(p, prefetch_bucket_size=0)
    assert none.bounds.tolist() == [0, 1, 3, 5, 6] and none.forward_prefetch == none.backward_prefetch == 0
    # Reuse distance: emb is used again after 2 x (6 + 1 + 6 + 1 + 2) = 32 elements, h.0.fc after
    # 2 x 9 = 18, h.1.fc after 2 x 3 = 6 (the units' first modules); released when >= the distance.
    assert zero3_plan(p, prefetch_bucket_size=0, max_reuse_distance=18).reshard.tolist() == [True, True, False, False]
    # max_live below the model's 20 elements: buckets of min(8, 10), 10 // 8 = 1 unit ahead.
    live = zero3_plan(p, prefetch_bucket_size=8, param_persistence_threshold=1, max_live_parameters=10)
    assert live.bounds.tolist() == [0, 1, 4, 6] and live.forward_prefetch == 1
    with pytest.raises(ValueError, match="reduce_bucket_size must be a whole number of elements >= 1"):
        zero3_plan(p, reduce_bucket_size=0)
    with pytest.raises(ValueError, match="prefetch_bucket_size must be a whole number"):
        zero3_plan(p, prefetch_bucket_size=2.5)


def test_zero3_timing_by_hand():
    # Forwards 1, 1, 0, 1, 0, 1 ms, backwards 2, 2, 0, 2, 0, 2 ms, every collective 1 ms.
    # The persistent biases (tensors 2 and 4) gathered first, 0-1 and 1-2; the units' gathers,
    # issued at 0 too, 2-3, 3-4, 4-5; forwards 3-4, 4-6, 6-7; backward of unit 2 7-9, of unit 1
    # 9-13 (tensor 2 ready at 13 - 2 = 11: group 2..5 issued 11, 11-12; tensor 1's at 13,
    # 13-14), unit 0 13-15, tensor 0's reduce-scatter 15-16: T = 16 ms.
    one = AlphaBeta(MS, 0.0)
    p = small([MS, MS, 0, MS, 0, MS], [2 * MS, 2 * MS, 0, 2 * MS, 0, 2 * MS])
    r = solve(Problem(p, pattern=FullySharded(one, one)), "zero3", prefetch_bucket_size=8,
              param_persistence_threshold=1, reduce_bucket_size=12)
    t = r.timeline
    assert [round(v / MS, 9) for v in t.message_ready] == [0, 0, 0, 0, 0, 11, 13, 15]
    assert [round(v / MS, 9) for v in t.message_end] == [1, 2, 3, 4, 5, 12, 14, 16]
    assert t.message_kind.tolist() == [1, 1, 1, 1, 1, 0, 0, 0] and t.message_unit.tolist() == [1, 2, 0, 1, 2, 2, 1, 0]
    # The persistent tensors travel alone (4 B each); the units' gathers carry the rest.
    assert t.message_bytes.tolist() == [4, 4, 40, 48, 8, 40, 24, 40]
    assert round(r.iteration_time / MS, 9) == 16 and r.stats["reduce_scatters"] == 3
    # Whole all step: the persistent 8 B are in every moment's count.
    assert t.memory_bytes.min() >= 0 and t.peak_memory >= 8


def test_zero3_on_gpt2_one_reduce_scatter_at_the_end():
    problem = gpt2()
    r = solve(problem, "zero3")
    profile = problem.profile
    plan, t = r.plan, r.timeline
    # The top-level module owns no tensor: buckets from wte. wte + wpe + h.0 + h.1 up to its
    # mlp.c_fc.weight: 38,597,376 + 786,432 + 7,077,888 + 1,769,472 + 589,824 + 2,359,296 =
    # 51,180,288 >= 5e7 elements that are not persistent; then h.1.mlp.c_proj.weight
    # (2,359,296) + 6 blocks (h.2..h.7, 7,077,888 each) + h.8 up to its mlp.c_proj.weight:
    # 51,904,512; the rest. 124M parameters: nothing resharded.
    assert plan.bounds.tolist() == [0, 23, 109, profile.n]
    assert profile.names[22] == "h.1.mlp.c_fc.weight" and profile.names[108] == "h.8.mlp.c_proj.weight"
    assert plan.forward_prefetch == plan.backward_prefetch == 3 and not plan.reshard.any()
    assert plan.reduce_bounds.tolist() == [0, profile.n]
    # 98 persistent tensors gathered alone first, then the 3 buckets, then one reduce-scatter.
    assert t.message_kind.tolist() == [1] * 101 + [0] and r.num_messages == 102
    assert t.message_bytes[:98].sum() + t.message_bytes[98:101].sum() == profile.total_bytes
    assert t.message_bytes[-1] == profile.total_bytes
    backward_end = [p for p in compute_pieces(problem, plan) if p.kind == "backward"][-1].end
    assert t.message_ready[-1] == backward_end
    assert r.iteration_time >= sharded_lower_bound(problem)
    assert r.stats["persistent_tensors"] == 98
    # A model past 5e8 elements' worth of reuse: a smaller distance reshards the first units.
    assert zero3_plan(profile, max_reuse_distance=10**8).reshard.tolist() == [True, True, False]
    # Smaller reduce buckets: several reduce-scatters, the last still at the end.
    smaller = solve(problem, "zero3", reduce_bucket_size=30_000_000)
    assert smaller.plan.reduce_bounds.size - 1 == 4 and smaller.timeline.message_kind[-1] == 0
    assert smaller.timeline.message_unit[-1] == 0


def test_inductor_layouts_by_hand():
    p = Profile.from_arrays([40, 24, 24, 24, 32], [0] * 5, [0] * 5,
                            names=["emb.weight", "h.0.w", "h.1.w", "h.2.w", "ln.weight"])
    problem = Problem(p, pattern=FullySharded(HALF, HALF))
    # FSDP2's units 40 (root's first part), 24, 24, 24, 32 (root's last part) B, cap 50 B.
    # All-gathers forward: [40] [24 24] [24] (24 + 32 > 50) [32]; reduce-scatters backward:
    # [32] (32 + 24 > 50) [24 24] [24] (24 + 40 > 50) [40].
    plan = inductor_plan(problem, bucket_cap_mb=50 / 2**20)
    assert plan.bounds.tolist() == [0, 1, 3, 4, 5] and plan.reduce_bounds.tolist() == [0, 1, 2, 4, 5]
    assert plan.reshard.tolist() == [False, True, True, False] and plan.names == ("(root)", "h.0..h.1", "h.2", "(root)")
    # A cap of 56 B: [40] [24 24] [24 32]; backward [32 24] [24 24] [40]: the same buckets.
    same = inductor_plan(problem, bucket_cap_mb=56 / 2**20)
    assert same.bounds.tolist() == [0, 1, 3, 5] and same.reduce_bounds is None
    assert same.reshard.tolist() == [False, True, False]
    # Exactly the cap stays in one bucket; a collective larger than the cap is alone.
    assert inductor_plan(problem, bucket_cap_mb=48 / 2**20).bounds.tolist() == [0, 1, 3, 4, 5]
    assert inductor_plan(problem, bucket_cap_mb=10 / 2**20).bounds.tolist() == [0, 1, 2, 3, 4, 5]
    r = solve(problem, "inductor", bucket_cap_mb=50 / 2**20)
    assert r.num_messages == 4 + 2 + 4 and r.timeline.message_kind.tolist().count(0) == 4


def test_inductor_cap_and_gpt2():
    # 100gb-ib, 64 workers: alpha = 126 us, beta = 78.75 ps/B: 9 alpha / beta = 14.4e6 B = 13.73 MiB.
    problem = gpt2()
    assert inductor_cap_mb(problem) == pytest.approx(9 * 126e-6 / 7.875e-11 / 2**20, rel=1e-12)
    r = solve(problem, "inductor")
    # Nothing merges: FSDP2's own plan, its root one unit, and FSDP2's time.
    assert r.plan == solve(problem, "fsdp2").plan and r.plan.root
    assert r.iteration_time == solve(problem, "fsdp2").iteration_time
    # 10gbe on 8 workers: 9 x 175 us / 0.7 ns/B = 2.25 MB: the 10 MiB floor. Alpha 0: the floor;
    # beta 0: the 500 MiB ceiling.
    assert inductor_cap_mb(gpt2("10gbe", 8)) == 10.0
    p = Profile.from_arrays([8], [0], [0])
    assert inductor_cap_mb(Problem(p, pattern=FullySharded(HALF, AlphaBeta(0.0, 1e-9)))) == 10.0
    assert inductor_cap_mb(Problem(p, pattern=FullySharded(HALF, AlphaBeta(MS, 0.0)))) == 500.0
    # 100 MiB: three 28.35 MB blocks a bucket, ln_f with the last three.
    merged = solve(problem, "inductor", bucket_cap_mb=100)
    assert merged.plan.num_units == 5 and merged.plan.bounds.tolist()[1] == 2
    assert merged.plan.reshard.tolist() == [False, True, True, True, False]
    curve = PiecewiseLinear([1, 1e6], [MS, 2 * MS])
    with pytest.raises(ValueError, match="not alpha \\+ beta S; give bucket_cap_mb"):
        solve(Problem(p, pattern=FullySharded(curve, curve)), "inductor")
    assert solve(Problem(p, pattern=FullySharded(curve, curve)), "inductor", bucket_cap_mb=20).plan.num_units == 1
    with pytest.raises(ValueError, match="bucket_cap_mb must be a positive number of MiB"):
        solve(problem, "inductor", bucket_cap_mb=0)


def test_registered_and_refused_on_all_reduce():
    from fusionopt.solvers import methods
    assert "zero3" in methods() and "inductor" in methods()
    p = small()
    for method in ("zero3", "inductor"):
        with pytest.raises(ValueError, match=f"method .{method}. is a fully sharded method"):
            solve(Problem(p, HALF), method)
