"""``validation/profiles/run.py``: measured PyTorch models against the zoo's architectures.

The LSTM language model needs torch alone; the torchvision and transformers models run
where those libraries are installed. What is asserted is exact: the measured tensors'
names, forward order and byte sizes equal the zoo's. Times are measured, so none is
asserted."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "validation" / "profiles" / "run.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("profiles_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(script, tmp_path, models, batch=2, store=True):
    profiles = tmp_path / "profiles"
    code = script.main(["--device", "cpu", "--zoo-device", "v100", "--models", models,
                        "--batch", str(batch), "--steps", "1", "--warmup", "0",
                        "--profiles-dir", str(profiles) if store else "", "--output-dir", str(tmp_path)])
    return code, json.loads((tmp_path / "profiles-cpu.json").read_text()), profiles


def test_lstm_language_model_is_the_zoos_to_the_byte(script, tmp_path):
    code, document, profiles = run(script, tmp_path, "lstm-lm")
    assert code == 0
    [row] = document["results"]
    assert row["model"] == "lstm-lm" and row["tensors"] == 11 and row["same_tensors_as_zoo"] is True
    assert row["measured_B"] > 0 and row["measured_F"] > 0
    assert document["libraries"]["torch"] == torch.__version__
    stored = Path(row["profile"])
    assert stored.parent == profiles and stored.name == "lstm-lm-cpu-b2.json"
    from fusionopt.model import Profile
    from fusionopt.zoo import profile

    measured = Profile.read(stored)
    assert measured.names == profile("lstm-lm", device="v100", batch=2).names
    assert measured.metadata["batch"] == 2
    table = (tmp_path / "profiles-cpu.md").read_text()
    assert "| lstm-lm | 11 | yes | yes | yes |" in table      # tensors, ready and registration orders
    assert row["same_ready_order_as_zoo"] is True and row["same_registration_order_as_zoo"] is True


def test_no_store_and_unbuildable_models_are_reported(script, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules["models"], "builder", lambda name, torch: None)   # as without torchvision
    code, document, profiles = run(script, tmp_path, "resnet50", store=False)
    assert code == 0 and document["results"] == [] and document["skipped"] == ["resnet50"]
    assert not profiles.exists()
    assert "Not built here (torchvision or transformers missing): resnet50." in (
        tmp_path / "profiles-cpu.md").read_text()


@pytest.mark.parametrize("model, library", [("vit-b16", "torchvision"), ("mobilenet-v2", "torchvision"),
                                            ("bert-base", "transformers")])
def test_reference_implementations_match_the_zoo(script, tmp_path, model, library):
    # ViT and BERT are the two whose forward order differs from registration order.
    pytest.importorskip(library)
    code, document, _ = run(script, tmp_path, model, batch=2, store=False)
    [row] = document["results"]
    assert row["same_tensors_as_zoo"] is True and code == 0
    assert row["profile"] is None
