"""Where the validation and paper scripts write: a run with other arguments than the stored
result's writes into a ``subset`` folder beside it, an interrupted run writes what finished
to ``STEM.interrupted.{md,json}``, and bad numbers are refused when the arguments are parsed."""

import argparse
import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest

from interrupting import interrupt_on
from kineto_traces import ddp_job

from fusionopt.experiments import Study
from fusionopt.reporting import Progress, changed_options, subset_location

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"


def load(script: str):
    spec = importlib.util.spec_from_file_location(script.replace("/", "_").removesuffix(".py"), ROOT / script)
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def training():
    return load("validation/training/run.py")


@pytest.fixture(scope="module")
def traces():
    return load("validation/traces/run.py")


def parser():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--models", default="mlp,cnn,lstm")
    p.add_argument("--out", default="results")
    return p


def test_changed_options_name_what_differs_from_the_stored_run():
    p = parser()
    assert changed_options(p, p.parse_args(["--out", "elsewhere"]), leave=["out"]) == []
    assert changed_options(p, p.parse_args(["--out", "elsewhere"])) == ["--out"]
    assert changed_options(p, p.parse_args(["--models", "mlp", "--steps", "30"])) == ["--models"]
    # The stored result made with --steps 10: the defaults are the other arguments.
    assert changed_options(p, p.parse_args(["--steps", "10"]), reference={"steps": 10}) == []
    assert changed_options(p, p.parse_args([]), reference={"steps": 10}) == ["--steps"]


def test_a_subset_run_writes_beside_the_stored_file_only_where_it_would_replace_it(tmp_path):
    stored = tmp_path / "exact.md"
    err = io.StringIO()
    assert subset_location(stored, stored, ["--quick"], stream=err) == str(tmp_path / "subset" / "exact.md")
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("--quick: not the stored result's")
    assert subset_location(tmp_path, tmp_path, ["--steps"], folder=True) == str(tmp_path / "subset")
    assert subset_location(stored, stored, []) == str(stored)                       # the stored run itself
    assert subset_location(tmp_path / "mine.md", stored, ["--quick"]) == str(tmp_path / "mine.md")


def test_an_interruption_writes_the_kept_document_beside_the_log(tmp_path):
    log = tmp_path / "x.interrupted.md"
    err = io.StringIO()
    with Progress(log, stream=err) as progress:
        progress.stage("jobs", total=3)
        progress.step("job 1")
        progress.keep({"results": [1]})
        progress.step("job 2")
        progress.keep({"results": [1, 2]})
        raise KeyboardInterrupt
    assert progress.exit_code == 130
    assert json.loads((tmp_path / "x.interrupted.json").read_text()) == {"results": [1, 2]}
    assert err.getvalue().splitlines()[-1].endswith(f"are in {log} and {tmp_path / 'x.interrupted.json'}")


def test_a_quick_validation_run_leaves_the_stored_result_byte_identical(tmp_path, monkeypatch, capsys):
    ps = load("validation/ps/run.py")
    stored = tmp_path / "ps.md"
    stored.write_bytes(b"the stored result\n")
    monkeypatch.setattr(ps, "RESULTS", stored)
    monkeypatch.setattr(ps, "MODELS", ("resnet50",))
    monkeypatch.setattr(ps, "NODES", (4,))
    assert ps.main(["--quick"]) == 0
    assert stored.read_bytes() == b"the stored result\n"
    written = (tmp_path / "subset" / "ps.md").read_text()
    assert "by `python validation/ps/run.py --quick`" in written and "resnet50" in written
    assert "--quick: not the stored result's arguments" in capsys.readouterr().err


def test_a_paper_study_with_other_arguments_writes_into_subset(tmp_path):
    (tmp_path / "RESULTS.md").write_bytes(b"the stored reproduction\n")
    study = Study("Reproduce a paper.", "papers/x/reproduce.py", str(tmp_path), "small")
    assert study.parse(["--quick"]).out == str(tmp_path / "subset")
    with study:
        study.progress.stage("one", total=1)
        study.progress.step("done")
        study.write("# Quick report\n")
    assert (tmp_path / "RESULTS.md").read_bytes() == b"the stored reproduction\n"
    assert (tmp_path / "subset" / "RESULTS.md").read_text() == "# Quick report\n"
    again = Study("Reproduce a paper.", "papers/x/reproduce.py", str(tmp_path), "small")
    assert again.parse([]).out == str(tmp_path)                        # the stored run itself
    mine = tmp_path / "mine"
    assert Study("Reproduce.", "x.py", str(tmp_path), "small").parse(["--quick", "--out", str(mine)]).out == str(mine)


def test_training_output_path(training, capsys):
    args, models, folder, stem = training.parse_arguments([])
    assert (models, Path(folder), stem) == (["mlp", "cnn", "lstm"], RESULTS, "training-cpu")
    for argv in (["--models", "mlp"], ["--steps", "10"], ["--workers", "8"], ["--models", "lstm,cnn,mlp"]):
        assert Path(training.parse_arguments(argv)[2]) == RESULTS / "subset"
    assert training.parse_arguments(["--backend", "nccl", "--ranks", "1"])[2:] == (str(RESULTS), "training-gpu")
    assert Path(training.parse_arguments(["--backend", "nccl", "--ranks", "2"])[2]) == RESULTS / "subset"
    assert Path(training.parse_arguments(["--ranks", "1"])[2]) == RESULTS / "subset"
    assert training.parse_arguments(["--models", "mlp", "--out", "elsewhere"])[2] == "elsewhere"
    capsys.readouterr()


@pytest.mark.parametrize("argv, culprit", [
    (["--steps", "0"], "--steps"), (["--steps=-3"], "--steps"), (["--warmup", "-1"], "--warmup"),
    (["--profile-steps", "0"], "--profile-steps"), (["--batch", "0"], "--batch"), (["--workers", "0"], "--workers"),
    (["--steps", "nan"], "--steps"), (["--models", "mlp,gpt"], "--models"), (["--network", "5g"], "--network"),
    (["--ranks", "3"], "--ranks"),
])
def test_training_refuses_bad_numbers_when_parsing(training, capsys, argv, culprit):
    with pytest.raises(SystemExit) as exit_:
        training.parse_arguments(argv)
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in last and culprit in last


def test_traces_output_path(traces, capsys):
    assert traces.parse_arguments([])[1:] == (str(RESULTS), "traces-cpu")
    assert traces.parse_arguments(["--counterfactual"])[1:] == (str(RESULTS), "traces-counterfactual-cpu")
    assert traces.parse_arguments(["--keep", "kept-jobs-not-made"])[1] == str(RESULTS)   # where traces go only
    for argv in (["--steps", "12"], ["--counterfactual", "--rounds", "1"], ["--traces", "jobs"]):
        assert Path(traces.parse_arguments(argv)[1]) == RESULTS / "subset"
    capsys.readouterr()
    for argv, culprit in ((["--steps", "2"], "--steps"), (["--steps", "0"], "--steps"), (["--rounds", "2"], "--rounds"),
                          (["--counterfactual", "--rounds", "0"], "--rounds"),
                          (["--traces", "jobs", "--counterfactual"], "--traces")):
        with pytest.raises(SystemExit) as exit_:
            traces.parse_arguments(argv)
        assert exit_.value.code == 2 and culprit in capsys.readouterr().err.strip().splitlines()[-1]


def write_jobs(root, count):
    for k in range(count):
        folder = root / f"job{k}"
        folder.mkdir(parents=True)
        for rank in (0, 1):
            (folder / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank)))
    return root


def test_traces_from_a_folder_and_interrupted(traces, tmp_path, monkeypatch, capsys):
    jobs = write_jobs(tmp_path / "jobs", 3)
    out = tmp_path / "out"
    assert traces.main(["--traces", str(jobs), "--out", str(out)]) == 0
    document = json.loads((out / "traces-cpu.json").read_text())
    assert [r["job"] for r in document["results"]] == ["job0", "job1", "job2"]
    assert [round(r["predicted"] * 1e6, 6) for r in document["results"]] == [1000.0] * 3     # the hand-made job
    stored = (out / "traces-cpu.md").read_bytes()

    real, calls = traces.predict_traced_step, []

    def interrupted_on_the_second(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(traces, "predict_traced_step", interrupted_on_the_second)
    assert traces.main(["--traces", str(jobs), "--out", str(out)]) == 130
    assert (out / "traces-cpu.md").read_bytes() == stored
    assert [r["job"] for r in json.loads((out / "traces-cpu.interrupted.json").read_text())["results"]] == ["job0"]
    assert "job0: measured 1.000 ms, predicted 1.000 ms" in (out / "traces-cpu.interrupted.md").read_text()
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("interrupted after")


def test_an_interrupted_training_run_keeps_the_models_finished(tmp_path):
    # Ctrl-C in a terminal reaches the script and its two ranks (one process group) once the
    # first model is done: the finished model goes to training-cpu.interrupted.{md,json}.
    # The reducer's cost is given, not measured first, so that the first model is reached soon.
    pytest.importorskip("torch")
    from fusionopt.integrations import ReducerCalibration

    ReducerCalibration("plan", per_step=2e-3, per_message=4e-4).write(tmp_path / "reducer.json")
    command = [sys.executable, str(ROOT / "validation" / "training" / "run.py"), "--models", "mlp,cnn,lstm",
               "--steps", "1", "--rounds", "1", "--warmup", "0", "--profile-steps", "1",
               "--reducer-calibration", str(tmp_path / "reducer.json"), "--out", str(tmp_path)]
    status, lines, left = interrupt_on(command, "models 1/3")
    assert status == 130, lines
    assert not left                                  # no rank left behind
    assert not (tmp_path / "training-cpu.md").exists()
    kept = json.loads((tmp_path / "training-cpu.interrupted.json").read_text())
    assert list(kept["results"]) == ["mlp"] and set(kept["results"]["mlp"]["plans"]) >= {"ddp", "dp", "wfbp"}
    assert "mlp: ddp" in (tmp_path / "training-cpu.interrupted.md").read_text()
    assert lines[-1].startswith("interrupted after") and "training-cpu.interrupted.json" in lines[-1]


def test_a_one_rank_run_says_so_in_its_table(training):
    args, _, _, _ = training.parse_arguments(["--ranks", "1", "--models", "mlp"])
    assert args.ranks == 1
    assert (training._ranks({"ranks": 1}), training._ranks({"ranks": 2}), training._ranks({})) == \
        ("1 rank,", "2 ranks,", "2 ranks,")


def test_training_predicts_with_the_reducer_cost_measured_apart(training, tmp_path):
    # Two 1 MB tensors, backward and forward 1 ms each, on AlphaBeta(3 ms, 1 ns/B): single is
    # 2 + 5 + 2 = 9 ms, wfbp 1 -> 5 -> 9 + 2 = 11 ms. With 0.4 ms per message and 0.7 ms per
    # step: single 10.1 ms, wfbp 12.5 ms; the plain prediction is left as it was.
    from fusionopt.integrations import ReducerCalibration
    from fusionopt.cost import AlphaBeta
    from fusionopt.model import Plan, Profile

    profile = Profile.from_arrays([1e6, 1e6], [1e-3, 1e-3], [1e-3, 1e-3])
    plans = {name: {"sync": "barrier", "predicted": t, "plan": Plan.from_cuts(profile, [cut]).to_dict()}
             for name, cut, t in (("single", False, 9e-3), ("wfbp", True, 11e-3))}
    results = {"tiny": {"profile": profile.to_dict(), "plans": plans}}
    calibration = ReducerCalibration("plan", per_step=7e-4, per_message=4e-4)
    training.with_reducer(results, AlphaBeta(3e-3, 1e-9), calibration)
    assert plans["single"]["predicted_with_reducer"] == pytest.approx(10.1e-3, abs=1e-12)
    assert plans["wfbp"]["predicted_with_reducer"] == pytest.approx(12.5e-3, abs=1e-12)
    assert plans["single"]["predicted"] == 9e-3
    # The compute per message a result document carries goes on the compute stream, 0.5 ms: single
    # ready at 2.5 ms, 2.5 -> 7.5, T = 9.5 ms; wfbp's tensor 1 ready at 1.5, sent 1.5 -> 5.5, tensor 0's
    # backward 1.5 -> 2.5 and ready at 3, but the channel frees at 5.5: 5.5 -> 9.5, T = 11.5 ms.
    document = dict(ReducerCalibration("plan", per_step=0.0, per_message=0.0, message_compute=5e-4).to_dict())
    assert training.reducer_of(document).message_compute == 5e-4
    training.with_reducer(results, AlphaBeta(3e-3, 1e-9), training.reducer_of(document))
    assert plans["single"]["predicted_with_reducer"] == pytest.approx(9.5e-3, abs=1e-12)
    assert plans["wfbp"]["predicted_with_reducer"] == pytest.approx(11.5e-3, abs=1e-12)
    # A version 1 document, written before the compute regime, has none.
    old = {k: v for k, v in document.items() if k not in ("message_compute", "compute_samples")}
    assert training.reducer_of({**old, "version": 1}).message_compute == 0.0
    # Costs per tensor and per byte a calibration carries are kept, not dropped: 0.1 ms for each of
    # the two tensors on the host, and 0.5 ms per MB on the 2 MB message of single (1 ms): 9 + 1.2 ms.
    shaped = dict(ReducerCalibration("plan", per_step=0.0, per_message=0.0, per_tensor=1e-4,
                                     per_byte=5e-10).to_dict())
    training.with_reducer(results, AlphaBeta(3e-3, 1e-9), training.reducer_of(shaped))
    assert plans["single"]["predicted_with_reducer"] == pytest.approx(10.2e-3, abs=1e-12)
    text = training.markdown({"date": "d", "host": "h", "network": "10gbe", "workers": 64, "steps": 3, "warmup": 1,
                              "command": "c", "reducer_calibration": shaped, "targets": {}, "results": {}})
    assert ("0.000 ms per step and 0.100 ms per parameter tensor on the host, 0.000 ms per message and 0.524 ms "
            "per MiB of it on the channel, 0.000 ms of compute per message") in text
    # The table's line of the figures measured apart names the compute per message.
    text = training.markdown({"date": "d", "host": "h", "network": "10gbe", "workers": 64, "steps": 3, "warmup": 1,
                              "command": "c", "reducer_calibration": document, "targets": {}, "results": {}})
    assert "0.000 ms per message on the channel, 0.500 ms of compute per message." in text
    text = training.markdown({"date": "d", "host": "h", "network": "10gbe", "workers": 64, "steps": 3, "warmup": 1,
                              "command": "c", "reducer_calibration": old, "targets": {}, "results": {}})
    assert "0.000 ms of compute per message (not measured)." in text
    # A calibration file of another reducer is refused in one line naming it.
    path = tmp_path / "ddp.json"
    ReducerCalibration("ddp", per_step=0.0, per_message=0.0).write(path)
    args, _, _, _ = training.parse_arguments(["--reducer-calibration", str(path)])
    with pytest.raises(ValueError, match=f"--reducer-calibration {path}: a ddp reducer calibration"):
        training.reducer_calibration(args)
