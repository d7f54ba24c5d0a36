"""The model against real collectives: WFBP, DP, DDP, Horovod and US-Byte plans of ResNet-50 and
BERT-base run through an executor backend, measured iteration time beside the prediction.

Before each model the script calibrates the backend (``fusionopt.executor.calibrate``: a
message's time against its size, fitted by ``PiecewiseLinear``), so the prediction prices
messages as this backend sends them, as of a minute ago. Compute is emulated from the zoo's
roofline profile, scaled by a ``time_scale`` chosen per model so that the backward lasts
``--overlap`` (default 0.5) times one all-reduce of every gradient: communication is then
partly exposed, so the plans differ and the prediction of the channel is put to the test (a
step takes a fraction of a second to about a second). ``--time-scale`` fixes the scale
instead. Plans are made for the scaled problem: DP, WFBP, DDP and Horovod with barrier sync
on the calibrated curve; US-Byte with layerwise sync on the calibrated AlphaBeta (it needs
an affine cost), its prediction still on the curve.

Every run checks every byte of every tensor after every step against its exact sum.

Writes ``validation/results/<backend>-<cpu|gpu>.json``, named by the hardware that ran the
collectives (inside: the zoo device of the profiles, hardware, versions, date, each model's
calibrated cost, per model and method measured and predicted times) and
``<backend>-<cpu|gpu>.md`` (the summary table), and prints the table.

    python validation/hardware/run.py --backend local --ranks 4
    python validation/hardware/run.py --backend mpi --ranks 4
    python validation/hardware/run.py --backend nccl --ranks 8                # 8 GPUs
    python validation/hardware/run.py --backend nccl --emulate-network 100gb-ib --workers 8  # 1 GPU
    python validation/hardware/run.py --backend nccl --emulate-network 100gb-ib --workers 8 --compute spin
    python validation/hardware/run.py --backend nccl --emulate-network 100gb-ib --workers 8 --compute gemm

With ``--compute spin`` or ``gemm`` (nccl only) each step is queued whole on two GPU streams
(``fusionopt.executor._streams``): compute as spin kernels of exact durations, or as GEMMs
that contend with NCCL; the file name then ends in ``-spin`` or ``-gemm``. The summary gives
each model's methods ordered by predicted and by measured ``T``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt import zoo  # noqa: E402
from fusionopt.cost import network  # noqa: E402
from fusionopt.executor import calibrate, run, scale_compute  # noqa: E402
from fusionopt.model import Problem  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, interrupted_path, nonnegative_int,  # noqa: E402
                                 positive_float, positive_int, subset_location, write_result)
from fusionopt.solvers import methods, solve  # noqa: E402

METHODS = ("wfbp", "dp", "ddp", "horovod", "usbyte")
# The arguments, beside the defaults, of the run that made each stored result: the CPU ones on
# 2 ranks, the GPU ones on one GPU and an emulated link (validation/README.md).
STORED = {"local-cpu": {"backend": "local", "ranks": 2}, "mpi-cpu": {"backend": "mpi", "ranks": 2},
          **{f"nccl-gpu-{compute}": {"backend": "nccl", "emulate_network": "100gb-ib", "compute": compute,
                                     "iterations": 6} for compute in ("spin", "gemm")}}
LAYERWISE = {"usbyte"}


def versions(backend: str) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("fusionopt", "numpy", "scipy", "mpi4py", "mpich", "cupy"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    if backend == "mpi":
        from mpi4py import MPI

        found["mpi_library"] = MPI.Get_library_version().splitlines()[0].strip()
    if backend == "nccl":
        from cupy.cuda import nccl

        found["nccl"] = str(nccl.get_version())
    return found


def hardware(backend: str) -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    found: dict[str, object] = {"cpu": cpu, "cores": os.cpu_count(), "system": platform.system()}
    if backend == "nccl":
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        found["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        found["gpus"] = cupy.cuda.runtime.getDeviceCount()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="local", choices=("local", "mpi", "nccl"))
    parser.add_argument("--ranks", type=positive_int, default=4)
    parser.add_argument("--device", default="h100", help="zoo device of the profiles (default h100)")
    parser.add_argument("--batch", type=positive_int, default=64, help="zoo batch per worker (default 64)")
    parser.add_argument("--models", default="resnet50,bert-base")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--iterations", type=positive_int, default=8)
    parser.add_argument("--warmup", type=nonnegative_int, default=2)
    parser.add_argument("--overlap", type=positive_float, default=0.5,
                        help="backward = OVERLAP x one all-reduce of every gradient (default 0.5)")
    parser.add_argument("--time-scale", type=positive_float, help="compute scale for every model (instead of --overlap)")
    parser.add_argument("--emulate-network", metavar="NAME",
                        help="nccl on one GPU: emulate this network preset's link (with --workers)")
    parser.add_argument("--workers", type=positive_int, default=8, help="workers of --emulate-network (default 8)")
    parser.add_argument("--compute", default="host", choices=("host", "spin", "gemm"),
                        help="emulated compute: host sleeps (default), or for nccl GPU spin kernels or GEMMs")
    parser.add_argument("--output-dir", default=str(ROOT / "validation" / "results"))
    args = parser.parse_args(argv)
    # Named by the hardware that ran the collectives (not the profiles' zoo device).
    label = f"{args.backend}-{'gpu' if args.backend == 'nccl' else 'cpu'}"
    if args.compute != "host":
        label += f"-{args.compute}"
    changed = changed_options(parser, args, reference=STORED.get(label), leave=("output_dir",))
    stored_dir = parser.get_default("output_dir")

    models = args.models.split(",")
    profiles = {name: zoo.profile(name, device=args.device, batch=args.batch) for name in models}
    registered = set(methods())
    chosen = [m for m in args.methods.split(",") if m in registered]
    skipped = [m for m in args.methods.split(",") if m not in registered]
    emulated = args.emulate_network is not None
    if emulated and args.backend != "nccl":
        parser.error("--emulate-network applies to --backend nccl with one GPU")
    if emulated:
        args.ranks = 1
    if args.compute != "host" and args.backend != "nccl":
        parser.error("--compute spin|gemm applies to --backend nccl")

    started = time.perf_counter()
    load_before = os.getloadavg()
    costs: dict[str, dict] = {}
    args.output_dir = subset_location(args.output_dir, stored_dir, changed, folder=True)
    with Progress(interrupted_path(Path(args.output_dir) / f"{label}.md")) as progress:
        progress.stage("runs", total=len(profiles) * len(chosen))
        rows = []
        for model, profile in profiles.items():
            if emulated:
                cost = affine = network(args.emulate_network, args.workers)
                costs[model] = cost.to_dict()
                print(f"{model}: emulated link: {args.emulate_network}, {args.workers} workers: {cost!r}")
            else:
                # Calibrated again before each model: other work on the host shifts the timings.
                t = time.perf_counter()
                max_bytes = 1 << int(np.ceil(np.log2(profile.total_bytes)))
                calibration = calibrate(args.backend, ranks=args.ranks, max_bytes=max_bytes, iterations=100)
                cost, affine = calibration.piecewise, calibration.alpha_beta
                costs[model] = calibration.to_dict()
                print(f"{model}: calibrated {calibration.description} in {time.perf_counter() - t:.1f} s")
                print(calibration.table())
            print()
            scale = (args.time_scale if args.time_scale is not None
                     else args.overlap * float(cost(profile.total_bytes)) / profile.B)
            scaled = scale_compute(profile, scale)
            for method in chosen:
                sync = "layerwise" if method in LAYERWISE else "barrier"
                plan_cost = affine if method in LAYERWISE else cost
                plan = solve(Problem(scaled, plan_cost, sync=sync), method).plan
                if plan.has_release and args.compute != "host":
                    print(f"{method}: the CUDA-stream runner cannot hold messages until their release times; "
                          "running its grouping without them")
                    plan = plan.without_release()
                t = time.perf_counter()
                m = run(Problem(profile, cost, sync=sync), plan, args.backend, ranks=args.ranks,
                        iterations=args.iterations, warmup=args.warmup, time_scale=scale, emulate_link=emulated,
                        compute=args.compute, timeout=120.0)
                message_errors = np.abs(m.message_errors)
                row = {
                    "model": model, "method": method, "sync": sync, "messages": plan.num_messages,
                    "time_scale": scale, "compute_time": scaled.compute_time,
                    "predicted_time": m.predicted_time, "measured_time": m.iteration_time,
                    "relative_error": m.relative_error, "iteration_times": m.iteration_times.tolist(),
                    "median_abs_message_error": float(np.median(message_errors)),
                    "backward_late": m.backward_late,
                    "host_queue": float(np.median(m.host_queue)) if m.host_queue.size else None,
                    "correct": m.correct, "checked_bytes": m.checked_bytes,
                    "emulated": m.emulated, "seconds": time.perf_counter() - t,
                }
                rows.append(row)
                progress.keep({"schema": "fusionopt.validation.hardware", "interrupted": True, "backend": args.backend,
                               "results": list(rows)})
                progress.step(f"{model:10s} {method:8s} {sync:9s} {plan.num_messages:4d} msgs  predicted "
                              f"{1e3 * m.predicted_time:9.2f} ms  measured {1e3 * m.iteration_time:9.2f} ms  "
                              f"{100 * m.relative_error:+7.2f} %  {'ok' if m.correct else 'WRONG'}  ({row['seconds']:.1f} s)")
            if not emulated:
                # The same sweep after the runs: how far the host's speed moved meanwhile.
                after = calibrate(args.backend, ranks=args.ranks, max_bytes=max_bytes, iterations=100)
                drift = float(after.piecewise(profile.total_bytes) / cost(profile.total_bytes)) - 1
                small = float(after.piecewise(1 << 16) / cost(1 << 16)) - 1
                costs[model]["calibration"]["after_runs"] = {
                    "points": [[int(a), float(b)] for a, b in zip(after.sizes, after.times)],
                    "drift_total_bytes": drift, "drift_64KiB": small}
                for row in rows[-len(chosen):]:
                    row["calibration_drift"] = drift
                print(f"{model}: calibration after the runs: c(all gradients) {100 * drift:+.1f} %, "
                      f"c(64 KiB) {100 * small:+.1f} %")

        by_method = {method: statistics.median(abs(r["relative_error"]) for r in rows if r["method"] == method)
                     for method in chosen}
        summary = {"median_abs_relative_error": statistics.median(abs(r["relative_error"]) for r in rows),
                   "median_abs_relative_error_by_method": by_method,
                   "ranking": {model: ranking([r for r in rows if r["model"] == model]) for model in profiles},
                   "all_correct": all(r["correct"] for r in rows)}
        document = {
            "schema": "fusionopt.validation.hardware", "version": 1, "backend": args.backend,
            "device": args.device, "batch": args.batch, "ranks": args.ranks, "emulated": emulated,
            "compute": args.compute, "zoo_compute": "calibrated",     # zoo.profile's compute= of the profiles
            "overlap": None if args.time_scale is not None else args.overlap,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hardware": hardware(args.backend), "versions": versions(args.backend),
            "cost": costs,
            "methods_not_registered": skipped, "iterations": args.iterations, "warmup": args.warmup,
            "results": rows, "summary": summary, "seconds": time.perf_counter() - started,
            # Other work on the host disturbs the timings: the 1-minute load before and after.
            "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
        }
        write_result(args.output_dir, label, document, markdown(document))
    if progress.interrupted:
        return progress.exit_code
    return 0 if summary["all_correct"] else 1


def ranking(rows: list[dict], tie: float = 0.01) -> dict:
    """Methods ordered by predicted and by measured T; whether the orders agree.

    ``equal``: the two orders are the same. ``agree_beyond_ties``: every pair of methods whose
    predicted times differ by more than ``tie`` (relative) is measured in the predicted order.
    """
    predicted = [r["method"] for r in sorted(rows, key=lambda r: r["predicted_time"])]
    measured = [r["method"] for r in sorted(rows, key=lambda r: r["measured_time"])]
    disagree = [(a["method"], b["method"]) for a in rows for b in rows
                if a["predicted_time"] < b["predicted_time"] * (1 - tie) and a["measured_time"] > b["measured_time"]]
    return {"predicted": predicted, "measured": measured, "equal": predicted == measured,
            "agree_beyond_ties": not disagree, "tie": tie, "disagreements": disagree}


def markdown(document: dict) -> str:
    hw = document["hardware"]
    where = hw.get("gpu") or hw["cpu"]
    lines = [
        f"# Executor validation: {document['backend']} backend, {document['device']} profiles",
        "",
        f"{document['date']}; {document['ranks']} ranks on {where} ({hw['cores']} cores); "
        f"zoo profiles for {document['device']}, batch {document['batch']}; {document['iterations']} timed steps "
        f"after {document['warmup']} warm-up; compute emulated (scaled by the time scale"
        + (f": backward = {document['overlap']:g} x one all-reduce of every gradient" if document["overlap"] else "")
        + "), communication real"
        + (" (EMULATED link)" if document["emulated"] else "") + "; predictions by `simulate` on the backend's "
        f"calibrated cost; host load average {document['load_average']['before']:.2f} before, "
        f"{document['load_average']['after']:.2f} after. Written by `validation/hardware/run.py`.",
        "",
        "| model | method | sync | messages | time scale | predicted T (ms) | measured T (ms) | error | "
        "median message error | calibration drift | checked |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in document["results"]:
        drift = f"{100 * r['calibration_drift']:+.1f}%" if "calibration_drift" in r else "-"
        lines.append(
            f"| {r['model']} | {r['method']} | {r['sync']} | {r['messages']} | {r['time_scale']:.3g} | "
            f"{1e3 * r['predicted_time']:.2f} | {1e3 * r['measured_time']:.2f} | {100 * r['relative_error']:+.2f}% | "
            f"{100 * r['median_abs_message_error']:.1f}% | {drift} | "
            f"{'all bytes exact' if r['correct'] else 'WRONG'} |")
    s = document["summary"]
    lines += ["", f"Median |measured - predicted| / predicted: {100 * s['median_abs_relative_error']:.2f}% over all "
              "runs; by method: " + ", ".join(f"{m} {100 * v:.2f}%" for m, v in
                                             s["median_abs_relative_error_by_method"].items()) + "."]
    lines.append("Message error: median over a plan's messages of |measured - c(S)| / c(S) (small messages are "
                 "noisy). Calibration drift: c(all gradients) from the same sweep repeated after the model's "
                 "runs, against the one the predictions used (the host is shared; its speed moves).")
    for model, order in s.get("ranking", {}).items():
        verdict = ("equal" if order["equal"] else
                   f"agree beyond {100 * order['tie']:g}% ties" if order["agree_beyond_ties"] else "DIFFERENT")
        lines.append(f"Ranking on {model}: predicted {' < '.join(order['predicted'])}; measured "
                     f"{' < '.join(order['measured'])}: {verdict}.")
    if document.get("compute", "host") != "host":
        lines.append(f"Compute queued on the GPU as {document['compute']} work (`--compute {document['compute']}`).")
        queued = [r for r in document["results"] if r.get("host_queue") is not None]
        if queued:
            bound = [r for r in queued if r["host_queue"] >= r["measured_time"]]
            lines.append("The host's time to queue a step (median, slowest rank) against the measured step: "
                         + ", ".join(f"{r['model']} {r['method']} {1e3 * r['host_queue']:.2f} of "
                                     f"{1e3 * r['measured_time']:.2f} ms" for r in queued)
                         + f"; {len(bound)} of {len(queued)} steps took the host at least as long to queue as "
                           "the device to run (bound by the host's launches, not by the device).")
    if document["methods_not_registered"]:
        lines.append(f"Not registered, skipped: {', '.join(document['methods_not_registered'])}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
