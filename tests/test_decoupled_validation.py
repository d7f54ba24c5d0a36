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
        checks = run.cross_checks(8, progress)
    # every random profile has tensor 0's gradient strictly last (its backward time is drawn from a continuous
    # range), so decoupled-dp takes all of them, layerwise and with update times included, and equals brute force
    assert checks["dp"] == 8 and checks["dp_agree"] == checks["dp"]
    assert min(checks["dp_kinds"]["layerwise"], checks["dp_kinds"]["update"]) >= 1
    assert len(checks["opt_gaps"]) == 8 and min(checks["opt_gaps"]) >= -1e-9
    assert min(checks["bound_gaps"]) >= -1e-9
    with Progress(None, stream=io.StringIO()) as progress:
        again = run.cross_checks(4, progress)              # seeded, drawn in turn: the first four again
    assert again["opt_gaps"] == checks["opt_gaps"][:4] and again["bound_gaps"] == checks["bound_gaps"][:4]


def test_a_zoo_cell_has_every_method_above_the_bound():
    run = load()
    row = run.zoo_cell("resnet18", 32, "10gbe", 8, "barrier")
    assert set(row["T"]) == {"unfused", "Megatron", "ZeRO-2", "decoupled-opt", "decoupled-dp (exact)"}
    assert all(t >= row["bound"] * (1 - 1e-12) for t in row["T"].values())
    assert row["T"]["decoupled-dp (exact)"] <= row["T"]["decoupled-opt"] * (1 + 1e-9)


def test_a_layerwise_zoo_cell_has_the_exact_optimum_where_tensor_0_is_last():
    run = load()
    row = run.zoo_cell("resnet18", 32, "10gbe", 8, "layerwise")       # conv1 has no bias: tensor 0 ready last
    assert set(row["T"]) == {"unfused", "Megatron overlap", "DeAR", "decoupled-opt", "decoupled-dp (exact)"}
    exact = row["T"]["decoupled-dp (exact)"]
    assert exact >= row["bound"] * (1 - 1e-12)
    # the search and DeAR's groups (contiguous both ways, release times only delaying) lie in its space
    assert exact <= row["T"]["decoupled-opt"] * (1 + 1e-9) and exact <= row["T"]["DeAR"] * (1 + 1e-9)
    # VGG-16's first convolution has a bias ready with its weight and ordered after it: no exact column
    tied = run.zoo_cell("vgg16", 32, "10gbe", 8, "layerwise")
    assert "decoupled-dp (exact)" not in tied["T"] and "decoupled-opt" in tied["T"]


def test_the_stored_results_hold_the_exact_optimum_to_brute_force_and_the_search():
    """validation/results/decoupled.md as stored: decoupled-dp equals brute force on every random
    problem it takes (all of them: tensor 0 is ready last in each), and in each zoo table its T
    lies between the bound and decoupled-opt's."""
    run = load()
    text = run.RESULTS.read_text()
    agree = next(line for line in text.splitlines() if line.startswith("* `decoupled-dp` equals `decoupled-brute`"))
    counts = agree.split("**")[1].split(" of ")
    assert counts == [str(run.RANDOM_PROBLEMS)] * 2
    tables = text.split("### sync=")[1:]
    assert [block.split("\n")[0] for block in tables] == ['"barrier"', '"layerwise"']
    for block in tables:
        lines = [line for line in block.splitlines() if line.startswith("|")]
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        assert "decoupled-dp (exact)" in header
        for line in lines[2:]:
            row = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
            if row["decoupled-dp (exact)"] == "-":
                # only where it refuses: layerwise sync, VGG-16 (its first bias ready with the weight, after it)
                assert block.startswith('"layerwise"') and row["model"] == "vgg16"
                continue
            exact = float(row["decoupled-dp (exact)"].split()[0])            # printed to 0.01 ms
            assert float(row["bound"]) - 0.005 <= exact <= float(row["decoupled-opt"].split()[0]) + 0.005
