"""The mpi backend: one process per rank under the mpiexec beside the interpreter (2 and 4 ranks)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from executor_helpers import plan_of, small_problem
from fusionopt.executor import CollectiveTimeout, Fault, Job, run
from fusionopt.model import Plan

mpi4py = pytest.importorskip("mpi4py", reason="the mpi extra (mpi4py, mpich) is not installed")


def _mpiexec():
    from fusionopt.executor import mpiexec

    try:
        return mpiexec()
    except ImportError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_partition_plan_runs_correctly_on_mpi_processes(ranks):
    _mpiexec()
    problem = small_problem(sync="layerwise")
    plan = plan_of([(2, 0, 1024)], [(0, 0, 2048), (2, 1024, 2048)], [(1, 0, 1024), (0, 2048, 4096)])
    m = run(problem, plan, "mpi", ranks=ranks, iterations=2, warmup=1, time_scale=1.0, timeout=20.0)
    assert m.correct and m.backend == "mpi" and m.ranks == ranks
    assert m.description.startswith(f"mpi, {ranks} processes")
    assert m.checked_bytes == ranks * 7168 * 3
    ready = problem.profile.ready_times
    for step in range(2):
        start, end = m.message_start[step], m.message_end[step]
        assert start[0] >= ready[2] and start[1] >= ready[0] and start[2] >= ready[0]
        assert start[1] >= end[0] and start[2] >= end[1]


def test_a_corrupting_rank_fails_the_mpi_run_with_the_range():
    _mpiexec()
    problem = small_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, "mpi", ranks=2, iterations=1, warmup=0, time_scale=0.0, timeout=20.0,
            raise_on_error=False, fault=Fault("corrupt", rank=1, message=1))
    assert not m.correct
    assert m.errors[0].startswith("rank 1, step 0: tensor 't0' (index 0): bytes [1536, 1544) differ")


def test_a_stalled_mpi_rank_times_out_naming_the_message():
    _mpiexec()
    problem = small_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    with pytest.raises(CollectiveTimeout, match=r"message 1 of 2 \(2 chunks, 5120 B: 't1', 't0'\): all-reduce "
                                                r"did not complete within 1 s on rank \d"):
        run(problem, plan, "mpi", ranks=2, iterations=1, warmup=0, time_scale=0.0, timeout=1.0,
            fault=Fault("stall", rank=1, message=1))


def test_mpi_ranks_with_different_plans_stop_before_the_first_step(tmp_path):
    executable = _mpiexec()
    problem = small_problem()
    job = Job(problem, Plan.per_tensor(problem.profile), iterations=1, warmup=0, time_scale=0.0, timeout=20.0,
              backend="mpi")
    other = Job(problem, Plan.from_groups(problem.profile, [[2, 1, 0]]), iterations=1, warmup=0, time_scale=0.0,
                timeout=20.0, backend="mpi")
    (tmp_path / "a.json").write_text(json.dumps(job.to_dict()))
    (tmp_path / "b.json").write_text(json.dumps(other.to_dict()))
    out = str(tmp_path / "out.json")
    rank = [sys.executable, "-m", "fusionopt.executor"]
    command = [str(executable), "-n", "1", *rank, str(tmp_path / "a.json"), "--output", out,
               ":", "-n", "1", *rank, str(tmp_path / "b.json"), "--output", out]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "fusionopt.executor: error: rank 0: ranks disagree on the plan: rank 0 has sha256" in done.stderr
    error = json.loads((tmp_path / "error-rank0.json").read_text())
    assert error["type"] == "PlanMismatchError" and not (tmp_path / "out.json").exists()


def test_the_per_rank_entry_point_prints_a_summary_without_output(tmp_path):
    executable = _mpiexec()
    problem = small_problem()
    job = Job(problem, Plan.per_tensor(problem.profile), iterations=1, warmup=0, time_scale=0.0, timeout=20.0,
              backend="mpi")
    (tmp_path / "job.json").write_text(json.dumps(job.to_dict()))
    done = subprocess.run([str(executable), "-n", "2", sys.executable, "-m", "fusionopt.executor",
                           str(tmp_path / "job.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "backend        mpi, 2 processes" in done.stdout and "correctness    ok" in done.stdout


def test_without_mpi4py_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    problem = small_problem()
    with pytest.raises(ImportError, match=r"the mpi backend needs mpi4py .*pip install 'fusionopt\[mpi\]'"):
        run(problem, Plan.per_tensor(problem.profile), "mpi")


def test_without_mpiexec_beside_the_interpreter_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    problem = small_problem()
    with pytest.raises(ImportError, match=r"the mpi backend needs mpiexec next to the Python interpreter .*"
                                          r"'fusionopt\[mpi\]'"):
        run(problem, Plan.per_tensor(problem.profile), "mpi")
