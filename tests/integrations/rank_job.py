"""A rank of a test job for :func:`fusionopt.integrations.run_rank_processes`:
``python -m rank_job JOB RANK`` writes ``RANK`` into the job's folder, then
fails (rank ``fail``, after a line of output), sleeps (``sleep`` seconds) or ends."""

import json
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    job, rank = json.loads(sys.argv[1]), int(sys.argv[2])
    (Path(job["folder"]) / f"rank{rank}").write_text(str(rank))
    if rank == job.get("fail"):
        print("first line")
        print(f"rank {rank} gives up")
        sys.exit(3)
    time.sleep(job.get("sleep", 0))
