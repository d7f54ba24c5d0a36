"""Problem and simulate: argument checks."""

import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate


def test_problem_rejects_bad_parts():
    p = Profile.from_arrays([8, 8], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="unknown sync 'eager'"):
        Problem(p, AlphaBeta(0, 1e-9), sync="eager")
    with pytest.raises(ValueError, match="cost must be a CommCost"):
        Problem(p, lambda s: s)
    with pytest.raises(ValueError, match="profile must be a Profile"):
        Problem([8, 8], AlphaBeta(0, 1e-9))


def test_simulate_rejects_invalid_plan():
    p = Profile.from_arrays([8, 8], [0, 0], [1, 1], ["w", "b"])
    with pytest.raises(ValueError, match=r"tensor 'w' \(index 0\): bytes \[0, 8\) are missing"):
        simulate(Problem(p, AlphaBeta(0, 1e-9)), Plan.from_groups(p, [[1]]))
