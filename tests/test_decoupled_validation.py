"""validation/decoupled/run.py: its cross-checks agree, and a zoo cell carries every method."""

import importlib.util
import io
from pathlib import Path

from fusionopt.reporting import Progress

SCRIPT = Path(__file__).resolve().parents[1] / "validation" / "decoupled" / "run.py"


def load():
    spec = importlib.util.spec_from_file_location("decoupled_validation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cross_checks_agree_on_seeded_problems():
    run = load()
    with Progress(None, stream=io.StringIO()) as progress:
        checks = run.cross_checks(12, progress)
    assert checks["dp"] >= 1 and checks["dp_agree"] == checks["dp"]
    assert len(checks["opt_gaps"]) == 12 and min(checks["opt_gaps"]) >= -1e-9
    assert min(checks["bound_gaps"]) >= -1e-9
    with Progress(None, stream=io.StringIO()) as progress:
        assert run.cross_checks(12, progress) == checks                                  # seeded: the same figures


def test_a_zoo_cell_has_every_method_above_the_bound():
    run = load()
    row = run.zoo_cell("resnet18", 32, "10gbe", 8, "barrier")
    assert set(row["T"]) == {"unfused", "Megatron", "ZeRO-2", "decoupled-opt", "decoupled-dp (exact)"}
    assert all(t >= row["bound"] * (1 - 1e-12) for t in row["T"].values())
    assert row["T"]["decoupled-dp (exact)"] <= row["T"]["decoupled-opt"] * (1 + 1e-9)
