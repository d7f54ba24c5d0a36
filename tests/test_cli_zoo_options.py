"""The zoo's compute options on the command line: --precision, --compute and --optimizer give
the profile fusionopt.zoo.profile gives with them, the workload line says which compute it is,
and each is refused in one line where it changes nothing or the zoo has no data."""

from __future__ import annotations

import json

import pytest

from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.cost import network
from fusionopt.model import Problem
from fusionopt.solvers import solve

NET = ["--workers", "64", "--network", "25gbe"]


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("flags, options, words", [
    ([], {}, "fp32, compute calibrated on measured steps"),
    (["--precision", "bf16"], {"precision": "bf16"}, "bf16, compute calibrated on measured steps"),
    (["--optimizer", "sgd"], {"optimizer": "sgd"}, "fp32, compute calibrated on measured steps, with SGD's update"),
    (["--compute", "roofline"], {"compute": "roofline"}, "roofline estimate"),
])
def test_compare_uses_the_zoo_profile_of_its_options(capsys, flags, options, words):
    status, out, err = run(capsys, "compare", "--model", "resnet50", *NET, "--methods", "dp", *flags, "--json")
    assert status == 0, err
    [row] = json.loads(out)
    expected = solve(Problem(zoo.profile("resnet50", **options), network("25gbe", workers=64)), "dp")
    assert row["iteration_time"] == expected.iteration_time
    status, out, _ = run(capsys, "compare", "--model", "resnet50", *NET, "--methods", "dp", *flags)
    assert status == 0 and out.splitlines()[0].startswith(f"workload  resnet50 on h100, batch 64 ({words})")


def test_profile_writes_the_zoo_profile_of_its_options(capsys, tmp_path):
    from fusionopt.model import Profile

    status, _, err = run(capsys, "profile", "--model", "resnet50", "--optimizer", "sgd", "--precision", "bf16",
                         "--output", tmp_path / "p.json")
    assert status == 0, err
    written, expected = Profile.read(tmp_path / "p.json"), zoo.profile("resnet50", optimizer="sgd", precision="bf16")
    assert written.update.tolist() == expected.update.tolist() and written.U > 0
    assert written.backward.tolist() == expected.backward.tolist()


@pytest.mark.parametrize("argv, message", [
    (["compare", "--profile", "PROFILE", *NET, "--precision", "bf16"],
     "--precision is for a zoo model and changes nothing with --profile"),
    (["compare", "--model", "resnet50", *NET, "--precision", "fp8"], "fp8"),
    (["compare", "--model", "lstm-lm", *NET, "--precision", "bf16"], "lstm-lm"),
    (["compare", "--model", "resnet50", *NET, "--compute", "roofline", "--precision", "bf16"], "roofline"),
    (["compare", "--model", "resnet50", *NET, "--compute", "measured"], "measured"),
    (["sweep", "--models", "resnet50", "--workers", "8", "--networks", "25gbe", "--output", "OUT",
      "--precision", "fp8"], "fp8"),
])
def test_options_the_zoo_cannot_honour_are_refused_in_one_line(capsys, tmp_path, argv, message):
    profile = tmp_path / "p.json"
    zoo.profile("alexnet").write(profile)
    out_file = tmp_path / "sweep.jsonl"
    status, out, err = run(capsys, *[str(profile) if a == "PROFILE" else str(out_file) if a == "OUT" else a
                                     for a in argv])
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and message in err, err
    assert not out_file.exists()


def test_sweep_runs_the_zoo_profile_of_its_options(capsys, tmp_path):
    path = tmp_path / "sweep.jsonl"
    status, _, err = run(capsys, "sweep", "--models", "resnet50", "--workers", "64", "--networks", "25gbe",
                         "--methods", "dp", "--precision", "bf16", "--optimizer", "sgd", "--output", path,
                         "--jobs", "1", "--no-progress")
    assert status == 0, err
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    options = {"precision": "bf16", "optimizer": "sgd"}
    expected = solve(Problem(zoo.profile("resnet50", **options), network("25gbe", workers=64)), "dp")
    assert record["iteration_time"] == expected.iteration_time
    assert (record["precision"], record["compute"], record["optimizer"]) == ("bf16", "calibrated", "sgd")
