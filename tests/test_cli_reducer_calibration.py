"""``calibrate --reducer`` and ``--reducer-calibration`` on simulate and advise: the reducer's
own cost enters the model exactly as stated, bad files and flags give one line, and Ctrl-C
leaves no rank behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusionopt.cli import main
from fusionopt.integrations import ReducerCalibration
from fusionopt.model import Plan, Profile


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def files(tmp_path: Path, *, reducer: str = "ddp", per_step: float = 7e-4, per_message: float = 4e-4):
    # Two 1 MB tensors, forward and backward 1 ms each; one message of both (MODEL.md section 4).
    profile = Profile.from_arrays([1e6, 1e6], [1e-3, 1e-3], [1e-3, 1e-3])
    profile.write(tmp_path / "p.json")
    Plan.from_cuts(profile, [False]).write(tmp_path / "single.json")
    Plan.from_cuts(profile, [True]).write(tmp_path / "wfbp.json")
    ReducerCalibration(reducer, per_step=per_step, per_message=per_message).write(tmp_path / "r.json")
    return tmp_path / "p.json", tmp_path / "r.json"


def iteration_time(capsys, *argv) -> float:
    status, out, err = run(capsys, "simulate", *argv, "--json")
    assert status == 0, err
    return json.loads(out)["iteration_time"]


def test_simulate_adds_the_reducer_cost_exactly(capsys, tmp_path):
    # single: ready at 2 ms, c = 3 ms + 2 ms; T = 2 + 5 + 2 = 9 ms; with 0.4 ms per message and
    # 0.7 ms per step 10.1 ms. wfbp: 1 -> 5, 5 -> 9, T = 11 ms; with 0.4 ms: 1 -> 5.4 -> 9.8, + 2 + 0.7 = 12.5 ms.
    profile, calibration = files(tmp_path)
    cost = ["--alpha", "3e-3", "--beta", "1e-9"]
    for plan, plain, slower in (("single.json", 9e-3, 10.1e-3), ("wfbp.json", 11e-3, 12.5e-3)):
        assert iteration_time(capsys, profile, "--plan", tmp_path / plan, *cost) == pytest.approx(plain, abs=1e-12)
        assert iteration_time(capsys, profile, "--plan", tmp_path / plan, *cost, "--reducer-calibration",
                              calibration) == pytest.approx(slower, abs=1e-12)
    status, out, _ = run(capsys, "simulate", profile, "--plan", tmp_path / "single.json", *cost,
                         "--reducer-calibration", calibration)
    assert status == 0 and "ddp, 0.700 ms per step on the host, 0.400 ms per bucket on the channel" in out
    assert "iteration time  10.100000 ms" in out


def test_simulate_adds_the_costs_per_tensor_and_per_byte_and_says_so(capsys, tmp_path):
    # single: T = 9 ms (above). With 0.1 ms per parameter tensor (two: 0.2 ms on the host) and
    # 0.5 ms per MB of each message (the 2 MB message holds the channel 1 ms longer): 10.2 ms.
    profile, _ = files(tmp_path)
    ReducerCalibration("ddp", per_step=0.0, per_message=0.0, per_tensor=1e-4, per_byte=5e-10).write(tmp_path / "t.json")
    argv = [profile, "--plan", tmp_path / "single.json", "--alpha", "3e-3", "--beta", "1e-9",
            "--reducer-calibration", tmp_path / "t.json"]
    assert iteration_time(capsys, *argv) == pytest.approx(10.2e-3, abs=1e-12)
    status, out, _ = run(capsys, "simulate", *argv)
    assert status == 0 and ("ddp, 0.000 ms per step and 0.100 ms per parameter tensor on the host, 0.000 ms per "
                            "bucket and 0.524 ms per MiB of it on the channel") in out


def test_simulate_puts_the_compute_per_message_on_the_compute_stream(capsys, tmp_path):
    # wfbp, c = 0.1 ms + 1 ms/MB: tensor 1 sent 1 -> 2.1, tensor 0 2.1 -> 3.2; T = 5.2 ms. With 0.5 ms of
    # compute per message: tensor 1 ready 1.5 (sent to 2.6), tensor 0's backward 1.5 -> 2.5, ready 3,
    # sent to 4.1; T = 4.1 + 2 = 6.1 ms.
    profile, _ = files(tmp_path)
    ReducerCalibration("plan", per_step=0.0, per_message=0.0, message_compute=5e-4).write(tmp_path / "c.json")
    cost = ["--alpha", "1e-4", "--beta", "1e-9", "--plan", tmp_path / "wfbp.json"]
    assert iteration_time(capsys, profile, *cost) == pytest.approx(5.2e-3, abs=1e-12)
    assert iteration_time(capsys, profile, *cost, "--reducer-calibration", tmp_path / "c.json") == pytest.approx(
        6.1e-3, abs=1e-12)
    status, out, _ = run(capsys, "simulate", profile, *cost, "--reducer-calibration", tmp_path / "c.json")
    assert status == 0 and ("plan, 0.000 ms per step on the host, 0.000 ms per message on the channel, "
                            "0.500 ms of compute per message") in out


def test_advise_packs_messages_when_each_costs_the_reducer_more(capsys, tmp_path):
    # Four 1 MB tensors, backward 2 ms each, c = 0.1 ms + 1 ms: the DP's plan is WFBP (T = 8 + 1.1 +
    # F 4 = 13.1 ms); at 50 ms per message, one message (8 + 54.1 + 4 = 66.1 ms).
    Profile.from_arrays([1e6] * 4, [1e-3] * 4, [2e-3] * 4).write(tmp_path / "p.json")
    ReducerCalibration("ddp", per_step=0.0, per_message=5e-2).write(tmp_path / "r.json")
    cost = ["--alpha", "1e-4", "--beta", "1e-9"]
    status, out, _ = run(capsys, "advise", "--profile", tmp_path / "p.json", *cost)
    assert status == 0 and "plan      dp: T = 13.100 ms, 4 messages" in out
    status, out, _ = run(capsys, "advise", "--profile", tmp_path / "p.json", *cost, "--reducer-calibration",
                         tmp_path / "r.json")
    assert status == 0 and "plan      dp: T = 66.100 ms, 1 message" in out


def test_advise_takes_a_calibration_with_compute_per_message(capsys, tmp_path):
    # The four tensors above with 5 ms of compute per message: WFBP's messages are ready at 7, 14, 21
    # and 28 ms, T = 28 + 1.1 + 4 = 33.1 ms; two messages ready at 9 and 18, T = 18 + 2.1 + 4 = 24.1 ms;
    # one message ready at 8 + 5 = 13, T = 13 + 4.1 + 4 = 21.1 ms: the DP's plan.
    Profile.from_arrays([1e6] * 4, [1e-3] * 4, [2e-3] * 4).write(tmp_path / "p.json")
    ReducerCalibration("ddp", per_step=0.0, per_message=0.0, message_compute=5e-3).write(tmp_path / "r.json")
    status, out, err = run(capsys, "advise", "--profile", tmp_path / "p.json", "--alpha", "1e-4", "--beta", "1e-9",
                           "--reducer-calibration", tmp_path / "r.json")
    assert status == 0, err
    assert "plan      dp: T = 21.100 ms, 1 message" in out and "5.000 ms of compute per bucket" in out


def test_advise_keeps_the_encodings_it_prices_under_a_calibration(capsys, tmp_path):
    # The four tensors above in fp16 where cheaper: every bucket's advice is fp16 with or without the
    # reducer's 1 ms per message on the link (which goes under the encoding: 0.1 + 1 ms + 0.5 ms for
    # one 2 MB bucket in fp16; the wire line and the hook's registration stay).
    Profile.from_arrays([1e6] * 4, [1e-3] * 4, [2e-3] * 4).write(tmp_path / "p.json")
    ReducerCalibration("ddp", per_step=0.0, per_message=1e-3).write(tmp_path / "r.json")
    argv = ["advise", "--profile", tmp_path / "p.json", "--alpha", "1e-4", "--beta", "1e-9", "--encodings", "fp32,fp16"]
    for extra in ([], ["--reducer-calibration", tmp_path / "r.json"]):
        status, out, err = run(capsys, *argv, *extra)
        assert status == 0, err
        assert "wire: " in out and " in fp16" in out and "fp16_compress_hook" in out, out
    # FSDP2 under a bf16 MixedPrecisionPolicy takes an FSDP2 calibration (it was refused), and says
    # so: its one unit (the model) gathers once and reduce-scatters once, each 1 ms longer.
    ReducerCalibration("fsdp2", per_step=0.0, per_message=1e-3).write(tmp_path / "f.json")
    fsdp = ["advise", "--profile", tmp_path / "p.json", "--alpha", "1e-4", "--beta", "1e-9", "--pattern", "fsdp",
            "--param-dtype", "bf16"]
    status, out, err = run(capsys, *fsdp)
    assert status == 0 and "defaults (fully_shard per block, then the model): T = 16.200 ms" in out, err
    status, out, err = run(capsys, *fsdp, "--reducer-calibration", tmp_path / "f.json")
    assert status == 0 and "defaults (fully_shard per block, then the model): T = 18.200 ms" in out, err
    assert "f.json: fsdp2, 0.000 ms per step on the host, 1.000 ms per collective on the channel\n" in out


@pytest.mark.parametrize("content, culprit", [
    ("{\"schema\": ", "malformed JSON"),
    (json.dumps({"schema": "fusionopt.cost", "kind": "alpha_beta"}), "not a reducer calibration"),
    (json.dumps({"schema": "fusionopt.reducer_calibration", "version": 1, "reducer": "ddp", "per_step": 0.0,
                 "per_message": float("nan")}), "per_message must be a finite number"),
])
def test_a_bad_calibration_file_is_one_line_naming_it(capsys, tmp_path, content, culprit):
    profile, _ = files(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    status, out, err = run(capsys, "simulate", profile, "--plan", tmp_path / "single.json", "--alpha", "1e-3",
                           "--beta", "1e-9", "--reducer-calibration", bad)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(bad) in err and culprit in err


def test_a_calibration_of_another_pattern_is_refused(capsys, tmp_path):
    profile, calibration = files(tmp_path, reducer="fsdp2")
    status, _, err = run(capsys, "simulate", profile, "--plan", tmp_path / "single.json", "--alpha", "1e-3",
                         "--beta", "1e-9", "--reducer-calibration", calibration)
    assert status == 2 and err.strip() == (f"fusionopt: error: --reducer-calibration {calibration}: a fsdp2 reducer "
                                           "calibration prices fully-sharded problems, and this one is all-reduce")


@pytest.mark.parametrize("flags, culprit", [
    (["--contention"], "--contention does not apply to --reducer"),
    (["--collective", "all_gather"], "--collective does not apply to --reducer"),
    (["--backend", "nccl"], "--backend does not apply to --reducer"),
    (["--ranks", "1"], "--ranks 1: --reducer measures a reducer between ranks"),
    (["--output", "r.csv"], "--output r.csv: the reducer calibration is written as JSON"),
    (["--optimizer", "Adagrad2"], "--optimizer: optimizer 'Adagrad2': not an optimiser class of torch.optim"),
    (["--optimizer-option", "momentum"], "--optimizer-option 'momentum': give KEY=VALUE, VALUE in JSON"),
    (["--optimizer-option", "momentum=fast"], "--optimizer-option 'momentum=fast': give KEY=VALUE"),
    (["--optimizer-option", "betas=[0.9,0.99]"], "--optimizer: optimizer SGD(lr=0.001, betas=[0.9, 0.99]): "),
])
def test_calibrate_reducer_refuses_flags_it_does_not_take(capsys, flags, culprit):
    pytest.importorskip("torch")
    status, _, err = run(capsys, "calibrate", "--reducer", "plan", *flags)
    assert status == 2 and len(err.strip().splitlines()) == 1 and culprit in err


@pytest.mark.parametrize("flags", [["--optimizer", "Adam"], ["--optimizer-option", "momentum=0.9"]])
def test_the_optimiser_goes_with_a_reducer_calibration_only(capsys, flags):
    status, _, err = run(capsys, "calibrate", "--backend", "local", *flags)
    assert status == 2 and err.strip() == (f"fusionopt: error: {flags[0]} names the optimiser a reducer calibration "
                                           "steps with and goes with --reducer")


def test_ctrl_c_ends_calibrate_reducer_with_one_line_and_no_rank_left(tmp_path):
    pytest.importorskip("torch")
    # Its own session: the command and the ranks it starts share one process group.
    process = subprocess.Popen([sys.executable, "-m", "fusionopt", "calibrate", "--reducer", "plan", "--output",
                                str(tmp_path / "r.json")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        first = process.stderr.readline()
        assert first.startswith("fusionopt calibrate: the plan reducer's own cost"), first
        time.sleep(3.0)                                  # the ranks are running
        os.killpg(process.pid, signal.SIGINT)            # as a terminal's Ctrl-C reaches the group
        rest = process.stderr.read().strip().splitlines()
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert rest == ["fusionopt: interrupted"]
    assert not (tmp_path / "r.json").exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:               # every rank of the group is gone
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a rank outlived the interrupted calibration")
