"""A traced job's step predicted under other DDP bucket settings (``TracedStep.problem``)."""

import json

import pytest

from kineto_traces import PARAMS, US, ddp_job

from fusionopt.integrations import predict_traced_step
from fusionopt.solvers import solve


@pytest.fixture
def traced(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank)))
    return predict_traced_step(tmp_path, PARAMS)


def test_another_bucket_setting_is_predicted_by_hand(traced):
    # The hand-made job: forward 290 us, backward 140 us (tensors ready 55, 65, 130 and 140 us
    # into it, in the order fc2.bias, fc2.weight, fc1.bias, fc1.weight), copy 20, update lump
    # 105, host 245; its one bucket took 200 us, and the fitted cost is 200 us for any size.
    # One bucket (100 MiB, as traced): exposed 200 us, T = 1000 us, the traced prediction.
    same = solve(traced.problem, "ddp", bucket_cap_mb=100)
    assert same.plan.groups() == traced.plan.groups() == [[3, 2, 1, 0]]
    assert round(same.iteration_time / US, 6) == round(traced.predicted / US, 6) == 1000.0
    # A 1-byte cap: a bucket per tensor, 200 us each, one after another from 55 us: the last
    # ends at 55 + 4 * 200 = 855 us, 715 us after the backward; T = 290 + 140 + 715 + 20 +
    # 105 + 245 = 1515 us.
    apart = solve(traced.problem, "ddp", bucket_cap_mb=1 / 2**20)
    assert apart.plan.groups() == [[3], [2], [1], [0]]
    assert round(apart.timeline.exposed / US, 6) == 715.0 and round(apart.iteration_time / US, 6) == 1515.0
    # 629 bytes: fc2's two tensors (40 + 640 B) close the first bucket at 65 us (65 -> 265),
    # fc1's the second at 140 us (265 -> 465): exposed 325 us, T = 1125 us.
    two = solve(traced.problem, "ddp", bucket_cap_mb=629 / 2**20)
    assert two.plan.groups() == [[3, 2], [1, 0]] and round(two.iteration_time / US, 6) == 1125.0


def test_the_problem_is_the_traced_one(traced):
    assert traced.problem.profile is traced.profile and traced.problem.cost is traced.cost
    assert traced.problem.sync == "barrier"
