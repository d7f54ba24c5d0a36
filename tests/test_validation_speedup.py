"""validation/frameworks/speedup.py: the advice against the frameworks' defaults on real DDP and
FSDP2 over an emulated link. Its statistics and memory count by hand, where it writes, the
one-line refusals of bad arguments, and a tiny real run (one model, 2 ranks, few steps) whose
document must agree with itself and with the prediction functions."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interrupting import interrupt_on

from fusionopt.integrations import ReducerCalibration, read_reducer_calibration
from fusionopt.model import Profile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"
SCRIPT = ROOT / "validation" / "frameworks" / "speedup.py"
HARNESS = ROOT / "validation" / "frameworks" / "harness.py"


@pytest.fixture(scope="module")
def speedup():
    spec = importlib.util.spec_from_file_location("validation_frameworks_speedup", SCRIPT)
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness(speedup):
    return sys.modules["harness"]          # as the script imports it


def test_the_speedup_is_the_ratio_of_the_means_and_its_interval_resamples_rounds(harness):
    # Rounds of 30, 36 and 33 ms against 20, 24 and 22 ms: means 33 and 22 ms, speedup 1.5; every
    # round's own ratio is 1.5, so every resample's is too and the interval is [1.5, 1.5].
    s = harness.speedup_interval([0.030, 0.036, 0.033], [0.020, 0.024, 0.022])
    assert (round(s["default"], 12), round(s["advised"], 12), round(s["speedup"], 12)) == (0.033, 0.022, 1.5)
    assert s["ci"] == pytest.approx([1.5, 1.5])
    # Two rounds, ratios 2 and 1: a resample is both rounds of one kind or one of each, so the
    # interval runs from the second round's 1.0 to the first's 2.0; fixed seed, same interval.
    s = harness.speedup_interval([4.0, 1.0], [2.0, 1.0])
    assert s["speedup"] == pytest.approx(5 / 3) and s["ci"] == pytest.approx([1.0, 2.0])
    assert harness.speedup_interval([4.0, 1.0], [2.0, 1.0]) == s
    with pytest.raises(ValueError, match="pair up: 2 default against 1 advised"):
        harness.speedup_interval([1.0, 2.0], [1.0])


def test_peak_counts_as_the_model_does(harness):
    # [0, 2) 5 B and [2, 3) 7 B meet at 2, where the 5 B is freed first: 7; the zero-length 4 B
    # at 1 counts beside the 5 B: 9.
    assert harness.peak_of([(0.0, 2.0, 5), (2.0, 3.0, 7), (1.0, 1.0, 4)]) == 9
    assert harness.peak_of([(0.0, 2.0, 5), (1.5, 3.0, 7)]) == 12
    assert harness.peak_of([]) == 0


def test_targets_by_hand(speedup):
    case = {"framework": "fsdp2", "memory_cap": 100.0,
            "predicted": {"speedup": 2.0, "advised_peak": 100},
            "measured": {"speedup": 1.7, "ci": [0.95, 2.1]}, "memory": {"advised_peak": 104}}
    t = speedup.targets(case)
    assert (t["not_slower"], t["speedup_ratio"], t["speedup"]) == (True, 0.85, False)
    assert (t["memory_error"], t["memory"], t["cap"]) == (pytest.approx(0.04), True, False)
    case["measured"] = {"speedup": 0.9, "ci": [0.85, 0.99]}      # 0.9 of a predicted 1.0: met
    case["predicted"] = {"speedup": 1.0, "advised_peak": 100}
    case["memory"] = {"advised_peak": 94}
    t = speedup.targets(case)
    assert (t["not_slower"], t["speedup"], t["memory"], t["cap"]) == (False, True, False, True)
    ddp = {"framework": "ddp", "memory_cap": None, "predicted": {"speedup": 1.0}, "measured": {"speedup": 1.0,
                                                                                              "ci": [0.9, 1.1]}}
    assert speedup.targets(ddp)["memory"] is None and speedup.targets(ddp)["cap"] is None
    assert speedup.targets(ddp)["not_slower"] is True and speedup.targets(ddp)["same_within"] is None
    # Advice that keeps the defaults runs the same job twice: "not slower" does not apply; the
    # interval holding 1 or not is a check of the measurement.
    ddp.update(advised_is_default=True, measured={"speedup": 0.98, "ci": [0.964, 0.997]})
    t = speedup.targets(ddp)
    assert t["not_slower"] is None and t["same_within"] is False and t["speedup"] is True
    ddp["measured"] = {"speedup": 0.99, "ci": [0.95, 1.02]}
    assert speedup.targets(ddp)["same_within"] is True


def test_output_path(speedup, capsys):
    args, folder = speedup.parse_arguments([])
    assert Path(folder) == RESULTS
    assert (args.models, args.networks, args.ranks) == (["mlp", "cnn", "lstm", "transformer"], ["10gbe", "25gbe"],
                                                        [2, 4])
    assert args.capped_model == "transformer"
    assert speedup.parse_arguments(["--models", "mlp"])[0].capped_model is None      # no transformer: no cap case
    for argv in (["--models", "mlp"], ["--ranks", "2"], ["--rounds", "3"], ["--networks", "10gbe"],
                 ["--calibration-rounds", "0"], ["--capped-model", "none"]):
        assert Path(speedup.parse_arguments(argv)[1]) == RESULTS / "subset"
    assert speedup.parse_arguments(["--ranks", "2,4", "--out", str(RESULTS)])[1] == str(RESULTS)
    assert speedup.parse_arguments(["--models", "mlp", "--capped-model", "mlp", "--out", "elsewhere"])[1] == "elsewhere"
    capsys.readouterr()


def test_calibrations_measured_apart_are_read_by_reducer_and_ranks(speedup, capsys, tmp_path):
    files = {}
    for reducer, ranks in (("ddp", 2), ("fsdp2", 4), ("plan", 2), ("ddp", 3)):
        files[reducer, ranks] = str(tmp_path / f"{reducer}-{ranks}.json")
        ReducerCalibration(reducer, per_step=1e-3, per_message=2e-4, ranks=ranks).write(files[reducer, ranks])
    args, folder = speedup.parse_arguments(["--reducer-calibration", files["ddp", 2],
                                            "--reducer-calibration", files["fsdp2", 4]])
    assert args.reducer_calibration == {("ddp", 2): files["ddp", 2], ("fsdp2", 4): files["fsdp2", 4]}
    assert Path(folder) == RESULTS / "subset"           # not the stored result's calibrations
    (tmp_path / "bad.json").write_text("[]")
    for argv, said in (([files["plan", 2]], "a calibration of the 'plan' reducer; this script runs ddp and fsdp2"),
                       ([files["ddp", 3]], "measured on 3 ranks, not among --ranks (2, 4)"),
                       ([files["ddp", 2], files["ddp", 2]], "is already the ddp calibration on 2 ranks"),
                       ([str(tmp_path / "bad.json")], "bad.json: not a reducer calibration"),
                       ([str(tmp_path / "none.json")], "none.json")):
        with pytest.raises(SystemExit):
            speedup.parse_arguments([a for path in argv for a in ("--reducer-calibration", path)])
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "error: --reducer-calibration" in last and said in last, last


def test_the_gpu_backend_runs_one_rank_without_a_gloo_calibration(speedup, capsys):
    args, folder = speedup.parse_arguments(["--backend", "nccl"])
    assert (args.ranks, args.calibration_rounds) == ([1], 0)
    assert Path(folder) == RESULTS / "subset"                       # the GPU command's models and network are fewer
    # The GPU command's stage runs the stored GPU result's arguments.
    spec = importlib.util.spec_from_file_location("gpu_run_stages", ROOT / "validation" / "gpu" / "run.py")
    gpu_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_run)
    stage = gpu_run.STAGES["speedup"][1]
    assert stage[0] == "validation/frameworks/speedup.py"
    args, folder = speedup.parse_arguments([str(RESULTS) if a == "OUT" else a for a in stage[1:]])
    assert Path(folder) == RESULTS and args.capped_model == "transformer"
    assert (args.models, args.networks, args.rounds) == (list(speedup.GPU_MODELS), list(speedup.GPU_NETWORKS), 12)
    for argv, said in ((["--backend", "nccl", "--calibration-rounds", "2"], "the reducer calibration runs on gloo"),
                       (["--backend", "nccl", "--ranks", "0"], "each must be a whole number >= 1 (one GPU each)"),
                       (["--ranks", "1"], "each must be a whole number >= 2 (data parallelism; one rank runs on nccl")):
        with pytest.raises(SystemExit):
            speedup.parse_arguments(argv)
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "error:" in last and said in last, last


def test_a_gpu_table_predicts_fsdp2_on_streams_and_leaves_its_peak_out(speedup):
    profile = Profile.from_arrays(sizes=[4e6, 1e6, 2e6, 3e6], forward=[1e-3] * 4, backward=[3e-3, 2e-3, 1e-3, 2e-3],
                                  names=[f"layers.{k}.weight" for k in range(4)])     # four blocks: four units
    on_streams = speedup.fsdp2_case(profile, "10gbe", 64, blocking=False)
    blocking = speedup.fsdp2_case(profile, "10gbe", 64)
    # Collectives that block the training thread serialise the step: never faster than on streams.
    assert blocking["predicted"]["default"] > on_streams["predicted"]["default"]
    args, _ = speedup.parse_arguments(["--backend", "nccl", "--models", "mlp", "--out", "elsewhere"])
    cases = []
    args.ranks = [1, 2]                               # FSDP2 runs on two GPUs; on one it is left out
    for framework, solved in (("ddp", speedup.ddp_case(profile, "10gbe", 64)), ("fsdp2", on_streams)):
        cases.append({"model": "mlp", "network": "10gbe", "framework": framework, "cap_fraction": None,
                      "ranks": 1 if framework == "ddp" else 2,
                      "memory_cap": None, **solved, "messages_per_step": {"default": 3.0, "advised": 2.0},
                      "measured": speedup.speedup_interval([0.02, 0.021], [0.015, 0.016])})
    document = speedup.document_of(cases, {}, args, ["--backend", "nccl"], "host, one GPU", {"start": "0", "end": "0"})
    assert document["backend"] == "nccl"
    assert cases[1]["targets"]["speedup_ratio"] == pytest.approx(
        cases[1]["measured"]["speedup"] / on_streams["predicted"]["speedup"], rel=1e-12)
    assert cases[1]["targets"]["memory"] is None and cases[1]["targets"]["cap"] is None
    text = speedup.markdown(document)
    assert "NCCL ranks, one GPU each" in text and "gloo ranks" not in text
    assert "* FSDP2's peak: not measured on a GPU (above)." in text
    assert "unsharded parameters and gradients, MiB" not in text
    assert "`--pattern fsdp` for FSDP2, its collectives on the GPU's streams" in text
    assert "FSDP2 is left out on one rank" in text
    assert [c["framework"] for c in speedup.cases_of(["mlp"], ["10gbe"], "mlp", 1.0, ("ddp",))] == ["ddp"]


@pytest.mark.parametrize("argv, culprit", [
    (["--models", "mlp,gpt"], "--models"), (["--models", "mlp,mlp"], "--models"), (["--networks", "5g"], "--networks"),
    (["--networks", "mgwfbp-10gbe"], "--networks"), (["--ranks", "1"], "--ranks"), (["--ranks", "two"], "--ranks"),
    (["--rounds", "0"], "--rounds"), (["--steps", "0"], "--steps"), (["--warmup", "-1"], "--warmup"),
    (["--workers", "0"], "--workers"), (["--cap-fraction", "0"], "--cap-fraction"),
    (["--cap-fraction", "inf"], "--cap-fraction"), (["--calibration-rounds", "-1"], "--calibration-rounds"),
    (["--models", "mlp", "--capped-model", "cnn"], "--capped-model"), (["--profile-steps", "nan"], "--profile-steps"),
])
def test_bad_arguments_get_one_line(speedup, capsys, argv, culprit):
    with pytest.raises(SystemExit) as exit_:
        speedup.parse_arguments(argv)
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and culprit in last


def test_a_tiny_run_agrees_with_itself_and_the_predictions(speedup, harness, tmp_path):
    # DDP's reducer cost is read from a file made by hand; FSDP2's is measured by the run.
    pytest.importorskip("torch")
    ddp_file = tmp_path / "ddp-measured-apart.json"
    ReducerCalibration("ddp", per_step=1.5e-3, per_message=2.5e-4, ranks=2).write(ddp_file)
    command = [sys.executable, str(SCRIPT), "--models", "mlp", "--ranks", "2", "--networks", "10gbe",
               "--rounds", "2", "--steps", "1", "--warmup", "1", "--profile-steps", "2",
               "--calibration-rounds", "1", "--calibration-steps", "2", "--reducer-calibration", str(ddp_file),
               "--capped-model", "mlp", "--cap-fraction", "1.8", "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Warning" not in run.stderr, run.stderr[-3000:]       # e.g. torch's deprecated collective names
    document = json.loads((tmp_path / "speedup-cpu.json").read_text())
    table = (tmp_path / "speedup-cpu.md").read_text()
    assert "emulated link" in table and "Timings of this host" in table and document["command"] in table
    cases = document["cases"]
    assert [(c["framework"], c["memory_cap"] is not None) for c in cases] == [("ddp", False), ("fsdp2", False),
                                                                             ("fsdp2", True)]
    calibration = tmp_path / "calibration.json"
    for case in cases:
        assert "error" not in case, case.get("error")
        m, p = case["measured"], case["predicted"]
        assert len(case["rounds"]["default"]) == len(case["rounds"]["advised"]) == 2
        assert m["default"] == pytest.approx(np.mean(case["rounds"]["default"]), rel=1e-12)
        assert m["advised"] == pytest.approx(np.mean(case["rounds"]["advised"]), rel=1e-12)
        assert m["speedup"] == pytest.approx(m["default"] / m["advised"], rel=1e-12)
        assert m["ci"][0] <= m["speedup"] <= m["ci"][1]
        assert p["speedup"] == pytest.approx(p["default"] / p["advised"], rel=1e-12)
        assert case["targets"]["speedup_ratio"] == pytest.approx(m["speedup"] / p["speedup"], rel=1e-12)
        assert case["targets"]["not_slower"] == (None if case["advised_is_default"] else m["ci"][1] >= 1.0)
        # The predictions are the prediction functions' on the profile the ranks measured, with
        # the reducer's cost the calibration measured.
        calibration.write_text(json.dumps(document["calibrations"]["2"][case["framework"]]))
        profile = Profile.from_dict(case["profile"])
        again = (speedup.ddp_case(profile, "10gbe", 64, read_reducer_calibration(calibration))
                 if case["framework"] == "ddp" else
                 speedup.fsdp2_case(profile, "10gbe", 64, case["memory_cap"], read_reducer_calibration(calibration)))
        assert again["predicted"] == p and again["predicted_plain"] == case["predicted_plain"]
        assert again["advice"] == case["advice"]
        # The loopback collectives timed bare before the cases, each size's bytes a multiple of the ranks'.
        assert sorted(case["loopback"]) == ["all_gather", "all_reduce", "reduce_scatter"]
        assert [size for size, _ in case["loopback"]["all_gather"]] == [float(s) for s in harness.LOOPBACK_SIZES]
        assert all(t > 0 for points in case["loopback"].values() for _, t in points)
    ddp, fsdp2, capped = cases
    used = document["calibrations"]["2"]
    assert (used["ddp"]["per_step"], used["ddp"]["per_message"], used["ddp"]["file"]) == (
        1.5e-3, 2.5e-4, "ddp-measured-apart.json")
    # Measured: 1 to 16 messages, then the shape regime's 4 and 64 layers and 16 and 64 KiB tensors.
    assert "file" not in used["fsdp2"] and len(used["fsdp2"]["samples"]) == 5 + 4
    assert used["fsdp2"]["model"]["optimizer"] == {"name": "SGD", "options": {"lr": 1e-3, "momentum": 0.9}}
    assert ("ddp on 2 ranks, 1.500 ms per step on the host, 0.250 ms per bucket on the channel, 0.000 ms of compute "
            "per bucket (not measured) (read from `ddp-measured-apart.json`)") in table
    fitted = used["fsdp2"]
    assert (f"fsdp2 on 2 ranks, {1e3 * fitted['per_step']:.3f} ms per step and" in table
            and "the loopback collectives, timed bare on the ranks before the cases and not priced" in table)
    assert ddp["messages_per_step"]["advised"] == ddp["predicted"]["messages"]["advised"]
    assert capped["memory_cap"] == pytest.approx(1.8 * Profile.from_dict(capped["profile"]).total_bytes)
    for case in (fsdp2, capped):
        peak, measured = case["predicted"]["advised_peak"], case["memory"]["advised_peak"]
        assert case["targets"]["memory_error"] == pytest.approx((measured - peak) / peak, rel=1e-12)
    assert capped["targets"]["cap"] == (capped["memory"]["advised_peak"] <= capped["memory_cap"])
    # The mlp's tensors cost far less than a message's 3 ms on 10gbe: FSDP2 is advised one unit,
    # the model, kept whole. Its parameters and gradients are then all whole at once at the end
    # of the backward, on the real job as in the model: twice the model's bytes.
    total = Profile.from_dict(fsdp2["profile"]).total_bytes
    assert fsdp2["setting"]["units"] == [[""]]
    assert fsdp2["predicted"]["advised_peak"] == fsdp2["memory"]["advised_peak"] == 2 * total
    assert fsdp2["messages_per_step"]["advised"] == fsdp2["predicted"]["messages"]["advised"] == 2


def test_an_interrupted_run_keeps_the_cases_finished_and_leaves_no_rank(tmp_path):
    # Ctrl-C in a terminal reaches the script and its ranks (one process group) once the first
    # case is done: it goes to speedup-cpu.interrupted.{md,json}, the ranks are gone, status 130.
    pytest.importorskip("torch")
    command = [sys.executable, str(SCRIPT), "--models", "mlp", "--ranks", "2", "--networks", "10gbe",
               "--rounds", "40", "--steps", "1", "--warmup", "1", "--profile-steps", "2",
               "--calibration-rounds", "0", "--out", str(tmp_path)]
    status, lines, left = interrupt_on(command, "cases on 2 ranks 1/2")
    assert status == 130, lines
    assert not left                                  # no rank left behind
    assert not (tmp_path / "speedup-cpu.md").exists()
    kept = json.loads((tmp_path / "speedup-cpu.interrupted.json").read_text())
    assert [(c["framework"], c["model"]) for c in kept["cases"]] == [("ddp", "mlp")]
    assert kept["cases"][0]["targets"]["speedup_ratio"] > 0
    assert "2 ranks, mlp, 10gbe, ddp: predicted" in (tmp_path / "speedup-cpu.interrupted.md").read_text()
    assert lines[-1].startswith("interrupted after") and "speedup-cpu.interrupted.json" in lines[-1]


COUNT_GROUPED_UNIT = """
import importlib.util, json, os, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
spec = importlib.util.spec_from_file_location("harness", sys.argv[1])
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)
from fusionopt.integrations import EmulatedLink
from fusionopt.cost import AlphaBeta
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
torch.set_num_threads(1)
torch.manual_seed(0)
model, make_input = harness.build_model("transformer")
params = [[name, p.numel() * p.element_size()] for name, p in model.named_parameters()]
nbytes = lambda modules: sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
if sys.argv[3] == "blocks":
    units = [[model.embed, model.layers[0], model.layers[1]], [model.layers[2]], [model.layers[3], model.norm]]
    sizes = sorted({nbytes(u) for u in units} | {nbytes([model.head])})
    reshard = [True] * 3
elif sys.argv[3] == "capped":          # every parameter wrapped; the first unit alone resharded
    units = [[model.embed, model.layers[0], model.layers[1]], [model.layers[2]], [model.layers[3], model.norm],
             [model.head]]
    sizes = sorted({nbytes(u) for u in units})
    reshard = [True, False, False, False]
else:                                  # a ModuleList, whose forward never runs, in a unit
    units = [[model.embed, model.layers], [model.norm, model.head]]
    sizes = sorted({nbytes(u) for u in units})
    reshard = [False] * 2
for unit, flag in zip(units, reshard):
    fully_shard(unit if len(unit) > 1 else unit[0], reshard_after_forward=flag)
fully_shard(model)
link = EmulatedLink(AlphaBeta(1e-4, 0.0))      # the counter's clock: on one rank FSDP2 sends no collective to hold
count = harness.UnshardedBytes(model, link)
x = make_input(1, 0)
model(x).sum().backward()
count.start()
model(x).sum().backward()
count.stop()
print(json.dumps({"sizes": sizes, "counted": sorted({b for _, _, b in count.intervals}), "peak": count.peak,
                  "total": nbytes([model]), "params": params}))
dist.destroy_process_group()
"""


def test_a_unit_of_several_modules_is_counted_once(tmp_path):
    # fully_shard([embed, layers.0, layers.1]) gives three modules one parameter group: its bytes
    # are counted once per interval, not once per module.
    pytest.importorskip("torch")
    found = count_units("blocks")
    assert found["counted"] and set(found["counted"]) <= set(found["sizes"])
    assert max(found["sizes"]) < found["peak"] <= 2 * found["total"]


def count_units(units):
    from fusionopt.integrations import free_port

    run = subprocess.run([sys.executable, "-c", COUNT_GROUPED_UNIT, str(HARNESS), str(free_port()), units],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_units_backward_starts_when_the_unit_after_it_ends(tmp_path):
    # fully_shard([embed, layers]) with layers a ModuleList: FSDP2 runs the unit's pre_backward
    # at the model's output, before [norm, head]'s backward. Its gradients are counted from the
    # end of [norm, head]'s backward, whose reduce-scatter (held on the training thread) has
    # freed its gradients and whose parameters are resharded: the peak is [embed, layers]'
    # parameters and gradients, not every parameter and gradient (2 x the model's bytes).
    pytest.importorskip("torch")
    found = count_units("modulelist")
    small, large = found["sizes"]
    assert small + large == found["total"]
    assert found["peak"] == 2 * large


def test_the_measured_peak_is_m_peak_with_the_collectives_blocking(tmp_path):
    # FSDP2 on CPU (gloo) waits out each all-gather and reduce-scatter on the training thread,
    # and nothing runs ahead: with FullySharded(blocking=True) the model's M_peak of the plan
    # FSDP2 builds from these calls ([embed, layers.0, layers.1] resharded; [layers.2],
    # [layers.3, norm] and [head] kept; the root owning nothing) is the peak the real job
    # reached, to the byte (the times only set the order, which blocking fixes). The model
    # that overlaps collectives with compute and lets FSDP2's forward gather two units ahead (a
    # GPU's streams) predicts a higher peak: three units whole in the first forward.
    pytest.importorskip("torch")
    from fusionopt.cost import AlphaBeta
    from fusionopt.model import FullySharded, Problem, simulate
    from fusionopt.advice import fsdp2_plan_of

    found = count_units("capped")
    names, sizes = zip(*found["params"])
    profile = Profile.from_arrays(list(sizes), [1e-3] * len(sizes), [2e-3] * len(sizes), names=list(names))
    units = [["embed", "layers.0", "layers.1"], ["layers.2"], ["layers.3", "norm"], ["head"], [""]]
    reshard = [True, False, False, False, False]
    half = AlphaBeta(1e-4, 0.0)
    blocking = Problem(profile, pattern=FullySharded(half, half, blocking=True))
    plan = fsdp2_plan_of(profile, units, reshard, {}, {}, blocking=True)
    assert plan.forward_prefetch == 0 and plan.num_units == 4 and not plan.root
    assert simulate(blocking, plan).peak_memory == found["peak"]
    overlapped = Problem(profile, pattern=FullySharded(half, half))
    ahead = fsdp2_plan_of(profile, units, reshard, {}, {})
    assert simulate(overlapped, ahead).peak_memory > found["peak"]
