"""`fusionopt traced` reports the traced job's step and the same job's step without the profiler."""

import json

from kineto_traces import PARAMS, ddp_job

from fusionopt.cli import main


def run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write_job(folder):
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank)))
    (folder / "parameters.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    return folder


def test_traced_says_which_step_is_which_and_what_is_missing(tmp_path, capsys):
    job = write_job(tmp_path / "job")
    status, out, err = run(capsys, "traced", str(job), "--json")
    doc = json.loads(out)
    # The traced job: 1000 us; without the profiler, at the default 3 us for each of the 29
    # events of a step: 913 us.
    assert status == 0 and round(doc["predicted"] * 1e6, 6) == 1000.0
    assert round(doc["predicted_unprofiled"] * 1e6, 6) == 913.0 and round(doc["replayed_unprofiled"] * 1e6, 6) == 913.0
    assert doc["profiler_cost"]["source"] == "default" and doc["measured_unprofiled"] is None
    assert round(sum(doc["unprofiled_parts"].values()) * 1e6, 6) == 913.0
    assert err.count("\n") == 1 and err.startswith(f"fusionopt: warning: {job}: no profiler_cost.json")
    assert "no unprofiled.json" in err and doc["unprofiled_note"] in err
    # Measured beside the traces: no warning, and the check in the table.
    (job / "profiler_cost.json").write_text(json.dumps({"seconds_per_event": 1e-6}))
    (job / "unprofiled.json").write_text(json.dumps({"ddp_plain_median": 0.000950}))
    status, out, err = run(capsys, "traced", str(job))
    assert status == 0 and err == ""
    assert "step                   1.000         1.000   error +0.0%" in out
    assert "Without the profiler (predicted: the traces replayed with its cost, 1 us per recorded event (measured)" in out
    assert "step                     0.971   measured 0.950 ms, error +2.2%" in out
    status, out, err = run(capsys, "traced", str(job), "--profiler-cost", "2e-6", "--json")
    doc = json.loads(out)
    assert round(doc["predicted_unprofiled"] * 1e6, 6) == 942.0 and doc["profiler_cost"]["source"] == "given"
    status, out, err = run(capsys, "traced", str(job), "--profiler-cost", "-1e-6")
    assert status == 2 and out == ""
    assert err == "fusionopt: error: --profiler-cost must be a finite number of seconds >= 0, got -1e-06\n"
