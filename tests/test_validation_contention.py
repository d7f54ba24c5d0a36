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
