"""ByteScheduler on Horovod's cycle-tick fusion (fusionopt.solvers.papers._bytescheduler)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.papers import bytescheduler, bytescheduler_slices

MS = 1e-3
QUARTER = 250_000                    # float32 parameters in 1 MB


def worked_example(alpha: float = 1 * MS) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha, 1e-9), sync="layerwise")


def test_partitions_fuse_at_horovods_ticks_hand_worked():
    # 5 ms ticks, 64 MiB: t2's partitions (ready 1 ms) and t1 (3 ms) go at the 5 ms tick as
    # one 4 MB message, 5 -> 10; t0 (6 ms) at the 10 ms tick, 10 -> 15; T = 18 ms.
    result = bytescheduler(worked_example(), partition_parameters=QUARTER)
    assert result.plan.groups() == [[2, 1], [0]]
    assert [len(m.chunks) for m in result.plan.messages] == [3, 4]
    assert (result.plan.release / MS).round(9).tolist() == [5.0, 10.0]
    assert result.iteration_time == pytest.approx(18 * MS, rel=1e-12)
    assert result.stats["cycles"] == 2 and result.stats["fusion_threshold_bytes"] == 64 * 2**20
    # A 1 ms cycle: t2's partitions at 1 ms (1 -> 4: two 1 MB partitions, one message),
    # t1 at 3 ms (4 -> 6), t0 at 6 ms (6 -> 11); T = 14 ms.
    fast = bytescheduler(worked_example(), partition_parameters=QUARTER, cycle_time=1 * MS)
    assert fast.plan.groups() == [[2], [1], [0]]
    assert fast.iteration_time == pytest.approx(14 * MS, rel=1e-12)
    # Fusion off, ticks kept (US-Byte's runtime): every partition alone, still at ticks.
    alone = bytescheduler(worked_example(), partition_parameters=QUARTER, fusion_threshold_bytes=0)
    assert all(len(m.chunks) == 1 for m in alone.plan.messages) and alone.plan.release[0] == 5 * MS


def test_the_credit_holds_partitions_back_until_their_message_ends():
    # Credit of one partition (fixed): t2's first partition goes at the 5 ms tick (5 -> 7);
    # its credit comes back at 7, the second is posted then and goes at the 10 ms tick.
    result = bytescheduler(worked_example(), partition_parameters=QUARTER, credit_parameters=QUARTER,
                           credit_tuning=False)
    first = result.plan.messages[0]
    assert [(c.tensor, c.lo, c.hi) for c in first.chunks] == [(2, 0, 1_000_000)]
    assert (result.plan.release[:2] / MS).round(9).tolist() == [5.0, 10.0]


def test_cpu_backend_waits_for_the_cycles_collectives():
    gpu = bytescheduler(worked_example(), partition_parameters=QUARTER, cycle_time=1 * MS)
    cpu = bytescheduler(worked_example(), partition_parameters=QUARTER, cycle_time=1 * MS, backend="gloo")
    # GPU ticks at 3 ms while t2's message runs (1 -> 4) and sends t1 alone; on the CPU the
    # next cycle starts at 4 ms, when t1 is ready too.
    assert gpu.plan.release.tolist() == pytest.approx([1 * MS, 3 * MS, 6 * MS])
    assert cpu.plan.release[1] == pytest.approx(4 * MS)


def test_partitions_are_whole_rows_when_shapes_are_known():
    # A (5, 2) float32 tensor, partition 4 elements: 3 pieces of 1, 2 and 2 rows.
    profile = Profile.from_arrays([40, 8], [0.0] * 2, [MS] * 2, shapes=[(5, 2), (2,)])
    slices = bytescheduler_slices(Problem(profile, AlphaBeta(0, 1e-9), sync="layerwise"), 4)
    assert [(c.lo, c.hi) for c in slices if c.tensor == 0] == [(0, 8), (8, 24), (24, 40)]
    # More pieces than rows: one row each.
    tall = Profile.from_arrays([40], [0.0], [MS], shapes=[(2, 5)])
    assert [(c.lo, c.hi) for c in bytescheduler_slices(Problem(tall, AlphaBeta(0, 1e-9), sync="layerwise"), 1)] \
        == [(0, 20), (20, 40)]


def test_priority_is_registration_order():
    # Two tensors ready together; the one registered first goes first, whatever the
    # forward order says.
    profile = Profile.from_arrays([1e6, 1e6], [MS, MS], [0.0, MS], registration_order=[1, 0])
    problem = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")
    result = bytescheduler(problem, fusion_threshold_bytes=0, cycle_time=0, credit_tuning=False)
    assert result.plan.groups() == [[1], [0]]


def test_credit_tuning_keeps_the_best_credit():
    problem = worked_example()
    tuned = bytescheduler(problem, partition_parameters=QUARTER, credit_parameters=QUARTER)
    fixed = bytescheduler(problem, partition_parameters=QUARTER, credit_parameters=QUARTER, credit_tuning=False)
    assert tuned.iteration_time <= fixed.iteration_time
    assert tuned.stats["credits_tried"] == 6


def test_model_extensions_need_the_unfused_policy():
    problem = Problem(worked_example().profile, AlphaBeta(MS, 1e-9), sync="layerwise", channels=2)
    with pytest.raises(ValueError, match="pass fusion_threshold_bytes=0 and cycle_time=0"):
        bytescheduler(problem)
    assert bytescheduler(problem, fusion_threshold_bytes=0, cycle_time=0).plan.num_messages == 3
    with pytest.raises(ValueError, match="cycle_time must be a number of seconds >= 0, got -1"):
        bytescheduler(worked_example(), cycle_time=-1)


@settings(deadline=None, max_examples=40)
@given(problems(sync="layerwise", cost=st.builds(AlphaBeta, alpha=st.floats(0, 2e-3), beta=st.floats(0, 1e-8))),
       st.integers(50_000, 3_000_000), st.sampled_from([1e-4, 1e-3, 5e-3]), st.sampled_from([0, 2**20, 64 * 2**20]),
       st.sampled_from(["nccl", "gloo"]))
def test_plans_are_valid_and_wait_for_their_ticks(problem, partition, cycle, threshold, backend):
    result = solve(problem, "bytescheduler", partition_parameters=partition, credit_parameters=4 * partition,
                   cycle_time=cycle, fusion_threshold_bytes=threshold, backend=backend)
    result.plan.validate(problem.profile)
    assert result.iteration_time == simulate(problem, result.plan).iteration_time
    timeline = result.timeline
    # Every message starts at or after its tick, which is on the cycle grid (GPU), and
    # holds no more than the threshold unless it is one partition.
    assert (timeline.message_start >= result.plan.release).all()
    for message in result.plan.messages:
        assert len(message.chunks) == 1 or message.nbytes <= threshold
        if backend == "nccl":
            ticks = message.release / cycle
            assert abs(ticks - round(ticks)) < 1e-6
