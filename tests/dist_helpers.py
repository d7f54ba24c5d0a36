"""torch.distributed set-ups the tests share."""

from __future__ import annotations

import contextlib

from fusionopt.integrations.ddp_record import free_port


@contextlib.contextmanager
def one_rank_group():
    """A gloo process group of this process alone, for the duration of the block."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
