"""profile_model reconciles its hooked steps with the plain step (no hooks) it measures after them.

Timings are measured, so nothing here asserts a wall-clock value: only that the profile's
step is the plain step's measured period, that each part is scaled by the ratio the metadata
records, and that ``reconcile=False`` keeps the hooked times.
"""

from __future__ import annotations

import numpy as np
import pytest

from fusionopt.model import Problem

from fusionopt.solvers import solve
from fusionopt.cost import AlphaBeta

torch = pytest.importorskip("torch")
from fusionopt.integrations import profile_model  # noqa: E402


def _model():
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def _one_worker_step(profile) -> float:
    return solve(Problem(profile, AlphaBeta(0.0, 0.0)), "wfbp").iteration_time


def test_the_reconciled_profile_is_the_plain_step_part_by_part():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    p = profile_model(model, torch.randn(4, 32), steps=5, warmup=1, optimizer=opt)
    r, step = p.metadata["reconciled"], p.metadata["step"]
    assert r["forward_scale"] == pytest.approx(r["plain_forward_s"] / p.metadata["forward_step_s"], rel=1e-12)
    assert r["backward_scale"] == pytest.approx(r["plain_backward_s"] / p.metadata["backward_step_s"], rel=1e-12)
    assert step["period"] == r["plain_period_s"] and len(step["periods"]) == 5
    assert p.update_lump == step["update_lump"] > 0           # the plain steps' optimiser, measured
    busy = p.F + p.B + p.update_lump
    # The host takes the rest of the plain step, so the one-worker step is its period.
    assert p.host_overhead == pytest.approx(max(0.0, r["plain_period_s"] - busy), abs=1e-15)
    assert _one_worker_step(p) == pytest.approx(max(r["plain_period_s"], busy), rel=1e-12)
    assert p.metadata["step_hooked"]["period"] == r["hooked_period_s"]


def test_without_reconciling_the_hooked_times_stay():
    model = _model()
    p = profile_model(model, torch.randn(4, 32), steps=3, warmup=1, reconcile=False)
    assert "reconciled" not in p.metadata and "step_hooked" not in p.metadata
    assert p.metadata["step"]["update_lump"] == 0.0
    # Each tensor's backward is the gap between hooks: they add up to the last gradient's time.
    assert p.B == pytest.approx(float(np.max(p.ready_times)), rel=1e-12)


def test_reconcile_must_be_a_bool():
    with pytest.raises(ValueError, match="reconcile must be True or False, got 'yes'"):
        profile_model(_model(), torch.randn(4, 32), reconcile="yes")
