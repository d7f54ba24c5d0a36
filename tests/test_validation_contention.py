"""validation/hardware/contention.py: the stored GPU runs' plans rebuilt exactly, and a fit that
finds the factors that made its data."""

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("validation_hardware_contention",
                                                  ROOT / "validation" / "hardware" / "contention.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def stored(name: str) -> dict:
    return json.loads((RESULTS / f"nccl-gpu-{name}.json").read_text())


@pytest.mark.parametrize("run", ["gemm", "spin"])
def test_the_stored_plans_are_rebuilt_exactly(script, run):
    document = stored(run)
    cases = script.rebuild(document, run)
    assert [(c.model, c.method) for c in cases] == [(r["model"], r["method"]) for r in document["results"]]
    for case, row in zip(cases, document["results"]):
        assert case.plan.num_messages == row["messages"]
        assert case.predict() == pytest.approx(row["predicted_time"], rel=1e-12)


def test_a_plan_that_is_not_the_stored_one_stops_the_script(script):
    document = copy.deepcopy(stored("gemm"))
    document["results"][1]["predicted_time"] *= 1.001
    with pytest.raises(SystemExit, match=r"gemm run: resnet50 dp: the rebuilt plan \(3 messages, 17\.984494 ms\) "
                                         r"is not the stored one"):
        script.rebuild(document, "gemm run")


def test_the_fit_reproduces_the_data_it_was_made_from(script):
    # "Measurements" made by the model itself with kappa 1.2, mu 4 on ResNet-50's five plans:
    # the fitted factors must predict them again, and the pair that made them is among the
    # grid's pairs that fit as well. Both need not come back: where each message ends before
    # the next is ready only (1 - 1/kappa) mu counts.
    cases = [c for c in script.rebuild(stored("gemm"), "gemm run") if c.model == "resnet50"]
    for case in cases:
        case.measured = case.predict(1.2, 4.0)
    fitted = script.fit(cases)
    assert fitted["mean_abs_error"] < 1e-4
    assert (1.2, 4.0) in [(round(k, 9), round(m, 9)) for k, m in fitted["near"]]
    rows = script.prediction_rows(cases, fitted["kappa"], fitted["mu"], "resnet50")
    assert max(abs(r["relative_error"]) for r in rows) < 1e-3
    assert script.summarise(rows)["ranking"]["resnet50"]["equal"]
    assert script.mean_abs_error(cases, 1.2, 4.0) == 0.0
    assert script.mean_abs_error(cases, 1.3, 4.0) > 0.01


def test_a_later_run_on_the_calibrated_zoo_is_rebuilt_and_predicted_without_a_fit(script):
    later = json.loads(script.CHECKS[0].read_text())
    cases = script.rebuild(later, "checked run")
    assert {c.zoo_compute for c in cases} == {"calibrated"}
    for case, row in zip(cases, later["results"]):
        assert case.predict() == pytest.approx(row["predicted_time"], rel=1e-12)
    # The check predicts with factors given to it; the later run's measurements change nothing.
    every = {"kappa": 1.1, "mu": 3.0}
    folds = [{"fitted_on": "resnet50", "predicts": ["bert-base"], "kappa": 1.0, "mu": 2.0},
             {"fitted_on": "bert-base", "predicts": ["resnet50"], "kappa": 1.2, "mu": 5.0}]
    checked = script.check_rows(later, every, folds, calibrated=(1.05, 1.5))
    assert [r["predicted_time"] for r in checked["calibrated"]["results"]] == pytest.approx(
        [c.predict(1.05, 1.5) for c in cases])
    assert [r["predicted_time"] for r in checked["results"]] == pytest.approx([c.predict(1.1, 3.0) for c in cases])
    resnet = [r for r in checked["other_model"]["results"] if r["model"] == "resnet50"]
    assert [r["predicted_time"] for r in resnet] == pytest.approx(
        [c.predict(1.2, 5.0) for c in cases if c.model == "resnet50"])
    # A run that says which compute it had is rebuilt with that one alone.
    said = copy.deepcopy(later)
    said["zoo_compute"] = "roofline"
    with pytest.raises(SystemExit, match=r"checked run: resnet50 wfbp: the rebuilt plan .* is not the stored one"):
        script.rebuild(said, "checked run")


def test_the_excess_is_taken_over_each_models_barrier_plans(script):
    rows = [{"model": "a", "sync": "barrier", "messages": 3, "measured_time": 0.030, "plain_predicted_time": 0.022},
            {"model": "a", "sync": "barrier", "messages": 161, "measured_time": 0.031, "plain_predicted_time": 0.025},
            {"model": "a", "sync": "layerwise", "messages": 163, "measured_time": 0.050, "plain_predicted_time": 0.02},
            {"model": "b", "sync": "layerwise", "messages": 9, "measured_time": 0.05, "plain_predicted_time": 0.04}]
    (found,) = script.excess(rows)
    assert found["model"] == "a" and found["plans"] == 2 and found["messages"] == [3, 161]
    assert found["excess"] == pytest.approx([0.006, 0.008])
    assert found["host_queue_share"] is None                 # runs before the host's queueing was kept
    rows[0]["host_queue"], rows[1]["host_queue"] = 0.015, 0.031
    assert script.excess(rows)[0]["host_queue_share"] == pytest.approx([0.5, 1.0])
