"""Sweeps on an injected execution engine: a Dask cluster, or any concurrent.futures.Executor."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from fusionopt.experiments import cells, read_results, record_key, run_sweep

GRID = dict(models=["alexnet", "resnet18"], workers=[8, 64], networks=["10gbe"], methods=["wfbp", "ddp", "dp", "gradssa"])


def by_cell(records):
    return {record_key(r): r["iteration_time"] for r in records}


class Recording(ThreadPoolExecutor):
    """An engine that keeps how many cells each task it was given holds."""

    def __init__(self, workers):
        super().__init__(workers)
        self.sizes = []

    def submit(self, fn, *args, **kwargs):
        self.sizes.append(len(args[0]))
        return super().submit(fn, *args, **kwargs)


class Failing(ThreadPoolExecutor):
    """An engine whose tasks holding a ``resnet18`` cell fail, as if their worker died."""

    def submit(self, fn, *args, **kwargs):
        if any(cell.model == "resnet18" for cell in args[0]):
            future: Future = Future()
            future.set_exception(RuntimeError("worker tcp://10.0.0.7 died"))
            return future
        return super().submit(fn, *args, **kwargs)


def test_an_injected_engine_gives_the_local_records(tmp_path):
    grid = cells(**GRID)
    local = run_sweep(grid, tmp_path / "local.jsonl", jobs=1, progress=False)
    with Recording(2) as engine:
        injected = run_sweep(grid, tmp_path / "injected.jsonl", executor=engine, progress=False)
    deterministic = [r for r in local if r["method"] != "gradssa"]
    assert by_cell(deterministic).items() <= by_cell(injected).items()
    assert len(read_results(tmp_path / "injected.jsonl")) == len(grid)
    # Cheap cells share a task (16 at most); a search has its own.
    assert sorted(engine.sizes) == [1, 1, 1, 1, 12]


def test_a_lost_task_loses_no_record_and_the_rerun_completes(tmp_path):
    path = tmp_path / "sweep.jsonl"
    grid = cells(**GRID)
    with Failing(2) as engine, pytest.raises(RuntimeError, match=r"^14 cell\(s\) were lost with their task \(alexnet 8 "
                                                                 r"10gbe wfbp, alexnet 8 10gbe ddp, alexnet 8 10gbe dp "
                                                                 r"and 11 more; RuntimeError: worker tcp://10.0.0.7 "
                                                                 r"died\); the records written so far are kept"):
        run_sweep(grid, path, executor=engine, progress=False)
    # The cheap cells of both models share the failed task; alexnet's two searches finish.
    kept = read_results(path)
    assert sorted((r["model"], r["method"]) for r in kept) == [("alexnet", "gradssa")] * 2
    assert all(json.loads(line) for line in path.read_text().splitlines())   # the file is whole
    with ThreadPoolExecutor(2) as engine:
        records = run_sweep(grid, path, executor=engine, progress=False)
    assert len(records) == len(grid) == len(read_results(path))


def test_a_local_dask_cluster_runs_a_sweep(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = cells(["alexnet"], [8, 64], ["10gbe", "25gbe"], ["wfbp", "dp", "cpsat"])
    local = run_sweep(grid, tmp_path / "local.jsonl", jobs=1, progress=False)
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        records = run_sweep(grid, tmp_path / "dask.jsonl", executor=client.get_executor(), progress=False)
    assert by_cell(records) == pytest.approx(by_cell(local), rel=1e-12)
    assert [r["status"] for r in records if r["method"] == "cpsat"] == ["OPTIMAL"] * 4


def test_a_dask_worker_killed_mid_sweep_loses_nothing(tmp_path):
    # Two worker processes; one is killed once the first records are in. Dask moves its
    # tasks to the other worker (or the sweep names them for the rerun): either way the file
    # stays whole and, after at most one rerun, holds every cell once.
    import os
    import signal
    import threading
    import time

    distributed = pytest.importorskip("distributed")
    path = tmp_path / "sweep.jsonl"
    grid = cells(["alexnet", "resnet18", "vgg16"], [8, 64], ["10gbe", "100gb-ib"], ["wfbp", "dp", "gradssa"])
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pids = list(client.run(os.getpid).values())

        moments = {}

        def kill_one():
            while not path.exists() or not path.read_text().strip():
                time.sleep(0.05)
            os.kill(pids[0], signal.SIGKILL)
            moments["killed"] = time.perf_counter()

        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        try:
            run_sweep(grid, path, executor=client.get_executor(), time_limit=0.3, progress=False)
        except RuntimeError as exc:
            assert "were lost with their task" in str(exc)
        moments["ended"] = time.perf_counter()
        killer.join(timeout=30)
        assert moments["killed"] < moments["ended"]                                   # killed mid-sweep
        assert all(json.loads(line) for line in path.read_text().splitlines())      # the file is whole
        records = run_sweep(grid, path, executor=client.get_executor(), time_limit=0.3, progress=False)
    assert len(records) == len(grid)
    stored = read_results(path)
    assert len({record_key(r) for r in stored}) == len(stored)                    # each cell once
    assert len(read_results(path)) == len(grid)
