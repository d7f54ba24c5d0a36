"""Record the profiler traces of a real data-parallel job: ``ranks`` processes on one host,
each training a model under ``torch.nn.parallel.DistributedDataParallel`` on a gloo process
group (CPU) and writing its trace as ``tensorboard_trace_handler`` does (gzip on, one file
per rank), with the model's parameter list beside them (``parameters.csv``). These are the
traces :mod:`fusionopt.integrations._traced_step` predicts.

Each rank seeds torch with ``seed``, builds the model, wraps it in DDP, and runs ``steps``
training steps of SGD with momentum on a fixed random batch: ``zero_grad``, forward, the
sum of the output as the loss, backward, ``optimizer.step()``. With ``schedule=True`` the
profiler skips one step, warms up on one and records the rest, one ``ProfilerStep`` each;
without, it records every step and writes no ``ProfilerStep`` (the reader then finds the
steps from the backward). ``threads`` intra-op threads per rank (1 keeps two ranks from
competing for a small host's cores).

Each rank runs in a Python process of its own, started as
``python -m fusionopt.integrations._ddp_record``: the calling script is not imported again
in the ranks, so it needs no ``if __name__ == "__main__":`` guard. A rank that fails stops
the others, and its last line of output is the error. A folder that already holds a
recording (traces or ``parameters.csv``) is refused: two jobs' traces in one folder would
read as one job.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fusionopt.integrations._kineto_events import TRACE_SUFFIXES
from fusionopt.integrations._profiler_calibration import measure_profiler_cost
from fusionopt.integrations._rank_processes import leave_rank, run_rank_processes
from fusionopt.integrations._torch import require_torch
from fusionopt.integrations._traced_step import PARAMETERS_FILE
from fusionopt.integrations._unprofiled import PROFILER_COST_FILE, UNPROFILED_FILE, write_profiler_cost
from fusionopt.model._io import csv_text, write_json_atomic, write_text_atomic

# What a folder holding a recording holds beside its traces.
RECORDING_FILES = (PARAMETERS_FILE, PROFILER_COST_FILE, UNPROFILED_FILE)


def small_model(name: str) -> Any:
    """One of the small ``torch.nn`` models the trace validation records: ``"mlp"`` (three
    linear layers, 256 -> 512 -> 512 -> 10), ``"cnn"`` (two convolutions with batch norm, a
    linear head; 3x32x32 inputs) and ``"lstm"`` (a two-layer LSTM of 128 over 64 inputs and a
    linear head; inputs of shape (batch, 16, 64))."""
    torch = require_torch()
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    if name == "lstm":
        return _lstm_head(torch)
    raise ValueError(f"unknown small model {name!r}: choose 'mlp', 'cnn' or 'lstm'")


SMALL_INPUTS = {"mlp": (256,), "cnn": (3, 32, 32), "lstm": (16, 64)}


def _lstm_head(torch: Any) -> Any:
    class LSTMHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.lstm(x)[0][:, -1])

    return LSTMHead()


def _rank(rank: int, ranks: int, port: int, folder: str, model: str, batch: int, steps: int,
          schedule: bool, bucket_cap_mb: float | None, threads: int, seed: int) -> None:
    torch = require_torch()
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
    from torch.profiler import schedule as make_schedule

    join_gloo(rank, ranks, port, threads)
    try:
        if rank == 0:       # the profiler's cost on this host, before the job
            write_profiler_cost(folder, measure_profiler_cost("cpu"))
        torch.manual_seed(seed)
        net = small_model(model)
        if rank == 0:      # the parameter list, forward (registration) order, beside the traces
            rows = [(name, p.numel() * p.element_size()) for name, p in net.named_parameters() if p.requires_grad]
            write_text_atomic(Path(folder) / PARAMETERS_FILE, csv_text(["name", "size_bytes"], rows))
        options = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
        ddp = torch.nn.parallel.DistributedDataParallel(net, **options)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
        x = torch.randn(batch, *SMALL_INPUTS[model])
        timing = {"schedule": make_schedule(wait=1, warmup=1, active=steps - 2)} if schedule else {}
        handler = tensorboard_trace_handler(folder, worker_name=f"rank{rank}", use_gzip=True)
        def step() -> None:
            optimizer.zero_grad()
            ddp(x).sum().backward()
            optimizer.step()

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=handler,
                     **timing) as prof:
            for _ in range(steps):
                step()
                if schedule:
                    prof.step()
        periods = []
        for _ in range(steps - 2 if schedule else steps):       # the same job without the profiler
            started = time.perf_counter()
            step()
            periods.append(time.perf_counter() - started)
        if rank == 0:
            write_json_atomic(Path(folder) / UNPROFILED_FILE, {
                "ddp_plain_median": statistics.median(periods), "steps": len(periods),
                "source": {"recorder": "fusionopt.integrations.record_ddp_traces", "what": "the traced job's next steps "
                           "without the profiler, rank 0's periods", "machine": f"{platform.machine()}, "
                           f"{os.cpu_count()} cores, torch {torch.__version__}",
                           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}})
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    leave_rank()            # every rank has written its files and passed the barrier


def join_gloo(rank: int, ranks: int, port: int, threads: int) -> None:
    """Join a ``ranks``-process gloo group as ``rank``, its rendezvous on 127.0.0.1:``port``,
    with ``threads`` intra-op threads (each spawned rank of a job on one host)."""
    torch = require_torch()
    import torch.distributed as dist

    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a job's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_ddp_traces(folder: str | Path, model: str, *, batch: int = 32, ranks: int = 2, steps: int = 12,
                      schedule: bool = True, bucket_cap_mb: float | None = None, threads: int = 1,
                      seed: int = 0) -> list[Path]:
    """Run a ``ranks``-process gloo DDP job of the small model ``model`` (:func:`small_model`)
    and write one gzip trace per rank into ``folder``, with ``parameters.csv``,
    ``profiler_cost.json`` and ``unprofiled.json`` (module docstring); returns the files.

    ``steps >= 3`` with a schedule (one skipped, one warm-up, the rest recorded). ``folder``
    must not hold a recording already; it is made if missing. The ranks run in processes of
    their own, which do not import the calling script: no ``if __name__ == "__main__":``
    guard is needed. Raises ``RuntimeError`` naming the rank that failed and its last line.
    """
    require_torch()
    if model not in SMALL_INPUTS:
        raise ValueError(f"unknown small model {model!r}: choose {', '.join(map(repr, SMALL_INPUTS))}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < (3 if schedule else 1):
        raise ValueError(f"steps must be a whole number >= {3 if schedule else 1}, got {steps!r}")
    folder = Path(folder)
    if folder.is_dir():
        held = sorted(p.name for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIXES) or p.name in RECORDING_FILES)
        if held:
            listed = ", ".join(held[:2]) + (", ..." if len(held) > 2 else "")
            raise ValueError(f"{folder}: already holds a recording ({listed}): a second job's traces would read as one "
                             "job with it; record into a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.iterdir())
    job = {"ranks": ranks, "port": free_port(), "folder": str(folder), "model": model, "batch": batch, "steps": steps,
           "schedule": schedule, "bucket_cap_mb": bucket_cap_mb, "threads": threads, "seed": seed}
    run_rank_processes(__name__, job, ranks, what=f"the {model} job")
    return sorted(set(folder.iterdir()) - before)


if __name__ == "__main__":            # one rank of a job record_ddp_traces runs
    _rank(int(sys.argv[2]), **json.loads(sys.argv[1]))

