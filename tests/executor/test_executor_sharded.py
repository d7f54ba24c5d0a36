"""Sharded plans on the executor (MODEL.md 8.1 and 8.2): reduce-scatters and all-gathers, every byte checked."""

from __future__ import annotations

import ctypes
import json
import sys

import numpy as np
import pytest

from executor_helpers import require_mpiexec, small_profile
from fusionopt.executor import (
    CollectiveTimeout, CorrectnessError, Fault, Job, run, LocalGroup, run_threads, build_program,
)
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, simulate, Decoupled, DecoupledPlan, FullySharded, ShardedPlan, replay

HALF = AlphaBeta(alpha=1e-4, beta=1e-9)
KINDS = {0: "reduce-scatter", 1: "all-gather"}


def decoupled_problem(sync="barrier", after=False, **kwargs):
    return Problem(small_profile(update=2e-4, **kwargs), pattern=Decoupled(HALF, HALF, update_after_gather=after),
                   sync=sync)


def sharded_problem(**kwargs):
    return Problem(small_profile(update=2e-4, **kwargs), pattern=FullySharded(HALF, HALF))


def sharded_plans():
    return [ShardedPlan([0, 2, 3]),                                          # both resharded
            ShardedPlan([0, 1, 2, 3], root=True),                            # a root of t0 and t2
            ShardedPlan([0, 1, 3], [False, True], forward_prefetch=0, backward_prefetch=0, reduce_bounds=[0, 2, 3]),
            ShardedPlan([0, 1, 2, 3], forward_prefetch=2, backward_prefetch=2),
            ShardedPlan([0, 2, 3], [True, False], persistent=[False, True, False])]   # t1 gathered alone


def assert_ran_the_plan(m, problem, plan, ranks):
    """``correct``, and the collectives that ran are the model's, in its order, with its sizes."""
    t = simulate(problem, plan)
    assert m.correct and m.errors == ()
    assert [(k, b) for k, b, _ in m.collectives] == [(KINDS[k], b) for k, b in
                                                     zip(t.message_kind.tolist(), t.message_bytes.tolist())]
    assert len(m.collectives) == plan.num_messages
    for _, nbytes, padded in m.collectives:       # padded to a multiple of the ranks' words, no more
        assert padded >= nbytes and padded % ranks == 0 and padded - nbytes < 8 * ranks
    scaled = Job(problem, plan, time_scale=m.time_scale).scaled_problem()
    assert m.predicted_time == simulate(scaled, plan).iteration_time
    assert m.message_start.shape == m.message_end.shape == (m.iteration_times.size, plan.num_messages)
    # One channel: each collective starts after the one before it ended.
    assert (m.message_start[:, 1:] >= m.message_end[:, :-1]).all()
    assert (m.iteration_times >= scaled.profile.compute_time).all()


# ---------------------------------------------------------------------- decoupled (8.1)
@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_decoupled_plans_run_correctly_in_channel_order(sync, after):
    problem = decoupled_problem(sync, after)
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0], [1, 2]])
    m = run(problem, plan, ranks=3, iterations=2, warmup=1)
    assert_ran_the_plan(m, problem, plan, 3)
    assert m.pattern == "decoupled" and m.sync == sync
    # Each rank checks its reduce-scatter shards (7 KiB padded / 3) and every gathered byte (7 KiB).
    assert m.checked_bytes == 3 * 3 * ((2064 + 5136) // 3 + 7168)
    # A reduce-scatter starts after its gradients are emitted; D_i is its last one's end.
    ready = problem.profile.ready_times
    assert (m.message_start[:, 0] >= ready[2]).all() and (m.message_start[:, 1] >= ready[0]).all()
    assert np.allclose(m.reduced[:, 0], m.message_end[:, 1], atol=1e-3) and (m.reduced[:, 0] >= m.message_end[:, 1]).all()
    assert np.allclose(m.reduced[:, 2], m.message_end[:, 0], atol=1e-3) and (m.reduced[:, 2] >= m.message_end[:, 0]).all()
    # The forward of each tensor waits for its all-gather.
    assert (m.forward_start[:, 0] >= m.message_end[:, 2]).all()
    assert (m.forward_start[:, 1] >= m.message_end[:, 3]).all()


def test_an_interleaved_decoupled_order_runs_as_ordered():
    problem = decoupled_problem("layerwise")
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[2], [1], [0]], order=[0, 1, 0, 1, 0, 1])
    m = run(problem, plan, ranks=2, iterations=2, warmup=0)
    assert_ran_the_plan(m, problem, plan, 2)
    assert [k for k, _, _ in m.collectives] == ["reduce-scatter", "all-gather"] * 3


def test_chunked_decoupled_plans_with_odd_bytes_use_byte_words():
    profile = small_profile([1001, 7, 64], update=1e-4)
    problem = Problem(profile, pattern=Decoupled(HALF, HALF))
    rs = Plan.from_dict({"schema": "fusionopt.plan", "version": 1,
                         "messages": [[[2, 0, 64], [1, 0, 7], [0, 0, 500]], [[0, 500, 1001]]]})
    plan = DecoupledPlan(rs, Plan.from_groups(profile, [[0, 1, 2]]))
    m = run(problem, plan, ranks=4, iterations=1, warmup=0, time_scale=0.0)
    assert_ran_the_plan(m, problem, plan, 4)
    assert [p for _, _, p in m.collectives] == [572, 504, 1072]     # 571, 501 and 1072 B padded to a multiple of 4


def test_a_decoupled_order_that_can_never_run_is_refused_before_starting():
    problem = decoupled_problem()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0, 1, 2]], order=[0, 1, 0])
    with pytest.raises(ValueError, match="all-gather message 0 holds tensor 0, whose update waits"):
        run(problem, plan, ranks=2, iterations=1, warmup=0)


# ---------------------------------------------------------------------- fully sharded (8.2)
@pytest.mark.parametrize("plan", sharded_plans(), ids=repr)
def test_fully_sharded_plans_gather_and_reduce_every_unit(plan):
    problem = sharded_problem()
    m = run(problem, plan, ranks=3, iterations=2, warmup=1)
    assert_ran_the_plan(m, problem, plan, 3)
    assert m.pattern == "fully-sharded"
    # Collectives start no earlier than their issue points allow: the program replayed with
    # instantaneous collectives gives the earliest each can start.
    earliest = replay(build_program(problem, plan), [0.0] * plan.num_messages)["start"]
    assert (m.message_start >= np.asarray(earliest) - 1e-9).all()


def test_a_fully_sharded_run_predicts_the_model_and_follows_its_forward():
    problem = sharded_problem()
    plan = ShardedPlan([0, 2, 3])
    m = run(problem, plan, ranks=2, iterations=3, warmup=1)
    t = simulate(problem, plan)
    # Unit 1's forward (t2) waits for its all-gather; unit 0's forward starts the step.
    assert (m.forward_start[:, 2] >= m.message_end[:, 1]).all()
    assert (m.forward_start[:, 1] - m.forward_start[:, 0] >= problem.profile.forward[0] - 1e-9).all()
    # Threads all-gather far faster than c(S) says, so the step is no slower than predicted by much,
    # and never faster than its compute.
    assert t.iteration_time * 0.5 < m.iteration_time < t.iteration_time + 0.05


# ---------------------------------------------------------------------- the program is the model
@pytest.mark.parametrize("case", range(8))
def test_the_program_replays_the_models_timeline_exactly(case):
    profile = small_profile([4096, 1024, 2048, 512], update=3e-4)
    ag = AlphaBeta(3e-4, 2e-9)
    problems_and_plans = [
        (Problem(profile, pattern=Decoupled(HALF, ag), sync="layerwise"),
         DecoupledPlan.from_groups(profile, [[3, 2], [1], [0]], [[0], [1, 2, 3]], order=[0, 0, 0, 1, 1])),
        (Problem(profile, pattern=Decoupled(HALF, ag, update_after_gather=True), sync="layerwise"),
         DecoupledPlan.from_groups(profile, [[3], [2, 1], [0]], [[3], [2, 1], [0]], order=[0, 1, 0, 1, 0, 1])),
        (Problem(profile, pattern=Decoupled(HALF, ag, update_after_gather=True)),
         DecoupledPlan.from_groups(profile, [[3, 2, 1, 0]], [[0, 1, 2, 3]])),
        (Problem(profile, pattern=FullySharded(HALF, ag)), ShardedPlan([0, 1, 3, 4], root=True)),
        (Problem(profile, pattern=FullySharded(HALF, ag)),
         ShardedPlan([0, 2, 4], [False, True], forward_prefetch=0, backward_prefetch=2, reduce_bounds=[0, 1, 3, 4])),
        (Problem(profile, pattern=FullySharded(HALF, ag)), ShardedPlan.per_tensor(profile, backward_prefetch=0)),
        (Problem(profile, pattern=FullySharded(HALF, ag)),
         ShardedPlan([0, 2, 4], [True, True], reduce_bounds=[0, 4], persistent=[False, True, True, True])),
        (Problem(profile, pattern=FullySharded(HALF, ag)),
         ShardedPlan([0, 1, 3, 4], root=True, persistent=[True, False, False, True])),
    ]
    problem, plan = problems_and_plans[case]
    t = simulate(problem, plan)
    program = build_program(problem, plan)
    r = replay(program, t.message_end - t.message_start)
    assert r["iteration_time"] == pytest.approx(t.iteration_time, abs=1e-12)
    assert np.allclose(r["start"], t.message_start, atol=1e-12) and np.allclose(r["end"], t.message_end, atol=1e-12)
    assert np.allclose(r["forward_start"], t.forward_start, atol=1e-12)
    assert [s.nbytes for s in program.collectives] == t.message_bytes.tolist()


# ---------------------------------------------------------------------- faults are caught
def test_a_corrupted_reduce_scatter_is_caught_naming_the_collective():
    problem = sharded_problem()
    plan = ShardedPlan([0, 2, 3])       # AG u0, AG u1, AG u1 (backward), AG u0 (backward), RS u1, RS u0
    m = run(problem, plan, ranks=2, iterations=2, warmup=0, time_scale=0.0, raise_on_error=False,
            fault=Fault("corrupt", rank=1, message=5, step=1))
    assert not m.correct and m.steps == 2
    # RS of unit 0 (t0, t1: 5120 B, 640 words): rank 1's shard is words 320..639, its word 160 is word 480:
    # byte 3840 of t0.
    assert m.errors == ("rank 1, step 1: collective 5 of 6 (reduce-scatter of unit 0, 5120 B): tensor 't0' "
                        "(index 0): bytes [3840, 3848) differ from the exact sum over 2 ranks (8 B wrong in this "
                        "range; got " + m.errors[0].split("got ")[1],)


def test_a_dropped_reduce_scatter_shard_fails_the_run():
    problem = decoupled_problem()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0, 1, 2]])
    with pytest.raises(CorrectnessError, match=r"rank 0, step 0: collective 1 of 3 \(reduce-scatter message 1, "
                                               r"5120 B\): tensor 't1' \(index 1\): bytes \[0, 1024\) differ from "
                                               r"the exact sum over 2 ranks"):
        run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0, fault=Fault("drop", rank=0, message=1))


def test_a_corrupted_all_gather_is_caught_naming_the_owner():
    problem = decoupled_problem()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0, 1, 2]])
    m = run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0, raise_on_error=False,
            fault=Fault("corrupt", rank=0, message=2))
    # Word 448 of 896 (t0, t1, t2): rank 1's shard, byte 3584 of t0.
    assert len(m.errors) == 1 and m.errors[0].startswith(
        "rank 0, step 0: collective 2 of 3 (all-gather message 0, 7168 B): tensor 't0' (index 0): bytes "
        "[3584, 3592) differ from rank 1's shard")


def test_a_stalled_rank_times_out_naming_the_collective():
    problem = sharded_problem()
    with pytest.raises(CollectiveTimeout, match=r"collective 1 of 6 \(all-gather of unit 1 \(forward\), 2048 B, "
                                                r"padded to 2064 B\): all-gather did not complete within 0.3 s"):
        run(problem, ShardedPlan([0, 2, 3]), ranks=3, time_scale=0.0, timeout=0.3,
            fault=Fault("stall", rank=2, message=1))


# ---------------------------------------------------------------------- pieces
def test_local_reduce_scatter_and_all_gather_are_exact():
    group = LocalGroup(3)
    sends = [np.arange(9, dtype=np.uint64) * (r + 1) for r in range(3)]
    shards = [np.zeros(3, dtype=np.uint64) for _ in range(3)]
    gathered = [np.zeros(9, dtype=np.uint64) for _ in range(3)]

    def rank(comm):
        comm.reduce_scatter(sends[comm.rank], shards[comm.rank], timeout=5.0)
        comm.all_gather(shards[comm.rank], gathered[comm.rank], timeout=5.0)

    run_threads([lambda c=c: rank(c) for c in group.communicators()], group)
    for r in range(3):
        assert shards[r].tolist() == (np.arange(9) * 6)[3 * r: 3 * r + 3].tolist()
        assert gathered[r].tolist() == (np.arange(9) * 6).tolist()
    with pytest.raises(ValueError, match="reduce-scatter: the whole buffer must be 3 shards of 3 words"):
        group.communicators()[0].reduce_scatter(sends[0][:8], shards[0], timeout=1.0)


def test_jobs_of_both_patterns_travel_as_json():
    for problem, plan in ((decoupled_problem("layerwise", True),
                           DecoupledPlan.from_groups(small_profile(), [[2], [1, 0]], [[0], [1, 2]])),
                          (Problem(small_profile(), pattern=FullySharded(HALF, HALF, memory_cap=1e6)),
                           ShardedPlan([0, 1, 3], reduce_bounds=[0, 2, 3]))):
        job = Job(problem, plan, iterations=1, warmup=0, backend="mpi")
        again = Job.from_dict(json.loads(json.dumps(job.to_dict())))
        assert again.plan == plan and again.digests() == job.digests()
        assert again.problem.pattern == problem.pattern and again.problem.sync == problem.sync


def test_mismatched_plans_and_device_compute_are_refused():
    problem = sharded_problem()
    with pytest.raises(ValueError, match="plan must be a ShardedPlan for a fully sharded problem, got Plan"):
        run(problem, Plan.per_tensor(problem.profile))
    with pytest.raises(ValueError, match="compute='spin' runs all-reduce plans only"):
        run(problem, ShardedPlan([0, 3]), "nccl", compute="spin")


# ---------------------------------------------------------------------- other backends
def test_sharded_plans_run_on_mpi_processes():
    require_mpiexec()
    problem = decoupled_problem("layerwise")
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0], [1, 2]])
    m = run(problem, plan, "mpi", ranks=3, iterations=2, warmup=1, timeout=20.0)
    assert_ran_the_plan(m, problem, plan, 3)
    assert m.backend == "mpi" and m.description.startswith("mpi, 3 processes")
    problem = sharded_problem()
    m = run(problem, ShardedPlan([0, 2, 3]), "mpi", ranks=2, iterations=1, warmup=0, timeout=20.0,
            raise_on_error=False, fault=Fault("corrupt", rank=1, message=5))
    assert not m.correct and m.errors[0].startswith(
        "rank 1, step 0: collective 5 of 6 (reduce-scatter of unit 0, 5120 B): tensor 't0' (index 0): bytes [3840, 3848)")


def test_sharded_nccl_control_flow_on_a_fake_cupy(monkeypatch):
    from test_executor_nccl import fake_cupy

    cupy, cuda, nccl = fake_cupy()
    widths = {nccl.NCCL_UINT8: 1, nccl.NCCL_UINT32: 4, nccl.NCCL_UINT64: 8}

    class Communicator(nccl.NcclCommunicator):       # one rank: each collective is a copy
        calls = []

        @staticmethod
        def initAll(devices):
            return [Communicator() for _ in devices]

        def reduceScatter(self, send, recv, count, datatype, op, stream):
            Communicator.calls.append(("reduceScatter", count, datatype, op))
            ctypes.memmove(recv, send, count * widths[datatype])

        def allGather(self, send, recv, count, datatype, stream):
            Communicator.calls.append(("allGather", count, datatype))
            ctypes.memmove(recv, send, count * widths[datatype])

    nccl.NcclCommunicator = Communicator
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.nccl", nccl)):
        monkeypatch.setitem(sys.modules, name, module)
    problem = sharded_problem()
    plan = ShardedPlan([0, 2, 3], [False, True])
    m = run(problem, plan, "nccl", emulate_link=True, iterations=1, warmup=0, time_scale=0.0)
    assert_ran_the_plan(m, problem, plan, 1)
    assert m.emulated and m.backend == "nccl"
    # The emulated link holds the stream for c_AG(S) or c_RS(S) of each collective's unsharded bytes.
    assert (m.message_end - m.message_start >= HALF(np.array([b for _, b, _ in m.collectives])) * 0.999).all()
    assert Communicator.calls == [("allGather", 640, 5), ("allGather", 256, 5), ("allGather", 256, 5),
                                  ("reduceScatter", 256, 5, 0), ("reduceScatter", 640, 5, 0)]


def test_real_nccl_runs_sharded_plans_on_two_gpus():
    cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy) is not installed")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        pytest.skip(f"no usable GPU: {exc}")
    if count < 2:
        pytest.skip("needs two GPUs")
    problem = sharded_problem()
    plan = ShardedPlan([0, 2, 3])
    m = run(problem, plan, "nccl", ranks=2, iterations=2, warmup=1)
    assert_ran_the_plan(m, problem, plan, 2)
    problem = decoupled_problem("layerwise")
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1, 0]], [[0], [1, 2]])
    assert_ran_the_plan(run(problem, plan, "nccl", ranks=2, iterations=2, warmup=1), problem, plan, 2)
