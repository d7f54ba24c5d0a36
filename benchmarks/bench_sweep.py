"""Sweep throughput: cells per second on the local process pool and on a local Dask cluster.

Measures, side by side in one run, the same sweep (every zoo model x 8, 64 and 512 workers
x 10gbe and 100gb-ib x wfbp, ddp, horovod, mgwfbp, dp and gradssa with ``--time-limit``)
written to a fresh file by:

* the local process pool (``run_sweep(jobs=J)``, the default engine);
* a Dask ``LocalCluster`` of ``J`` single-threaded worker processes
  (``run_sweep(executor=client.get_executor())``), the engine beyond one machine.

Both give the same records (checked); the table is a **timing** of this host. Writes
``benchmarks/results/sweep.md``.

Run: ``python benchmarks/bench_sweep.py [--jobs 2] [--time-limit 0.2]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from fusionopt import zoo
from fusionopt.reporting import write_text_atomic
from fusionopt.experiments import cells, run_sweep

METHODS = ("wfbp", "ddp", "horovod", "mgwfbp", "dp", "gradssa")
WORKERS = (8, 64, 512)
NETWORKS = ("10gbe", "100gb-ib")
OUT = Path(__file__).resolve().parent / "results" / "sweep.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes of each engine (default 2)")
    parser.add_argument("--time-limit", type=float, default=0.2, help="gradssa's time limit per cell (default 0.2 s)")
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster

    grid = cells(zoo.models(), WORKERS, NETWORKS, METHODS)
    rows = []
    keys = {}
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        local = run_sweep(grid, Path(scratch) / "local.jsonl", jobs=args.jobs, time_limit=args.time_limit,
                          progress=False)
        rows.append(("local process pool", time.perf_counter() - started))
        with LocalCluster(n_workers=args.jobs, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            started = time.perf_counter()
            on_dask = run_sweep(grid, Path(scratch) / "dask.jsonl", executor=client.get_executor(),
                                time_limit=args.time_limit, progress=False)
            rows.append((f"Dask LocalCluster, {args.jobs} workers", time.perf_counter() - started))
    for name, records in (("local", local), ("dask", on_dask)):
        keys[name] = {(r["model"], r["workers"], r["network"], r["method"]): r["iteration_time"]
                      for r in records if r["method"] != "gradssa"}    # gradssa stops on the clock
    same = keys["local"] == keys["dask"]
    lines = [
        "# Sweep throughput: local process pool against a local Dask cluster (timings)",
        "",
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}. Written by `python benchmarks/bench_sweep.py --jobs {args.jobs} "
        f"--time-limit {args.time_limit:g}`. A timing of this host: it varies from run to run.",
        "",
        f"{len(grid)} cells: {len(zoo.models())} zoo models x {len(WORKERS)} worker counts x {len(NETWORKS)} "
        f"networks x {len(METHODS)} methods ({', '.join(METHODS)}; gradssa with a {args.time_limit:g} s limit). "
        f"Same records from both engines (the deterministic methods' T compared): **{'yes' if same else 'NO'}**.",
        "",
        "| engine | seconds | cells per second | relative |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in rows:
        lines.append(f"| {name} | {seconds:.2f} | {len(grid) / seconds:.1f} | {rows[0][1] / seconds:.2f}x |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(OUT, text)
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
