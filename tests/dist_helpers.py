"""torch.distributed set-ups the tests share."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from fusionopt.integrations import free_port


@contextlib.contextmanager
def one_rank_group():
    """A gloo process group of this process alone, for the duration of the block."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def spawn_gloo(worker, folder, ranks: int = 2) -> list[dict]:
    """Run ``worker(rank, port, folder)`` in ``ranks`` processes (each reports through
    :func:`gloo_rank`); return their reports, rank by rank."""
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(free_port(), str(folder)), nprocs=ranks, join=True)
    return [json.loads((Path(folder) / f"rank{r}.json").read_text()) for r in range(ranks)]


@contextlib.contextmanager
def gloo_rank(rank: int, port: int, folder: str, ranks: int = 2, report_errors: bool = False):
    """In a spawned worker: join a gloo group of ``ranks``, one thread each; yield the report
    (a dict) and write it as ``rank{rank}.json`` in ``folder`` when the block ends, however.
    With ``report_errors`` an exception of the block is not raised but written as the report's
    ``"error"`` (``"Type: message"``), for the parent to assert on, and the rank ends as one
    whose block ended well.
    A block that ends well then meets the other ranks at a barrier and ends the process
    without tearing the group down (:func:`~fusionopt.integrations.leave_rank`:
    on gloo that teardown sometimes aborts a rank whose work is done)."""
    import torch
    import torch.distributed as dist

    from fusionopt.integrations import leave_rank

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.set_num_threads(1)
    report: dict = {}

    def write() -> None:
        with open(f"{folder}/rank{rank}.json", "w") as f:
            json.dump(report, f)

    try:
        yield report
    except BaseException as exc:
        if not report_errors:
            write()
            raise
        report["error"] = f"{type(exc).__name__}: {exc}"
    write()
    dist.barrier()
    leave_rank()
