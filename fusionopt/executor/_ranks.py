"""One rank's run of a job, whatever its pattern: :func:`run_rank`.

Every plan runs as the model's step program of it (the one :func:`fusionopt.model.simulate`'s
engine runs) on :class:`~fusionopt.executor.RankRunner`: an all-reduce
plan (MODEL.md sections 3 and 4), a decoupled or fully sharded one (section 8). A job's
deliberate fault wraps the communicator first
(:class:`~fusionopt.executor.FaultyCommunicator`).
"""

from __future__ import annotations

from typing import Any

from fusionopt.executor._communicator import Communicator
from fusionopt.executor._faults import FaultyCommunicator
from fusionopt.executor._job import Job
from fusionopt.executor._runner import RankRunner


def run_rank(comm: Communicator, job: Job) -> dict[str, Any]:
    """Run ``job`` on this rank; returns its record (plain lists, JSON-ready)."""
    if job.fault is not None:
        comm = FaultyCommunicator(comm, job.fault)
    return RankRunner(comm, job).run()


__all__ = ["run_rank"]
