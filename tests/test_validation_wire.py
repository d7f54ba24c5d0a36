"""validation/wire/study.py and powersgd.py: a small run's figures against the model, computed apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study():
    return load_script("validation/wire/study.py")


def test_a_small_wire_study(study, tmp_path):
    assert study.main(["--workers", "8", "--cast-per-message", "50e-6", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "wire-study.json").read_text())
    assert len(document["results"]) == 8
    from fusionopt import zoo
    from fusionopt.cost import network, Encoded
    from fusionopt.model import Plan, Problem, simulate
    from fusionopt.cost import FP16, FP32, Cheapest
    from fusionopt.solvers import solve

    fp16 = FP16.with_costs(seconds_per_byte=study.CAST_PER_BYTE, seconds_per_message=50e-6)
    for row in document["results"]:
        profile = zoo.profile(row["model"], device="h100", batch=row["batch"])
        link = network(row["network"], 8)
        # DDP's buckets, every one of them in fp16: the hook's step, as the simulator gives it.
        plan = solve(Problem(profile, link), "ddp").plan
        assert row["ddp_fp16"] == simulate(Problem(profile, Encoded(link, fp16)), plan).iteration_time
        # The hook's cast to fp16 (half the bytes, two of three launches) on the backward's stream,
        # given apart as the problem's compute per message: the same step; the DP's no longer.
        path = fp16.with_costs(seconds_per_byte=study.CAST_PER_BYTE / 2, seconds_per_message=50e-6 / 3)
        apart = Problem(profile, Encoded(link, path), message_compute=50e-6 * 2 / 3,
                        message_compute_per_byte=study.CAST_PER_BYTE / 2)
        assert row["ddp_fp16_stream"] == pytest.approx(simulate(apart, plan).iteration_time, rel=1e-12)
        assert row["dp_fp16_stream"] <= row["ddp_fp16_stream"] * (1 + 1e-12)
        # The joint optimum is no slower than either single choice; fp16 pays above the crossover.
        assert row["joint"] <= min(row["dp"], row["dp_fp16"]) * (1 + 1e-12)
        assert row["single_gap"] >= -1e-12
        (cross,) = row["crossovers"]
        alpha, beta = link.affine
        assert cross == pytest.approx(50e-6 / (beta / 2 - study.CAST_PER_BYTE), abs=1.0)
        # The 1-D tensors kept exact: a budget only costs time, and the DP's optimum under it is
        # no slower than WFBP under it.
        assert row["exact_tensors"] == sum(len(shape) == 1 for shape in profile.shapes) > 0
        assert row["joint_exact"] >= row["joint"] * (1 - 1e-12)
        kept = Problem(profile, Cheapest(link, [FP32, fp16]),
                       exact_tensors=[i for i, shape in enumerate(profile.shapes) if len(shape) == 1])
        assert row["joint_exact"] <= solve(kept, "wfbp").iteration_time * (1 + 1e-12)
        # Sent apart: never slower than the fusion plans under the budget, nor than the joint
        # optimum's messages without the 1-D tensors, then those in one fp32 message (a plan of its space).
        assert row["exact_apart"] <= row["joint_exact"] * (1 + 1e-12)
        exact = set(kept.exact_tensors)
        joint = solve(Problem(profile, Cheapest(link, [FP32, fp16])), "dp").plan.groups()
        apart = [g for g in ([t for t in group if t not in exact] for group in joint) if g] + [sorted(exact)]
        assert row["exact_apart"] <= simulate(kept, Plan.from_groups(profile, apart)).iteration_time * (1 + 1e-12)
    summary = document["summary"]
    assert summary["jobs"] == 8 and summary["largest_single_gap"] == max(r["single_gap"] for r in document["results"])
    assert study.main(["--workers", "8", "--cast-per-message", "50e-6", "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "wire-study.json").read_text())["results"] == document["results"]


def test_a_small_measured_wire_run(tmp_path):
    script = ROOT / "validation" / "wire" / "run.py"
    from fusionopt.integrations import ReducerCalibration

    reducer = ReducerCalibration("ddp", per_step=2e-3, per_message=1e-5, message_compute=5e-4, ranks=2)
    reducer.write(tmp_path / "ddp.json")
    command = [sys.executable, str(script), "--models", "mlp", "--rounds", "2", "--steps", "2", "--warmup", "2",
               "--profile-steps", "3", "--links", "10gbe:64", "--reducer-calibration", str(tmp_path / "ddp.json"),
               "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "wire-cpu.json").read_text())
    (row,) = document["results"]
    run = load_script("validation/wire/run.py")
    from fusionopt.model import Problem, Profile

    # The predictions are the model's on the profile and the casts measured first, recomputed here.
    assert (row["network"], row["workers"]) == ("10gbe", 64)
    again = run.predict(Profile.from_dict(row["profile"]), "10gbe", 64, row["casts"], 1, reducer)
    assert again["predicted"] == row["predicted"] and again["encodings"] == row["encodings"]
    # With DDP's reducer cost read from the file, each step is the same plan's on the problem
    # with_reducer_overhead makes: the default's by hand, and never shorter than the model's.
    assert again["predicted_with_reducer"] == row["predicted_with_reducer"]
    from fusionopt.cost import network as network_preset
    from fusionopt.integrations import with_reducer_overhead
    from fusionopt.model import simulate
    from fusionopt.solvers import solve

    plain = Problem(Profile.from_dict(row["profile"]), network_preset("10gbe", 64), step_parts="fit")
    assert row["predicted_with_reducer"]["default"] == simulate(with_reducer_overhead(plain, reducer),
                                                                solve(plain, "ddp").plan).iteration_time
    assert all(row["predicted_with_reducer"][s] >= row["predicted"][s] + 2e-3 for s in run.SETTINGS)
    assert document["reducer"]["file"] == "ddp.json" and document["reducer"]["per_step"] == 2e-3
    table = (tmp_path / "wire-cpu.md").read_text()
    assert "read from `ddp.json` (measured apart): 2.000 ms per step" in table and "with reducer (ms)" in table
    assert len(run.step_errors(document["results"], "predicted_with_reducer")) == len(run.SETTINGS)
    assert again["encodings_powersgd"] == row["encodings_powersgd"]
    # The PowerSGD hook priced with its compute measured first, on DDP's buckets: torch's
    # compression rate of the model's split, and the step the baseline gives.
    from fusionopt.cost import PowerSGD, network as preset
    from fusionopt.solvers.baselines import ddp_powersgd

    hook = PowerSGD(**row["powersgd"])
    assert (hook.rank, hook.start_iter) == (1, run.START_ITER)
    assert hook.seconds_per_byte == row["casts"]["powersgd"]["seconds_per_byte"]
    plain = ddp_powersgd(Problem(Profile.from_dict(row["profile"]), preset("10gbe", 64), step_parts="fit"), hook)
    assert row["predicted"]["powersgd"] == plain.iteration_time
    assert row["compression_rate"] == plain.stats["compression_rate"] > 1
    # Half the bytes on a 10 GbE link, the casts free: fp16 is faster (with the casts measured
    # here it need not be, on a loaded host).
    free = {name: {"seconds_per_byte": 0.0, "seconds_per_message": 0.0} for name in row["casts"]}
    assert run.predict(Profile.from_dict(row["profile"]), "10gbe", 64, free, 1)["predicted"]["fp16"] \
        < row["predicted"]["default"]
    # On 1 GbE, the hook's compute free, a 512 x 512 weight's 1 MiB costs more than two more
    # startups: some bucket goes through it, and the advice with the hook is the faster.
    slow = run.predict(Profile.from_dict(row["profile"]), "1gbe", 64, free, 1)
    assert "powersgd" in slow["encodings_powersgd"]
    assert slow["predicted"]["advised-powersgd"] < slow["predicted"]["advised"]
    assert set(row["rounds"]) == set(run.SETTINGS) and all(len(r) == 2 for r in row["rounds"].values())
    for setting, m in row["measured"].items():
        assert m["speedup"] == pytest.approx(sum(row["rounds"]["default"]) / sum(row["rounds"][setting]))
    assert "emulated link" in (tmp_path / "wire-cpu.md").read_text()


@pytest.mark.parametrize("arguments, says", [
    (["--links", "10gbe"], "--links: '10gbe' is not NETWORK:WORKERS"),
    (["--links", "40gbe:8"], "--links: '40gbe:8': unknown network '40gbe'"),
    (["--warmup", "1"], "--warmup 1: the PowerSGD settings compress from step 2 on"),
    (["--reducer-calibration", "no-such-calibration.json"], "--reducer-calibration: no-such-calibration.json"),
    (["--reducer-calibration", "FSDP2"], "a calibration of the 'fsdp2' reducer; this script runs ddp"),
    (["--reducer-calibration", "DDP4"], "measured on 4 ranks, not among --ranks (2)"),
])
def test_the_measured_wire_run_refuses_in_one_line(arguments, says, capsys, tmp_path):
    from fusionopt.integrations import ReducerCalibration

    files = {"FSDP2": ReducerCalibration("fsdp2", per_step=0.0, per_message=0.0),
             "DDP4": ReducerCalibration("ddp", per_step=0.0, per_message=0.0, ranks=4)}
    for name, calibration in files.items():
        calibration.write(tmp_path / f"{name}.json")
    arguments = [str(tmp_path / f"{a}.json") if a in files else a for a in arguments]
    run = load_script("validation/wire/run.py")
    with pytest.raises(SystemExit):
        run.main(arguments)
    assert says in capsys.readouterr().err


def test_a_small_powersgd_study(tmp_path):
    powersgd = load_script("validation/wire/powersgd.py")
    assert powersgd.main(["--workers", "8", "--ranks", "2", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "wire-powersgd.json").read_text())
    assert len(document["results"]) == 8
    from fusionopt import zoo
    from fusionopt.cost import PowerSGD, network
    from fusionopt.solvers.baselines import ddp_buckets

    hook = PowerSGD(rank=2, seconds_per_byte=powersgd.PER_BYTE, seconds_per_flop=powersgd.PER_FLOP,
                    seconds_per_message=powersgd.PER_MESSAGE)
    for row in document["results"]:
        profile = zoo.profile(row["model"], device="h100", batch=row["batch"])
        link = network(row["network"], 8)
        (q,) = row["powersgd"]
        # DDP's buckets, each bucket's three all-reduces and compute summed apart (message_seconds)
        # and played on one FIFO channel after the backward's ready times: the hook's step.
        buckets = ddp_buckets(profile)
        channel = 0.0
        for bucket in buckets:
            ready = max(profile.ready_times[i] for i in bucket)
            channel = max(channel, ready) + hook.message_seconds(link, profile, bucket)
        expected = max(profile.B, channel) + profile.U + profile.F + profile.W
        assert q["ddp"] == pytest.approx(expected, rel=1e-9, abs=0.5 * link.affine[1] * profile.n)
        assert q["dp"] <= q["ddp"] * (1 + 1e-12)
        assert q["compression_rate"] == pytest.approx(hook.of_profile(profile).compression_rate(), rel=1e-12)
        times = {"fp32": row["ddp"], "fp16": row["ddp_fp16"], "powersgd-2": q["ddp"]}
        assert row["fastest"] == min(times, key=times.__getitem__)
        # The joint optimum is never slower than any single choice's DP (the hook's priced to the
        # nearest byte of the link a tensor).
        assert q["joint"] <= min(row["dp"], row["dp_fp16"], q["dp"] + 0.5 * link.affine[1] * profile.n) * (1 + 1e-12)
    assert sum(document["summary"]["fastest"].values()) == 8
    assert powersgd.main(["--workers", "8", "--ranks", "2", "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "wire-powersgd.json").read_text())["results"] == document["results"]


def test_a_small_executor_wire_run(tmp_path):
    executor = load_script("validation/wire/executor.py")
    assert executor.main(["--backend", "local", "--models", "mobilenet-v2", "--iterations", "1", "--warmup", "1",
                          "--seconds-per-size", "0.01", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "wire-executor-local-cpu.json").read_text())
    rows = {r["setting"]: r for r in document["results"]}
    assert list(rows) == list(executor.SETTINGS) and all(r["correct"] for r in rows.values())
    assert rows["ddp"]["fp16_messages"] == 0 and rows["ddp-fp16"]["fp16_messages"] == rows["ddp"]["messages"]
    assert rows["dp-fp16"]["fp16_messages"] == rows["dp-fp16"]["messages"]
    # Each message in its cheapest is never predicted slower than every message in one encoding,
    # and an error budget only raises prices.
    joint = rows["joint"]["predicted_time"]
    assert joint <= min(rows["dp"]["predicted_time"], rows["dp-fp16"]["predicted_time"]) * (1 + 1e-12)
    assert joint <= rows["joint-exact"]["predicted_time"] * (1 + 1e-12)
    # The PowerSGD hook as one more choice: never predicted slower, priced at the fit of the
    # products' medians calibrated first, on the square matrices' own bytes.
    assert rows["joint-powersgd"]["predicted_time"] <= joint * (1 + 1e-12)
    products = document["calibration"]["mobilenet-v2"]["products"]
    assert products["sizes"] == [4 * round((s // 4) ** 0.5) ** 2 for s in executor.PRODUCT_SIZES]
    from fusionopt.executor import fit_alpha_beta

    fit = fit_alpha_beta(products["sizes"], products["medians"])
    assert (products["seconds_per_message"], products["seconds_per_byte"]) == (fit.alpha, fit.beta)
    # Each prediction is the model's, recomputed here from the calibration the run stored.
    from fusionopt import zoo
    from fusionopt.cost import Encoding, cost_from_dict
    from fusionopt.executor import scale_compute
    from fusionopt.solvers import solve

    calibration = document["calibration"]["mobilenet-v2"]
    link, fp16 = cost_from_dict(calibration["link"]), Encoding.from_dict(calibration["casts"])
    profile = scale_compute(zoo.profile("mobilenet-v2", device="h100", batch=64), rows["ddp"]["time_scale"])
    for setting, (problem, method) in executor.problems(profile, link, fp16, products).items():
        assert solve(problem, method).iteration_time == pytest.approx(rows[setting]["predicted_time"], rel=1e-9)
    assert rows["joint"]["measured_speedup"] == pytest.approx(rows["ddp"]["measured_time"]
                                                              / rows["joint"]["measured_time"])
    assert "--models mobilenet-v2" in (tmp_path / "wire-executor-local-cpu.md").read_text()


def test_ranks_with_an_emulated_link_are_refused_not_ignored(monkeypatch, capsys):
    # The emulated link runs one rank, on one GPU; the stored MPI run is 2 ranks, the default.
    executor = load_script("validation/wire/executor.py")
    with pytest.raises(SystemExit):
        executor.main(["--backend", "nccl", "--emulate-network", "100gb-ib", "--ranks", "2"])
    assert "error: --ranks 2: --emulate-network runs one rank, on one GPU" in capsys.readouterr().err
    seen = {}

    def stop(path, stored, changed, **_):
        seen["changed"] = changed
        raise SystemExit(0)
    monkeypatch.setattr(executor, "subset_location", stop)
    with pytest.raises(SystemExit):
        executor.main(["--backend", "mpi"])
    assert seen == {"changed": []}
