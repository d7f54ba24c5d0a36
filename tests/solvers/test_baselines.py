"""Baselines on hand-worked cases, the solve() registry, Result and compare()."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

from strategies import problems

import fusionopt
from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate, best_bound
from fusionopt.solvers import Status, compare, default_methods, format_table, methods, solve

MS = 1e-3
MiB = 2**20
BASELINES = ["wfbp", "single", "threshold", "ddp", "horovod"]


def bucket_profile() -> Profile:
    # Forward order; backward order is 5, 4, 3, 2, 1, 0.
    sizes = [30 * MiB, 10 * MiB, 10 * MiB, 6 * MiB, MiB // 2, 3 * MiB // 4]
    return Profile.from_arrays(sizes, [MS] * 6, [MS] * 6)


def test_ddp_buckets_close_once_they_reach_the_cap():
    # 0.75 + 0.5 = 1.25 MiB >= 1 MiB closes the first bucket; 6 + 10 + 10 = 26 >= 25 the
    # second; the 30 MiB tensor is a bucket alone, over the cap, never split.
    problem = Problem(bucket_profile(), AlphaBeta(1e-4, 1e-9))
    result = solve(problem, "ddp")
    assert result.plan.groups() == [[5, 4], [3, 2, 1], [0]]
    assert result.plan.message_bytes.tolist() == [5 * MiB // 4, 26 * MiB, 30 * MiB]
    assert result.iteration_time == simulate(problem, result.plan).iteration_time
    # An explicit cap applies to the first bucket too (torch's rule): 8 MiB gives
    # [5, 4, 3, 2] (7.25 < 8 <= 17.25) | 1 | 0.
    assert solve(problem, "ddp", bucket_cap_mb=8).plan.groups() == [[5, 4, 3, 2], [1], [0]]
    # A list: 1 MiB, then 8 MiB: [5,4] | 3, 2 (16 >= 8) | 1 | 0.
    assert solve(problem, "ddp", bucket_cap_mb_list=[1, 8]).plan.groups() == [[5, 4], [3, 2], [1], [0]]
    # An explicit 25 MiB: 0.75 + 0.5 + 6 + 10 + 10 >= 25.
    assert solve(problem, "ddp", bucket_cap_mb=25).plan.groups() == [[5, 4, 3, 2, 1], [0]]


def test_threshold_closes_before_overflowing():
    # 0.75 + 0.5 + 6 + 10 = 17.25; adding 10 would pass 25, so it starts a new message.
    problem = Problem(bucket_profile(), AlphaBeta(1e-4, 1e-9))
    assert solve(problem, "threshold").plan.groups() == [[5, 4, 3, 2], [1], [0]]
    assert solve(problem, "threshold", threshold_bytes=1).plan.groups() == [[5], [4], [3], [2], [1], [0]]
    assert solve(problem, "threshold", threshold_bytes=1e12).plan.groups() == [[5, 4, 3, 2, 1, 0]]


def horovod_profile() -> Profile:
    # Ready times: t3 0.5 ms, t2 1.5 ms, t1 2.5 ms, t0 3.5 ms; 1 MB each.
    return Profile.from_arrays([1_000_000] * 4, [MS] * 4, [MS, MS, MS, 0.5 * MS])


def test_horovod_cpu_cycles_hand_worked():
    # alpha = 2 ms, beta = 1 ns/B: 1 MB takes 3 ms, 2 MB 4 ms. Gloo, 1 ms cycles: the tick
    # at 1 ms finds t3 and sends it 1 -> 4 ms; the thread runs the collective, so the next
    # cycle starts at 4 ms and finds t2, t1, t0: 3 MB > the threshold (2.5 MB, rounded up to
    # 512 B), so [t2, t1] 4 -> 8 and [t0] 8 -> 11, both released at 4; T = 11 + F (4) = 15.
    problem = Problem(horovod_profile(), AlphaBeta(2 * MS, 1e-9))
    result = solve(problem, "horovod", fusion_threshold_bytes=2_500_000, backend="gloo")
    assert result.plan.groups() == [[3], [2, 1], [0]]
    assert result.plan.release.tolist() == [1 * MS, 4 * MS, 4 * MS]
    assert result.stats["cycles"] == 2 and result.stats["fusion_threshold_bytes"] == 4883 * 512
    assert result.iteration_time == pytest.approx(15 * MS, rel=1e-12)
    # Default threshold 128 MiB: the second cycle fuses all three.
    assert solve(problem, "horovod", backend="mpi").plan.groups() == [[3], [2, 1, 0]]
    # Legacy 5 ms cycles: the first tick with work is at 5 ms, when everything is ready.
    legacy = solve(problem, "horovod", defaults="legacy", backend="gloo")
    assert legacy.plan.groups() == [[3, 2, 1, 0]] and legacy.plan.release.tolist() == [5 * MS]
    assert legacy.stats["cycle_time"] == 5 * MS and legacy.stats["fusion_threshold_bytes"] == 64 * MiB


def test_horovod_gpu_ticks_while_the_stream_is_busy():
    # NCCL: a tick every 1 ms whatever the stream does, so each gradient (ready 1 ms apart)
    # goes at its own tick: [t3] 1 -> 4, [t2] (released at 2) 4 -> 7, [t1] 7 -> 10,
    # [t0] 10 -> 13; T = 13 + 4 = 17 ms, where the CPU behaviour gives 15.
    problem = Problem(horovod_profile(), AlphaBeta(2 * MS, 1e-9))
    result = solve(problem, "horovod")
    assert result.plan.groups() == [[3], [2], [1], [0]]
    assert (result.plan.release / MS).round(9).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert result.iteration_time == pytest.approx(17 * MS, rel=1e-12)
    # Ticks half a cycle later meet each gradient as it arrives: 0.5 -> 3.5 ... -> 12.5.
    shifted = solve(problem, "horovod", cycle_phase=0.5 * MS)
    assert (shifted.plan.release / MS).round(9).tolist() == [0.5, 1.5, 2.5, 3.5]
    assert shifted.iteration_time == pytest.approx(16.5 * MS, rel=1e-12)
    with pytest.raises(ValueError, match=r"cycle_phase must be a number of seconds in \[0, cycle_time"):
        solve(problem, "horovod", cycle_phase=1 * MS)
    with pytest.raises(ValueError, match="unknown backend 'tcp'"):
        solve(problem, "horovod", backend="tcp")


def test_horovod_fast_network_sends_each_tensor_in_its_own_cycle():
    # With a free network every cycle finds at most one new gradient (ready 1 ms apart).
    problem = Problem(horovod_profile(), AlphaBeta(0.0, 0.0))
    assert solve(problem, "horovod", backend="gloo").plan.groups() == [[3], [2], [1], [0]]


def test_wfbp_and_single_on_the_worked_example():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    problem = Problem(profile, AlphaBeta(3 * MS, 1e-9))
    assert solve(problem, "wfbp").iteration_time == pytest.approx(20 * MS, rel=1e-12)
    assert solve(problem, "single").iteration_time == pytest.approx(19 * MS, rel=1e-12)
    assert solve(problem, "single").plan.groups() == [[2, 1, 0]]


def test_status_optimal_only_when_the_bound_is_met():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    free = solve(Problem(profile, AlphaBeta(0.0, 0.0)), "wfbp")
    assert free.status is Status.OPTIMAL and free.gap == 0.0
    assert free.iteration_time == pytest.approx(9 * MS, rel=1e-12)
    slow = solve(Problem(profile, AlphaBeta(3 * MS, 1e-9)), "wfbp")
    assert slow.status is Status.FEASIBLE
    assert slow.gap == pytest.approx((slow.iteration_time - slow.lower_bound) / slow.lower_bound)
    with pytest.raises(dataclasses.FrozenInstanceError):
        slow.iteration_time = 0.0


@settings(deadline=None)
@given(problem=problems(max_n=10))
def test_every_baseline_is_valid_and_above_the_bound(problem):
    bound = best_bound(problem, space="fusion")
    for name in BASELINES:
        result = solve(problem, name)
        result.plan.validate(problem.profile)
        # Horovod's messages wait for their tick: a fusion plan once the releases are dropped.
        assert result.plan.without_release().is_fusion(problem.profile)
        assert result.iteration_time == simulate(problem, result.plan).iteration_time
        assert result.iteration_time >= bound * (1 - 1e-9)
        space = "fusion" if result.plan.is_fusion(problem.profile) else "any"
        assert result.lower_bound == pytest.approx(best_bound(problem, space=space), rel=1e-12)


def test_registry_errors_name_the_culprit():
    problem = Problem(bucket_profile(), AlphaBeta(1e-4, 1e-9))
    known = ", ".join(sorted(methods()))
    assert known.startswith("brute, bytescheduler, bytescheduler-tuned, cpsat, ddp, dear, decoupled-brute")
    with pytest.raises(ValueError, match=f"unknown method 'dpp'; known methods: {known}$"):
        solve(problem, "dpp")
    with pytest.raises(ValueError, match="unknown option 'cycle_time' for method 'ddp'"):
        solve(problem, "ddp", cycle_time=1e-3)
    with pytest.raises(ValueError, match="unknown option 'threshold' for method 'wfbp'; its options: none"):
        solve(problem, "wfbp", threshold=1)
    with pytest.raises(ValueError, match="bucket_cap_mb must be a positive, finite number of MiB, got -5"):
        solve(problem, "ddp", bucket_cap_mb=-5)
    with pytest.raises(ValueError, match=r"bucket_cap_mb_list\[1\] must be a number of MiB, got 'x'"):
        solve(problem, "ddp", bucket_cap_mb_list=[1, "x"])
    with pytest.raises(ValueError, match="find_unused_parameters must be True or False, got 1"):
        solve(problem, "ddp", find_unused_parameters=1)
    with pytest.raises(ValueError, match="cycle_time must be a positive, finite number of seconds, got nan"):
        solve(problem, "horovod", cycle_time=float("nan"))
    with pytest.raises(ValueError, match="unknown defaults 'old'"):
        solve(problem, "horovod", defaults="old")
    with pytest.raises(ValueError, match="threshold_bytes must be a number of bytes, got '1MB'"):
        solve(problem, "threshold", threshold_bytes="1MB")
    with pytest.raises(ValueError, match="problem must be a Problem"):
        solve(bucket_profile(), "wfbp")


def test_compare_rows_and_table():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    rows = compare(Problem(profile, AlphaBeta(3 * MS, 1e-9)))
    by_name = {r.method: r for r in rows}
    assert list(by_name) == BASELINES + ["mgwfbp", "dp"] == default_methods()
    assert by_name["wfbp"].speedup == 1.0
    assert by_name["single"].speedup == pytest.approx(20 / 19, rel=1e-12)
    for r in rows:
        assert r.speedup == pytest.approx(by_name["wfbp"].iteration_time / r.iteration_time, rel=1e-12)
        assert r.exposed == pytest.approx(r.iteration_time - 9 * MS, rel=1e-9)
    table = format_table(rows).splitlines()
    assert table[0].split()[:3] == ["method", "T", "(ms)"]
    assert table[2].split()[:3] == ["wfbp", "20.000", "1.000x"]
    assert compare(Problem(profile, AlphaBeta(3 * MS, 1e-9)), ["single"])[0].speedup == pytest.approx(20 / 19)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        compare(Problem(profile, AlphaBeta(3 * MS, 1e-9)), ["single", "nope"])


def test_top_level_api():
    assert {"model", "cost", "solvers"} <= set(fusionopt.__all__)
    assert {"Profile", "Plan", "Problem", "simulate"} <= set(fusionopt.model.__all__)
    assert {"solve", "compare", "methods"} <= set(fusionopt.solvers.__all__)
    assert fusionopt.cost.AlphaBeta is AlphaBeta
    assert np.isclose(fusionopt.cost.network("10gbe", 8).beta, 2 * 7 / 8 / 1.25e9)


def test_layerwise_schedulers_join_the_default_comparison_only_under_layerwise_sync():
    from fusionopt.solvers import compare, default_methods

    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    barrier = Problem(profile, AlphaBeta(1e-3, 1e-9))
    layerwise = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    partition = {"p3", "bytescheduler", "bytescheduler-tuned", "layerwise-opt"}
    assert not partition & set(default_methods(barrier))
    assert partition <= set(default_methods(layerwise))
    assert "usbyte" not in default_methods(layerwise)           # its default unit needs large tensors
    rows = {row.method: row for row in compare(layerwise)}
    # P3's default 40,000-parameter slices cut the 7 MB into 25 + 7 + 13 = 45 messages of
    # 1 ms latency each: the channel works 45 + 7 = 52 ms from t = 1 ms, and the last
    # forward (1 ms) follows: 54 ms.
    assert rows["p3"].iteration_time == pytest.approx(0.054, rel=1e-12)
    assert rows["p3"].messages == 45


def test_horovod_gpu_padding_and_threshold_rounding():
    # Ten 100-byte gradients ready together. The current code pads each to 112 bytes on
    # GPUs: four fit a 512-byte threshold (448), a fifth would not (560); on the CPU five do.
    profile = Profile.from_arrays([100] * 10, [0.0] * 10, [0.0] * 9 + [MS])
    problem = Problem(profile, AlphaBeta(MS, 1e-9))
    gpu = solve(problem, "horovod", fusion_threshold_bytes=512)
    cpu = solve(problem, "horovod", fusion_threshold_bytes=512, backend="gloo")
    assert [len(g) for g in gpu.plan.groups()] == [4, 4, 2]
    assert [len(g) for g in cpu.plan.groups()] == [5, 5]
    # 500 bytes round up to 512 (8 x 64 x local_size 1); legacy v0.16 neither rounds nor pads.
    assert solve(problem, "horovod", fusion_threshold_bytes=500).stats["fusion_threshold_bytes"] == 512
    legacy = solve(problem, "horovod", fusion_threshold_bytes=500, defaults="legacy")
    assert [len(g) for g in legacy.plan.groups()] == [5, 5]
    assert solve(problem, "horovod", fusion_threshold_bytes=500, local_size=2).stats["fusion_threshold_bytes"] == 1024
