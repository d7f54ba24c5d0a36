"""Parameter-server plans on the executor (MODEL.md section 6): pushes and pulls on two channels
of real collectives, each pull after the servers' update of the pushes it reads."""

from __future__ import annotations

import numpy as np
import pytest

from executor_helpers import require_mpiexec, small_profile
from fusionopt.executor import CollectiveTimeout, Fault, Job, run, LocalGroup, build_program
from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, simulate, ParameterServer, PSPlan, pieces_by_tensor, pull_sources

COST = AlphaBeta(alpha=1e-4, beta=1e-9)
UPDATE = 2e-3          # the servers' update of every push message, seconds


def ps_problem(sync="barrier", **options):
    return Problem(small_profile(), pattern=ParameterServer(COST, update_overhead=UPDATE, **options), sync=sync)


def sources(plan, n=3):
    return pull_sources(plan, pieces_by_tensor(plan.push, n))


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_pushes_and_pulls_run_as_reduce_scatters_and_all_gathers_in_their_orders(sync):
    problem = ps_problem(sync)
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1, 0]], pull=[[0], [1], [2]])
    m = run(problem, plan, ranks=3, iterations=2, warmup=1)
    assert m.correct and m.pattern == "ps"
    # Pushes in push order, then pulls in pull order, each of its own bytes, padded to 3 ranks' words.
    assert [(k, b) for k, b, _ in m.collectives] == [("reduce-scatter", 2048), ("reduce-scatter", 5120),
                                                     ("all-gather", 4096), ("all-gather", 1024),
                                                     ("all-gather", 2048)]
    assert [p for _, _, p in m.collectives] == [2064, 5136, 4104, 1032, 2064]
    # Every rank checks its push shards (7 KiB + padding, / 3) and every pulled byte (7 KiB).
    assert m.checked_bytes == 3 * 3 * ((2064 + 5136) // 3 + 7168)
    assert m.predicted_time == simulate(problem, plan).iteration_time
    assert m.message_start.shape == (2, 2) and m.pull_start.shape == (2, 3)
    ready = problem.profile.ready_times
    assert (m.message_start[:, 0] >= ready[2]).all() and (m.message_start[:, 1] >= ready[0]).all()
    assert (m.message_start[:, 1] >= m.message_end[:, 0]).all()
    # A pull starts once every push it reads has ended and the servers' update has passed.
    for q, pushes in enumerate(sources(plan)):
        assert (m.pull_start[:, q] >= m.message_end[:, max(pushes)] + UPDATE).all()
    assert (m.pull_start[:, 1:] >= m.pull_end[:, :-1]).all()
    # The forward of each tensor waits for the pull that carries it: t0 pulled first.
    assert (m.forward_start[:, 0] >= m.pull_end[:, 0]).all()
    assert (m.forward_start[:, 2] >= m.pull_end[:, 2]).all()
    assert np.allclose(m.reduced, m.pull_end[:, [0, 1, 2]], atol=1e-3)
    doc = m.to_dict()
    assert np.array(doc["pull_end"]).shape == (2, 3) and doc["predicted_pulls"]["pull_bytes"] == [4096, 1024, 2048]
    assert "pulls          3" in m.summary()


def test_the_pull_channel_runs_while_the_backward_still_pushes():
    # t2 is ready at 10 ms (compute at 10 times the profile's) and pushed alone; its pull reads
    # only that push, so on a channel of its own it ends about 2 ms (the update) later, long
    # before t0 is ready (60 ms) and pushed. One channel in order could not. (At the profile's
    # own times the margin, 2.5 ms, was within a loaded host's scheduling delays.)
    problem = ps_problem("layerwise")
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1], [0]], pull=[[2], [1], [0]])
    m = run(problem, plan, ranks=2, iterations=2, warmup=1, time_scale=10.0)
    assert m.correct
    assert (m.pull_end[:, 0] < m.message_start[:, 2]).all()
    assert (m.pull_start[:, 0] >= m.message_end[:, 0] + UPDATE).all()


def test_partitioned_compute_runs_the_program_of_pieces():
    problem = ps_problem("layerwise", partition_compute=True, delta=1e-4)
    plan = PSPlan.from_offsets(problem.profile, push=[1024, 2048, 5120], pull=[3072])
    program = build_program(problem, plan)
    assert program.channels == 2 and program.channel == [0] * 4 + [1] * 2
    m = run(problem, plan, ranks=2, iterations=1, warmup=1)
    assert m.correct and len(m.collectives) == 6
    assert m.predicted_time == simulate(problem, plan).iteration_time
    for q, pushes in enumerate(sources(plan)):
        assert (m.pull_start[:, q] >= m.message_end[:, max(pushes)] + UPDATE).all()


def test_the_program_holds_each_pull_for_the_update_of_the_pushes_it_reads():
    problem = Problem(small_profile(), pattern=ParameterServer(COST, update_per_byte=1e-9, update_overhead=1e-4))
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1], [0]], pull=[[0, 1], [2]])
    program = build_program(problem, plan)
    # Pull 0 (t0, t1) reads pushes 1 and 2, and waits for the later one; pull 1 (t2) reads push 0.
    assert [c.gate for c in program.collectives[3:]] == ["channel", "channel"]
    assert [c.need for c in program.collectives[3:]] == [3, 1]
    assert program.after[3] == ((1, 1e-4 + 1024e-9), (2, 1e-4 + 4096e-9))
    assert program.after[4] == ((0, 1e-4 + 2048e-9),)
    t = simulate(problem, plan)
    assert t.pull_ready.tolist() == [max(t.message_end[k] + s for k, s in program.after[3]),
                                     t.message_end[0] + program.after[4][0][1]]


def test_a_corrupted_pull_is_caught_naming_it_and_a_stalled_pull_times_out():
    problem = ps_problem()
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1, 0]], pull=[[0], [1], [2]])
    m = run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0, raise_on_error=False,
            fault=Fault("corrupt", rank=1, message=3))
    assert not m.correct
    assert m.errors[0].startswith("rank 1, step 0: collective 3 of 5 (pull message 1, 1024 B): tensor 't1'")
    with pytest.raises(CollectiveTimeout, match=r"collective 4 of 5 \(pull message 2, 2048 B\): all-gather did "
                                                r"not complete within 1 s"):
        run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0, timeout=1.0,
            fault=Fault("stall", rank=0, message=4))


def test_a_parameter_server_job_travels_as_json():
    problem = ps_problem("layerwise", partition_compute=True, delta=1e-5, workers=2)
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1, 0]], pull=[[0], [1, 2]])
    job = Job(problem, plan, iterations=3)
    again = Job.from_dict(job.to_dict())
    assert again.to_dict() == job.to_dict() and again.digests() == job.digests()
    assert repr(again.problem.pattern) == repr(problem.pattern)
    with pytest.raises(ValueError, match=r"^job.ps: unknown field\(s\) servres$"):
        Job.from_dict({**job.to_dict(), "ps": {**job.to_dict()["ps"], "servres": 2}})


def test_the_nccl_backend_refuses_two_channels_in_one_line():
    problem = ps_problem()
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1, 0]], pull=[[0], [1], [2]])
    with pytest.raises(ValueError, match=r"^the nccl backend runs one channel per rank, and a parameter-server "
                                         r"plan runs two at once: use the local or mpi backend$"):
        run(problem, plan, "nccl", ranks=2)


def test_a_local_group_aborts_every_channel_at_once():
    group = LocalGroup(2)
    pulls = group.channel(1)
    assert group.channel(1) is pulls and pulls.channel(0) is group
    pulls.abort("rank 1 failed")
    assert group.aborted and pulls.aborted


def test_parameter_server_plans_run_on_mpi_processes():
    require_mpiexec()
    problem = ps_problem("layerwise")
    plan = PSPlan.from_groups(problem.profile, push=[[2], [1], [0]], pull=[[2], [1], [0]])
    # Compute ten times the profile's: tensor 2's push is ready at 10 ms and its pull follows the
    # servers' 2 ms update, some 45 ms before tensor 0's push (ready at 60 ms), a margin that a
    # loaded host's delays keep (at the profile's own times it was 2.5 ms).
    m = run(problem, plan, "mpi", ranks=2, iterations=2, warmup=1, timeout=20.0, time_scale=10.0)
    assert m.correct and m.backend == "mpi" and [k for k, _, _ in m.collectives] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
    assert (m.pull_end[:, 0] < m.message_start[:, 2]).all()
