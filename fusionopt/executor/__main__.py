"""Per-rank entry point: ``mpiexec -n N python -m fusionopt.executor JOB.json [--output OUT.json]``.

``JOB.json`` is a run job (:class:`~fusionopt.executor.Job`, as ``fusionopt run
--backend mpi`` writes it) or a calibration job. Every rank runs it; rank 0 writes the result
(every rank's record, and for a run the assembled measurement) to ``--output``, or prints a
summary without it. A rank that fails writes ``error-rank<R>.json`` beside the output and
prints one line; after a timeout it calls ``MPI_Abort`` so that no rank is left waiting.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from fusionopt.model._io import read_json_document, write_json_atomic

RESULT_SCHEMA = "fusionopt.executor.result"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusionopt.executor",
                                     description="Run a fusionopt executor job on this MPI rank.")
    parser.add_argument("job", metavar="JOB.json")
    parser.add_argument("--output", metavar="OUT.json", help="where rank 0 writes the result")
    args = parser.parse_args(argv)

    from fusionopt.executor._calibrate import CALIBRATION_SCHEMA, sweep_rank, sweep_spec_from_dict
    from fusionopt.executor._errors import PlanMismatchError, error_document
    from fusionopt.executor._job import Job
    from fusionopt.executor._measurement import assemble
    from fusionopt.executor._mpi import MPICommunicator
    from fusionopt.executor._ranks import run_rank

    comm = MPICommunicator()
    rank = comm.rank
    output = Path(args.output) if args.output else None
    try:
        document = read_json_document(args.job)
        if isinstance(document, dict) and document.get("schema") == CALIBRATION_SCHEMA:
            spec = sweep_spec_from_dict(document)
            record = sweep_rank(comm, spec)
            result = {"schema": RESULT_SCHEMA, "kind": "calibration", "description": comm.describe(),
                      "records": comm.allgather(record, timeout=spec.timeout)}
            summary = None
        else:
            job = Job.from_dict(document, source=args.job)
            record = run_rank(comm, job)
            records = comm.allgather(record, timeout=job.timeout)
            measurement = assemble(job, records, backend="mpi", description=comm.describe())
            result = {"schema": RESULT_SCHEMA, "kind": "run", "description": comm.describe(),
                      "records": records, "measurement": measurement.to_dict()}
            summary = measurement.summary()
        if rank == 0:
            if output is not None:
                write_json_atomic(output, result)
            elif summary is not None:
                print(summary)
        return 0
    except BaseException as exc:  # noqa: BLE001 - reported, then the world is ended
        line = " ".join(str(exc).split()) or type(exc).__name__
        print(f"fusionopt.executor: error: rank {rank}: {line}", file=sys.stderr, flush=True)
        if output is not None:
            try:
                write_json_atomic(output.parent / f"error-rank{rank}.json", error_document(exc, rank))
            except OSError:
                pass
        if isinstance(exc, (PlanMismatchError, ValueError)):
            return 2        # every rank found the same fault: no rank is left waiting
        comm.abort(line)
        return 3


if __name__ == "__main__":
    sys.exit(main())
