"""``fusionopt simulate`` names each collective of a decoupled or fully sharded plan as the
timeline reports it. MODEL.md section 5's profile (4, 1, 2 MB; forward 1 ms each; backward
3, 2, 1 ms), each collective 1 ms + 1 ns/B."""

from __future__ import annotations

import json

import pytest

from fusionopt.cli import main
from fusionopt.model import Plan, Profile, DecoupledPlan, ShardedPlan

COST = ["--alpha", "0.001", "--beta", "1e-9"]


def profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "profile.json"
    profile().write(path)
    return path, tmp_path


def simulate(capsys, *argv) -> tuple[list[list[str]], str]:
    """The table's rows (split in words) and the whole output."""
    status = main(["simulate", *map(str, argv)])
    captured = capsys.readouterr()
    assert (status, captured.err) == (0, ""), captured.err
    lines = captured.out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.split()[:1] == ["k"]) + 1
    return [line.split() for line in lines[start:]], captured.out


def test_decoupled_rows_name_reduce_scatters_and_all_gathers(capsys, files):
    # Reduce-scatters of t2, t1, t0 run 1-4, 4-6, 6-11 ms; the all-gather of everything 11-19 ms.
    path, folder = files
    plan = folder / "plan.json"
    DecoupledPlan.from_groups(profile(), [[2], [1], [0]], [[0, 1, 2]]).write(plan)
    rows, out = simulate(capsys, path, "--plan", plan, *COST, "--decoupled", "--sync", "layerwise")
    assert "times from the start of the backward" in out
    assert rows == [["0", "reduce-scatter", "2000000", "1.000", "1.000", "4.000"],
                    ["1", "reduce-scatter", "1000000", "3.000", "4.000", "6.000"],
                    ["2", "reduce-scatter", "4000000", "6.000", "6.000", "11.000"],
                    ["3", "all-gather", "7000000", "11.000", "11.000", "19.000"]]
    document = json.loads(simulate_json(capsys, path, "--plan", plan, *COST, "--decoupled", "--sync", "layerwise"))
    assert [m["kind"] for m in document["messages"]] == ["reduce-scatter"] * 3 + ["all-gather"]


def test_gradients_reduced_by_all_reduces_are_named_so(capsys, files):
    # reduce_with="all_reduce": each gradient message costs c_RS + c_AG = 2 ms + 2 ns/B:
    # 1-7, 7-11, 11-21 ms; the all-gather 21-29 ms.
    path, folder = files
    plan = folder / "plan.json"
    DecoupledPlan.from_groups(profile(), [[2], [1], [0]], [[0, 1, 2]], reduce_with="all_reduce").write(plan)
    rows, _ = simulate(capsys, path, "--plan", plan, *COST, "--decoupled")
    assert [(r[1], r[-1]) for r in rows] == [("all-reduce", "7.000"), ("all-reduce", "11.000"),
                                             ("all-reduce", "21.000"), ("all-gather", "29.000")]


def test_fully_sharded_rows_name_the_kind_and_the_unit(capsys, files):
    # MODEL.md 8.2's worked check: all-gather 0-8, forward 8-11, second all-gather issued at
    # 11 and run 11-19, backward 19-25, reduce-scatter issued at 25 and run 25-33 ms.
    path, folder = files
    plan = folder / "plan.json"
    ShardedPlan([0, 3]).write(plan)
    rows, out = simulate(capsys, path, "--plan", plan, *COST, "--fully-sharded")
    assert "times from the start of the forward" in out and "issued ms" in out
    assert rows == [["0", "all-gather", "0", "7000000", "0.000", "0.000", "8.000"],
                    ["1", "all-gather", "0", "7000000", "11.000", "11.000", "19.000"],
                    ["2", "reduce-scatter", "0", "7000000", "25.000", "25.000", "33.000"]]


def test_all_reduce_plans_are_named_all_reduce_in_json(capsys, files):
    path, folder = files
    plan = folder / "plan.json"
    Plan.from_groups(profile(), [[2], [1, 0]]).write(plan)
    document = json.loads(simulate_json(capsys, path, "--plan", plan, *COST))
    assert [m["kind"] for m in document["messages"]] == ["all-reduce", "all-reduce"]


def simulate_json(capsys, *argv) -> str:
    status = main(["simulate", *map(str, argv), "--json"])
    captured = capsys.readouterr()
    assert (status, captured.err) == (0, "")
    return captured.out
