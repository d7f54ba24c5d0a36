"""``fusionopt.sweep`` and ``fusionopt sweep``: records, resuming, repair, formats, errors.

The cells are zoo models on preset networks (the zoo's calibrated compute); every figure a
test checks is compared with :func:`fusionopt.solvers.solve` on the same problem, or with the
record's own definition, never with a wall-clock time.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fusionopt
from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.cost import network
from fusionopt.solvers import default_methods, solve
from fusionopt import solvers
from fusionopt.experiments import (
    cell_problem, CSV_COLUMNS, record_key, CELL_FIELDS, FIELDS, Cell, cells, pending_cells, read_results, run_sweep,
)

SMALL = dict(models=["resnet18", "alexnet"], workers=[8, 64], networks=["10gbe", "100gb-ib"],
             methods=["wfbp", "single", "ddp", "dp"])


def small_grid() -> list[Cell]:
    return cells(**SMALL)


def key(record) -> tuple:
    return tuple(record[name] for name in CELL_FIELDS) + (record["time_limit"],)


def in_cell_order(records: list[dict], grid: list[Cell]) -> list[dict]:
    return sorted(records, key=lambda record: grid.index(Cell(*key(record)[:-1])))


def direct(cell: Cell) -> fusionopt.solvers.Result:
    """The cell solved without the sweep."""
    problem = fusionopt.model.Problem(zoo.profile(cell.model, device=cell.device, batch=cell.batch),
                                network(cell.network, cell.workers, algorithm=cell.algorithm), sync=cell.sync)
    return fusionopt.solvers.solve(problem, cell.method)


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_error(capsys, *argv) -> str:
    """A command that must fail: status 2, no stdout, one line on stderr; returns it."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (status, out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fusionopt: error: ")
    return lines[0]


# ---------------------------------------------------------------------- cells
def test_cells_is_the_product_in_order_and_skips_methods_the_registry_refuses(capsys):
    grid = cells(["resnet18", "AlexNet"], [8, 64, 8], ["10gbe", "100GB-IB"], ["wfbp", "p3", "dp", "ps-dp"])
    err = capsys.readouterr().err
    assert len(grid) == 2 * 2 * 2 * 2
    assert [c.label for c in grid[:3]] == ["resnet18 8 10gbe wfbp", "resnet18 8 10gbe dp", "resnet18 8 100gb-ib wfbp"]
    assert grid[-1] == Cell("alexnet", "h100", 64, "100gb-ib", "ring", 64, "barrier", "dp")
    assert len(set(grid)) == len(grid)
    # one line names both skipped methods and why
    assert err.count("\n") == 1 and "p3" in err and "layerwise" in err and "ps-dp" in err
    # under layerwise sync p3 runs; the parameter-server method never does
    layerwise = cells(["resnet18"], [8], ["10gbe"], ["wfbp", "p3", "ps-dp"], sync="layerwise")
    assert [c.method for c in layerwise] == ["wfbp", "p3"]
    # decoupled and fully sharded methods run on their own pattern's problem
    # (tests/test_compare_defaults.py), each where its sync allows
    capsys.readouterr()
    decoupled = cells(["resnet18"], [8], ["10gbe"], ["wfbp", "megatron", "megatron-overlap", "dear"], sync="layerwise")
    assert [c.method for c in decoupled] == ["wfbp", "megatron-overlap", "dear"]
    assert "megatron (barrier-only" in capsys.readouterr().err
    sharded = cells(["resnet18"], [8], ["10gbe"], ["wfbp", "fsdp2", "sharded-opt"])
    assert [c.method for c in sharded] == ["wfbp", "fsdp2", "sharded-opt"]
    assert capsys.readouterr().err == ""


def test_cells_default_methods_are_the_default_comparison_for_the_sync(capsys):
    assert [c.method for c in cells(["resnet18"], [8], ["10gbe"])] == default_methods()
    layerwise = [c.method for c in cells(["resnet18"], [8], ["10gbe"], sync="layerwise")]
    assert set(default_methods()) < set(layerwise) and "p3" in layerwise
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kwargs, message", [
    (dict(methods=["wfpb"]), r"unknown method 'wfpb'; known methods: .*wfbp"),
    (dict(models=["resnet51"]), r"unknown model 'resnet51'; known: .*resnet50"),
    (dict(networks=["5gbe"]), r"unknown network '5gbe'; known: .*10gbe"),
    (dict(workers=[8, 0]), r"workers must be integers >= 1, got 0"),
    (dict(device="tpu"), r"unknown device 'tpu'; known: .*h100"),
    (dict(sync="eager"), r"unknown sync 'eager'; known: barrier, layerwise"),
    (dict(algorithm="tree"), r"unknown algorithm 'tree'"),
    (dict(batch=0), r"batch must be a positive integer, got 0"),
    (dict(networks=["mgwfbp-10gbe"], workers=[3]), r"mgwfbp-10gbe.* not 3"),
    (dict(methods=["p3"]), r"no method left to run: skipped p3"),
    (dict(models=[]), r"models: give at least one"),
])
def test_cells_bad_inputs_name_the_culprit(kwargs, message):
    arguments = dict(SMALL, **kwargs)
    with pytest.raises(ValueError, match=message):
        cells(arguments.pop("models"), arguments.pop("workers"), arguments.pop("networks"),
              arguments.pop("methods"), **arguments)


# ---------------------------------------------------------------------- records
def test_records_equal_a_direct_solve_and_their_definitions(tmp_path):
    grid = small_grid()
    records = run_sweep(grid, tmp_path / "sweep.jsonl", jobs=2, progress=False)
    assert [key(r) for r in records] == [record_key(c) for c in grid]
    for cell, record in zip(grid, records):
        assert tuple(record) == FIELDS            # exactly these keys, in this order
        result = direct(cell)
        assert record["iteration_time"] == result.iteration_time
        assert record["lower_bound"] == result.lower_bound
        assert record["status"] == str(result.status)
        assert record["messages"] == result.num_messages
        compute = zoo.profile(cell.model).compute_time
        assert record["compute_time"] == compute
        assert record["scaling_efficiency"] == compute / result.iteration_time
        assert record["throughput"] == cell.workers * compute / result.iteration_time
        assert 0 < record["scaling_efficiency"] < 1
        assert record["fusionopt_version"] == fusionopt.__version__
        assert record["solve_seconds"] >= 0
    def without_method(r):
        return tuple(r[name] for name in CELL_FIELDS if name != "method")

    by_key = {without_method(r) + (r["method"],): r for r in records}
    for record in records:
        # the DP is exact over fusion plans: no baseline beats it; single sends one message
        dp = by_key[without_method(record) + ("dp",)]
        assert dp["status"] == "OPTIMAL"
        assert dp["iteration_time"] <= record["iteration_time"] * (1 + 1e-12)   # ties differ in rounding
        if record["method"] == "single":
            assert record["messages"] == 1
        if record["method"] == "wfbp":
            assert record["messages"] == zoo.profile(record["model"]).n


def test_a_failing_cell_is_an_error_record_and_the_sweep_goes_on(tmp_path):
    grid = cells(["resnet18"], [8], ["10gbe"], ["brute", "wfbp"])   # brute refuses 62 tensors
    brute, wfbp = run_sweep(grid, tmp_path / "sweep.jsonl", jobs=2, progress=False)
    assert brute["status"] == "ERROR"
    assert brute["error"].startswith("ValueError: brute enumerates 2^(n-1) plans") and "62" in brute["error"]
    assert brute["iteration_time"] is None and brute["messages"] is None and brute["throughput"] is None
    assert brute["compute_time"] == zoo.profile("resnet18").compute_time
    assert set(brute) == set(FIELDS) | {"error"}
    assert wfbp["status"] == "FEASIBLE" and "error" not in wfbp
    assert wfbp["iteration_time"] == direct(grid[1]).iteration_time


def test_error_cells_are_done_unless_retried(tmp_path, monkeypatch, capsys):
    path = tmp_path / "sweep.jsonl"
    grid = cells(["alexnet"], [8, 16], ["10gbe"], ["wfbp"])
    real = solvers.solve

    def flaky(problem, method, **options):
        if problem.cost(1) > 0 and flaky.fail:
            raise RuntimeError("solver crashed")
        return real(problem, method, **options)

    flaky.fail = True
    monkeypatch.setattr(solvers, "solve", flaky)
    first = run_sweep(grid, path, jobs=1, progress=False)
    assert [r["status"] for r in first] == ["ERROR", "ERROR"]
    flaky.fail = False
    assert run_sweep(grid, path, jobs=1, progress=False) == first          # ERROR counts as done
    assert pending_cells(grid, path) == [] and pending_cells(grid, path, retry_errors=True) == grid
    again = run_sweep(grid, path, jobs=1, progress=False, retry_errors=True)
    assert [r["status"] for r in again] == ["FEASIBLE", "FEASIBLE"]
    assert [r["iteration_time"] for r in again] == [direct(c).iteration_time for c in grid]
    assert read_results(path) == again        # the ERROR records are gone from the file
    assert "solving 2 ERROR cell(s) again" in capsys.readouterr().err


def test_a_second_writer_of_the_same_file_is_refused(tmp_path):
    pytest.importorskip("fcntl")
    path = tmp_path / "sweep.jsonl"
    # Another process holds the lock a running sweep would hold, until told to let go.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.lockf(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
         str(tmp_path / "sweep.jsonl.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match="another sweep is writing this file"):
            run_sweep(cells(["alexnet"], [8], ["10gbe"], ["wfbp"]), path, jobs=1, progress=False)
    finally:
        holder.communicate("", timeout=10)
    assert not path.exists() or path.read_bytes() == b""
    assert len(run_sweep(cells(["alexnet"], [8], ["10gbe"], ["wfbp"]), path, jobs=1, progress=False)) == 1
    assert not (tmp_path / "sweep.jsonl.lock").exists()      # removed when the sweep ends


def test_time_limit_goes_to_the_methods_that_take_one(tmp_path, monkeypatch):
    seen = {}
    real = solvers.solve

    def spy(problem, method, **options):
        seen[method] = options
        return real(problem, "wfbp")

    monkeypatch.setattr(solvers, "solve", spy)
    grid = cells(["alexnet"], [8], ["10gbe"], ["wfbp", "layerwise-opt"], sync="layerwise")
    records = run_sweep(grid, tmp_path / "sweep.jsonl", jobs=1, time_limit=0.5, progress=False)
    assert seen == {"wfbp": {}, "layerwise-opt": {"time_limit": 0.5}}
    assert [r["status"] for r in records] == ["FEASIBLE", "FEASIBLE"]
    with pytest.raises(ValueError, match="time_limit must be a positive, finite number"):
        run_sweep(grid, tmp_path / "sweep.jsonl", time_limit=0)
    with pytest.raises(ValueError, match="jobs must be an integer >= 1, got 0"):
        run_sweep(grid, tmp_path / "sweep.jsonl", jobs=0)


# ---------------------------------------------------------------------- resuming
def test_rerun_solves_nothing_and_leaves_the_file_alone(tmp_path, monkeypatch):
    path = tmp_path / "sweep.jsonl"
    grid = small_grid()
    first = run_sweep(grid, path, jobs=2, progress=False)
    content = path.read_bytes()
    assert content.count(b"\n") == len(grid)

    calls = []
    real = solvers.solve

    def counting(problem, method, **options):
        calls.append(method)
        return real(problem, method, **options)

    monkeypatch.setattr(solvers, "solve", counting)
    assert run_sweep(grid, path, jobs=1, progress=False) == first   # solve_seconds too: not recomputed
    assert run_sweep(grid, path, jobs=2, progress=False) == first
    assert calls == [] and path.read_bytes() == content
    # one more network: only its cells are solved, appended after the old bytes
    wider = cells(SMALL["models"], SMALL["workers"], SMALL["networks"] + ["25gbe"], SMALL["methods"])
    assert len(pending_cells(wider, path)) == len(wider) - len(grid) == 16
    records = run_sweep(wider, path, jobs=1, progress=False)
    assert len(calls) == 16 and all(r["network"] == "25gbe" for r in records if r not in first)
    assert path.read_bytes().startswith(content)
    assert [r for r in records if r["network"] != "25gbe"] == first
    # a sweep of a subset returns just its cells, in its order; the file keeps all
    subset = list(reversed(grid[:3]))
    assert run_sweep(subset, path, jobs=1, progress=False) == [first[2], first[1], first[0]]
    assert len(read_results(path)) == len(wider)


def _live_group(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (Linux /proc)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, _, pgrp = stat.rpartition(")")[2].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                alive.append(int(entry))
    return alive


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="uses /proc to find the worker processes")
def test_sigkill_mid_sweep_then_rerun_completes_without_recomputing(tmp_path, capsys):
    path = tmp_path / "sweep.jsonl"
    # resnet101 under mgwfbp takes a noticeable fraction of a second per cell
    argv = ["sweep", "--models", "resnet101", "--workers", "8,16,32,64,128,256", "--networks", "10gbe,25gbe",
            "--methods", "mgwfbp,wfbp", "--jobs", "2", "--output", str(path)]
    grid = cells(["resnet101"], [8, 16, 32, 64, 128, 256], ["10gbe", "25gbe"], ["mgwfbp", "wfbp"])
    assert len(grid) == 24
    process = subprocess.Popen([sys.executable, "-m", "fusionopt.cli", *argv], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120        # a guard against hanging, not a timing assertion
        while process.poll() is None and time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        # the orphaned workers notice their parent is gone and exit by themselves
        while _live_group(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _live_group(process.pid) == []
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = path.read_bytes()
    kept = before[:before.rfind(b"\n") + 1]                 # complete lines only
    written = kept.count(b"\n")
    assert 2 <= written < len(grid), "the sweep must be killed part-way"
    old = [json.loads(line) for line in kept.splitlines()]
    # a write torn by a kill: half a record, no newline
    with open(path, "ab") as handle:
        handle.write(b'{"model": "resnet101", "device": "h1')

    status, out, err = run(capsys, *argv, "--no-progress")
    assert status == 0, err
    assert "dropped a last line cut short" in err and '"model": "resnet101"' in err
    assert f"{len(grid) - written} run now, {written} skipped as already done, 0 error(s)" in out

    after = path.read_bytes()
    assert after.startswith(kept)                            # the old records, byte for byte
    lines = after.splitlines()
    assert after.endswith(b"\n") and len(lines) == len(grid)
    final = [json.loads(line) for line in lines]             # every line parses
    assert sorted(key(r) for r in final) == sorted(record_key(c) for c in grid)   # each cell once
    assert final[:written] == old                            # solve_seconds and all: not recomputed

    fresh = run_sweep(grid, tmp_path / "fresh.jsonl", jobs=2, progress=False)
    assert {key(r): r["iteration_time"] for r in final} == {key(r): r["iteration_time"] for r in fresh}
    assert read_results(path) == final


def test_a_file_with_lines_that_are_not_records_is_refused_and_kept(tmp_path):
    path = tmp_path / "sweep.jsonl"
    grid = cells(["alexnet"], [8, 16, 32], ["10gbe"], ["single"])
    run_sweep(grid, path, jobs=1, progress=False)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"not json\n" + lines[1] + b'{"model": 1}\n')   # and cell 32 lost
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"sweep.jsonl: line 2 is not a sweep record: 'not json'"):
        read_results(path)
    with pytest.raises(ValueError, match=r"sweep.jsonl: line 2 is not a sweep record: 'not json' \(2 such lines\); "
                                         r"this is not a sweep's results file"):
        run_sweep(grid, path, jobs=1, progress=False)
    assert path.read_bytes() == before                       # nothing of the user's is lost
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"my": "own data"}\n')
    with pytest.raises(ValueError, match="notes.jsonl: line 1 is not a sweep record"):
        run_sweep(grid, notes, jobs=1, progress=False)
    assert notes.read_text() == '{"my": "own data"}\n'


@pytest.mark.parametrize("name, value", [("iteration_time", -0.5), ("scaling_efficiency", float("nan")),
                                         ("throughput", "fast"), ("lower_bound", True)])
def test_a_record_whose_figure_is_not_a_number_at_least_0_is_named_with_it(tmp_path, name, value):
    path = tmp_path / "sweep.jsonl"
    run_sweep(cells(["alexnet"], [8, 16], ["10gbe"], ["single"]), path, jobs=1, progress=False)
    assert len(read_results(path)) == 2
    record = json.loads(path.read_bytes().splitlines()[1])
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0] + json.dumps({**record, name: value}).encode()
                     + b"\n")
    with pytest.raises(ValueError, match=rf"sweep.jsonl: line 2 is not a sweep record: .* \(its {name} "
                                         rf"{value!r} is not a number >= 0\)$"):
        read_results(path)


def test_read_results_ignores_a_last_line_still_being_written(tmp_path):
    path = tmp_path / "sweep.jsonl"
    records = run_sweep(cells(["alexnet"], [8], ["10gbe"], ["single"]), path, jobs=1, progress=False)
    with open(path, "ab") as handle:
        handle.write(b'{"model": "alex')
    assert read_results(path) == records
    assert len(pending_cells(cells(["alexnet"], [8, 16], ["10gbe"], ["single"]), path)) == 1


# ---------------------------------------------------------------------- formats
def test_csv_and_jsonl_round_trip_the_same_records(tmp_path):
    grid = cells(["resnet18"], [8, 64], ["10gbe"], ["brute", "single", "dp"])
    as_jsonl = run_sweep(grid, tmp_path / "sweep.jsonl", jobs=2, progress=False)
    as_csv = run_sweep(grid, tmp_path / "sweep.csv", jobs=2, progress=False)
    strip = [{k: v for k, v in r.items() if k != "solve_seconds"} for r in as_jsonl]
    assert [{k: v for k, v in r.items() if k != "solve_seconds"} for r in as_csv] == strip
    # the files hold the records in the order they finished
    assert in_cell_order(read_results(tmp_path / "sweep.jsonl"), grid) == as_jsonl
    from_csv = in_cell_order(read_results(tmp_path / "sweep.csv"), grid)
    assert from_csv == as_csv
    errors = [r for r in from_csv if r["status"] == "ERROR"]
    assert len(errors) == 2 and all(r["iteration_time"] is None and "brute enumerates" in r["error"] for r in errors)
    ok = [r for r in from_csv if r["status"] != "ERROR"]
    assert all("error" not in r and type(r["workers"]) is int and type(r["messages"]) is int
               and type(r["iteration_time"]) is float for r in ok)
    text = (tmp_path / "sweep.csv").read_text()
    assert text.startswith(",".join(FIELDS) + ",error\n") and text.count("model,") == 1
    # rerun on the CSV: nothing solved, header not repeated
    assert run_sweep(grid, tmp_path / "sweep.csv", jobs=1, progress=False) == from_csv
    assert (tmp_path / "sweep.csv").read_text() == text


def test_csv_torn_line_is_repaired_and_a_foreign_csv_refused(tmp_path, capsys):
    path = tmp_path / "sweep.csv"
    grid = cells(["alexnet"], [8, 16], ["10gbe"], ["single"])
    first = run_sweep(grid[:1], path, jobs=1, progress=False)
    with open(path, "a") as handle:
        handle.write("alexnet,h100,64,10gbe,ring,16,barrier,single,0.3")
    records = run_sweep(grid, path, jobs=1, progress=False)
    assert "dropped a last line cut short (line 3" in capsys.readouterr().err
    assert records[0] == first[0] and read_results(path) == records
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="other.csv: not a sweep CSV file"):
        run_sweep(grid, foreign, jobs=1, progress=False)
    assert foreign.read_text() == "a,b\n1,2\n"


def test_unknown_extension_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"sweep.txt: unknown results format '.txt'; use .jsonl or .csv"):
        run_sweep(small_grid(), tmp_path / "sweep.txt")
    with pytest.raises(ValueError, match="unknown results format"):
        read_results(tmp_path / "sweep.json")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- progress
def test_progress_on_a_log_is_a_few_lines_and_off_is_silent(tmp_path, capsys):
    grid = cells(["resnet18", "alexnet"], [8, 16, 32, 64], ["10gbe", "25gbe", "100gb-ib"], ["single"])
    run_sweep(grid, tmp_path / "a.jsonl", jobs=1)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 8 and lines[-1].startswith("sweep: 24/24 cells  ")
    assert all("ETA" in line for line in lines)
    run_sweep(grid, tmp_path / "b.jsonl", jobs=1, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    run_sweep(cells(["alexnet"], [8, 16], ["10gbe"], ["single", "wfbp"]), tmp_path / "a.jsonl", jobs=1)
    text = terminal.getvalue()
    assert text.count("\r") == 4 and text.endswith("\n") and text.count("\n") == 1
    assert "\r[#####...............] 1/4 cells  alexnet 8 10gbe single  ETA " in text
    assert "\r[####################] 4/4 cells  alexnet 16 10gbe wfbp  ETA 0:00" in text


# ---------------------------------------------------------------------- command line
def test_cli_sweep_runs_then_skips(tmp_path, capsys):
    path = tmp_path / "sweep.csv"
    argv = ["sweep", "--models", "resnet18,alexnet", "--workers", "8,64", "--networks", "10gbe, 100gb-ib",
            "--methods", "wfbp,single,ddp,dp", "--output", path, "--jobs", "2", "--no-progress"]
    status, out, err = run(capsys, *argv)
    assert status == 0 and err == ""
    assert out.splitlines() == ["sweep: 32 cells: 32 run now, 0 skipped as already done, 0 error(s)",
                                f"results: {path}"]
    records = read_results(path)
    assert sorted(key(r) for r in records) == sorted(record_key(c) for c in small_grid())
    status, out, err = run(capsys, *argv)
    assert status == 0 and "0 run now, 32 skipped as already done" in out
    assert read_results(path) == records
    # default methods, an error cell reported in the summary
    status, out, _ = run(capsys, "sweep", "--models", "resnet18", "--workers", "8", "--networks", "10gbe",
                         "--methods", "brute", "--output", tmp_path / "b.jsonl", "--jobs", "1", "--no-progress")
    assert status == 1 and "1 error(s)" in out and "ERROR resnet18 8 10gbe brute: ValueError: brute enumerates" in out


@pytest.mark.parametrize("change, message", [
    (["--methods", "wfbp,wfpb"], "unknown method 'wfpb'; known methods:"),
    (["--models", "resnet51"], "unknown model 'resnet51'; known:"),
    (["--networks", "5gbe"], "unknown network '5gbe'; known:"),
    (["--workers", "8,0"], "workers must be integers >= 1, got 0"),
    (["--workers", "8,x"], "--workers takes comma-separated integers, got '8,x'"),
    (["--workers", ","], "--workers needs at least one comma-separated value"),
    (["--output", "sweep.txt"], "sweep.txt: unknown results format '.txt'; use .jsonl or .csv"),
    (["--output", "missing/sweep.jsonl"], "folder missing does not exist"),
    (["--methods", "p3"], "no method left to run: skipped p3"),
    (["--jobs", "0"], "jobs must be an integer >= 1, got 0"),
    (["--sync", "eager"], "argument --sync: invalid choice: 'eager'"),
])
def test_cli_sweep_bad_arguments_exit_2_with_one_line(tmp_path, capsys, monkeypatch, change, message):
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--models", "alexnet", "--workers", "8", "--networks", "10gbe", "--methods", "single",
            "--output", "sweep.jsonl", "--no-progress"]
    for option, value in zip(change[::2], change[1::2]):
        if option in argv:
            argv[argv.index(option) + 1] = value
        else:
            argv += [option, value]
    assert message in run_error(capsys, *argv)
    assert not (tmp_path / "sweep.jsonl").exists()


def test_a_rerun_with_another_time_limit_solves_the_limited_cells_again(tmp_path):
    # gradssa takes a time limit, wfbp does not: a rerun with a larger limit solves the
    # gradssa cell again (a new record under the new limit) and keeps wfbp's as done.
    path = tmp_path / "sweep.jsonl"
    grid = cells(["alexnet"], [8], ["10gbe"], ["wfbp", "gradssa"])
    first = run_sweep(grid, path, jobs=1, time_limit=0.05, progress=False)
    assert [r["time_limit"] for r in first] == [None, 0.05]
    assert [c.method for c in pending_cells(grid, path, time_limit=0.05)] == []
    assert [c.method for c in pending_cells(grid, path, time_limit=0.5)] == ["gradssa"]
    second = run_sweep(grid, path, jobs=1, time_limit=0.5, progress=False)
    assert second[0] == first[0] and second[1]["time_limit"] == 0.5
    assert sorted((r["method"], r["time_limit"]) for r in read_results(path)) == [
        ("gradssa", 0.05), ("gradssa", 0.5), ("wfbp", None)]


def test_a_sweep_with_failed_cells_exits_non_zero(tmp_path, capsys):
    from fusionopt.cli import main

    path = tmp_path / "sweep.jsonl"
    status = main(["sweep", "--models", "resnet18", "--workers", "8", "--networks", "10gbe", "--methods",
                   "wfbp,brute", "--output", str(path), "--jobs", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 1 and "1 error(s)" in out and "ERROR resnet18 8 10gbe brute" in out
    assert [r["status"] for r in read_results(path)] == ["FEASIBLE", "ERROR"]


ZOO_OPTIONS = ("precision", "compute", "optimizer")


def test_an_older_sweep_csv_is_refused_with_one_line(tmp_path):
    older = [c for c in CSV_COLUMNS if c not in ZOO_OPTIONS]
    oldest = [c for c in older if c != "time_limit"]
    oldest[oldest.index("throughput")] = "speedup"
    for header, match in ((oldest, r"\(no time_limit column"), (older, r"\(no precision, compute and optimizer")):
        path = tmp_path / "old.csv"
        path.write_text(",".join(header) + "\n")
        with pytest.raises(ValueError, match=r"old.csv: a sweep CSV file of an older fusionopt " + match):
            run_sweep(cells(["alexnet"], [8], ["10gbe"], ["wfbp"]), path, jobs=1, progress=False)
        assert path.read_text() == ",".join(header) + "\n"


def test_zoo_options_make_cells_of_their_own(tmp_path):
    # A bf16 sweep and an fp32 one of the same grid are different cells in one file: the bf16
    # cells take the zoo's bf16 profile (its compute time is the record's) and the fp32
    # records are not taken for them.
    path = tmp_path / "sweep.jsonl"
    fp32 = run_sweep(cells(["resnet18"], [8], ["10gbe"], ["dp"]), path, jobs=1, progress=False)
    grid = cells(["resnet18"], [8], ["10gbe"], ["dp"], precision="bf16", optimizer="sgd")
    assert grid[0].precision == "bf16" and grid[0].optimizer == "sgd" and grid[0].compute == "calibrated"
    bf16 = run_sweep(grid, path, jobs=1, progress=False)
    assert len(read_results(path)) == 2
    expected = zoo.profile("resnet18", precision="bf16", optimizer="sgd").compute_time
    assert bf16[0]["compute_time"] == expected != fp32[0]["compute_time"]
    assert bf16[0]["iteration_time"] == solve(cell_problem(grid[0], zoo.profile("resnet18", precision="bf16",
                                                                                optimizer="sgd")),
                                              "dp").iteration_time
    with pytest.raises(ValueError, match="unknown compute 'estimate'"):
        cells(["resnet18"], [8], ["10gbe"], ["dp"], compute="estimate")


def test_records_of_an_older_fusionopt_are_kept_and_their_cells_solved_again(tmp_path, capsys):
    # A JSON-lines record without the zoo options stays in the file, but which compute its
    # cell used cannot be told: the cell is solved again, and the sweep says so.
    path = tmp_path / "sweep.jsonl"
    grid = cells(["alexnet"], [8], ["10gbe"], ["single"])
    record = run_sweep(grid, path, jobs=1, progress=False)[0]
    older = {k: v for k, v in record.items() if k not in ZOO_OPTIONS}
    path.write_text(json.dumps(older) + "\n")
    capsys.readouterr()
    again = run_sweep(grid, path, jobs=1, progress=False)
    assert "1 record(s) of an older fusionopt name no precision, compute or optimizer" in capsys.readouterr().err
    assert read_results(path)[0] == older and len(read_results(path)) == 2
    assert again[0]["iteration_time"] == record["iteration_time"] and again[0]["precision"] == "fp32"


def test_a_roofline_sweep_runs_resumes_and_reads_back(tmp_path):
    # A roofline estimate takes no precision: its cells say "none", and the file is a sweep's.
    path = tmp_path / "roofline.jsonl"
    grid = cells(["alexnet"], [8, 16], ["10gbe"], ["wfbp"], compute="roofline")
    assert {c.precision for c in grid} == {"none"}
    records = run_sweep(grid, path, jobs=1, progress=False)
    assert pending_cells(grid, path) == [] and read_results(path) == records
    assert run_sweep(grid, path, jobs=1, progress=False) == records
    problem = fusionopt.model.Problem(zoo.profile("alexnet", compute="roofline"), network("10gbe", 8))
    assert records[0]["iteration_time"] == pytest.approx(solve(problem, "wfbp").iteration_time, rel=1e-12)
