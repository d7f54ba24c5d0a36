"""``validation/step/run.py``: the whole step measured against both measuring routes.

Runs on the CPU with the small models, in a subprocess (it opens its own process group).
Times are measured, so none is asserted: what is asserted is what the result files hold,
that the table's errors are the JSON's, which files a subset or a stopped run writes, and the
refusals."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "validation" / "step" / "run.py"


def run(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = (f"import runpy, sys; sys.argv = ['run.py', *{list(args)!r}]\n{prelude}\n"
            f"module = runpy.run_path({str(SCRIPT)!r}, run_name='step_run')\n"
            "sys.exit(module['main'](sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_both_routes_on_the_cpu_write_a_subset_result(tmp_path):
    done = run("--device", "cpu", "--cases", "mlp:8", "--steps", "2", "--warmup", "1", "--profile-steps", "2",
               "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-cpu.subset.json", "step-cpu.subset.md"]
    document = json.loads((tmp_path / "step-cpu.subset.json").read_text())
    assert document["complete"] is True and document["routes"] == ["hooks", "traced"]
    [row] = document["cases"]
    assert (row["model"], row["batch"], row["precision"]) == ("mlp", 8, "fp32")
    hooks, traced = row["hooks"], row["traced"]
    # The hooks route predicts the step of the profile it wrote: its parts add up to it.
    assert hooks["predicted"] == pytest.approx(max(sum(hooks["parts"].values()), hooks["reconciled"]["plain_period_s"]),
                                               rel=1e-9)
    assert hooks["n"] == 6 and traced["buckets"] >= 1
    assert traced["predicted"] > 0 and traced["measured_in_trace"] > 0 and traced["unprofiled"] > 0
    table = (tmp_path / "step-cpu.subset.md").read_text()
    error = 100 * (hooks["predicted"] - row["measured"]["median"]) / row["measured"]["median"]
    # No device events on the CPU: that column says "-".
    assert "events_median" not in row["measured"]
    assert f"| mlp | 8 | fp32 | {1e3 * row['measured']['median']:.2f} | - | {1e3 * hooks['predicted']:.2f} | " \
           f"{error:+.1f}% |" in table
    assert "Measured: the plain step" in table and "Predicted: the hooks route" in table


def test_a_time_limit_keeps_the_finished_case_and_writes_no_full_result(tmp_path):
    # A clock that moves 1 s per reading: the first case starts at once and reads it many times,
    # so the limit (5 s) stops the run before the second.
    prelude = ("import itertools, time; ticks = itertools.count(0, 1.0); "
               "time.perf_counter = lambda: float(next(ticks))")
    done = run("--device", "cpu", "--cases", "mlp:8,mlp:16", "--routes", "hooks", "--steps", "2", "--warmup", "1",
               "--profile-steps", "2", "--time-limit", "5", "--out", str(tmp_path), prelude=prelude)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-cpu.subset.partial.json", "step-cpu.subset.partial.md"]
    document = json.loads((tmp_path / "step-cpu.subset.partial.json").read_text())
    assert document["complete"] is False and [r["batch"] for r in document["cases"]] == [8]
    assert document["not_run"] == [["mlp", 16, "fp32"]]
    assert "Not run (time limit 5 s): mlp:16 fp32." in (tmp_path / "step-cpu.subset.partial.md").read_text()


@pytest.mark.parametrize("args, message", [
    (("--cases", "mlp"), "--cases: 'mlp' is not MODEL:BATCH with a positive batch"),
    (("--cases", "mlp:0"), "--cases: 'mlp:0' is not MODEL:BATCH with a positive batch"),
    (("--steps", "0"), "--steps must be a positive integer, got 0"),
    (("--precision", "fp8"), "--precision: unknown 'fp8': choose from fp32, bf16"),
    (("--routes", "kineto"), "--routes: unknown 'kineto': choose from hooks, traced"),
])
def test_bad_arguments_are_refused_in_one_line(tmp_path, args, message):
    done = run("--device", "cpu", "--out", str(tmp_path), *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_a_model_that_cannot_be_built_is_a_row_that_says_so(tmp_path):
    done = run("--device", "cpu", "--cases", "no-such-model:4", "--routes", "hooks", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    [row] = json.loads((tmp_path / "step-cpu.subset.json").read_text())["cases"]
    assert row["error"].startswith("no-such-model: cannot be built here")
    assert "| no-such-model | 4 | fp32 | not run: no-such-model: cannot be built here" in \
        (tmp_path / "step-cpu.subset.md").read_text()


class FakeEvent:
    """A timing event on a fake device clock that advances 3 ms per step."""

    clock = 0.0

    def __init__(self) -> None:
        self.at = FakeEvent.clock

    def elapsed_time(self, other: "FakeEvent") -> float:
        return other.at - self.at          # milliseconds, as torch.cuda.Event says


def test_the_plain_step_is_also_timed_by_device_events():
    module = runpy.run_path(str(SCRIPT), run_name="step_run_events")

    def step():
        FakeEvent.clock += 3.0

    found = module["measure"](step, lambda: None, 5, 1, FakeEvent)
    assert found["events_median"] == pytest.approx(3e-3, rel=1e-12)
    assert found["median"] >= 0 and "events_median" not in module["measure"](step, lambda: None, 2, 1)
