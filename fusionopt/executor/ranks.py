"""One rank's run of a job, whatever its pattern: :func:`run_rank`.

An all-reduce plan runs on :class:`~fusionopt.executor.runner.RankRunner`; a decoupled or
fully sharded plan (MODEL.md section 8) on
:class:`~fusionopt.executor.sharded_runner.ShardedRankRunner`. A job's deliberate fault
wraps the communicator first (:class:`~fusionopt.executor.faults.FaultyCommunicator`).
"""

from __future__ import annotations

from typing import Any

from fusionopt.executor.communicator import Communicator
from fusionopt.executor.faults import FaultyCommunicator
from fusionopt.executor.job import Job
from fusionopt.executor.runner import RankRunner
from fusionopt.executor.sharded_runner import ShardedRankRunner
from fusionopt.model.plan import Plan


def run_rank(comm: Communicator, job: Job) -> dict[str, Any]:
    """Run ``job`` on this rank; returns its record (plain lists, JSON-ready)."""
    if job.fault is not None:
        comm = FaultyCommunicator(comm, job.fault)
    runner = RankRunner if isinstance(job.plan, Plan) else ShardedRankRunner
    return runner(comm, job).run()


__all__ = ["run_rank"]
