"""``fusionopt run``: measured against predicted on the command line; bad input exits 2 in one line."""

from __future__ import annotations

import json

import pytest

from executor_helpers import small_profile
from fusionopt.cli import main
from fusionopt.model import Plan

AB = ["--alpha", "1e-4", "--beta", "1e-9"]


@pytest.fixture
def files(tmp_path):
    profile = small_profile()
    profile.write(tmp_path / "profile.json")
    Plan.from_groups(profile, [[2], [1, 0]]).write(tmp_path / "plan.json")
    return tmp_path / "profile.json", tmp_path / "plan.json"


def run_cli(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_run_prints_measured_and_predicted(files, capsys):
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, *AB, "--backend", "local", "--ranks", "3",
                               "--iterations", "2", "--warmup", "0", "--time-scale", "0.5")
    assert status == 0 and err == ""
    assert "backend        local, 3 ranks as threads of one process" in out
    assert "predicted T    " in out and "measured T     " in out and "correctness    ok" in out


def test_run_json(files, capsys):
    profile, plan = files
    status, out, _ = run_cli(capsys, "run", profile, "--plan", plan, *AB, "--ranks", "2", "--iterations", "2",
                             "--time-scale", "0", "--json", "--sync", "layerwise")
    doc = json.loads(out)
    assert status == 0 and doc["correct"] and doc["sync"] == "layerwise" and len(doc["iteration_times"]) == 2


def test_run_over_mpi(files, capsys):
    pytest.importorskip("mpi4py")
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, *AB, "--backend", "mpi", "--ranks", "2",
                               "--iterations", "1", "--warmup", "0", "--time-scale", "0", "--json")
    assert status == 0, err
    assert json.loads(out)["backend"] == "mpi"


@pytest.mark.parametrize("extra, message", [
    (["--ranks", "0"], "ranks must be an integer >= 1, got 0"),
    (["--backend", "gloo"], "argument --backend: invalid choice: 'gloo'"),
    (["--copy-cost", "1e-10"], "the executor runs the plain model (MODEL.md sections 1-4), and this problem has "
                               "copy_cost on"),
    (["--backend", "nccl", "--emulate-link"], None),
])
def test_bad_arguments_exit_2_with_one_line(files, capsys, monkeypatch, extra, message):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, *AB, *extra)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("fusionopt: error: ")
    if message is None:
        assert "pip install 'fusionopt[gpu]'" in err
    else:
        assert message in err


def test_an_invalid_plan_file_is_named(files, capsys, tmp_path):
    profile, _ = files
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "fusionopt.plan", "version": 1, "messages": [[[0, 0, 4096]]]}))
    status, _, err = run_cli(capsys, "run", profile, "--plan", bad, *AB)
    assert status == 2 and f"{bad}: tensor 't1' (index 1): bytes [0, 1024) are missing" in err


def test_a_run_that_fails_its_check_exits_1(files, capsys, monkeypatch):
    from fusionopt.executor import Fault, run as original

    def with_fault(*args, **kwargs):
        return original(*args, fault=Fault("corrupt", rank=1, message=0), **kwargs)

    monkeypatch.setattr("fusionopt.executor.run", with_fault)
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, *AB, "--time-scale", "0")
    assert status == 1 and "correctness    FAILED" in out
    assert err.startswith("fusionopt: error: reduced gradients are wrong: rank 1, step 0: tensor 't2' (index 2)")


def test_run_sends_each_message_in_its_encoding_and_keeps_the_tensors_named_exact(files, capsys):
    profile, plan = files
    # Messages [t2] (2 KiB) and [t1, t0] (5 KiB) both pay in fp16 (no cast cost); t1 kept exact.
    base = ["run", profile, "--plan", plan, *AB, "--ranks", "2", "--iterations", "1", "--warmup", "0",
            "--time-scale", "0", "--encodings", "fp32,fp16"]
    status, out, err = run_cli(capsys, *base)
    assert status == 0 and err == ""
    assert "2048 B fp16 " in out and "5120 B fp16 " in out and "correctness    ok" in out
    status, out, _ = run_cli(capsys, *base, "--exact-tensors", "t1", "--json")
    doc = json.loads(out)
    assert status == 0 and doc["correct"] and doc["encodings"] == ["fp16", "fp32"]


def test_run_sends_the_messages_the_model_prices_through_the_powersgd_hook(tmp_path, capsys):
    from fusionopt.model import Profile

    profile = Profile.from_arrays([64 * 128 * 4, 64 * 4, 32 * 64 * 4, 32 * 4], [1e-4] * 4, [1e-4] * 4,
                                  ["w1", "b1", "w2", "b2"], shapes=[(64, 128), (64,), (32, 64), (32,)])
    profile.write(tmp_path / "profile.json")
    Plan.per_tensor(profile).write(tmp_path / "plan.json")
    argv = ["run", tmp_path / "profile.json", "--plan", tmp_path / "plan.json", "--alpha", "1e-5", "--beta", "1e-8",
            "--iterations", "1", "--warmup", "0", "--time-scale", "0", "--powersgd-rank", "2"]
    status, out, err = run_cli(capsys, *argv, "--powersgd-as-choice", "--json")
    doc = json.loads(out)
    assert status == 0 and doc["correct"] and doc["encodings"] == ["fp32", "powersgd", "fp32", "powersgd"]
    assert doc["collectives"][1] == ["powersgd", 768, 768]     # w2: P 64 and Q 128 elements of 4 B
    status, out, err = run_cli(capsys, *argv)
    assert status == 2 and out == ""
    assert err.strip().splitlines() == ["fusionopt: error: --powersgd-rank: run sends a message through torch's "
                                        "PowerSGD hook where the model prices it cheaper than its encoding, and every "
                                        "other as it is: add --powersgd-as-choice"]
