"""Methods for the decoupled all-reduce: Megatron-LM's buckets, the unfused schedule, brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, costs, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, Problem, Profile, decoupled_lower_bound
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import megatron_buckets

MS = 1e-3


def decoupled(profile, sync="barrier", half=AlphaBeta(MS, 1e-9)):
    return Problem(profile, pattern=Decoupled(half, half), sync=sync)


def test_megatron_bucket_rule():
    # 30M, 30M, 20M and 50M float32 parameters, registered in forward order; Megatron walks
    # them backwards and closes a bucket once it holds >= bucket_size parameters.
    profile = Profile.from_arrays([120e6, 120e6, 80e6, 200e6], [0.0] * 4, [MS] * 4)
    problem = decoupled(profile)
    assert megatron_buckets(problem) == ([[3], [2, 1], [0]], 40_000_000)           # 50M; 20M + 30M; 30M
    assert megatron_buckets(problem, data_parallel_size=64) == ([[3, 2], [1, 0]], 64_000_000)
    assert megatron_buckets(problem, bucket_size=200_000_000) == ([[3, 2, 1, 0]], 200_000_000)
    with pytest.raises(ValueError, match="^data_parallel_size must be an integer >= 1, got 0$"):
        megatron_buckets(problem, data_parallel_size=0)
    result = solve(problem, "megatron", data_parallel_size=64)
    assert result.stats["buckets"] == 2 and result.plan.reduce_scatter.groups() == [[3, 2], [1, 0]]


def test_megatron_needs_the_sync_its_gather_runs_under():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    with pytest.raises(ValueError, match="^megatron is for sync='barrier' only"):
        solve(decoupled(profile, "layerwise"), "megatron")
    with pytest.raises(ValueError, match="^megatron-overlap is for sync='layerwise' only"):
        solve(decoupled(profile, "barrier"), "megatron-overlap")
    with pytest.raises(ValueError, match="^method 'megatron' is a decoupled method and this problem "
                                         "is an all-reduce problem"):
        solve(Problem(profile, AlphaBeta(MS, 1e-9)), "megatron")
    with pytest.raises(ValueError, match="^method 'dp' is an all-reduce method and this problem is a decoupled problem"):
        solve(decoupled(profile), "dp")


def test_brute_force_by_hand():
    # Barrier, MODEL.md section 5's profile: the bound (22 ms) is met by per-tensor
    # reduce-scatters and one all-gather; the unfused schedule takes 24 ms.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    problem = decoupled(profile)
    best = solve(problem, "decoupled-brute")
    assert round(best.iteration_time / MS, 9) == 22 and str(best.status) == "OPTIMAL"
    assert best.plan.reduce_scatter.groups() == [[2], [1], [0]] and best.plan.all_gather.groups() == [[0, 1, 2]]
    assert round(solve(problem, "decoupled-wfbp").iteration_time / MS, 9) == 24


small = st.tuples(profiles(max_n=5, with_updates=False), alpha_beta, st.sampled_from(["barrier", "layerwise"]))


@settings(deadline=None, max_examples=40)
@given(small)
def test_brute_force_beats_the_schedules_in_its_space(case):
    profile, half, sync = case
    problem = decoupled(profile, sync, half)
    best = solve(problem, "decoupled-brute")
    assert best.lower_bound >= decoupled_lower_bound(problem) * (1 - 1e-12) - 1e-15
    assert best.iteration_time <= solve(problem, "decoupled-wfbp").iteration_time * (1 + 1e-12)
    if sync == "barrier" and profile.has_default_orders:
        # Without update time Megatron's buckets are contiguous groupings of the ready order
        # whose all-gathers start when the channel is free: a plan of the space, or as slow.
        assert best.iteration_time <= solve(problem, "megatron", bucket_size=1_000_000).iteration_time * (1 + 1e-12)


@settings(deadline=None, max_examples=40)
@given(profiles(max_n=8), alpha_beta, st.integers(1, 3_000_000))
def test_megatron_overlap_gathers_one_ahead(profile, half, bucket):
    # The first bucket goes at the step's end; each next one only once the forward has waited
    # for the bucket before it, so never before that bucket's all-gather ends.
    result = solve(decoupled(profile, "layerwise", half), "megatron-overlap", bucket_size=bucket)
    assert result.iteration_time >= result.lower_bound
    releases = result.plan.all_gather.release
    assert releases[0] == result.stats["step_end"] and all(releases[1:] >= releases[:-1])
    gathered = result.timeline.message_end[result.timeline.message_kind == 1]
    assert all(releases[1:] >= gathered[:-1])


@settings(deadline=None, max_examples=60)
@given(profiles(max_n=6, with_updates=False), st.one_of(alpha_beta, costs), st.one_of(alpha_beta, costs))
def test_the_dp_equals_brute_force(profile, rs, ag):
    # Barrier sync, no update time: the groupings separate, and the DP's optimum is brute force's.
    problem = Problem(profile, pattern=Decoupled(rs, ag), sync="barrier")
    exact = solve(problem, "decoupled-dp")
    assert exact.iteration_time == pytest.approx(solve(problem, "decoupled-brute").iteration_time, rel=1e-9, abs=1e-15)
    assert str(exact.status) == "OPTIMAL"


def test_dear_groups_modules_under_its_threshold():
    mb = 2 ** 20
    # Modules of 10 + 2, 20, 8 and 8 MB with the default 25 MB: {a}, {b}, {c, d} (8 + 8 < 25
    # after b closed the second group at 20 + 8 >= 25).
    profile = Profile.from_arrays([10 * mb, 2 * mb, 20 * mb, 8 * mb, 8 * mb], [0.0] * 5, [MS] * 5,
                                  names=["a.weight", "a.bias", "b.weight", "c.weight", "d.weight"])
    from fusionopt.solvers.papers import dear_groups
    problem = decoupled(profile, "layerwise")
    assert dear_groups(problem) == [[0, 1], [2], [3, 4]]
    assert dear_groups(problem, threshold_mb=100) == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="^threshold_mb must be a positive number of MB, got 0$"):
        dear_groups(problem, threshold_mb=0)
    updating = Profile.from_arrays([mb, mb], [MS, MS], [MS, MS], update=[MS, MS])
    with pytest.raises(ValueError, match=r"^dear updates each module after its all-gather"):
        solve(decoupled(updating, "layerwise"), "dear")


@settings(deadline=None, max_examples=40)
@given(profiles(max_n=8), alpha_beta, st.floats(0.5, 30.0))
def test_dear_gathers_one_ahead(profile, half, threshold):
    # With its own semantics (updates after the gathers) and any update time: the first group
    # goes once every reduce-scatter has ended, each next one when the update of the group
    # before it starts, which waits for that group's all-gather.
    problem = Problem(profile, pattern=Decoupled(half, half, update_after_gather=True), sync="layerwise")
    result = solve(problem, "dear", threshold_mb=threshold)
    assert result.iteration_time >= result.lower_bound
    assert result.plan.all_gather.release[0] == result.timeline.message_end[result.timeline.message_kind == 0].max()
    releases = result.plan.all_gather.release
    gathered = result.timeline.message_end[result.timeline.message_kind == 1]
    firsts = [min(group) for group in result.plan.all_gather.groups()]
    assert all(releases[1:] >= gathered[:-1])
    assert np.allclose(releases[1:], result.timeline.updated[firsts[:-1]] - profile.update[firsts[:-1]],
                       rtol=1e-12, atol=1e-15)


@settings(deadline=None, max_examples=18)
@given(profiles(max_n=6), alpha_beta, st.sampled_from(["barrier", "layerwise"]))
def test_the_search_sits_between_brute_force_and_its_starts(profile, half, sync):
    problem = decoupled(profile, sync, half)
    found = solve(problem, "decoupled-opt", evaluations=400)
    assert found.iteration_time <= min(found.stats["start_times"].values()) * (1 + 1e-12)
    assert found.iteration_time >= solve(problem, "decoupled-brute").iteration_time * (1 - 1e-12)
    again = solve(problem, "decoupled-opt", evaluations=400)                   # a deterministic budget
    assert again.plan == found.plan and again.stats["evaluations"] == found.stats["evaluations"] <= 400


def test_the_search_options_are_checked():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    with pytest.raises(ValueError, match="^evaluations must be an integer >= 0, got -1$"):
        solve(decoupled(profile), "decoupled-opt", evaluations=-1)
    with pytest.raises(ValueError, match=r"^time_limit must be a positive, finite number of seconds, got 0$"):
        solve(decoupled(profile), "decoupled-opt", time_limit=0)


def test_megatron_overlap_with_free_collectives_and_update_time():
    # One worker: every collective costs nothing, so the first all-gather waits only for the
    # updates, and the model's own update ends must be what the policy uses (to the bit).
    profile = Profile.from_arrays([8, 8, 8], [MS] * 3, [0.1, 0.1, 0.0], update=[0.01, 0.0002, 0.0007])
    result = solve(Problem(profile, pattern=Decoupled.from_network("10gbe", 1), sync="layerwise"),
                   "megatron-overlap", bucket_size=1)
    assert result.iteration_time == pytest.approx(profile.compute_time, rel=1e-12) and str(result.status) == "OPTIMAL"


def test_megatron_takes_the_problems_workers_for_its_bucket_rule():
    # On a network preset of 64 workers the bucket is max(4e7, 1e6 x 64) = 6.4e7 parameters
    # without naming data_parallel_size; a problem built from costs alone keeps the 4e7 floor.
    from fusionopt import zoo
    from fusionopt.model import Decoupled, Problem
    from fusionopt.solvers import solve
    profile = zoo.profile("gpt2", device="h100", batch=8)
    preset = Problem(profile, pattern=Decoupled.from_network("10gbe", 64))
    r = solve(preset, "megatron")
    assert r.stats["bucket_size"] == 64_000_000 and r.stats["data_parallel_size"] == 64
    assert r.iteration_time == solve(preset, "megatron", data_parallel_size=64).iteration_time
    bare = Problem(profile, pattern=Decoupled(preset.pattern.reduce_scatter, preset.pattern.all_gather))
    assert solve(bare, "megatron").stats["bucket_size"] == 40_000_000
    import pytest
    with pytest.raises(ValueError, match="workers must be a whole number >= 1 or None, got 0"):
        Decoupled(preset.pattern.reduce_scatter, preset.pattern.all_gather, workers=0)
