"""``validation/gpu/run.py``: every GPU validation in one command, within a budget.

Without a GPU every stage is skipped with its reason, and the summary says so; a stage past its
share of the budget is stopped with its whole process group."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "validation" / "gpu" / "run.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_every_stage_is_skipped_and_said_so(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "machine", lambda: {"cpu": "x", "cores": 2, "python": "3", "torch": None})
    assert script.main(["--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "gpu-run.json").read_text())
    assert [s["stage"] for s in document["stages"]] == list(script.STAGES)
    assert {s["status"] for s in document["stages"]} == {"skipped: no CUDA GPU here"}
    table = (tmp_path / "gpu-run.md").read_text()
    assert "| hardware-gemm | skipped: no CUDA GPU here | - | - |" in table


def test_a_stage_past_its_budget_is_stopped_with_its_children(script, tmp_path):
    marker = tmp_path / "child.pid"
    code = (f"import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(120)']); open({str(marker)!r}, 'w').write(str(child.pid)); time.sleep(120)")
    status, _ = script.run_stage(["-c", code], 6.0, tmp_path / "log.txt")
    assert status == "stopped at its budget of 6 s"
    child = int(marker.read_text())
    # The child of the stage goes with it (its process group was interrupted), or is a zombie at
    # most; it may still be handling the interrupt when the stage's leader has ended.
    state = Path(f"/proc/{child}/stat")
    deadline = time.monotonic() + 10.0
    while state.exists() and state.read_text().split()[2] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not state.exists() or state.read_text().split()[2] == "Z"


def test_stage_and_budget_arguments_are_checked(script, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        script.main(["--out", str(tmp_path), "--stages", "tests,warp"])
    assert stop.value.code == 2
    assert "--stages: unknown 'warp'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--out", str(tmp_path), "--budget", "0"])
    assert "--budget must be a positive number of seconds, got 0.0" in capsys.readouterr().err


def test_the_stages_call_scripts_and_flags_that_exist():
    # Every script a stage names is in the repository (a renamed script would skip silently).
    spec = importlib.util.spec_from_file_location("gpu_run_names", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = SCRIPT.parents[2]
    for name, (_, arguments) in module.STAGES.items():
        if arguments[0] != "-m":
            assert (root / arguments[0]).is_file(), name
    assert sum(share for share, _ in module.STAGES.values()) == pytest.approx(1.0)
    done = subprocess.run([sys.executable, str(root / "validation" / "step" / "run.py"), "--help"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert "--time-limit" in done.stdout


def test_time_a_stage_leaves_goes_to_the_later_ones(script, tmp_path, monkeypatch):
    # Each stage gets its share of what is left among the stages still to run; a stage that
    # ends at once leaves its share to the others, and the last takes all that is left.
    given: dict[int, float] = {}

    def run_stage(arguments, seconds, log):
        given[len(given)] = seconds
        log.write_text("")
        return "passed", 0.0

    monkeypatch.setattr(script, "machine", lambda: {"cpu": "x", "cores": 2, "python": "3", "gpu": "Fake"})
    monkeypatch.setattr(script, "why_not", lambda name, arguments, gpu: None)
    monkeypatch.setattr(script, "run_stage", run_stage)
    assert script.main(["--out", str(tmp_path), "--budget", "400", "--stages", "tests,training,step"]) == 0
    shares = [script.STAGES[s][0] for s in ("tests", "training", "step")]
    assert given[0] == pytest.approx(400 * shares[0] / sum(shares), rel=1e-3)
    assert given[1] == pytest.approx(400 * shares[1] / (shares[1] + shares[2]), rel=1e-3)
    assert given[2] == pytest.approx(400, rel=1e-3)
    assert script.stage_seconds(-3.0, 0.2, 0.5) == 0.0


def test_the_contention_check_fits_on_the_stored_runs_as_they_were_before_the_hardware_stages(script, tmp_path,
                                                                                             monkeypatch):
    # With --out the stored results' folder, the hardware stages rewrite the stored GEMM and
    # spin runs; the check must still fit on the runs as they were, not on the run it checks.
    for name in script.FITTED_ON:
        (tmp_path / name).write_text(f"stored {name}")
    seen = {}

    def run_stage(arguments, seconds, log):
        if arguments[0] == "validation/hardware/run.py":        # this run's results, over the stored ones
            for name in script.FITTED_ON:
                (tmp_path / name).write_text("this run")
        else:
            fit = {flag: Path(arguments[arguments.index(flag) + 1]) for flag in ("--gemm", "--spin")}
            seen.update({flag: path.read_text() for flag, path in fit.items()})
            seen["check"] = Path(arguments[arguments.index("--check") + 1]).read_text()
        log.write_text("")
        return "passed", 0.0

    monkeypatch.setattr(script, "RESULTS", tmp_path)
    monkeypatch.setattr(script, "machine", lambda: {"cpu": "x", "cores": 2, "python": "3", "gpu": "Fake"})
    monkeypatch.setattr(script, "why_not", lambda name, arguments, gpu: None)
    monkeypatch.setattr(script, "run_stage", run_stage)
    assert script.main(["--out", str(tmp_path), "--stages", "hardware-spin,hardware-gemm,contention-check"]) == 0
    assert seen == {"--gemm": "stored nccl-gpu-gemm.json", "--spin": "stored nccl-gpu-spin.json", "check": "this run"}


@pytest.mark.parametrize("stage", ["hardware-spin", "hardware-gemm", "training", "profiles", "wire", "speedup"])
def test_with_the_stored_folder_each_stage_writes_the_stored_result(script, stage, monkeypatch):
    # A stage's arguments are its stored result's own: with --out the stored results' folder it
    # writes there (its options unchanged), not to a subset folder.
    results = SCRIPT.parents[1] / "results"
    template = script.STAGES[stage][1]
    target = load_script(template[0])
    seen = {}

    def stop(path, stored, changed, **_):
        seen.update(path=str(path), changed=changed)
        raise SystemExit(0)
    monkeypatch.setattr(target, "subset_location", stop)
    arguments = [a.replace("OUT", str(results)) for a in template[1:]]
    with pytest.raises(SystemExit):
        (target.parse_arguments if stage == "speedup" else target.main)(arguments)
    assert seen == {"path": str(results), "changed": []}
