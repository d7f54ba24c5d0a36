"""Ranks as processes: every rank runs, a failure names the rank and its last line, and a
time limit stops the ranks still running."""

import time
from pathlib import Path

import pytest

from fusionopt.integrations import run_rank_processes

MODULE = "rank_job"        # tests/integrations/rank_job.py, importable by the ranks through PYTHONPATH


@pytest.fixture(autouse=True)
def rank_job_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))


def test_every_rank_runs(tmp_path):
    run_rank_processes(MODULE, {"folder": str(tmp_path)}, 3, what="the test job")
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["0", "1", "2"]


def test_a_failed_rank_is_named_with_its_last_line_and_the_others_stopped(tmp_path):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^rank 1 of the test job failed \(exit status 3\): rank 1 gives up$"):
        run_rank_processes(MODULE, {"folder": str(tmp_path), "fail": 1, "sleep": 60}, 2, what="the test job")
    assert time.monotonic() - started < 30           # rank 0's minute of sleep was cut short


def test_a_time_limit_stops_the_ranks(tmp_path):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^the test job took over 1 s; stopped$"):
        run_rank_processes(MODULE, {"folder": str(tmp_path), "sleep": 60}, 2, what="the test job", timeout=1.0)
    assert time.monotonic() - started < 30
