"""``fusionopt.reporting.Progress``: progress lines, and what an interrupted script keeps."""

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from fusionopt.reporting import Progress, interrupted_path

ROOT = Path(__file__).resolve().parents[1]


def clock(*ticks):
    values = iter(ticks)
    return lambda: next(values)


def test_estimate_is_the_stage_mean_times_the_steps_left():
    err = io.StringIO()
    with Progress(None, clock=clock(0.0, 10.0, 13.0, 19.0, 30.0), stream=err) as progress:
        progress.stage("grid", total=4)       # starts at 10 s
        progress.step("a")                    # 3 s for 1 step: 3 left -> 9 s
        progress.step("b")                    # 9 s for 2 steps: 2 left -> 9 s
        progress.step("c")                    # 20 s for 3 steps: 1 left -> about 7 s
    assert err.getvalue().splitlines() == ["grid 1/4, 13 s, about 9 s left: a",
                                           "grid 2/4, 19 s, about 9 s left: b",
                                           "grid 3/4, 30 s, about 7 s left: c"]
    assert progress.exit_code == 0 and not progress.interrupted


def test_interrupt_writes_the_finished_steps_and_sets_exit_code(tmp_path):
    log = tmp_path / "sub" / "x.interrupted.md"
    err = io.StringIO()
    with Progress(log, clock=clock(0.0, 0.0, 1.0, 2.0, 5.0), stream=err) as progress:
        progress.stage("grid", total=3)
        progress.step("row one")
        progress.step("row two")
        raise KeyboardInterrupt
    assert progress.interrupted and progress.exit_code == 130
    text = log.read_text()
    assert text.startswith("# Interrupted after 5 s during grid (2 of 3 steps done)")
    assert text.splitlines()[-3:] == ["## grid", "row one", "row two"]
    assert err.getvalue().splitlines()[-1] == f"interrupted after 5 s: the finished steps are in {log}"


def test_interrupt_before_any_step_writes_nothing(tmp_path):
    log = tmp_path / "x.interrupted.md"
    with Progress(log, stream=io.StringIO()) as progress:
        progress.stage("grid", total=3)
        raise KeyboardInterrupt
    assert progress.exit_code == 130 and not log.exists()


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(ValueError):
        with Progress(tmp_path / "x.interrupted.md", stream=io.StringIO()):
            raise ValueError("boom")
    assert not (tmp_path / "x.interrupted.md").exists()


def test_interrupted_path_sits_beside_the_result():
    assert interrupted_path(Path("a") / "RESULTS.md") == str(Path("a") / "RESULTS.interrupted.md")
    assert interrupted_path("frameworks") == "frameworks.interrupted.md"


def load(script: str):
    spec = importlib.util.spec_from_file_location(script.replace("/", "_"), ROOT / script)
    # Registered before it runs: dataclasses look their module up by name.
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def test_an_interrupted_validation_script_keeps_its_rows_and_leaves_the_result(tmp_path, monkeypatch, capsys):
    ps = load("validation/ps/run.py")
    real, calls = ps.run_instance, []

    def interrupted_on_the_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(ps, "run_instance", interrupted_on_the_third)
    result = tmp_path / "ps.md"
    result.write_text("the stored result\n")
    assert ps.main(["--quick", "--output", str(result)]) == 130
    assert result.read_text() == "the stored result\n"
    rows = [line for line in (tmp_path / "ps.interrupted.md").read_text().splitlines()
            if line.startswith("resnet50 k80")]
    assert [row.split(":")[0] for row in rows] == ["resnet50 k80 P=4", "resnet50 k80 P=16"]


def test_an_interrupted_paper_reproduction_keeps_its_finished_results(tmp_path, monkeypatch):
    mg = load("papers/mg_wfbp/reproduce.py")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mg, "sweep", interrupted)           # result 2 is interrupted
    (tmp_path / "RESULTS.md").write_text("the stored reproduction\n")
    assert mg.main(["--quick", "--out", str(tmp_path)]) == 130
    assert (tmp_path / "RESULTS.md").read_text() == "the stored reproduction\n"
    log = (tmp_path / "RESULTS.interrupted.md").read_text().splitlines()
    assert log[0].startswith("# Interrupted after") and "during result 2" in log[0]
    finished = [line for line in log if line.startswith(("googlenet: wfbp", "resnet50: wfbp"))]
    assert len(finished) == 2          # result 1, every model, as printed


def test_a_table_row_shorter_than_the_header_leaves_its_last_cells_empty():
    from fusionopt.reporting import markdown_table

    assert markdown_table(("job", "step 1", "step 2"), [("a", 1, 2), ("b", 1)]) == [
        "| job | step 1 | step 2 |", "|---|---|---|", "| a | 1 | 2 |", "| b | 1 |  |"]
