"""validation/traces/unprofiled.py on a hand-made job, and the H100 traces it checks."""

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

from kineto_traces import PARAMS, US, ddp_job

from fusionopt.integrations import predict_traced_step

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "validation" / "data" / "h100-2026-11-27" / "traces"


def script():
    spec = importlib.util.spec_from_file_location("validation_traces_unprofiled", ROOT / "validation/traces/unprofiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_writes_both_steps_against_both_measurements(tmp_path):
    job = tmp_path / "jobs" / "hand"
    job.mkdir(parents=True)
    for rank in (0, 1):
        (job / f"rank{rank}.pt.trace.json").write_text(json.dumps(ddp_job(rank)))
    (job / "parameters.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    (job / "unprofiled.json").write_text(json.dumps({"ddp_plain_median": 0.000900, "measured_in_trace": 0.001}))
    assert script().main(["--traces", str(tmp_path / "jobs"), "--out", str(tmp_path / "out")]) == 0
    document = json.loads((tmp_path / "out" / "traces-gpu.json").read_text())
    [row] = document["results"]
    # 1000 us traced and predicted; at the default 3 us for each of a step's 29 events, 913 us
    # without the profiler, against 900 measured: +1.4%.
    assert row["job"] == "hand" and round(row["predicted"] / US, 6) == 1000.0
    assert round(row["predicted_unprofiled"] / US, 6) == 913.0 and round(row["unprofiled_error"], 9) == round(13 / 900, 9)
    assert [round(s["replayed"] / US, 6) for s in row["replays"]] == [913.0] * 4
    table = (tmp_path / "out" / "traces-gpu.md").read_text()
    assert "| hand | 1.00 | 1.00 | +0.0% | 0.90 | 0.91 | +1.4% | 0.91 | 3 (default) | cpu |" in table
    assert script().main(["--traces", str(tmp_path / "empty")]) == 2


@pytest.mark.skipif(not (H100 / "bf16" / "gpt2").is_dir(), reason="the H100 traces are not in this checkout")
def test_a_host_bound_h100_job_without_its_profiler():
    # bf16 GPT-2 at batch 8, host-bound under the profiler: 88.1 ms traced, 58.7 ms measured
    # without the profiler. Without the profiler's cost the replay is the traced step; with
    # the default cost the prediction is within 10% of the measured unprofiled step.
    folder = H100 / "bf16" / "gpt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same = predict_traced_step(folder, profiler_cost=0.0)
        r = predict_traced_step(folder)
    assert abs(same.replayed - same.measured) <= 0.01 * same.measured
    assert r.measured_unprofiled == pytest.approx(0.05870932700000253, rel=1e-12)
    assert abs(r.unprofiled_error) <= 0.10 and r.predicted_unprofiled < 0.75 * r.predicted
