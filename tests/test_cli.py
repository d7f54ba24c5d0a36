"""The ``fusionopt`` command line, driven in-process through ``fusionopt.cli.main``.

Numbers come from the MODEL.md section 5 worked example: three tensors of 4, 1 and 2 MB
(forward order), forward 1 ms each, backward 3, 2, 1 ms, so B = 6 ms and F = 3 ms.
With AlphaBeta(alpha, 1e-9) a message of S bytes costs alpha + S * 1e-9 seconds.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fusionopt
from fusionopt.cli import main
from fusionopt.solvers import default_methods

METHODS = default_methods()
AB3 = ["--alpha", "0.003", "--beta", "1e-9"]   # alpha = 3 ms
AB1 = ["--alpha", "0.001", "--beta", "1e-9"]   # alpha = 1 ms
RESNET_10GBE = ["--model", "resnet50", "--workers", "64", "--network", "10gbe"]


# ---------------------------------------------------------------------- helpers
def example_profile() -> fusionopt.model.Profile:
    """The MODEL.md worked example (tensors named t0, t1, t2)."""
    return fusionopt.model.Profile.from_arrays(
        [4e6, 1e6, 2e6], forward=[1e-3] * 3, backward=[3e-3, 2e-3, 1e-3])


def write_example_profile(path: Path) -> Path:
    """The worked example as a profile file; returns ``path``."""
    example_profile().write(path)
    return path


def write_plan(path: Path, groups: list[list[int]]) -> Path:
    """A plan of whole tensors of the worked example, messages in the given order."""
    fusionopt.model.Plan.from_groups(example_profile(), groups).write(path)
    return path


def write_json(path: Path, document) -> Path:
    path.write_text(json.dumps(document))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    """Run ``fusionopt ARGV`` in-process; returns (exit status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_json(capsys, *argv):
    """Run a command that ends in ``--json``, check it succeeded, parse its stdout."""
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    # Nothing on stderr but, on a slow host, the notice of a search still running after 1 s.
    assert all(": still searching, " in line for line in err.splitlines()), err
    return json.loads(out)


def run_error(capsys, *argv) -> str:
    """Run a command that must fail; check exit status 2, no stdout and exactly one line
    ``fusionopt: error: ...`` on stderr; return that line."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (status, out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    assert lines[0].startswith("fusionopt: error: ")
    return lines[0]


def plan_groups(plan_document: dict) -> list[list[int]]:
    """Forward indices of the tensors of each message of a plan JSON document."""
    return [[chunk[0] for chunk in message] for message in plan_document["messages"]]


@pytest.fixture
def profile_path(tmp_path) -> Path:
    return write_example_profile(tmp_path / "profile.json")


# ---------------------------------------------------------------------- methods
def test_methods_lists_every_method_with_its_description(capsys):
    status, out, err = run(capsys, "methods")
    assert status == 0 and err == ""
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    listing = fusionopt.solvers.methods()
    assert sorted(line.split()[0] for line in lines) == sorted(listing)
    assert set(METHODS) < set(listing) and {"dp", "brute", "cpsat", "milp"} <= set(listing)
    for line in lines:
        name = line.split()[0]
        description = line.strip()[len(name):].strip()
        assert description == listing[name]
        assert len(description) > 10
    # the descriptions start in one column
    assert len({line.index(listing[line.split()[0]]) for line in lines}) == 1
    # Grouped by family, each method under its own family's heading.
    headings = [line for line in out.splitlines() if not line.startswith("  ")]
    assert [h.split(" methods:")[0] for h in headings] == ["framework baseline", "paper", "search", "exact"]
    exact = out.split("exact methods:")[1].split("\n", 1)[1]
    assert {line.split()[0] for line in exact.splitlines() if line.strip()} == {
        "dp", "dp-apart", "brute", "cpsat", "milp", "ps-brute", "ps-dp", "ps-cpsat", "decoupled-brute",
        "decoupled-dp", "sharded-brute", "decoupled-cpsat"}


# ---------------------------------------------------------------------- solve
def test_solve_single_json_worked_example(capsys, profile_path):
    doc = run_json(capsys, "solve", profile_path, *AB3, "--method", "single", "--json")
    # one message of 7 MB at B = 6 ms: ends at 6 + 3 + 7 = 16 ms, plus F = 3 ms
    assert doc["iteration_time"] == pytest.approx(0.019, rel=1e-12)
    assert doc["messages"] == 1
    assert doc["method"] == "single"
    assert doc["exposed"] == pytest.approx(0.010, rel=1e-12)
    assert doc["lower_bound"] <= doc["iteration_time"]
    plan = doc["plan"]
    assert isinstance(plan, dict)
    assert plan["schema"] == "fusionopt.plan"
    assert plan_groups(plan) == [[2, 1, 0]]
    assert plan["messages"] == [[[2, 0, 2_000_000], [1, 0, 1_000_000], [0, 0, 4_000_000]]]


def test_solve_wfbp_json_at_alpha_1ms(capsys, profile_path):
    doc = run_json(capsys, "solve", profile_path, *AB1, "--method", "wfbp", "--json")
    assert doc["iteration_time"] == pytest.approx(0.014, rel=1e-12)
    assert doc["method"] == "wfbp"
    assert doc["messages"] == 3
    assert plan_groups(doc["plan"]) == [[2], [1], [0]]


def test_solve_default_method_is_wfbp(capsys, profile_path):
    doc = run_json(capsys, "solve", profile_path, *AB1, "--json")
    assert doc["method"] == "wfbp"
    assert doc["iteration_time"] == pytest.approx(0.014, rel=1e-12)


def test_solve_text_output(capsys, profile_path):
    status, out, err = run(capsys, "solve", profile_path, *AB3, "--method", "single")
    assert status == 0 and err == ""
    assert "method          single" in out
    assert "iteration time  19.000000 ms" in out
    assert "messages        1" in out
    assert "[t2, t1, t0]" in out


def test_solve_output_writes_a_readable_plan(capsys, profile_path, tmp_path):
    out_path = tmp_path / "plan.json"
    doc = run_json(capsys, "solve", profile_path, *AB3, "--method", "single",
                   "--output", out_path, "--json")
    plan = fusionopt.model.Plan.read(out_path)
    assert plan.groups() == [[2, 1, 0]]
    assert plan.to_dict() == doc["plan"]
    plan.validate(fusionopt.model.Profile.read(profile_path))


def test_solve_ddp_options(capsys, profile_path):
    doc = run_json(capsys, "solve", profile_path, *AB3, "--method", "ddp",
                   "--option", "bucket_cap_mb_list=[0.95, 4]", "--json")
    assert doc["method"] == "ddp"
    assert plan_groups(doc["plan"]) == [[2], [1, 0]]
    assert doc["messages"] == 2
    assert doc["iteration_time"] == pytest.approx(0.017, rel=1e-12)


def test_solve_ddp_default_options_differ_from_small_buckets(capsys, profile_path):
    # the 25 MiB default cap fuses tensors 1 and 0; a 0.95 MiB cap for every bucket does not
    doc = run_json(capsys, "solve", profile_path, *AB3, "--method", "ddp", "--json")
    small = run_json(capsys, "solve", profile_path, *AB3, "--method", "ddp",
                     "--option", "bucket_cap_mb=0.95", "--json")
    assert plan_groups(small["plan"]) == [[2], [1], [0]]
    assert plan_groups(doc["plan"]) != plan_groups(small["plan"])


def test_solve_cost_file(capsys, profile_path, tmp_path):
    cost = write_json(tmp_path / "cost.json", fusionopt.cost.AlphaBeta(3e-3, 1e-9).to_dict())
    doc = run_json(capsys, "solve", profile_path, "--cost", cost, "--method", "single", "--json")
    assert doc["iteration_time"] == pytest.approx(0.019, rel=1e-12)


# ---------------------------------------------------------------------- simulate
def test_simulate_ddp_plan(capsys, profile_path, tmp_path):
    plan = write_plan(tmp_path / "plan.json", [[2], [1, 0]])
    doc = run_json(capsys, "simulate", profile_path, "--plan", plan, *AB3, "--json")
    # t2 (2 MB) from 1 ms to 6 ms; t1+t0 (5 MB) from 6 ms to 14 ms; then F = 3 ms
    assert doc["iteration_time"] == pytest.approx(0.017, rel=1e-12)
    assert doc["compute_time"] == pytest.approx(0.009, rel=1e-12)
    assert doc["exposed"] == pytest.approx(0.008, rel=1e-12)
    assert doc["communication_end"] == pytest.approx(0.014, rel=1e-12)
    assert [m["bytes"] for m in doc["messages"]] == [2_000_000, 5_000_000]
    assert [m["start"] for m in doc["messages"]] == pytest.approx([0.001, 0.006], rel=1e-12)
    assert [m["end"] for m in doc["messages"]] == pytest.approx([0.006, 0.014], rel=1e-12)


@pytest.mark.parametrize("sync, expected", [("layerwise", 0.018), ("barrier", 0.019)])
def test_simulate_sync(capsys, profile_path, tmp_path, sync, expected):
    plan = write_plan(tmp_path / "plan.json", [[0], [2], [1]])
    doc = run_json(capsys, "simulate", profile_path, "--plan", plan, *AB1,
                   "--sync", sync, "--json")
    assert doc["iteration_time"] == pytest.approx(expected, rel=1e-12)


def test_simulate_default_sync_is_barrier(capsys, profile_path, tmp_path):
    plan = write_plan(tmp_path / "plan.json", [[0], [2], [1]])
    doc = run_json(capsys, "simulate", profile_path, "--plan", plan, *AB1, "--json")
    assert doc["iteration_time"] == pytest.approx(0.019, rel=1e-12)


def test_simulate_text_output(capsys, profile_path, tmp_path):
    plan = write_plan(tmp_path / "plan.json", [[2], [1, 0]])
    status, out, err = run(capsys, "simulate", profile_path, "--plan", plan, *AB3)
    assert status == 0 and err == ""
    assert "iteration time  17.000000 ms" in out
    assert "compute         9.000000 ms" in out
    assert "messages        2" in out
    # The timeline, message by message: t3 ready at 1 ms, 1 -> 6; t2 + t1 ready at 6, 6 -> 14.
    rows = [line.split() for line in out.splitlines()[-2:]]
    assert rows == [["0", "2000000", "1.000", "1.000", "6.000"], ["1", "5000000", "6.000", "6.000", "14.000"]]


def test_solve_output_round_trips_through_simulate(capsys, profile_path, tmp_path):
    out_path = tmp_path / "plan.json"
    solved = run_json(capsys, "solve", profile_path, *AB3, "--method", "horovod",
                      "--output", out_path, "--json")
    simulated = run_json(capsys, "simulate", profile_path, "--plan", out_path, *AB3, "--json")
    assert simulated["iteration_time"] == pytest.approx(solved["iteration_time"], rel=1e-12)


# ---------------------------------------------------------------------- compare
def parse_table(out: str) -> tuple[str, list[list[str]]]:
    """The header line and the cells of each row of the comparison table in ``out``."""
    lines = out.splitlines()
    header_at = next(k for k, line in enumerate(lines) if line.startswith("method"))
    assert set(lines[header_at + 1]) <= {"-", " "}
    body = lines[header_at + 2:]
    rows = [line.split() for line in body[:body.index("")] if line.strip()]   # a blank line ends it
    assert any(line.startswith("gap to bound:") for line in body)           # the footnote follows
    return lines[header_at], rows


def test_compare_table_on_resnet50(capsys):
    status, out, err = run(capsys, "compare", *RESNET_10GBE)
    assert status == 0 and err == ""
    assert "resnet50" in out and "161 tensors" in out
    header, rows = parse_table(out)
    for column in ("method", "T (ms)", "speedup", "exposed", "messages"):
        assert column in header
    assert [row[0] for row in rows] == METHODS
    by_method = {row[0]: row for row in rows}
    assert by_method["wfbp"][2] == "1.000x"
    assert by_method["wfbp"][4] == "161"
    assert by_method["single"][4] == "1"

    # the table shows the same figures as the JSON output
    doc = run_json(capsys, "compare", *RESNET_10GBE, "--json")
    for entry in doc:
        row = by_method[entry["method"]]
        assert row[1] == f"{1e3 * entry['iteration_time']:.3f}"
        assert row[2] == f"{entry['speedup']:.3f}x"
        assert row[3] == f"{1e3 * entry['exposed']:.3f}"
        assert row[4] == str(entry["messages"])


def test_compare_json_on_resnet50(capsys):
    doc = run_json(capsys, "compare", *RESNET_10GBE, "--json")
    assert [row["method"] for row in doc] == METHODS
    assert sorted(row["method"] for row in doc) == sorted(METHODS)
    by_method = {row["method"]: row for row in doc}
    reference = by_method["wfbp"]["iteration_time"]
    assert by_method["wfbp"]["speedup"] == 1.0
    for row in doc:
        assert row["speedup"] == pytest.approx(reference / row["iteration_time"], rel=1e-12)
        assert row["iteration_time"] > 0
        assert row["messages"] >= 1
    assert by_method["wfbp"]["messages"] == 161
    assert by_method["single"]["messages"] == 1
    # on 10 GbE with 64 workers, fusion pays: every other method beats WFBP
    assert all(row["speedup"] > 1.0 for row in doc if row["method"] != "wfbp")


def test_compare_methods_restricts_rows(capsys):
    doc = run_json(capsys, "compare", *RESNET_10GBE, "--methods", "wfbp,ddp", "--json")
    assert [row["method"] for row in doc] == ["wfbp", "ddp"]

    status, out, err = run(capsys, "compare", *RESNET_10GBE, "--methods", "wfbp,ddp")
    assert status == 0 and err == ""
    _, rows = parse_table(out)
    assert [row[0] for row in rows] == ["wfbp", "ddp"]


def test_compare_speedup_is_against_wfbp_even_when_not_listed(capsys, profile_path):
    doc = run_json(capsys, "compare", "--profile", profile_path, *AB3,
                   "--methods", "single", "--json")
    assert [row["method"] for row in doc] == ["single"]
    # WFBP at alpha 3 ms takes 20 ms, single 19 ms
    assert doc[0]["speedup"] == pytest.approx(0.020 / 0.019, rel=1e-12)


def test_compare_profile(capsys, profile_path):
    doc = run_json(capsys, "compare", "--profile", profile_path, *AB3, "--json")
    by_method = {row["method"]: row for row in doc}
    assert set(by_method) == set(METHODS)
    assert by_method["wfbp"]["iteration_time"] == pytest.approx(0.020, rel=1e-12)
    assert by_method["single"]["iteration_time"] == pytest.approx(0.019, rel=1e-12)
    assert by_method["single"]["speedup"] == pytest.approx(0.020 / 0.019, rel=1e-12)

    status, out, err = run(capsys, "compare", "--profile", profile_path, *AB3)
    assert status == 0 and err == ""
    assert str(profile_path) in out and "3 tensors" in out
    _, rows = parse_table(out)
    assert {row[0]: row[1] for row in rows}["wfbp"] == "20.000"


# ---------------------------------------------------------------------- zoo and profile
def test_zoo_lists_the_models_with_parameter_counts(capsys):
    status, out, err = run(capsys, "zoo")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert "parameters" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {
        "resnet18", "resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "alexnet",
        "googlenet", "bert-base", "bert-large", "gpt2", "gpt2-medium", "densenet121", "densenet201",
        "inception-v3", "mobilenet-v2", "vit-b16", "lstm-lm",
    }
    assert rows["resnet50"][1] == "25,557,032"
    assert rows["vgg16"][1] == "138,357,544"
    assert rows["googlenet"][1] == "6,624,904"
    assert rows["bert-base"][1] == "109,482,240"
    assert rows["resnet50"][2] == "161"
    assert rows["vgg16"][2] == "32"
    assert rows["bert-large"][1] == "335,141,888"
    assert rows["gpt2"][1] == "124,439,808"
    assert rows["densenet121"][1] == "7,978,856"
    assert rows["vit-b16"][1] == "86,567,656"


def test_profile_writes_a_zoo_profile(capsys, tmp_path):
    out_path = tmp_path / "vgg16.json"
    status, out, err = run(capsys, "profile", "--model", "vgg16", "--batch", "32", "--output", out_path)
    assert status == 0 and err == ""
    assert str(out_path) in out
    profile = fusionopt.model.Profile.read(out_path)
    assert profile.n == 32
    assert profile.total_bytes == 4 * 138_357_544
    assert profile.metadata["batch"] == 32
    assert profile.B > 0 and profile.F > 0


def test_profile_batch_scales_the_compute(capsys, tmp_path):
    run(capsys, "profile", "--model", "vgg16", "--batch", "32", "--output", tmp_path / "b32.json")
    run(capsys, "profile", "--model", "vgg16", "--batch", "64", "--output", tmp_path / "b64.json")
    b32 = fusionopt.model.Profile.read(tmp_path / "b32.json")
    b64 = fusionopt.model.Profile.read(tmp_path / "b64.json")
    assert b64.B > b32.B
    assert b64.total_bytes == b32.total_bytes


def test_profile_without_output_prints_json(capsys):
    status, out, err = run(capsys, "profile", "--model", "resnet50", "--batch", "8")
    assert status == 0 and err == ""
    profile = fusionopt.model.Profile.from_dict(json.loads(out))
    assert profile.n == 161
    assert profile.total_bytes == 4 * 25_557_032


# ---------------------------------------------------------------------- errors
def test_error_unknown_command(capsys):
    line = run_error(capsys, "frobnicate")
    assert "'frobnicate'" in line


def test_no_command_prints_the_usage_with_every_command(capsys):
    # What --help prints, on stderr with exit status 2: argparse's status for a missing
    # required argument, so a script that forgot its command fails.
    status, out, err = run(capsys)
    assert (status, out) == (2, "")
    help_status, help_text, _ = run(capsys, "--help")
    assert help_status == 0 and err == help_text
    for command in ("methods", "solve", "simulate", "compare", "advise", "zoo", "profile", "run", "sweep", "plot"):
        assert f"\n    {command} " in err or f"\n    {command}\n" in err, command
    status, out, err = run(capsys, "plot")
    assert (status, out) == (2, "") and err == run(capsys, "plot", "--help")[1]
    assert "timeline" in err and "sweep" in err


def test_a_scheduler_that_is_not_an_address_names_the_flag_and_the_forms(capsys, tmp_path):
    pytest.importorskip("distributed")
    line = run_error(capsys, "sweep", "--models", "alexnet", "--workers", "8", "--networks", "10gbe",
                     "--methods", "wfbp", "--output", tmp_path / "cells.jsonl", "--scheduler", "banana",
                     "--no-progress")
    assert line.startswith("fusionopt: error: --scheduler banana: not a Dask scheduler address")
    assert "SCHEME://HOST:PORT" in line and "tcp" in line


def test_counts_of_one_are_singular(capsys, profile_path, tmp_path):
    status, out, _ = run(capsys, "advise", "--profile", profile_path, *AB3, "--method", "single")
    assert status == 0
    assert "plan      single: T = 19.000 ms, 1 message\n" in out         # one message: MODEL.md section 5
    assert "(1 bucket, the plan's)" in out
    # Twenty-one messages: twenty shown, one more.
    many = tmp_path / "many.json"
    fusionopt.model.Profile.from_arrays([1e6] * 21, forward=[1e-3] * 21, backward=[1e-3] * 21).write(many)
    status, out, _ = run(capsys, "solve", many, *AB1)
    assert status == 0 and out.endswith("  ... 1 more message (use --json for all)\n")
    fusionopt.model.Plan.per_tensor(fusionopt.model.Profile.read(many)).write(tmp_path / "plan.json")
    status, out, _ = run(capsys, "simulate", many, "--plan", tmp_path / "plan.json", *AB1)
    assert status == 0 and out.endswith("  ... 1 more message (use --json for all)\n")
    one = tmp_path / "one.json"
    fusionopt.model.Profile.from_arrays([1e6], forward=[1e-3], backward=[1e-3]).write(one)
    status, out, _ = run(capsys, "compare", "--profile", one, *AB1, "--methods", "wfbp")
    assert status == 0 and out.startswith(f"workload  {one}: 1 tensor, ")


def test_error_unknown_method(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--method", "nope")
    assert "'nope'" in line
    for name in METHODS:
        assert name in line


def test_error_unknown_method_in_compare(capsys, profile_path):
    line = run_error(capsys, "compare", "--profile", profile_path, *AB3, "--methods", "wfbp,nope")
    assert "'nope'" in line


def test_error_unknown_option(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--method", "ddp", "--option", "foo=1")
    assert "'foo'" in line
    assert "bucket_cap_mb_list" in line  # lists the options it does take


@pytest.mark.parametrize("pair", ["foo", "=3"])
def test_error_malformed_option(capsys, profile_path, pair):
    line = run_error(capsys, "solve", profile_path, *AB3, "--method", "ddp", "--option", pair)
    assert "KEY=VALUE" in line
    assert repr(pair) in line


def test_error_bad_option_value(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--method", "ddp",
                     "--option", "bucket_cap_mb=-5")
    assert "bucket_cap_mb must be a positive" in line


def test_error_malformed_profile_json(capsys, tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema": "fusionopt.profile", "version": 1,\n')
    line = run_error(capsys, "solve", bad, *AB3)
    assert str(bad) in line
    assert "malformed JSON" in line


def test_error_a_folder_for_a_file_names_it(capsys, tmp_path):
    line = run_error(capsys, "solve", tmp_path, *AB3)
    assert line.endswith(f"{tmp_path}: a folder, not a file") and "Errno" not in line


def test_error_profile_not_utf8_names_the_file(capsys, tmp_path):
    bad = tmp_path / "binary.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    line = run_error(capsys, "solve", bad, *AB3)
    assert str(bad) in line


def test_error_missing_profile(capsys, tmp_path):
    missing = tmp_path / "missing.json"
    line = run_error(capsys, "solve", missing, *AB3)
    assert str(missing) in line
    assert "no such file" in line


def test_error_missing_plan(capsys, profile_path, tmp_path):
    missing = tmp_path / "no_plan.json"
    line = run_error(capsys, "simulate", profile_path, "--plan", missing, *AB3)
    assert str(missing) in line


def test_error_profile_is_a_directory(capsys, tmp_path):
    line = run_error(capsys, "solve", tmp_path, *AB3)
    assert str(tmp_path) in line


def test_error_profile_path_through_a_file(capsys, profile_path):
    bad = profile_path / "profile.json"
    line = run_error(capsys, "solve", bad, *AB3)
    assert str(bad) in line


@pytest.mark.parametrize("value, word", [(float("nan"), "NaN"), (-1.0, "negative")])
def test_error_profile_bad_time_names_the_tensor(capsys, profile_path, tmp_path, value, word):
    doc = json.loads(profile_path.read_text())
    doc["tensors"][1]["name"] = "layer1.weight"
    doc["tensors"][1]["backward"] = value
    bad = tmp_path / "bad_time.json"
    bad.write_text(json.dumps(doc))          # json writes NaN, which json reads back
    line = run_error(capsys, "solve", bad, *AB3)
    assert "'layer1.weight'" in line
    assert "backward" in line
    assert word in line
    assert str(bad) in line


def test_error_profile_missing_field(capsys, tmp_path):
    bad = write_json(tmp_path / "nosize.json", {
        "schema": "fusionopt.profile", "version": 1,
        "tensors": [{"name": "fc.bias", "forward": 1e-3, "backward": 1e-3}]})
    line = run_error(capsys, "solve", bad, *AB3)
    assert "'fc.bias'" in line and "'size'" in line


def test_error_plan_misses_bytes(capsys, profile_path, tmp_path):
    plan = write_json(tmp_path / "short_plan.json", {
        "schema": "fusionopt.plan", "version": 1,
        "messages": [[[2, 0, 2_000_000]], [[1, 0, 1_000_000], [0, 0, 3_000_000]]]})
    line = run_error(capsys, "simulate", profile_path, "--plan", plan, *AB3)
    assert "'t0'" in line
    assert "[3000000, 4000000)" in line
    assert "missing" in line


def test_error_plan_is_a_profile(capsys, profile_path):
    line = run_error(capsys, "simulate", profile_path, "--plan", profile_path, *AB3)
    assert str(profile_path) in line
    assert "fusionopt.plan" in line


def test_error_no_cost(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path)
    assert "--alpha" in line and "--network" in line


def test_error_two_costs(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--network", "10gbe", "--workers", "4")
    assert "exactly one cost" in line


@pytest.mark.parametrize("given", [["--alpha", "0.003"], ["--beta", "1e-9"]])
def test_error_alpha_without_beta(capsys, profile_path, given):
    line = run_error(capsys, "solve", profile_path, *given)
    assert "--alpha and --beta go together" in line


def test_error_network_without_workers(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, "--network", "10gbe")
    assert "--workers" in line


def test_error_unknown_network(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, "--network", "carrier-pigeon", "--workers", "4")
    assert "'carrier-pigeon'" in line
    assert "10gbe" in line


def test_error_bad_workers(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, "--network", "10gbe", "--workers", "0")
    assert "workers" in line


def test_error_unknown_algorithm(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, "--network", "10gbe", "--workers", "4",
                     "--algorithm", "gossip")
    assert "'gossip'" in line


@pytest.mark.parametrize("command", [
    ["profile", "--model", "resnet34"],
    ["compare", "--model", "resnet34", "--network", "10gbe", "--workers", "4"],
])
def test_error_unknown_zoo_model(capsys, command):
    line = run_error(capsys, *command)
    assert "'resnet34'" in line
    assert "resnet50" in line


def test_error_unknown_device(capsys):
    line = run_error(capsys, "profile", "--model", "vgg16", "--device", "tpu")
    assert "'tpu'" in line


def test_error_compare_needs_model_or_profile(capsys):
    line = run_error(capsys, "compare", *AB3)
    assert "--model" in line and "--profile" in line


def test_error_compare_with_model_and_profile(capsys, profile_path):
    line = run_error(capsys, "compare", "--model", "resnet50", "--profile", profile_path, *AB3)
    assert "exactly one of --model" in line


@pytest.mark.parametrize("flag, value", [("--alpha", "abc"), ("--beta", "fast")])
def test_error_cost_not_a_number(capsys, profile_path, flag, value):
    argv = {"--alpha": "0.003", "--beta": "1e-9"}
    argv[flag] = value
    line = run_error(capsys, "solve", profile_path, "--alpha", argv["--alpha"], "--beta", argv["--beta"])
    assert flag in line
    assert repr(value) in line


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_error_cost_out_of_range(capsys, profile_path, value):
    line = run_error(capsys, "solve", profile_path, "--alpha", value, "--beta", "1e-9")
    assert "alpha" in line


def test_error_bad_sync(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--sync", "sometimes")
    assert "--sync" in line and "'sometimes'" in line


def test_error_output_folder_missing_names_the_output(capsys, profile_path, tmp_path):
    out_path = tmp_path / "no_such_folder" / "plan.json"
    line = run_error(capsys, "solve", profile_path, *AB3, "--output", out_path)
    assert str(out_path) in line


def test_error_output_below_a_file(capsys, profile_path):
    line = run_error(capsys, "solve", profile_path, *AB3, "--output", profile_path / "plan.json")
    assert "plan.json" in line


def test_compare_zero_iteration_time_does_not_crash(capsys, tmp_path):
    # valid profile (compute times >= 0) and valid cost (alpha = beta = 0): every T is 0
    zero = tmp_path / "zero.json"
    fusionopt.model.Profile.from_arrays([8], forward=[0.0], backward=[0.0]).write(zero)
    status, out, err = run(capsys, "compare", "--profile", zero, "--alpha", "0", "--beta", "0")
    assert status == 0 and err == ""
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in METHODS}
    assert set(rows) == set(METHODS)
    for cells in rows.values():
        assert cells[1:3] == ["0.000", "1.000x"]   # every step takes 0 ms, as fast as WFBP


# ---------------------------------------------------------------------- the installed command
def test_console_script_entry_point():
    entry = [ep for ep in importlib.metadata.entry_points(group="console_scripts")
             if ep.name == "fusionopt"]
    assert len(entry) == 1 and entry[0].value == "fusionopt.cli:main"
    assert entry[0].load() is main


def test_command_runs_as_a_subprocess(tmp_path):
    profile_path = write_example_profile(tmp_path / "profile.json")
    command = [sys.executable, "-m", "fusionopt.cli"]
    done = subprocess.run(command + ["solve", str(profile_path), *AB3, "--method", "single", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)["iteration_time"] == pytest.approx(0.019, rel=1e-12)

    # the exit status of main reaches the shell
    failed = subprocess.run(command + ["solve", str(profile_path), *AB3, "--method", "nope"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2
    assert failed.stdout == ""
    assert failed.stderr.startswith("fusionopt: error: ") and len(failed.stderr.splitlines()) == 1


# ---------------------------------------------------------------------- model extensions
def test_extension_flags_reach_the_simulator(capsys, profile_path, tmp_path):
    # Contention 2, alpha 1 ms, WFBP on the worked example: 16.5 ms (tests/model/test_extensions.py).
    plan = tmp_path / "wfbp.json"
    fusionopt.model.Plan.per_tensor(fusionopt.model.Profile.read(profile_path)).write(plan)
    doc = run_json(capsys, "simulate", profile_path, "--plan", plan, "--alpha", "0.001", "--beta", "1e-9",
                   "--contention", "2", "--json")
    assert doc["iteration_time"] == pytest.approx(0.0165, rel=1e-12)
    doc = run_json(capsys, "solve", profile_path, "--alpha", "0.003", "--beta", "1e-9", "--method", "ddp",
                   "--option", "bucket_cap_mb_list=[0.95, 4]",
                   "--copy-cost", "1e-9", "--json")
    assert doc["iteration_time"] == pytest.approx(0.022, rel=1e-12)   # {t3}, {t2, t1} packed: 22 ms
    assert "contention must be >= 1" in run_error(capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9",
                                                 "--contention", "0.5")
    assert "dp applies to the plain model only, and this problem has channels on" in run_error(
        capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9", "--channels", "2", "--method", "dp")


def test_compare_leaves_out_plain_model_methods_on_extended_problems(capsys, profile_path):
    doc = run_json(capsys, "compare", "--profile", profile_path, "--alpha", "0.001", "--beta", "1e-9",
                   "--channels", "2", "--json")
    assert [row["method"] for row in doc] == [m for m in METHODS if m != "dp"]


def test_cpsat_on_two_channels_from_the_command_line(capsys, profile_path):
    # MODEL.md section 5 with alpha = 3 ms on two channels: 16 ms is optimal
    # (tests/solvers/test_cpsat_channels.py works it out).
    doc = run_json(capsys, "solve", profile_path, "--alpha", "0.003", "--beta", "1e-9", "--channels", "2",
                   "--method", "cpsat", "--option", "workers=1", "--json")
    assert doc["iteration_time"] == pytest.approx(0.016, rel=1e-9)
    assert doc["status"] == "OPTIMAL"
    assert "contention" in run_error(capsys, "solve", profile_path, "--alpha", "0.003", "--beta", "1e-9",
                                     "--channels", "2", "--contention", "1.5", "--method", "cpsat")


def test_long_messages_are_abbreviated_in_text_output(capsys, tmp_path):
    path = tmp_path / "many.json"
    fusionopt.model.Profile.from_arrays([1000] * 9, [1e-4] * 9, [1e-4] * 9).write(path)
    status, out, _ = run(capsys, "solve", path, "--alpha", "1", "--beta", "0", "--method", "single")
    assert status == 0
    line = next(text for text in out.splitlines() if " B  [" in text)
    assert line.endswith("[t8, t7, t6, t5, ... (9 tensors, t0 last)]")


def test_parameter_server_from_the_command_line(capsys, tmp_path):
    common = ("--model", "resnet50", "--device", "k80", "--batch", "32", "--network", "10gbe", "--workers", "8",
              "--ps-servers", "8", "--ps-colocated", "--sync", "layerwise")
    doc = run_json(capsys, "compare", *common, "--json")
    assert [row["method"] for row in doc] == ["ps-default", "ps-layer", "ibatch", "ipart", "ps-dp"]
    by_method = {row["method"]: row for row in doc}
    assert by_method["ps-default"]["speedup"] == 1.0
    # iPart is never slower than the default PS or layer by layer (tests/solvers/test_ipart.py).
    assert by_method["ipart"]["iteration_time"] <= by_method["ps-layer"]["iteration_time"]
    profile = tmp_path / "resnet50.json"
    run(capsys, "profile", "--model", "resnet50", "--device", "k80", "--batch", "32", "--output", profile)
    status, out, err = run(capsys, "solve", profile, "--network", "10gbe", "--workers", "8", "--ps-servers", "8",
                           "--method", "ps-default")
    assert status == 0 and err == ""
    assert "  push 1, pull 1 (use --json for all)" in out
    assert "cannot be combined with --copy-cost, --contention or --channels" in run_error(
        capsys, "solve", profile, "--alpha", "1e-3", "--beta", "1e-9", "--ps-servers", "2", "--channels", "2")
    assert "--network needs --workers" in run_error(capsys, "solve", profile, "--network", "10gbe", "--ps-servers", "2")
    assert "is an all-reduce method and this problem is a parameter-server problem" in run_error(
        capsys, "solve", profile, "--alpha", "1e-3", "--beta", "1e-9", "--ps-servers", "2", "--method", "dp")


# ---------------------------------------------------------------------- advise
def test_advise_prints_ddp_and_horovod_settings_with_their_own_times(capsys, profile_path):
    doc = run_json(capsys, "advise", "--profile", profile_path, *AB3, "--json")
    assert doc["method"] == "dp"
    ddp = doc["ddp"]
    assert ddp["buckets"] == [[2], [1, 0]] and ddp["bucket_cap_mb_list"] == [1.0, 1.0]
    solved = run_json(capsys, "solve", profile_path, *AB3, "--method", "ddp",
                      *[f"--option={k}={json.dumps(v)}" for k, v in ddp["arguments"].items()], "--json")
    assert ddp["iteration_time"] == solved["iteration_time"]
    assert ddp["cap_iteration_time"] <= ddp["default_iteration_time"]
    assert doc["horovod"]["environment"]["HOROVOD_FUSION_THRESHOLD"] == str(doc["horovod"]["fusion_threshold_bytes"])
    status, out, err = run(capsys, "advise", *RESNET_10GBE)
    assert status == 0, err
    assert "bucket_cap_mb_list=[" in out and "HOROVOD_CYCLE_TIME=" in out and "plan      dp: T =" in out
    assert "find_unused_parameters=True" in out
    assert "give exactly one of --model" in run_error(capsys, "advise", *AB3)
    assert "unknown method" in run_error(capsys, "advise", "--profile", profile_path, *AB3, "--method", "nope")


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, capsys):
    profile = tmp_path / "alexnet.json"
    assert run(capsys, "profile", "--model", "alexnet", "--output", profile)[0] == 0
    before = profile.read_bytes()
    status, _, err = run(capsys, "solve", profile, "--alpha", "1e-3", "--beta", "1e-9", "--output", profile)
    assert status == 2 and err == (f"fusionopt: error: --output {profile} is the profile file itself: writing it "
                                   "would lose the input; give another file\n")
    status, _, err = run(capsys, "profile", "--input", profile, "--output", profile)
    assert status == 2 and "is the --input file itself" in err
    assert profile.read_bytes() == before
    # Every file a command reads is kept, whichever flag names it.
    contention = tmp_path / "contention.json"
    contention.write_text(json.dumps({"contention": 1.2, "comm_contention": 1.1}))
    status, _, err = run(capsys, "solve", profile, "--alpha", "1e-3", "--beta", "1e-9", "--contention-file",
                         contention, "--output", contention)
    assert status == 2 and f"--output {contention} is the --contention-file file itself" in err
    plan = tmp_path / "plan.svg"
    plan.write_text("{}")
    status, _, err = run(capsys, "plot", "timeline", "--profile", profile, "--alpha", "1e-3", "--beta", "1e-9",
                         "--plan", plan, "--output", plan)
    assert status == 2 and "is the --plan file itself" in err and plan.read_text() == "{}"


def test_an_output_replaces_only_a_file_fusionopt_wrote_of_its_kind(tmp_path, capsys):
    profile = write_example_profile(tmp_path / "profile.json")
    plan, notes, empty = tmp_path / "plan.json", tmp_path / "notes.json", tmp_path / "empty.json"
    # A plan replaces a plan, or an empty file (made ready for it, as mktemp does).
    empty.touch()
    for output in (plan, plan, empty):
        assert run(capsys, "solve", profile, *AB3, "--output", output)[0] == 0
        assert plan_groups(json.loads(output.read_text())) == [[2], [1], [0]]    # wfbp: each tensor when ready
    # Any other file is the user's: kept, and the command refused before any work.
    notes.write_text('{"runs": 3}')
    for output, what in ((notes, "a file fusionopt did not write"), (profile, "a profile")):
        before = output.read_bytes()
        line = run_error(capsys, "solve", write_example_profile(tmp_path / "input.json"), *AB3, "--output", output)
        assert line == (f"fusionopt: error: --output {output} exists and is {what}, not a plan: writing it would "
                        "lose it; give another file, or remove it first")
        assert output.read_bytes() == before
    # A profile replaces a profile, JSON or CSV, not a plan.
    for output in (tmp_path / "p.json", tmp_path / "p.csv"):
        for _ in range(2):
            assert run(capsys, "profile", "--input", profile, "--output", output)[0] == 0
    assert run_error(capsys, "profile", "--input", profile, "--output", plan).endswith(
        "exists and is a plan, not a profile: writing it would lose it; give another file, or remove it first")
    # A calibration replaces one of its kind only: a reducer's is not a cost sweep's.
    cost = write_json(tmp_path / "cost.json", fusionopt.cost.AlphaBeta(1e-5, 1e-9).to_dict())
    assert run_error(capsys, "calibrate", "--reducer", "ddp", "--output", cost).endswith(
        f"--output {cost} exists and is a cost calibration, not a reducer calibration: writing it would lose it; "
        "give another file, or remove it first")
    assert "is a plan, not a cost calibration" in run_error(capsys, "calibrate", "--output", plan)


def test_a_plot_replaces_only_an_image_fusionopt_drew(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    profile = write_example_profile(tmp_path / "profile.json")
    png, svg, photo = tmp_path / "t.png", tmp_path / "t.svg", tmp_path / "photo.png"
    for _ in range(2):
        assert run(capsys, "plot", "timeline", "--profile", profile, *AB3, "--output", png, "--output", svg)[0] == 0
    # An image drawn elsewhere (here by matplotlib itself, without fusionopt's name) is the user's.
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    Figure().savefig(photo)
    before = photo.read_bytes()
    assert run_error(capsys, "plot", "timeline", "--profile", profile, *AB3, "--output", png, "--output",
                     photo) == (f"fusionopt: error: --output {photo} exists and is a file fusionopt did not write, "
                                "not an image: writing it would lose it; give another file, or remove it first")
    assert photo.read_bytes() == before


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--iterations", "0"], "argument --iterations: must be a whole number >= 1, got '0'"),
    (["calibrate", "--ranks", "0"], "argument --ranks: must be a whole number >= 1, got '0'"),
    (["solve", "{profile}", "--network", "10gbe", "--workers", "8", "--ps-servers", "2", "--method",
      "ps-dp", "--algorithm", "bogus"], "--algorithm bogus names an all-reduce algorithm; a parameter server's"),
    (["solve", "{profile}", "--network", "10gbe", "--workers", "8", "--ps-servers", "2", "--method",
      "ipart", "--ps-delta", "0.5"], "--ps-delta is the overhead of each compute piece and goes with "
                                     "--ps-partition-compute"),
    (["compare", "--model", "alexnet", "--alpha", "1e-3", "--beta", "1e-9", "--workers", "8"],
     "--workers sets --network's worker count and changes nothing with --alpha/--beta"),
    (["compare", "--model", "alexnet", "--alpha", "1e-3", "--beta", "1e-9", "--algorithm", "tree"],
     "--algorithm chooses --network's all-reduce and goes with --network"),
    (["compare", "--profile", "{profile}", "--device", "v100", "--network", "10gbe", "--workers", "8"],
     "--device is for a zoo model and changes nothing with --profile"),
    (["compare", "--model", "alexnet", "--network", "10gbe", "--workers", "8", "--copy-on", "compute"],
     "--copy-on says where packing runs and goes with --copy-cost GAMMA"),
    (["compare", "--model", "alexnet", "--network", "10gbe", "--workers", "8", "--ps-colocated"],
     "--ps-colocated is a parameter-server option and goes with --ps-servers K"),
    (["compare", "--model", "alexnet", "--network", "10gbe", "--workers", "8", "--methods", ","],
     "--methods needs at least one comma-separated value"),
    (["solve", "{profile}", "--alpha", "1e-3", "--beta", "1e-9", "--option", "cap=1", "--option", "cap=2"],
     "--option cap is given twice"),
    (["solve", "{profile}", "--alpha", "1e-3", "--beta", "1e-9", "--output", "plan.csv"],
     "--output plan.csv: the plan is written as JSON: give a .json file name"),
    (["profile", "--model", "alexnet", "--output", "alexnet.txt"],
     "--output alexnet.txt: a profile is written as JSON or CSV"),
    (["profile", "--input", "{profile}", "--batch", "32"],
     "--batch is for a zoo model and changes nothing with --input"),
    (["advise", "--model", "alexnet", "--network", "10gbe", "--workers", "8", "--method", "p3", "--sync", "layerwise"],
     "method 'p3' gives a plan that is not a fusion plan"),
])
def test_options_that_would_change_nothing_are_refused(tmp_path, capsys, argv, message):
    profile = tmp_path / "alexnet.json"
    assert run(capsys, "profile", "--model", "alexnet", "--output", profile)[0] == 0
    status, out, err = run(capsys, *[a.replace("{profile}", str(profile)) for a in argv])
    assert status == 2 and out == "" and message in err and err.count("\n") == 1


def test_compare_refuses_a_string_of_methods():
    from fusionopt import zoo
    from fusionopt.cost import AlphaBeta
    from fusionopt.model import Problem
    from fusionopt.solvers import compare

    problem = Problem(zoo.profile("alexnet"), AlphaBeta(1e-3, 1e-9))
    with pytest.raises(ValueError, match=r"methods must be a list of method names, got the string 'dp' \(write \['dp'\]\)"):
        compare(problem, "dp")


def test_negative_numbers_reach_their_check_and_versions_print(tmp_path, capsys):
    profile = tmp_path / "alexnet.json"
    assert run(capsys, "profile", "--model", "alexnet", "--output", profile)[0] == 0
    status, _, err = run(capsys, "solve", profile, "--alpha", "-1e-3", "--beta", "1e-9")
    assert status == 2 and err == "fusionopt: error: alpha must be >= 0, got -0.001\n"
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out == f"fusionopt {fusionopt.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "fusionopt", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == f"fusionopt {fusionopt.__version__}\n"


def test_an_output_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys):
    missing = tmp_path / "no-such-folder" / "alexnet.json"
    status, _, err = run(capsys, "profile", "--model", "alexnet", "--output", missing)
    assert status == 2 and err == f"fusionopt: error: --output {missing}: folder {missing.parent} does not exist\n"
    folder = tmp_path / "taken.json"
    folder.mkdir()
    status, _, err = run(capsys, "profile", "--model", "alexnet", "--output", folder)
    assert status == 2 and err == f"fusionopt: error: --output {folder} is a folder: give a file name\n"
    # A search's plan is not computed for an output it could not write (it was lost at the end).
    profile = tmp_path / "alexnet.json"
    assert run(capsys, "profile", "--model", "alexnet", "--output", profile)[0] == 0
    status, out, err = run(capsys, "solve", profile, "--network", "10gbe", "--workers", "8",
                           "--method", "gradssa", "--output", missing)
    assert status == 2 and out == "" and "does not exist" in err


def test_methods_lists_each_methods_options(capsys):
    status, out, _ = run(capsys, "methods", "--options")
    lines = out.splitlines()
    ddp = lines.index(next(line for line in lines if line.startswith("  ddp ")))
    assert status == 0 and "--option bucket_cap_mb=...  (default None)" in lines[ddp + 1]
    assert any("--option time_limit=...  (default 10.0)" in line for line in lines)     # cpsat
    assert "(no options)" in lines[lines.index(next(line for line in lines if line.startswith("  wfbp "))) + 1]
    usbyte = lines.index(next(line for line in lines if line.startswith("  usbyte ")))
    takes = next(line for line in lines[usbyte + 1:] if "takes:" in line)
    assert takes.strip() == "takes: all-reduce; plain model only; layerwise sync only"


def test_a_long_search_says_how_long_it_may_take(tmp_path, capsys):
    # GradSSA on DenseNet-201 (604 tensors) with more iterations than 2 s allow runs to its
    # 2 s limit on any host: after a second, one line.
    profile = tmp_path / "densenet.json"
    assert run(capsys, "profile", "--model", "densenet201", "--device", "v100", "--output", profile)[0] == 0
    status, _, err = run(capsys, "solve", profile, "--network", "100gb-ib", "--workers", "64", "--method", "gradssa",
                         "--option", "time_limit=2", "--option", "iterations=1000000")
    assert status == 0 and err == "fusionopt: gradssa: still searching, up to 2 s in all (--option time_limit=S to change)\n"
    status, _, err = run(capsys, "solve", profile, "--network", "100gb-ib", "--workers", "64", "--method", "dp")
    assert status == 0 and err == ""                        # done within a second: nothing to say


def test_decoupled_problems_from_the_command_line(capsys, tmp_path, profile_path):
    # MODEL.md section 5's profile, each half 1 ms + 1 ns/B: the unfused schedule takes 24 ms
    # under barrier sync and brute force finds 22 ms (per-tensor reduce-scatters, one gather).
    doc = run_json(capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9", "--decoupled",
                   "--method", "decoupled-brute", "--json")
    assert doc["iteration_time"] == pytest.approx(0.022, rel=1e-12) and doc["status"] == "OPTIMAL"
    assert doc["plan"]["schema"] == "fusionopt.decoupledplan" and doc["plan"]["order"] == [0, 0, 0, 1]
    plan = tmp_path / "plan.json"
    assert run(capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9", "--decoupled",
               "--method", "decoupled-wfbp", "--output", plan)[0] == 0
    again = run_json(capsys, "simulate", profile_path, "--plan", plan, "--alpha", "0.001", "--beta", "1e-9",
                     "--decoupled", "--json")
    assert again["iteration_time"] == pytest.approx(0.024, rel=1e-12) and len(again["messages"]) == 6
    rows = run_json(capsys, "compare", "--profile", profile_path, "--alpha", "0.001", "--beta", "1e-9",
                    "--decoupled", "--json")
    assert [r["method"] for r in rows] == ["decoupled-wfbp", "megatron", "zero2", "decoupled-opt", "decoupled-dp"]
    assert "goes with --decoupled" in run_error(capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9",
                                                "--update-after-gather")
    assert "is a decoupled method" in run_error(capsys, "solve", profile_path, "--alpha", "0.001",
                                                           "--beta", "1e-9", "--method", "megatron")


def test_decoupled_options_are_never_ignored(capsys, profile_path):
    assert "--ps-delta is a parameter-server option and goes with --ps-servers K" in run_error(
        capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9", "--decoupled", "--ps-delta", "0.5")
    assert "--decoupled: advise takes --pattern zero2" in run_error(
        capsys, "advise", "--model", "resnet18", "--network", "10gbe", "--workers", "8", "--decoupled")
    assert "--update-after-gather is a decoupled all-reduce option and goes with --decoupled" in run_error(
        capsys, "plot", "timeline", "--model", "resnet18", "--network", "10gbe", "--workers", "8",
        "--update-after-gather", "--output", "t.png")


def test_fully_sharded_problems_from_the_command_line(capsys, tmp_path, profile_path):
    # MODEL.md section 5's profile, each collective 1 ms + 1 ns/B: brute force keeps a unit per
    # tensor whole (22 ms, 11 MB at the peak); a 10 MB cap makes it reshard the middle unit (27 ms).
    cost = ["--alpha", "0.001", "--beta", "1e-9", "--fully-sharded"]
    doc = run_json(capsys, "solve", profile_path, *cost, "--method", "sharded-brute", "--json")
    assert doc["iteration_time"] == pytest.approx(0.022, rel=1e-12) and doc["status"] == "OPTIMAL"
    assert doc["plan"]["schema"] == "fusionopt.shardedplan" and doc["plan"]["bounds"] == [0, 1, 2, 3]
    capped = run_json(capsys, "solve", profile_path, *cost, "--memory-cap", "10MB", "--method", "sharded-brute",
                      "--json")
    assert capped["iteration_time"] == pytest.approx(0.027, rel=1e-12) and capped["plan"]["reshard"] == [False, True, False]
    plan = tmp_path / "plan.json"
    assert run(capsys, "solve", profile_path, *cost, "--method", "sharded-wfbp", "--output", plan)[0] == 0
    again = run_json(capsys, "simulate", profile_path, "--plan", plan, *cost, "--json")
    assert len(again["messages"]) == 9 and again["messages"][0]["kind"] == "all-gather"
    capped = run_json(capsys, "simulate", profile_path, "--plan", plan, *cost, "--memory-cap", "1MB", "--json")
    assert capped["memory_cap"] == 1e6 and capped["over_memory_cap"] == capped["peak_memory"] - 1e6 > 0
    status, out, _ = run(capsys, "simulate", profile_path, "--plan", plan, *cost, "--memory-cap", "1MB")
    assert status == 0 and "over the cap of 0.954 MiB: infeasible" in out
    assert again["peak_memory"] == simulate_peak(plan)
    status, out, _ = run(capsys, "compare", "--profile", profile_path, *cost, "--memory-cap", "10MB")
    assert status == 0 and "peak (MiB)" in out and "memory cap 9.5 MiB" in out
    assert "goes with --fully-sharded" in run_error(capsys, "solve", profile_path, "--alpha", "0.001", "--beta", "1e-9",
                                                    "--memory-cap", "1GB")
    assert "--memory-cap: '8 parsecs' is not a size" in run_error(capsys, "solve", profile_path, *cost,
                                                                   "--memory-cap", "8 parsecs")
    assert "--fully-sharded and --decoupled are two patterns" in run_error(capsys, "solve", profile_path, *cost,
                                                                             "--decoupled")
    assert "--sync does not apply to --fully-sharded" in run_error(capsys, "solve", profile_path, *cost,
                                                                    "--sync", "layerwise")
    # Two channels (the all-gathers and the reduce-scatters sharing the bandwidth): never below
    # the bound, and refused at three.
    two = run_json(capsys, "solve", profile_path, *cost, "--channels", "2", "--method", "sharded-wfbp", "--json")
    assert two["iteration_time"] >= two["lower_bound"] > 0
    assert "--channels with --fully-sharded is 1" in run_error(capsys, "solve", profile_path, *cost, "--channels", "3")
    assert "no plan fits the memory cap of 7e+06 B: tensor 't0' alone needs 8e+06 B" in run_error(
        capsys, "solve", profile_path, *cost, "--memory-cap", "7e6", "--method", "sharded-brute")


def simulate_peak(plan_path):
    problem = fusionopt.model.Problem(example_profile(), pattern=fusionopt.model.FullySharded(
        fusionopt.cost.AlphaBeta(1e-3, 1e-9), fusionopt.cost.AlphaBeta(1e-3, 1e-9)))
    return fusionopt.model.simulate(problem, fusionopt.model.ShardedPlan.read(plan_path)).peak_memory


def test_advise_sharded_patterns(capsys):
    gpt2 = ["--model", "gpt2", "--batch", "8", "--network", "100gb-ib", "--workers", "64"]
    doc = run_json(capsys, "advise", *gpt2, "--pattern", "fsdp", "--memory-cap", "400MiB", "--json")
    fsdp = doc["fsdp2"]
    assert fsdp["units"][-1] == [""] and fsdp["peak_memory"] <= 400 * 2**20
    assert fsdp["iteration_time"] <= fsdp["default_iteration_time"] and fsdp["lower_bound"] <= fsdp["iteration_time"]
    assert doc["zero3"]["peak_memory"] <= 400 * 2**20 and doc["zero3"]["tried"] == 90
    assert doc["zero3"]["iteration_time"] <= doc["zero3"]["default_iteration_time"] or not doc["zero3"]["default_feasible"]
    doc = run_json(capsys, "advise", *gpt2, "--pattern", "zero2", "--json")
    assert doc["megatron"]["options"]["data_parallel_size"] == 64
    assert doc["megatron"]["iteration_time"] <= doc["megatron"]["default_iteration_time"]
    # DeepSpeed's defaults (5e8 elements, overlap_comm off) are beaten by overlapping smaller buckets.
    assert doc["zero2"]["tried"] == 8 and doc["zero2"]["options"]["overlap_comm"] is True
    assert doc["zero2"]["options"]["reduce_bucket_size"] < 500_000_000
    assert doc["zero2"]["iteration_time"] < doc["zero2"]["default_iteration_time"]
    assert "--memory-cap goes with --pattern fsdp" in run_error(capsys, "advise", *gpt2, "--memory-cap", "1GB")
    assert "--fully-sharded: advise takes --pattern zero2 (decoupled) or --pattern fsdp" in run_error(
        capsys, "advise", *gpt2, "--fully-sharded")
    assert "--method picks the all-reduce plan to follow; --pattern zero2 plans its own" in run_error(
        capsys, "advise", *gpt2, "--pattern", "zero2", "--method", "wfbp")
    assert "--horovod-backend judges Horovod settings" in run_error(capsys, "advise", *gpt2, "--pattern", "fsdp",
                                                                    "--horovod-backend", "gloo")


def test_measured_collectives_price_sharded_problems(capsys, tmp_path, profile_path):
    # Each collective from its own cost file (as calibrate --collective writes them): the same
    # 1 ms + 1 ns/B as --alpha/--beta gives the same optimum, 22 ms.
    rs, ag = tmp_path / "rs.json", tmp_path / "ag.json"
    for path in (rs, ag):
        write_json(path, fusionopt.cost.AlphaBeta(1e-3, 1e-9).to_dict())
    doc = run_json(capsys, "solve", profile_path, "--fully-sharded", "--reduce-scatter-cost", rs, "--all-gather-cost", ag,
                   "--method", "sharded-brute", "--json")
    assert doc["iteration_time"] == pytest.approx(0.022, rel=1e-12)
    # A slower all-gather (2 ms startups) moves the optimum: each of the three gathers pays 1 ms more
    # in the forward at least.
    write_json(ag, fusionopt.cost.AlphaBeta(2e-3, 1e-9).to_dict())
    slower = run_json(capsys, "solve", profile_path, "--fully-sharded", "--reduce-scatter-cost", rs,
                      "--all-gather-cost", ag, "--method", "sharded-brute", "--json")
    assert slower["iteration_time"] > doc["iteration_time"]
    assert "--reduce-scatter-cost and --all-gather-cost go together" in run_error(
        capsys, "solve", profile_path, "--fully-sharded", "--reduce-scatter-cost", rs)
    assert "leave out --alpha/--beta" in run_error(capsys, "solve", profile_path, "--decoupled", *AB1,
                                                   "--reduce-scatter-cost", rs, "--all-gather-cost", ag)
    assert "price --decoupled or --fully-sharded problems" in run_error(
        capsys, "solve", profile_path, "--reduce-scatter-cost", rs, "--all-gather-cost", ag)
    status, out, _ = run(capsys, "calibrate", "--backend", "local", "--ranks", "2", "--collective", "all_gather",
                         "--min-bytes", "1024", "--max-bytes", "4096", "--iterations", "3", "--json")
    cal = json.loads(out)
    assert status == 0 and cal["calibration"]["collective"] == "all_gather" and [p[0] for p in cal["calibration"]["points"]] == [1024, 2048, 4096]


def test_run_takes_sharded_plans(capsys, tmp_path, profile_path):
    # The executor runs a fully sharded plan from the command line and checks every byte.
    cost = ["--alpha", "0.001", "--beta", "1e-9", "--fully-sharded"]
    plan = tmp_path / "plan.json"
    assert run(capsys, "solve", profile_path, *cost, "--method", "sharded-brute", "--output", plan)[0] == 0
    doc = run_json(capsys, "run", profile_path, "--plan", plan, *cost, "--backend", "local", "--ranks", "2",
                   "--iterations", "2", "--json")
    assert doc["correct"] is True and doc["predicted_time"] == pytest.approx(0.022, rel=1e-12)
    assert [c[0] for c in doc["collectives"]] == ["all-gather"] * 3 + ["reduce-scatter"] * 3


def test_cost_files_of_the_wrong_collective_are_refused(capsys, tmp_path, profile_path):
    # A calibration records the collective it timed; a flag that prices another refuses it.
    rs = tmp_path / "rs.json"
    ar = tmp_path / "ar.json"
    write_json(rs, {**fusionopt.cost.AlphaBeta(1e-3, 1e-9).to_dict(), "calibration": {"collective": "reduce_scatter"}})
    write_json(ar, {**fusionopt.cost.AlphaBeta(1e-3, 1e-9).to_dict(), "calibration": {"backend": "local"}})
    assert "--all-gather-cost" in run_error(capsys, "solve", profile_path, "--fully-sharded", "--reduce-scatter-cost", rs,
                                            "--all-gather-cost", rs)
    assert "a calibration of reduce-scatter, and --cost takes all-reduce" in run_error(
        capsys, "solve", profile_path, "--cost", rs)
    assert "a calibration of all-reduce, and --cost takes reduce-scatter or all-gather" in run_error(
        capsys, "solve", profile_path, "--fully-sharded", "--cost", ar)
    assert run(capsys, "solve", profile_path, "--cost", ar)[0] == 0
    assert "leave out --workers" in run_error(capsys, "solve", profile_path, "--fully-sharded", "--reduce-scatter-cost",
                                              rs, "--all-gather-cost", rs, "--workers", "8")


def test_advise_under_an_aligned_cost_says_to_pad(tmp_path, capsys, profile_path):
    from fusionopt.cost import Aligned, AlphaBeta

    cost = tmp_path / "aligned.json"
    cost.write_text(json.dumps(Aligned(AlphaBeta(3e-3, 1e-9), ranks=2, unit=64, slowdown=3.0, padded=True).to_dict()))
    status, out, err = run(capsys, "advise", "--profile", profile_path, "--cost", cost)
    assert status == 0, err
    line = next(line for line in out.splitlines() if "pad:" in line)
    assert line.strip().startswith("pad: register fusionopt.integrations.padded_comm_hook(unit=64): each bucket "
                                   "all-reduced as a multiple of 2 x 64 B")
    doc = run_json(capsys, "advise", "--profile", profile_path, "--cost", cost, "--json")
    assert doc["ddp"]["hook"] == "fusionopt.integrations.padded_comm_hook(unit=64)"
    assert len(doc["ddp"]["padding"]) == len(doc["ddp"]["buckets"])


def test_a_flag_is_taken_as_written_and_a_repeated_one_is_named(capsys, profile_path):
    # An abbreviation is not a flag (argparse would read --alp as --alpha).
    assert run_error(capsys, "solve", profile_path, "--alp", "1e-3", "--beta", "1e-9") == \
        "fusionopt: error: unrecognized arguments: --alp 1e-3"
    # A flag given twice with two values: the last is taken, and the first is not dropped unsaid.
    status, out, err = run(capsys, "solve", profile_path, "--alpha", "1e-3", "--alpha=3e-3", "--beta", "1e-9", "--json")
    assert status == 0 and err == "fusionopt: warning: --alpha is given 2 times (1e-3, 3e-3): the last, 3e-3, is taken\n"
    assert json.loads(out)["iteration_time"] == run_json(capsys, "solve", profile_path, *AB3, "--json")["iteration_time"]
    # The same value twice changes nothing and is not worth a word.
    status, out, err = run(capsys, "solve", profile_path, *AB3, "--alpha", "0.003", "--json")
    assert status == 0 and err == ""


def test_an_output_nested_past_the_json_parser_is_a_file_fusionopt_did_not_write(tmp_path, capsys, profile_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    assert run_error(capsys, "solve", profile_path, *AB3, "--output", deep) == (
        f"fusionopt: error: --output {deep} exists and is a file fusionopt did not write, not a plan: writing it would "
        "lose it; give another file, or remove it first")
