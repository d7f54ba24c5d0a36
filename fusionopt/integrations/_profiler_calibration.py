"""Measure what ``torch.profiler`` costs the host per event it records, on this host, now
(needs torch).

:func:`measure_profiler_cost` runs the same tiny operators (``x.add_(1)`` on a 16-element
tensor, one recorded operator each, plus its kernel launch on a GPU) ``operators`` times
without the profiler and under it, with the activities and ``record_shapes`` of the job to
be traced, alternately ``repeats`` times; the cost per event is the difference of the median
times over the host events the profiler recorded in one run (its operators, annotations and
runtime calls, counted in its exported trace as
:func:`~fusionopt.integrations.replay_trace` counts them). The recorders write it
beside a job's traces (:func:`~fusionopt.integrations.write_profiler_cost`), so
that the job's step without the profiler is predicted with the cost of the host that ran it.

What it measures is the profiler's cost on the cheapest operators; an operator with many
inputs costs more to record with shapes. It is measured, not fitted to any job.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fusionopt.integrations._torch_import import require_torch
from fusionopt.integrations._kineto_events import trace_events
from fusionopt.integrations._unprofiled import HOST_CATEGORIES
from fusionopt.model._io import read_json_document

SCHEMA = "fusionopt.profiler_cost"


def measure_profiler_cost(device: Any = "cpu", *, operators: int = 2000, repeats: int = 5,
                          record_shapes: bool = True) -> dict[str, Any]:
    """The profiler's host seconds per recorded event on ``device`` (``"cpu"`` or a CUDA
    device: CPU and CUDA activities), as a document for
    :func:`~fusionopt.integrations.write_profiler_cost`: ``seconds_per_event``,
    ``events`` (per run), ``profiled_s`` and ``unprofiled_s`` (medians of the runs), how it
    was measured (``detail``), the host, torch and the date. A cost that reads below 0 (the
    host's noise) is 0."""
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile

    if isinstance(operators, bool) or not isinstance(operators, int) or operators < 1:
        raise ValueError(f"operators must be a whole number >= 1, got {operators!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    device = torch.device(device)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    x = torch.zeros(16, device=device)

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def run() -> float:
        synchronize()
        started = time.perf_counter()
        for _ in range(operators):
            x.add_(1.0)
        synchronize()
        return time.perf_counter() - started

    run()
    with profile(activities=activities, record_shapes=record_shapes):     # the profiler's own first start
        run()
    plain, profiled, events = [], [], None
    for _ in range(repeats):
        plain.append(run())
        with profile(activities=activities, record_shapes=record_shapes) as prof:
            profiled.append(run())
        if events is None:
            events = _host_events(prof)
    unprofiled_s, profiled_s = statistics.median(plain), statistics.median(profiled)
    per_event = max(0.0, profiled_s - unprofiled_s) / max(events or 0, 1)
    activity = "CPU and CUDA activities" if cuda else "CPU activity"
    return {
        "schema": SCHEMA, "version": 1, "seconds_per_event": per_event, "events": events,
        "profiled_s": profiled_s, "unprofiled_s": unprofiled_s, "operators": operators, "repeats": repeats,
        "device": str(device) if not cuda else f"{device} ({torch.cuda.get_device_name(device)})",
        "record_shapes": record_shapes, "host": f"{platform.machine()}, {os.cpu_count()} cores",
        "torch": str(torch.__version__),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "detail": (f"{operators} x.add_(1) with and without torch.profiler ({activity}, "
                   f"record_shapes={record_shapes}) on {device}, medians of {repeats} runs each"),
    }


def _host_events(prof: Any) -> int:
    """The host events one profiled run recorded, counted in its exported trace."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "calibration.json"
        prof.export_chrome_trace(str(path))
        events = trace_events(read_json_document(path), str(path))
    return sum(1 for e in events if e.cat in HOST_CATEGORIES)
