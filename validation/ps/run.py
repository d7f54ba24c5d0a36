"""Parameter server: iPart and iBatch against the exact whole-tensor optimum and the bound.

For the zoo models x node counts 4..128 on 10GbE with co-located servers (``K = P``),
partitioned compute on and layerwise sync: T of ``ps-default``, ``ps-layer``, ``ibatch``,
``ipart`` and ``ps-dp``, which is the exact optimum over whole-tensor plans here (the
server update costs no time per byte: ``fusionopt/solvers/exact/_ps_dp.py`` proves it and the
result says OPTIMAL), and ``ps_lower_bound``, a bound for every plan. iPart may cut inside
tensors, outside ``ps-dp``'s space, so its gap to ``ps-dp`` can be negative.

Writes ``validation/results/ps.md``.

Run: ``python validation/ps/run.py [--quick]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import fusionopt
from fusionopt import zoo
from fusionopt.model import Problem
from fusionopt.reporting import write_text_atomic
from fusionopt.model import ParameterServer, ps_lower_bound
from fusionopt.reporting import Progress, changed_options, interrupted_path, subset_location
from fusionopt.solvers import Status, solve

RESULTS = Path(__file__).resolve().parents[1] / "results" / "ps.md"
MODELS = ("resnet50", "vgg16", "googlenet", "bert-base")
NODES = (4, 8, 16, 32, 64, 128)
METHODS = ("ps-default", "ps-layer", "ibatch", "ipart", "ps-dp")
DEVICES = (("k80", 32), ("v100", 64))        # (zoo device, per-GPU batch): slow and fast compute
DELTA = 1e-4


def run_instance(model: str, device: str, batch: int, nodes: int) -> dict:
    ps = ParameterServer.from_network("10gbe", nodes, nodes, colocated=True, partition_compute=True, delta=DELTA)
    problem = Problem(zoo.profile(model, device=device, batch=batch), pattern=ps, sync="layerwise")
    row = {"model": model, "device": device, "nodes": nodes, "bound": ps_lower_bound(problem), "T": {}, "seconds": {}}
    for name in METHODS:
        started = time.perf_counter()
        result = solve(problem, name)
        row["T"][name] = result.iteration_time
        row["seconds"][name] = time.perf_counter() - started
        if name == "ps-dp":
            row["dp_optimal"] = result.status is Status.OPTIMAL
    return row


def percent(value: float) -> str:
    return f"{100 * value:+.2f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two models, three node counts")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.output = Path(subset_location(args.output, RESULTS, changed_options(parser, args, leave=("output",))))
    started = time.perf_counter()
    models = MODELS[:2] if args.quick else MODELS
    nodes = NODES[::2] if args.quick else NODES
    cells = [(m, d, b, p) for d, b in DEVICES for m in models for p in nodes]
    with Progress(interrupted_path(args.output)) as progress:
        progress.stage("instances", total=len(cells))
        rows = []
        for m, d, b, p in cells:
            rows.append(run_instance(m, d, b, p))
            progress.step(f"{m} {d} P={p}: iPart {1e3 * rows[-1]['T']['ipart']:.3f} ms, ps-dp "
                          f"{1e3 * rows[-1]['T']['ps-dp']:.3f} ms, bound {1e3 * rows[-1]['bound']:.3f} ms")
        write(args, rows, started)
    return progress.exit_code


def write(args: argparse.Namespace, rows: list[dict], started: float) -> None:
    to_dp = [r["T"]["ipart"] / r["T"]["ps-dp"] - 1 for r in rows]
    to_bound = [r["T"]["ipart"] / r["bound"] - 1 for r in rows]
    lines = [
        "# Parameter server: iPart against the exact whole-tensor optimum",
        "",
        f"Run {datetime.date.today().isoformat()} by `python validation/ps/run.py{' --quick' if args.quick else ''}`"
        f" on {os.cpu_count()} cores ({platform.machine()}), Python {platform.python_version()},"
        f" fusionopt {fusionopt.__version__}.",
        "",
        "Zoo profiles (calibrated compute: the H100's scaled by published throughput) on "
        + " and ".join(f"{d.upper()} at batch {b}" for d, b in DEVICES) + "; 10GbE, co-located servers"
        f" (K = P), partitioned compute with delta = {1e6 * DELTA:g} us, layerwise sync;"
        f" {len(rows)} instances. `ps-dp` is exact over whole-tensor plans here"
        f" ({sum(r['dp_optimal'] for r in rows)} of {len(rows)} results say OPTIMAL); iPart may cut inside"
        " tensors, so it can beat it. The bound (`ps_lower_bound`) holds for every plan.",
        "",
        f"* iPart against the whole-tensor optimum: median {percent(statistics.median(to_dp))},"
        f" best {percent(min(to_dp))}, worst {percent(max(to_dp))}; at or below it on"
        f" {sum(g <= 1e-9 for g in to_dp)} of {len(rows)}.",
        f"* iPart against the bound: median {percent(statistics.median(to_bound))}, worst {percent(max(to_bound))}.",
        "",
        "| model | device | P | bound (ms) | " + " | ".join(f"{m} (ms)" for m in METHODS) + " | iPart vs ps-dp | iPart (s) |",
        "|---|---|---|---|" + "---|" * len(METHODS) + "---|---|",
    ]
    for r, gap in zip(rows, to_dp):
        lines.append(f"| {r['model']} | {r['device']} | {r['nodes']} | {1e3 * r['bound']:.3f} | "
                     + " | ".join(f"{1e3 * r['T'][m]:.3f}" for m in METHODS)
                     + f" | {percent(gap)} | {r['seconds']['ipart']:.2f} |")
    lines += ["", f"Total run time {time.perf_counter() - started:.0f} s.", ""]
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
