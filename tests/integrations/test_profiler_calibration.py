"""The profiler's cost measured on this host, and the recorder that writes it beside a job's
traces with the job's step measured without the profiler."""

import json
import warnings

import pytest

from fusionopt.integrations import read_profiler_cost, read_unprofiled_reference

torch = pytest.importorskip("torch")

from fusionopt.integrations import record_ddp_traces, measure_profiler_cost, predict_traced_step  # noqa: E402


def test_calibration_times_the_same_operators_with_and_without_the_profiler():
    document = measure_profiler_cost(operators=200, repeats=2)
    # Each x.add_(1) is recorded as one operator at least (its scalar's conversion may add more).
    assert document["events"] >= 200 and document["events"] % 200 == 0
    assert document["seconds_per_event"] == pytest.approx(
        max(0.0, document["profiled_s"] - document["unprofiled_s"]) / document["events"], rel=1e-12)
    assert document["unprofiled_s"] > 0 and document["operators"] == 200 and document["repeats"] == 2
    with pytest.raises(ValueError, match="operators must be a whole number >= 1, got 0"):
        measure_profiler_cost(operators=0)


def test_recorder_refuses_a_folder_holding_a_profiler_cost(tmp_path):
    (tmp_path / "profiler_cost.json").write_text(json.dumps({"seconds_per_event": 1e-6}))
    with pytest.raises(ValueError, match=r"already holds a recording \(profiler_cost\.json\)"):
        record_ddp_traces(tmp_path, "mlp")
    assert json.loads((tmp_path / "profiler_cost.json").read_text()) == {"seconds_per_event": 1e-6}


def test_recorded_job_carries_its_profiler_cost_and_unprofiled_step(tmp_path):
    folder = tmp_path / "mlp"
    files = record_ddp_traces(folder, "mlp", batch=16, steps=5, bucket_cap_mb=0.5)
    assert {"parameters.csv", "profiler_cost.json", "unprofiled.json"} <= {f.name for f in files}
    cost, reference = read_profiler_cost(folder), read_unprofiled_reference(folder)
    assert cost.source == "measured" and cost.seconds_per_event >= 0 and reference.seconds > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = predict_traced_step(folder)
    assert not [w for w in caught if "unprofiled" in str(w.message)] and r.unprofiled_note is None
    assert r.profiler_cost == cost and r.measured_unprofiled == reference.seconds
    # A job on the CPU alone: every replayed step is its traced step less what the replay took out.
    for steps in r.replays.values():
        assert all(0 < s.replayed <= s.traced + 1e-12 for s in steps)
        assert all(s.traced - s.replayed <= s.events * cost.seconds_per_event + 1e-12 for s in steps)
