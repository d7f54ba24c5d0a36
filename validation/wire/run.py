"""What goes on the wire, measured: real DDP on gloo ranks over an emulated link, its default
fp32 buckets against torch's fp16 and bf16 compress hooks and against the advice (the exact
DP's grouping and encodings), the measured speedups against the predicted ones.

For each model (``--models``: ``mlp``, ``cnn`` of
:func:`fusionopt.integrations.small_model`) on ``--ranks`` gloo ranks (one torch
thread each), batch ``--batch``, SGD with momentum:

1. measured first, apart from the steps predicted: the profile (``profile_model``, every
   rank; rank 0's is used) and what each of torch's hooks costs this host per bucket, its
   cast of a buffer to fp16 or bf16 divided by the world size and the copy back (the median
   of ``REPEATS`` runs at sizes from 4 kB to 4 MB, fitted ``seconds_per_message +
   seconds_per_byte S``, each term at least 0);
2. predicted (rank 0) on ``network(--network, --workers)``'s all-reduce: DDP's default
   buckets in fp32, the same buckets in fp16 and in bf16 (``Encoded``; the fitted casts),
   and the advice: the exact DP on ``Cheapest([fp32, fp16])`` (the error budget: fp16 where it
   pays), its buckets as ``bucket_cap_mb_list`` (:func:`~fusionopt.advice.ddp_settings`)
   and each message's encoding;
3. measured: a copy of the model per setting, each DDP with every bucket held on an emulated
   link of that network (:mod:`fusionopt.integrations._emulated_link`; the fp16 and bf16
   settings through its hook of that encoding, torch's ``_compress_hook`` with the link
   holding the cast bytes: torch 2.13 refuses its own bf16 hook without CUDA and NCCL), after
   ``--warmup`` untimed steps of each, ``--rounds`` rounds of ``--steps`` steps of each
   setting, the order rotated every round; a setting's round is its mean step on rank 0.
   Each speedup over the default comes with a 95% bootstrap interval over the paired rounds.

The advice runs as :func:`~fusionopt.integrations.apply_advice` builds it: its buckets, each
sent in the encoding its ``wire`` says (:func:`~fusionopt.integrations.wire_comm_hook` on the
link), so an advice that mixes encodings is measured too. Writes ``validation/results/wire-cpu.{json,md}``; a run
with other arguments writes into ``validation/results/subset/``. Timings of this host, on an
emulated link: they vary from run to run.

    python validation/wire/run.py
    python validation/wire/run.py --models mlp --rounds 2 --steps 2      # into results/subset/
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "frameworks"))

from fusionopt.reporting import read_json_document, write_json_atomic  # noqa: E402
from fusionopt.reporting import (changed_options, command_line, markdown_table, positive_int,  # noqa: E402
                                 subset_location, write_result)
from speedup import build_model, measure_profile, measure_rounds, speedup_interval, training_step  # noqa: E402

RESULTS = ROOT / "validation" / "results"
MODELS = ("mlp", "cnn")
SETTINGS = ("default", "fp16", "bf16", "advised")
SIZES = tuple(4096 * 4 ** k for k in range(6))      # 4 kB to 4 MB of fp32 gradients
REPEATS = 21


def measure_casts(ranks: int, dtype: Any) -> dict[str, float]:
    """What torch's hook of ``dtype`` costs this host around a bucket of ``S`` fp32 bytes (the
    cast divided by ``ranks``, the copy back), seconds: ``seconds_per_message +
    seconds_per_byte S`` fitted by least squares on the medians at :data:`SIZES`."""
    import torch

    medians = []
    for size in SIZES:
        buffer = torch.randn(size // 4)
        times = []
        for _ in range(REPEATS):
            begin = time.perf_counter()
            half = buffer.to(dtype).div_(ranks)
            buffer.copy_(half)
            times.append(time.perf_counter() - begin)
        medians.append(float(np.median(times)))
    slope, intercept = np.polyfit(np.array(SIZES, dtype=float), np.array(medians), 1)
    return {"seconds_per_byte": max(float(slope), 0.0), "seconds_per_message": max(float(intercept), 0.0),
            "sizes": list(SIZES), "medians": medians}


def predict(profile: Any, name: str, workers: int, casts: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Each setting's predicted step (seconds), the advice's DDP arguments and encodings."""
    from fusionopt.advice import ddp_settings
    from fusionopt.cost import network, Cheapest, Encoded
    from fusionopt.model import Plan, Problem, simulate
    from fusionopt.cost import BF16, FP16, FP32, encodings_of
    from fusionopt.solvers import solve

    fp16, bf16 = (e.with_costs(seconds_per_byte=casts[e.name]["seconds_per_byte"],
                               seconds_per_message=casts[e.name]["seconds_per_message"]) for e in (FP16, BF16))
    link = network(name, workers)
    plain = Problem(profile, link, step_parts="fit")
    allowed = Cheapest(link, [FP32, fp16])
    joint = Problem(profile, allowed, step_parts="fit")
    default = solve(plain, "ddp").plan
    settings = ddp_settings(joint, solve(joint, "dp").plan)
    advised = Plan.from_groups(profile, [list(b) for b in settings.buckets])
    encodings = encodings_of(advised.message_bytes, allowed)
    return {"predicted": {"default": simulate(plain, default).iteration_time,
                          **{e.name: simulate(Problem(profile, Encoded(link, e), step_parts="fit"),
                                              default).iteration_time for e in (fp16, bf16)},
                          "advised": simulate(joint, advised).iteration_time},
            "advice": settings.to_dict(), "encodings": encodings,
            "messages": {"default": default.num_messages, "advised": advised.num_messages}}


def _rank(rank: int, port: int, out: str, args: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from fusionopt.cost import network
    from fusionopt.integrations import apply_advice, apply_defaults, EmulatedLink, ddp_comm_hook

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args["ranks"])
    rows = []
    try:
        casts = {"fp16": measure_casts(args["ranks"], torch.float16),
                 "bf16": measure_casts(args["ranks"], torch.bfloat16)}
        shared: list[Any] = [casts]
        dist.broadcast_object_list(shared, src=0)             # rank 0's casts price every prediction
        casts0 = shared[0]
        for name in args["models"]:
            profile, x = measure_profile(name, rank, args, dist)
            solved = [predict(profile, args["network"], args["workers"], casts0) if rank == 0 else None]
            dist.broadcast_object_list(solved, src=0)
            row = {"model": name, "profile": profile.to_dict(), "casts": casts0, **solved[0]}
            models, links = {}, {}
            for setting in SETTINGS:
                torch.manual_seed(0)
                fresh, _ = build_model(name)
                links[setting] = EmulatedLink(network(args["network"], args["workers"]))
                if setting == "advised":         # its buckets, each in the encoding the advice's wire says
                    wrapped = apply_advice(fresh, {"ddp": row["advice"]}, framework="ddp", link=links[setting])
                else:
                    wrapped = apply_defaults(fresh, "ddp")
                    encoding = {"default": "fp32"}.get(setting, setting)
                    wrapped.register_comm_hook(None, ddp_comm_hook(links[setting], encoding))
                models[setting] = (wrapped, torch.optim.SGD(wrapped.parameters(), lr=1e-3, momentum=0.9))
            steps = {setting: training_step(*models[setting], x) for setting in models}
            row["rounds"] = measure_rounds(steps, args, dist)
            row["measured"] = {setting: speedup_interval(row["rounds"]["default"], row["rounds"][setting])
                               for setting in row["rounds"] if setting != "default"}
            rows.append(row)
            if rank == 0:
                write_json_atomic(out, rows)
    finally:
        dist.destroy_process_group()


def markdown(document: dict[str, Any]) -> str:
    ms = lambda t: f"{1e3 * t:.2f}"  # noqa: E731
    lines = ["# What goes on the wire, measured on gloo (CPU)", "",
             f"Real DDP on {document['ranks']} gloo ranks of this host, every bucket held on an **emulated link** of "
             f"`network('{document['network']}', {document['workers']})`; {document['rounds']} rounds of "
             f"{document['steps']} steps a setting after {document['warmup']} warm-up steps. Written by "
             f"`{document['command']}` on {document['date']}. Measured: the steps, the casts' cost; predicted: "
             "the simulator's steps from the profile and the casts measured first (nothing fitted on the steps). "
             "Timings of this host.", ""]
    header = ["model", "setting", "casts (us + ps/B)", "buckets", "encodings", "predicted (ms)", "measured (ms)",
              "predicted speedup", "measured speedup (95% CI)", "measured / predicted"]
    rows = []
    for r in document["results"]:
        for setting in SETTINGS:
            predicted = r["predicted"][setting]
            encodings = ", ".join(sorted(set(r["encodings"]))) if setting == "advised" else \
                {"default": "fp32"}.get(setting, setting)
            cast = r["casts"].get(encodings)
            casts = "-" if cast is None else \
                f"{1e6 * cast['seconds_per_message']:.1f} + {1e12 * cast['seconds_per_byte']:.1f}"
            if setting not in r["rounds"]:
                rows.append([r["model"], setting, casts, r["messages"]["advised"], encodings, ms(predicted), "-", "-",
                             r.get("not_measured", "-"), "-"])
                continue
            measured = float(np.mean(r["rounds"][setting]))
            buckets = r["messages"]["advised" if setting == "advised" else "default"]
            if setting == "default":
                speed = ["1", "1", "-"]
            else:
                m = r["measured"][setting]
                p = r["predicted"]["default"] / predicted
                speed = [f"{p:.3f}", f"{m['speedup']:.3f} ({m['ci'][0]:.3f} to {m['ci'][1]:.3f})",
                         f"{m['speedup'] / p:.3f}"]
            rows.append([r["model"], setting, casts, buckets, encodings, ms(predicted), ms(measured), *speed])
    lines += markdown_table(header, rows)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import datetime

    import torch.multiprocessing as mp

    from fusionopt.integrations import free_port

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: mlp, cnn")
    parser.add_argument("--ranks", type=positive_int, default=2, help="gloo ranks (default 2)")
    parser.add_argument("--network", default="10gbe", help="the emulated link's network preset (default 10gbe)")
    parser.add_argument("--workers", type=positive_int, default=64, help="workers it is priced for (default 64)")
    parser.add_argument("--batch", type=positive_int, default=32, help="batch per rank (default 32)")
    parser.add_argument("--rounds", type=positive_int, default=20, help="measured rounds (default 20)")
    parser.add_argument("--steps", type=positive_int, default=5, help="steps a setting each round (default 5)")
    parser.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--profile-steps", type=positive_int, default=10, help="profiled steps (default 10)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if not models or unknown:
        parser.error(f"--models: choose from {', '.join(MODELS)}, got {args.models!r}")
    folder = subset_location(args.out, parser.get_default("out"), changed_options(parser, args, leave=("out",)),
                             folder=True)
    settings = {key: getattr(args, key) for key in ("ranks", "network", "workers", "batch", "rounds", "steps",
                                                    "warmup", "profile_steps")}
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "rows.json")
        try:
            mp.spawn(_rank, args=(free_port(), out, {**settings, "models": models}), nprocs=args.ranks, join=True)
        except KeyboardInterrupt:
            print("wire: interrupted; nothing written", file=sys.stderr)
            return 130
        results = read_json_document(out)
    document = {"schema": "fusionopt.validation.wire-cpu", "version": 1, **settings,
                "command": command_line("validation/wire/run.py", argv, args.out),
                "date": datetime.date.today().isoformat(), "results": results}
    write_result(folder, "wire-cpu", document, markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
