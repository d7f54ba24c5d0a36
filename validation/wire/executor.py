"""Encodings through the executor: each plan's messages sent in the encodings the model prices
them in (MODEL.md section 2.2), measured against predicted, on a backend.

For each model (``--models``: zoo profiles for ``--device`` at ``--batch``):

1. calibrated first, before any run and never fitted on one: the backend's all-reduce
   ``c(S)`` in fp32 (``PiecewiseLinear``), and the same messages sent in fp16, packed
   narrowed and unpacked widened as the runs send them; :func:`~fusionopt.executor.fit_casts`
   prices fp16 on this backend (what its casts cost beyond an fp32 message of the bytes it
   sends). With ``--emulate-network`` (nccl on one GPU) the link is that network's cost at
   ``--workers`` and the casts are fitted on the GPU's own one-rank all-reduce;
2. compute emulated from the zoo's profile, scaled so that the backward lasts ``--overlap``
   times one fp32 all-reduce of every gradient (as ``validation/hardware/run.py`` does);
3. run, each through :func:`fusionopt.executor.run` with every byte checked after every step
   (an fp16 message's kept bits against the exact sum; ``fusionopt.executor._layout``):

   * ``ddp``: DDP's buckets in fp32; ``ddp-fp16``: the same buckets in fp16 (torch's
     ``fp16_compress_hook`` on every bucket);
   * ``dp``: the exact DP in fp32; ``dp-fp16``: the exact DP with every message in fp16;
   * ``joint``: the exact DP on ``Cheapest([fp32, fp16])``, each message in its cheapest;
   * ``joint-exact``: the same with the 1-D tensors (biases, norms) kept exact, every
     message carrying one in fp32;
   * ``joint-powersgd``: the exact DP on ``Cheapest([fp32, fp16])`` with torch's PowerSGD hook
     at rank 1 as one more choice per message (``Problem(..., compressor=PowerSGD(...))``),
     each message in fp32, in fp16 or as the hook sends a bucket (its uncompressed
     all-reduce, then the ``P`` and ``Q`` factors'; :class:`~fusionopt.executor.PowerSGDMessages`).
     The executor takes the hook's three products for real (in integers) and holds the
     channel for no less than the hook's priced compute; that price is what those products
     cost this backend, calibrated before the runs like the casts (:func:`fit_products`:
     the median of ``REPEATS`` runs on square matrices of 4 kB to 16 MB, ``seconds_per_message
     + seconds_per_byte S`` fitted by :func:`~fusionopt.executor.fit_alpha_beta`).

The table gives each setting's messages (in fp16), predicted and measured ``T``, the error,
and its speedup over ``ddp`` predicted and measured. Writes
``validation/results/wire-executor-<backend>-<cpu|gpu>.{json,md}``; a run with other
arguments than the stored one writes into ``validation/results/subset/``. Timings of the
machine that ran it: they vary from run to run.

    python validation/wire/executor.py --backend mpi
    python validation/wire/executor.py --backend nccl --emulate-network 100gb-ib --workers 8   # one GPU
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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt import zoo  # noqa: E402
from fusionopt.cost import Cheapest, Encoded, PowerSGD, network  # noqa: E402
from fusionopt.executor import calibrate, fit_alpha_beta, fit_casts, run, scale_compute  # noqa: E402
from fusionopt.model import Problem  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path,  # noqa: E402
                                 markdown_table, positive_float, positive_int, subset_location, write_result)
from fusionopt.solvers import solve  # noqa: E402

RESULTS = ROOT / "validation" / "results"
SETTINGS = ("ddp", "ddp-fp16", "dp", "dp-fp16", "joint", "joint-exact", "joint-powersgd")
PRODUCT_SIZES = tuple(4096 * 4 ** k for k in range(7))        # 4 kB to 16 MB of fp32 matrices
REPEATS = 9


def fit_products(backend: str) -> dict[str, Any]:
    """What the executor's PowerSGD products (``P = M Q``, ``Q = M^T P``, ``M = P Q^T`` at rank
    1, in 4-byte integers: :class:`~fusionopt.executor.PowerSGDMessages`) cost this backend's
    arrays for a matrix of ``S`` bytes: ``seconds_per_message + seconds_per_byte S`` fitted on
    the medians at :data:`PRODUCT_SIZES` (:func:`~fusionopt.executor.fit_alpha_beta`)."""
    import numpy as np

    if backend == "nccl":
        import cupy as xp

        synchronize = xp.cuda.Device().synchronize
    else:
        xp, synchronize = np, (lambda: None)
    sizes, medians = [], []
    for size in PRODUCT_SIZES:
        n = int(round((size // 4) ** 0.5))
        m = xp.arange(n * n, dtype=xp.int32).reshape(n, n)
        q, p = xp.ones((n, 1), dtype=xp.int32), xp.empty((n, 1), dtype=xp.int32)
        times = []
        for _ in range(REPEATS):
            synchronize()
            begin = time.perf_counter()
            xp.matmul(m, q, out=p)
            xp.matmul(m.T, p, out=q)
            xp.matmul(p, q.T, out=m)
            synchronize()
            times.append(time.perf_counter() - begin)
        sizes.append(4 * n * n)
        medians.append(float(np.median(times)))
    fit = fit_alpha_beta(sizes, medians)
    return {"seconds_per_byte": fit.beta, "seconds_per_message": fit.alpha, "sizes": sizes, "medians": medians}
# The arguments, beside the defaults, of the runs that made the stored results.
STORED = {"wire-executor-mpi-cpu": {"backend": "mpi", "ranks": 2},
          "wire-executor-nccl-gpu": {"backend": "nccl", "emulate_network": "100gb-ib", "ranks": 1}}


def problems(profile: Any, link: Any, fp16: Any, products: dict[str, Any]) -> dict[str, tuple[Problem, str]]:
    """Each setting's problem and the method that plans it (module docstring); ``products``:
    :func:`fit_products`."""
    exact = [i for i, shape in enumerate(profile.shapes or ()) if len(shape) == 1]
    choice = Cheapest(link, ["fp32", fp16])
    return {"ddp": (Problem(profile, link), "ddp"), "ddp-fp16": (Problem(profile, Encoded(link, fp16)), "ddp"),
            "dp": (Problem(profile, link), "dp"), "dp-fp16": (Problem(profile, Encoded(link, fp16)), "dp"),
            "joint": (Problem(profile, choice), "dp"),
            "joint-exact": (Problem(profile, choice, exact_tensors=exact), "dp"),
            "joint-powersgd": (Problem(profile, choice, compressor=PowerSGD(
                rank=1, seconds_per_byte=products["seconds_per_byte"],
                seconds_per_message=products["seconds_per_message"])), "dp")}


def measure_model(model: str, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The calibration of ``model``'s sizes and its settings' runs."""
    profile = zoo.profile(model, device=args.device, batch=args.batch)
    top = 1 << int(profile.total_bytes - 1).bit_length()
    sweep = {"ranks": args.ranks, "max_bytes": top, "iterations": 100, "seconds_per_size": args.seconds_per_size}
    fp32 = calibrate(args.backend, **sweep)
    encoded = calibrate(args.backend, **sweep, encoding="fp16")
    emulated = args.emulate_network is not None
    link = network(args.emulate_network, args.workers) if emulated else fp32.piecewise
    fp16 = fit_casts(fp32.piecewise, encoded)
    products = fit_products(args.backend)
    calibration = {"products": products, "fp32": [[int(s), float(t)] for s, t in zip(fp32.sizes, fp32.times)],
                   "fp16": [[int(s), float(t)] for s, t in zip(encoded.sizes, encoded.times)],
                   "casts": fp16.to_dict(), "link": link.to_dict(), "description": fp32.description}
    scale = args.overlap * float(link(profile.total_bytes)) / profile.B
    rows = []
    for setting, (problem, method) in problems(profile, link, fp16, products).items():
        plan = solve(Problem(scale_compute(profile, scale), problem.cost, exact_tensors=problem.exact_tensors,
                             compressor=problem.compressor), method).plan
        m = run(problem, plan, args.backend, ranks=args.ranks, iterations=args.iterations, warmup=args.warmup,
                time_scale=scale, emulate_link=emulated, timeout=120.0)
        rows.append({"model": model, "setting": setting, "method": method, "messages": plan.num_messages,
                     "fp16_messages": sum(e == "fp16" for e in m.encodings),
                     "powersgd_messages": sum(e == "powersgd" for e in m.encodings), "time_scale": scale,
                     "predicted_time": m.predicted_time, "measured_time": m.iteration_time,
                     "relative_error": m.relative_error, "iteration_times": m.iteration_times.tolist(),
                     "predicted_message_time": m.predicted_message_time, "lockstep_time": m.lockstep_time,
                     "correct": m.correct, "checked_bytes": m.checked_bytes, "emulated": m.emulated})
    base = next(r for r in rows if r["setting"] == "ddp")
    for r in rows:
        r["predicted_speedup"] = base["predicted_time"] / r["predicted_time"]
        r["measured_speedup"] = base["measured_time"] / r["measured_time"]
    return calibration, rows


def markdown(document: dict[str, Any]) -> str:
    lines = [f"# Encodings through the executor: {document['backend']}", "",
             f"{document['date']}; {document['machine']}; {document['ranks']} ranks; zoo profiles for "
             f"{document['device']}, batch {document['batch']}; compute emulated (backward = "
             f"{document['overlap']:g} x one fp32 all-reduce of every gradient), communication real"
             + (f" on an EMULATED link ({document['emulate_network']}, {document['workers']} workers)"
                if document["emulate_network"] else "")
             + f"; {document['iterations']} timed steps after {document['warmup']}. Written by "
             f"`{document['command']}`. **Measured**: T (the median step) and its speedup over "
             "`ddp`; **predicted**: `simulate` on the calibrated fp32 cost and the fp16 casts fitted on the "
             "calibration's fp16 sweep, both timed before the runs (never fitted on them). fp16 messages travel "
             "as narrowed words: the bytes and the passes are real, the rounding is not, and every kept bit was "
             "checked against the exact sum. `joint-powersgd` may also send messages as torch's PowerSGD hook "
             "sends a bucket (rank 1): three all-reduces, their factors' products taken in integers and checked, "
             "the hook's compute priced at what those products cost this backend, calibrated before the runs. "
             "Timings of this machine: they vary from run "
             "to run.", ""]
    rows = [[r["model"], r["setting"], f"{r['messages']} ({r['fp16_messages']} / {r.get('powersgd_messages', 0)})",
             f"{1e3 * r['predicted_time']:.2f}",
             f"{1e3 * r['measured_time']:.2f}", f"{100 * r['relative_error']:+.1f}%",
             f"{r['predicted_speedup']:.3f}", f"{r['measured_speedup']:.3f}",
             "all bytes exact" if r["correct"] else "WRONG"] for r in document["results"]]
    lines += markdown_table(["model", "setting", "messages (fp16 / PowerSGD)", "predicted T (ms)", "measured T (ms)",
                             "error", "predicted speedup", "measured speedup", "checked"], rows)
    lines.append("")
    for model, c in document["calibration"].items():
        casts = c["casts"]
        lines.append(f"* {model}: fp16 casts fitted on this backend, {1e6 * casts['seconds_per_message']:.2f} us + "
                     f"{1e9 * casts['seconds_per_byte']:.4f} ns per fp32 byte beyond an fp32 message of the bytes "
                     f"sent ({c['description']})"
                     + (f"; the PowerSGD products, {1e6 * c['products']['seconds_per_message']:.2f} us + "
                        f"{1e9 * c['products']['seconds_per_byte']:.4f} ns per byte of a matrix." if "products" in c
                        else "."))
    s = document["summary"]
    lines.append(f"* Median |measured - predicted| / predicted: {100 * s['median_abs_relative_error']:.1f}%; of "
                 f"the {s['pairs_apart']} pairs of a model's settings predicted more than {100 * s['tie']:g}% apart, "
                 f"{s['pairs_in_order']} were measured in the predicted order.")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]], tie: float = 0.02) -> dict[str, Any]:
    """The median error, and of the pairs of settings of a model predicted more than ``tie``
    apart (relative), how many were measured in the predicted order."""
    pairs = agree = 0
    for a in rows:
        for b in rows:
            if a["model"] == b["model"] and a["predicted_time"] < b["predicted_time"] * (1 - tie):
                pairs += 1
                agree += a["measured_time"] < b["measured_time"]
    return {"median_abs_relative_error": statistics.median(abs(r["relative_error"]) for r in rows),
            "tie": tie, "pairs_apart": pairs, "pairs_in_order": agree,
            "all_correct": all(r["correct"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="local", choices=("local", "mpi", "nccl"))
    parser.add_argument("--ranks", type=positive_int, default=None, help="ranks (default 2; 1 with --emulate-network)")
    parser.add_argument("--models", default="resnet50,bert-base", help="zoo models (default resnet50,bert-base)")
    parser.add_argument("--device", default="h100", help="zoo device of the profiles (default h100)")
    parser.add_argument("--batch", type=positive_int, default=64, help="zoo batch per worker (default 64)")
    parser.add_argument("--iterations", type=positive_int, default=8, help="timed steps (default 8)")
    parser.add_argument("--warmup", type=positive_int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--overlap", type=positive_float, default=0.5,
                        help="backward = OVERLAP x one fp32 all-reduce of every gradient (default 0.5)")
    parser.add_argument("--seconds-per-size", type=positive_float, default=0.2,
                        help="seconds a calibration spends on each size (default 0.2)")
    parser.add_argument("--emulate-network", metavar="NAME",
                        help="nccl on one GPU: emulate this network preset's link (with --workers)")
    parser.add_argument("--workers", type=positive_int, default=8, help="workers of --emulate-network (default 8)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    args = parser.parse_args(argv)
    if args.emulate_network is not None:
        if args.backend != "nccl":
            parser.error("--emulate-network applies to --backend nccl with one GPU")
        network(args.emulate_network, args.workers)        # a name it does not know: one line, now
        if args.ranks not in (None, 1):
            parser.error(f"--ranks {args.ranks}: --emulate-network runs one rank, on one GPU")
    args.ranks = args.ranks or (1 if args.emulate_network is not None else 2)
    stem = f"wire-executor-{args.backend}-{'gpu' if args.backend == 'nccl' else 'cpu'}"
    changed = changed_options(parser, args, reference=STORED.get(stem, {}), leave=("out",))
    folder = subset_location(args.out, str(RESULTS), changed, folder=True)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in zoo.models()]
    if unknown:
        parser.error(f"--models: unknown zoo model {unknown[0]!r}")
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    calibration: dict[str, Any] = {}
    with Progress(interrupted_path(Path(folder) / f"{stem}.md")) as progress:
        progress.stage("models", total=len(models))
        for model in models:
            calibration[model], mine = measure_model(model, args)
            rows += mine
            progress.keep({"schema": "fusionopt.validation.wire-executor", "interrupted": True, "results": rows})
            progress.step(f"{model}: " + ", ".join(f"{r['setting']} {1e3 * r['measured_time']:.1f} ms" for r in mine))
        document = {
            "schema": "fusionopt.validation.wire-executor", "version": 1, "backend": args.backend,
            "command": command_line("validation/wire/executor.py", sys.argv[1:] if argv is None else argv, args.out),
            "ranks": args.ranks, "device": args.device, "batch": args.batch, "overlap": args.overlap,
            "iterations": args.iterations, "warmup": args.warmup, "emulate_network": args.emulate_network,
            "workers": args.workers if args.emulate_network else None,
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "calibration": calibration, "results": rows, "summary": summary(rows),
            "seconds": time.perf_counter() - started,
        }
        write_result(folder, stem, document, markdown(document))
    if progress.interrupted:
        return progress.exit_code
    print(markdown(document))
    return 0 if document["summary"]["all_correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
