"""Broken communicators and disagreeing ranks: each a clear error, never a hang."""

from __future__ import annotations

import dataclasses

import pytest

from executor_helpers import small_problem
from fusionopt.executor import (
    CollectiveTimeout, CorrectnessError, Fault, Job, PlanMismatchError, run, run_local, Gradients, Layout,
    LocalGroup,
)
from fusionopt.model import Plan


def problem_and_plan():
    problem = small_problem()
    # Message 1 carries t1 (bytes [0, 1024)) then t0 (bytes [0, 4096)): 5120 B, 640 words.
    return problem, Plan.from_groups(problem.profile, [[2], [1, 0]])


def test_a_dropped_chunk_is_caught_and_named():
    problem, plan = problem_and_plan()
    with pytest.raises(CorrectnessError) as info:
        run(problem, plan, ranks=3, time_scale=0.0, fault=Fault("drop", rank=1, message=1, step=1))
    # The first half of message 1 (t1's 1024 B, then t0's first 1536 B) kept rank 1's own values.
    assert str(info.value).startswith(
        "reduced gradients are wrong: rank 1, step 1: tensor 't0' (index 0): bytes [0, 1536) differ from the "
        "exact sum over 3 ranks (1536 B wrong in this tensor; carried by message 1; byte 0: got 0x")
    assert str(info.value).endswith("(and 1 more)")
    m = info.value.measurement
    assert not m.correct and m.steps == 2
    assert any("tensor 't1' (index 1): bytes [0, 1024) differ" in e and "carried by message 1" in e for e in m.errors)
    assert any("tensor 't0' (index 0): bytes [0, 1536) differ" in e for e in m.errors)
    assert all(e.startswith("rank 1, step 1:") for e in m.errors)      # only the faulty rank


def test_a_corrupted_word_is_caught_with_its_byte_range():
    problem, plan = problem_and_plan()
    m = run(problem, plan, ranks=2, time_scale=0.0, raise_on_error=False,
            fault=Fault("corrupt", rank=0, message=1))
    # Word 320 of message 1 is byte 2560 of the fused buffer: byte 1536 of t0.
    assert m.errors == ("rank 0, step 0: tensor 't0' (index 0): bytes [1536, 1544) differ from the exact sum "
                        "over 2 ranks (8 B wrong in this tensor; carried by message 1; byte 1536: got "
                        + m.errors[0].split("got ")[1],)
    assert not m.correct


def test_a_stalled_rank_times_out_naming_the_message():
    problem, plan = problem_and_plan()
    with pytest.raises(CollectiveTimeout, match=r"message 1 of 2 \(2 chunks, 5120 B: 't1', 't0'\): "
                                                r"all-reduce did not complete within 0.3 s"):
        run(problem, plan, ranks=3, time_scale=0.0, timeout=0.3, fault=Fault("stall", rank=2, message=1))


def test_ranks_that_disagree_on_the_plan_stop_before_the_first_step():
    problem, plan = problem_and_plan()
    other = Plan.per_tensor(problem.profile)
    job = Job(problem, plan, iterations=1, warmup=0, time_scale=0.0, timeout=5.0)
    with pytest.raises(PlanMismatchError, match=r"ranks disagree on the plan: rank 0 has sha256 [0-9a-f]{12}\.\.\., "
                                                r"rank 2 has [0-9a-f]{12}\.\.\. \(checked before the first step\)"):
        run_local([job, job, dataclasses.replace(job, plan=other)])


def test_ranks_that_disagree_on_the_settings_stop_too():
    problem, plan = problem_and_plan()
    job = Job(problem, plan, iterations=1, warmup=0, time_scale=0.0, timeout=5.0)
    with pytest.raises(PlanMismatchError, match=r"ranks disagree on the run settings .*rank 1 has"):
        run_local([job, dataclasses.replace(job, iterations=2)])


def test_a_fault_on_a_missing_rank_is_refused():
    problem, plan = problem_and_plan()
    with pytest.raises(ValueError, match="fault on rank 5, but the run has 2 ranks"):
        run(problem, plan, ranks=2, fault=Fault("drop", rank=5, message=0))


def test_a_local_barrier_timeout_names_what_timed_out():
    group = LocalGroup(2)
    comm = group.communicators()[0]
    with pytest.raises(CollectiveTimeout, match="barrier did not complete within 0.05 s"):
        comm.barrier(timeout=0.05)
    assert group.aborted


def test_every_missing_contribution_changes_the_sum():
    # Contributions are odd, so the sum without any one rank differs from the full sum.
    problem, plan = problem_and_plan()
    layout = Layout(problem.profile, Plan.from_groups(problem.profile, [[2], [1, 0]]))
    ranks = [Gradients(layout, rank=r, size=4) for r in range(4)]
    for g in ranks:
        g.fill(step=3)
    for i in range(3):
        total = sum(g.grads[i] for g in ranks)
        scale, offset = ranks[0].expected_constants(step=3)
        exact = ranks[0]._pattern[i] * scale + offset
        assert (total == exact).all()
        for g in ranks:
            assert ((total - g.grads[i]) != exact).all()
